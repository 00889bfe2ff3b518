"""Privacy accounting for DP-REC (Triastcyn, Reisser and Louizos; final version).

Epsilon, delta and the calibration of ``c = C / sigma`` for a run of DP-REC: ``T`` rounds, ``B``
of ``N`` clients per round, each update clipped to ``C = c sigma`` and sent as one REC message.
Every result says whom it holds against and for which neighbouring relation.

Entry points
------------
:func:`dprec_epsilon`, :func:`dprec_delta`, :func:`dprec_calibrate`
    A whole run: the guarantee for ``relation``, both relations in ``epsilons`` (``inf`` with a
    reason in ``reasons`` where nothing is proved) and the local guarantee in ``local``.
:func:`dprec_local_epsilon`
    What one client's own messages reveal, with no sampling amplification.
:class:`DPRECRoundAccountant`
    Round-by-round composition for a server loop (``DPRECCodec.accountant`` makes one); ``B`` may
    change from round to round, and ``T`` rounds of a constant ``B`` give :func:`dprec_epsilon`'s
    numbers exactly.
:func:`dprec_step_rdp`, :func:`rec_message_log_moments`, :func:`rec_total_variation`
    The per-step Renyi curves and REC's per-message bounds behind them.
:func:`quantile_bits_rdp`
    The unamplified Renyi cost of adaptive clipping's noisy quantile bits (one per message): the
    local guarantee's, and a cap on the round accountant's, which folds the bits into each
    message's bound with ``quantile_noise``.

Arguments the functions share: ``threat_model`` (``"server"``, the default: the observer knows
which client sent each message; ``"messages"``: every message, not the sender; ``"central"``: the
aggregates only), ``relation`` (``"zero"``, the default: the client's update against a zero update;
``"add_remove"``), ``sampling`` (:data:`SAMPLING_SCHEMES`: ``"with_replacement"``, the paper's and
the default; ``"poisson"``; ``"without_replacement"``, what Flower's ``FedAvg`` does), ``bits``
(the TOTAL bits of one message, ``DPRECCodec.layout(template).total_bits``, with ``groups``;
``bits=None`` accounts the uncompressed Gaussian mechanism DP-REC simulates, what the paper's
tables report) and ``method``: ``"sound"`` (the default, a guarantee under the threat model) or
``"paper"``, Algorithm 7 exactly as printed (``"with_replacement"`` only, ``threat_model=None``,
``relation=None``, with a ``caveat``: it treats every slot that misses the target as a draw from
the prior, which is not a guarantee against a message observer). With ``method="paper"`` and
``bits``, Theorem 1's overhead ``12 rho / 2^b`` is paid out of delta: a ``ValueError`` naming
``bits`` when it reaches delta, and :class:`DPRECPrivacyWarning` above 10% of delta (through
the codec and the round accountant; ``dprec_epsilon`` itself does not warn;
:func:`dprec_min_bits` gives the bits that avoid it).

See the *Which guarantee do I have?* page of the documentation for the derivations, the
assumptions (stateless clients, fresh unlinkable seeds, public aggregation weights for
``"central"``), the sampling schemes and the bit-width rule, and the *Privacy accounting* page for
the paper's settings and the numerics.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln, logsumexp

from ._checks import (
    MAX_COUNT,
    check_bits,
    check_count,
    check_delta,
    check_epsilon,
    check_orders,
    check_positive,
    check_probability,
)
from .guarantee import RELATIONS, THREAT_MODELS, LocalGuarantee, PrivacyGuarantee, check_relation, check_threat_model
from .rdp import epsilon_per_order, rdp_to_delta, sampled_gaussian_rdp

#: Largest clip multiplier the DP-REC accountants take: ``c^2`` times the largest order's square must
#: stay finite in float64 (at ``c = 1e100`` epsilon is astronomically large anyway).
MAX_CLIP_MULTIPLIER = 1e100


def _check_clip_multiplier(value: Any) -> float:
    c = check_positive(value, "clip_multiplier")
    if c > MAX_CLIP_MULTIPLIER:
        raise ValueError(f"clip_multiplier must be at most {MAX_CLIP_MULTIPLIER:g} (c^2 overflows), got {value!r}")
    return c

__all__ = [
    "DPREC_DEFAULT_ORDERS",
    "DPREC_METHODS",
    "DPRECAccounting",
    "DPRECPrivacyWarning",
    "DPRECRoundAccountant",
    "EXACT_REVERSE_MAX_CLIP",
    "OVERHEAD_WARN_FRACTION",
    "REVERSE_METHODS",
    "SAMPLING_SCHEMES",
    "dprec_calibrate",
    "dprec_delta",
    "dprec_epsilon",
    "dprec_forward_rdp",
    "dprec_local_epsilon",
    "dprec_min_bits",
    "dprec_overhead",
    "dprec_reverse_rdp",
    "dprec_step_rdp",
    "quantile_bits_rdp",
    "rec_message_log_moments",
    "rec_total_variation",
]

#: Renyi orders ``a = lambda + 1`` for lambda = 1 .. 256 (Algorithm 7 works with integer lambda).
DPREC_DEFAULT_ORDERS: np.ndarray = np.arange(2.0, 258.0)

REVERSE_METHODS = ("bound", "exact")

#: How clients are sampled each round (see *Which guarantee do I have?* in the docs).
SAMPLING_SCHEMES = ("with_replacement", "poisson", "without_replacement")

#: ``method=`` of the DP-REC functions: ``"sound"`` (the default; a guarantee under a threat model)
#: or ``"paper"`` (Algorithm 7 as printed; see *Which guarantee do I have?*, section 5, in the docs).
DPREC_METHODS = ("sound", "paper")

#: The bit-width rule warns when the overhead ``12 rho / 2^b`` exceeds this fraction of delta.
OVERHEAD_WARN_FRACTION = 0.1


class DPRECPrivacyWarning(UserWarning):
    """The DP-REC overhead ``12 rho / 2^b`` uses more than 10% of delta (the bit-width rule).

    The guarantee is still valid; the message names the bits per group that would bring the
    overhead below 10% of delta. Silence it with ``warnings.filterwarnings("ignore",
    category=DPRECPrivacyWarning)`` or make it an error with ``"error"``.
    """


# Trapezoid grid for the exact reverse divergence: u in [-_GRID_HALF_WIDTH, _GRID_HALF_WIDTH];
# the standard normal density underflows to 0 beyond |u| ~ 38.6, so nothing is cut off.
_GRID_HALF_WIDTH = 39.0
#: Largest clip multiplier for ``reverse="exact"``: the grid step shrinks like 1/c, so the grid
#: grows like c (about 47,000 nodes at c = 100, where epsilon is astronomically large anyway).
EXACT_REVERSE_MAX_CLIP = 100.0
# Orders are processed in chunks of at most this many (orders x nodes) elements, to bound memory.
_CHUNK_ELEMENTS = 1 << 21


def _check_reverse(reverse: str) -> str:
    if reverse not in REVERSE_METHODS:
        raise ValueError(f"reverse must be one of {REVERSE_METHODS}, got {reverse!r}")
    return reverse


def dprec_forward_rdp(clip_multiplier: float, sampling_rate: float, orders: Any = None) -> np.ndarray:
    """Forward divergence ``D_a((1-q) p + q q_phi || p)`` of one DP-REC step (final paper, eq. (62)).

    ``= 1/(a-1) log E_{k ~ Bin(a, q)} exp((k^2 - k) c^2 / 2)`` with ``c = C / sigma``: the sampled
    Gaussian RDP with noise multiplier ``1/c`` (Mironov, Talwar and Zhang 2019, integer case).
    This is the step of ``sampling="with_replacement"`` (``q = 1/N``); it is *not* the cost of a
    Poisson round, where an unsampled client sends nothing rather than a draw from ``p`` (see
    *Which guarantee do I have?*, 4.2, in the docs).

    Parameters
    ----------
    clip_multiplier : float
        ``c = C / sigma > 0``.
    sampling_rate : float
        ``q`` in (0, 1]; ``1/N`` for sampling with replacement (Algorithm 7).
    orders : sequence of int, optional
        Integer Renyi orders ``a = lambda + 1 >= 2``; default :data:`DPREC_DEFAULT_ORDERS`.
    """
    c = _check_clip_multiplier(clip_multiplier)
    q = check_probability(sampling_rate, "sampling_rate")
    alphas = check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders, integer=True)
    return sampled_gaussian_rdp(q, 1.0 / c, alphas)


def _reverse_grid(c: float) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoid nodes and log-weights (including the N(0,1) density) for the reverse integral.

    The integrand ``(1 - q + q exp(c u - c^2/2))^(1-a)`` is analytic in the strip
    ``|Im u| < pi / c``; the trapezoid error for a Gaussian-weighted integrand analytic in a strip
    of half-width ``d`` decays like ``exp(-2 pi d / h)``. Using ``d = pi / (2c)`` (where the integrand
    stays bounded by ``(1-q)^(1-a)``) and ``h = pi^2 / (60 c)`` (at most 0.05) makes that factor
    ``exp(-60)``.
    """
    h = min(0.05, math.pi**2 / (60.0 * c))
    n = int(math.ceil(_GRID_HALF_WIDTH / h))
    u = np.arange(-n, n + 1, dtype=np.float64) * h
    log_w = -0.5 * u * u - 0.5 * math.log(2.0 * math.pi) + math.log(h)
    return u, log_w


def dprec_reverse_rdp(
    clip_multiplier: float, sampling_rate: float, orders: Any = None, *, reverse: str = "exact"
) -> np.ndarray:
    """Reverse divergence ``D_a(p || (1-q) p + q q_phi)`` of one DP-REC step (Algorithm 7, ``m``).

    ``reverse="bound"`` returns the forward divergence (eq. (62)), an upper bound by Mironov,
    Talwar and Zhang (2019), restated in the final paper as eq. (59).

    ``reverse="exact"`` evaluates, at ``||phi|| = C`` (the clipping boundary, where the divergence
    is largest; it increases with ``c``, which the tests check),
    ``D_a = 1/(a-1) log E_{u ~ N(0,1)} [(1 - q + q exp(c u - c^2/2))^(1-a)]`` by the trapezoid rule
    on a uniform grid over ``[-39, 39]`` (step ``min(0.05, pi^2 / (60 c))``). The integrand is
    analytic in a strip of half-width ``pi / c`` and Gaussian-weighted, so the rule converges
    geometrically: the discretisation error is ``~exp(-60)`` relative and the truncation error is
    below the float64 underflow of the density. When the divergence is small, ``E - 1`` is
    accumulated directly from ``expm1(-(a-1) log1p(x))`` (no ``1 + tiny`` rounding); otherwise
    ``log E`` comes from a log-sum-exp. Tested against SciPy's adaptive quadrature (``quad``,
    split at the integrand's transition) to 1e-9 relative.

    The grid has about ``470 c`` nodes for ``c > 3.3``, so ``reverse="exact"`` accepts
    ``clip_multiplier <= 100`` (:data:`EXACT_REVERSE_MAX_CLIP`) and raises ``ValueError`` above
    (``reverse="bound"`` has no such limit); orders are processed in chunks so memory stays
    bounded (a few tens of MB).
    """
    c = _check_clip_multiplier(clip_multiplier)
    q = check_probability(sampling_rate, "sampling_rate")
    alphas = check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders, integer=True)
    reverse = _check_reverse(reverse)
    if reverse == "bound":
        return sampled_gaussian_rdp(q, 1.0 / c, alphas)
    if q == 1.0:
        # Two Gaussians with equal variance: the divergence is symmetric, a c^2 / 2.
        return alphas * c * c / 2.0
    if c > EXACT_REVERSE_MAX_CLIP:
        raise ValueError(
            f"clip_multiplier={c!r} is above {EXACT_REVERSE_MAX_CLIP:g}, the largest for which "
            "reverse='exact' is evaluated (its quadrature grid grows like clip_multiplier); "
            "use reverse='bound', an upper bound"
        )
    u, log_w = _reverse_grid(c)
    # x = q (exp(c u - c^2/2) - 1) > -q: the density ratio mix/p minus one. It overflows to inf
    # for c u - c^2/2 > 709 (large c), where the integrand's factor is exactly 0: harmless.
    with np.errstate(over="ignore"):
        x = q * np.expm1(c * u - 0.5 * c * c)
    log1p_x = np.log1p(x)
    w = np.exp(log_w)
    # The quadrature of the constant 1 is 1 - (tiny) rather than 1; the small branch corrects it.
    one_error = w.sum() - 1.0
    log_e = np.empty(alphas.shape)
    chunk = max(1, _CHUNK_ELEMENTS // u.size)
    for start in range(0, alphas.size, chunk):
        beta = (alphas[start : start + chunk] - 1.0)[:, None]  # (orders, 1) x (grid,) -> (orders, grid)
        log_integrand = -beta * log1p_x[None, :]
        part = logsumexp(log_integrand + log_w[None, :], axis=1)
        # Small divergences: E - 1 from expm1 directly, free of the 1 + tiny rounding of log E.
        small = part < 1e-3
        if np.any(small):
            e_minus_1 = np.expm1(log_integrand[small]) @ w + one_error
            part[small] = np.log1p(np.maximum(e_minus_1, 0.0))
        log_e[start : start + chunk] = part
    return np.maximum(log_e, 0.0) / (alphas - 1.0)


def dprec_overhead(steps: int, clip_multiplier: float, bits: int) -> float:
    """The importance-sampling overhead ``12 rho / 2^b`` of Algorithm 7 / Theorem 1.

    ``rho = steps * exp(D_2(q || p)) = steps * exp(c^2)`` (eq. (57) at order 2) with ``steps`` the
    client messages sent (``T * B`` in every sampling scheme), ``b`` the TOTAL bits of one client
    message (bits per group times groups); the constant 12 is from the importance-sampling bound eq. (4)
    (Agapiou et al. 2017). This amount of delta is spent whatever epsilon is.
    """
    steps = check_count(steps, "steps")
    c = _check_clip_multiplier(clip_multiplier)
    b = check_bits(bits)
    # log-space: exp(c^2) overflows for c > 26.6 and 2^b for b > 1023.
    log_overhead = math.log(12.0) + math.log(steps) + c * c - b * math.log(2.0)
    return math.exp(log_overhead) if log_overhead < 700.0 else math.inf


@dataclass(frozen=True)
class DPRECAccounting:
    """Result of a DP-REC accounting run (Algorithm 7), with the inputs of every term.

    Attributes
    ----------
    epsilon, delta : float
        The guarantee (``delta`` as requested: it includes the overhead).
    order : float
        Best Renyi order ``a = lambda + 1``; ``lam`` is the paper's lambda.
    forward, reverse : float
        ``k_lambda`` and ``m_lambda`` at the best order, summed over all steps.
    overhead : float
        ``12 rho / 2^b`` (0 when ``bits`` is None, i.e. omitted).
    rho : float
        ``messages * exp(c^2)``.
    steps : int
        Composed steps: ``T * B`` for ``"with_replacement"``, ``T`` for ``"poisson"`` and
        ``"without_replacement"``, ``rounds`` for the local guarantee.
    sampling_rate : float
        Rate of one step: ``1/N`` (with replacement), ``B/N`` (the others; the average
        ``sum B / (T N)`` when a round accountant saw several ``B``), 1 for the local guarantee.
    bits : int or None
        Total bits of one message.
    reverse_method : str
        ``"bound"`` or ``"exact"``.
    sampling : str or None
        One of :data:`SAMPLING_SCHEMES`; None for the local guarantee.
    messages : int or None
        Client messages counted in ``rho``: ``sum over rounds of B`` (``rounds`` for the local guarantee).
    rounds : int or None
        Rounds composed.
    """

    epsilon: float
    delta: float
    order: float
    lam: int
    forward: float
    reverse: float
    overhead: float
    rho: float
    steps: int
    sampling_rate: float
    bits: Optional[int]
    reverse_method: str
    sampling: Optional[str] = "with_replacement"
    messages: Optional[int] = None
    rounds: Optional[int] = None
    threat_model: Optional[str] = None
    relation: Optional[str] = None
    epsilons: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    method: str = "paper"
    conversion: str = ""
    composition: str = ""
    local: Optional[LocalGuarantee] = None
    caveat: Optional[str] = None

    @property
    def finite(self) -> bool:
        """Whether a bound is proved (``epsilon`` is finite)."""
        return math.isfinite(self.epsilon)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        """The :class:`~dprec.accounting.guarantee.PrivacyGuarantee` view of this result."""
        return PrivacyGuarantee(
            mechanism="dprec" if self.sampling is not None else "dprec-local",
            epsilon=self.epsilon,
            delta=self.delta,
            threat_model=self.threat_model,
            relation=self.relation,
            epsilons=dict(self.epsilons),
            reasons=dict(self.reasons),
            sampling=self.sampling,
            composition=self.composition,
            conversion=self.conversion,
            method=self.method,
            local=self.local,
            order=self.order if math.isfinite(self.epsilon) else None,
            caveat=self.caveat,
            details=self,
        )

    def summary(self) -> str:
        """A few lines: the guarantee, whom it holds against, and how it was computed."""
        text = self.guarantee.summary()
        if self.bits is None:
            return text
        if self.method == "paper":
            text += f"\nTheorem 1's overhead 12*rho/2^b = {self.overhead:.3g} of delta (b = {self.bits} total bits)"
        elif self.threat_model == "central":
            text += (
                f"\nREC's total-variation cost eta = {self.overhead:.3g}, paid as (1 + e^eps) eta of delta "
                f"(b = {self.bits} total bits)"
            )
        else:
            text += f"\nREC's messages bounded as sent, seed and index visible (b = {self.bits} total bits)"
        return text


# --------------------------------------------------------------------------------------
# Validation and the bit-width rule
# --------------------------------------------------------------------------------------


def _check_sampling(sampling: Any) -> str:
    if not isinstance(sampling, str) or sampling not in SAMPLING_SCHEMES:
        raise ValueError(f"sampling must be one of {SAMPLING_SCHEMES}, got {sampling!r}")
    return sampling


def _check_reverse_for(reverse: Any, sampling: str) -> str:
    return _check_reverse(reverse)


def _check_clients(b: int, n: int, sampling: str, name: str = "clients_per_round") -> None:
    if sampling != "with_replacement" and b > n:
        raise ValueError(f"{name} must be <= num_clients ({n}) for sampling={sampling!r}, got {b}")


def _log_overhead(messages: int, c: float, bits: float) -> float:
    return math.log(12.0) + math.log(messages) + c * c - bits * math.log(2.0)


def dprec_min_bits(
    *, messages: int, clip_multiplier: float, delta: float, groups: int = 1, fraction: float = OVERHEAD_WARN_FRACTION
) -> int:
    """Smallest uniform bits per group that keep the DP-REC overhead at most ``fraction * delta``.

    The overhead is ``12 rho / 2^b`` with ``rho = messages * exp(c^2)`` and ``b = groups * bits``
    (Algorithm 7); the result is the smallest integer ``k >= 1`` with
    ``12 * messages * exp(c^2) / 2^(groups * k) <= fraction * delta``.

    Parameters
    ----------
    messages : int
        Client messages over the whole run, ``rounds * clients_per_round`` (``rounds`` for the
        local guarantee).
    clip_multiplier : float
        ``c = C / sigma``.
    delta : float
        Target delta in (0, 1).
    groups : int
        Groups per message (``DPRECCodec.layout(template).num_groups``); 1 gives total bits.
    fraction : float
        In (0, 1): the share of delta the overhead may use (default 0.1, the bit-width rule).

    Returns
    -------
    int
        Bits per group. It may exceed the codec's limit of 24 per group; then more groups
        (``max_group_size``) are needed.
    """
    m = check_count(messages, "messages")
    c = _check_clip_multiplier(clip_multiplier)
    delta = check_delta(delta)
    g = check_count(groups, "groups")
    f = check_positive(fraction, "fraction")
    if f >= 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {f!r}")
    target = math.log(f * delta)
    k = max(1, math.ceil((_log_overhead(m, c, 0.0) - target) / (g * math.log(2.0))))
    # Settle rounding at the boundary with the exact comparison used everywhere else.
    while _log_overhead(m, c, g * k) > target:
        k += 1
    while k > 1 and _log_overhead(m, c, g * (k - 1)) <= target:
        k -= 1
    return k


def _describe_bits(bits: int, groups: Optional[int]) -> str:
    if groups is None:
        return f"bits={bits} total bits"
    if bits % groups == 0:
        return f"the message has {groups} groups x {bits // groups} bits = {bits} total bits"
    return f"the message has {groups} groups with {bits} total bits"


def _advice(messages: int, c: float, delta: float, groups: Optional[int]) -> str:
    from ..constants import MAX_BITS  # noqa: PLC0415 - the codec's per-group limit

    if groups is None:
        need = dprec_min_bits(messages=messages, clip_multiplier=c, delta=delta)
        return f"at least {need} total bits bring the overhead to <= 10% of delta"
    k = dprec_min_bits(messages=messages, clip_multiplier=c, delta=delta, groups=groups)
    text = f"use at least {k} bits per group ({groups} x {k} = {groups * k} total bits) to bring it to <= 10% of delta"
    if k > MAX_BITS:
        least = dprec_min_bits(messages=messages, clip_multiplier=c, delta=delta)
        text += (
            f"; a group has at most {MAX_BITS} bits, so split the update into more groups "
            f"(max_group_size): at least {-(-least // MAX_BITS)} groups of {MAX_BITS} bits"
        )
    return text


def _overhead_text(overhead: float, delta: float, messages: int, c: float, bits: int) -> str:
    ratio = overhead / delta
    how = f"{ratio:.3g} times delta" if ratio >= 1.0 else f"{100.0 * ratio:.3g}% of delta"
    return (
        f"the DP-REC overhead 12*rho/2^b = 12 * {messages} * exp({c:.4g}^2) / 2^{bits} = {overhead:.3g} "
        f"is {how}={delta:.3g}"
    )


def _bits_error(
    overhead: float, delta: float, messages: int, c: float, bits: int, groups: Optional[int]
) -> ValueError:
    what = _overhead_text(overhead, delta, messages, c, bits)
    if groups is None:
        return ValueError(
            f"bits={bits} is too few: `bits` is the TOTAL bits of one client message (bits per group x "
            "number of groups, i.e. DPRECCodec.layout(template).total_bits; the codec's epsilon(template, ...) "
            f"and accountant(template, ...) fill it in). With it {what}, and Algorithm 7 needs "
            f"delta > 12*rho/2^b (it takes log(delta - 12*rho/2^b)); {_advice(messages, c, delta, None)}, "
            "or use fewer messages (rounds x clients_per_round), a smaller clip_multiplier or a larger delta"
        )
    return ValueError(
        f"bits: {_describe_bits(bits, groups)}, too few for {messages} messages: {what}, and Algorithm 7 "
        f"needs delta > 12*rho/2^b; {_advice(messages, c, delta, groups)} (or use fewer messages, a smaller "
        "clip_multiplier or a larger delta)"
    )


def _enforce_bit_rule(
    *,
    messages: int,
    clip_multiplier: float,
    delta: float,
    bits: Optional[int],
    groups: Optional[int],
    warn: bool = True,
    stacklevel: int = 3,
) -> float:
    """The bit-width rule: ValueError when the overhead reaches delta, a warning above 10%.

    Returns the overhead (0 when ``bits`` is None).
    """
    if bits is None:
        return 0.0
    overhead = dprec_overhead(messages, clip_multiplier, bits)
    if overhead >= delta:
        raise _bits_error(overhead, delta, messages, clip_multiplier, bits, groups)
    if warn and overhead > OVERHEAD_WARN_FRACTION * delta:
        warnings.warn(
            f"{_overhead_text(overhead, delta, messages, clip_multiplier, bits)} (more than 10%; it is "
            f"subtracted from delta before epsilon is computed): {_describe_bits(bits, groups)}; "
            f"{_advice(messages, clip_multiplier, delta, groups)}",
            DPRECPrivacyWarning,
            stacklevel=stacklevel,
        )
    return overhead


# --------------------------------------------------------------------------------------
# Curves and the final minimisation
# --------------------------------------------------------------------------------------


def _round_unit(sampling: str, b: int, n: int) -> tuple[float, int]:
    """Sampling rate of one step and steps per round."""
    if sampling == "with_replacement":
        return 1.0 / n, b
    return b / n, 1


def _poisson_round_rdp(c: float, q: float, alphas: np.ndarray) -> np.ndarray:
    """Exact RDP of one Poisson round of DP-REC, both directions (docs: *Which guarantee do I have?*, 4.2).

    ``eps(a) = log(1 - q + q exp(a (a-1) c^2 / 2)) / (a - 1)``: the target's message is absent
    with probability ``1 - q`` in both runs (a common atom, disjoint from every message) and
    otherwise ``N(phi, sigma^2 I)`` against ``N(0, sigma^2 I)``, whose ``a``-th moment of the
    likelihood ratio is ``exp(a (a-1) c^2 / 2)`` at ``||phi|| = C`` in either direction.

    Computed as ``log1p(q expm1(x)) / (a-1)`` with ``x = a (a-1) c^2 / 2`` (accurate to rounding
    when the divergence is tiny) and, where ``expm1(x)`` would overflow, as
    ``logaddexp(log1p(-q), log q + x) / (a-1)``; ``q = 1`` gives ``a c^2 / 2`` exactly.
    """
    if q == 1.0:
        return alphas * c * c / 2.0
    with np.errstate(over="ignore"):
        x = alphas * (alphas - 1.0) * (c * c / 2.0)
    return _log_mix_rdp(q, x, alphas)


def _step_curves(
    c: float, b: int, n: int, alphas: np.ndarray, sampling: str, reverse: str
) -> tuple[np.ndarray, np.ndarray]:
    """Forward and reverse RDP of one (uncomposed) step of the scheme."""
    q, _ = _round_unit(sampling, b, n)
    return _rate_curves(c, q, alphas, reverse, sampling)


def _rate_curves(
    c: float, q: float, alphas: np.ndarray, reverse: str, sampling: str
) -> tuple[np.ndarray, np.ndarray]:
    """Forward and reverse RDP of one step at rate ``q``.

    ``"with_replacement"``: the mixture ``(1-q) p + q q_phi`` against ``p`` (eq. (62); the reverse
    term bounded or exact). ``"poisson"`` and ``"without_replacement"`` (``q = B/N``): the exact
    per-round divergence (:func:`_poisson_round_rdp`), the same in both directions, so
    ``reverse`` does not matter.
    """
    if sampling != "with_replacement":
        curve = _poisson_round_rdp(c, q, alphas)
        return curve, curve.copy()
    forward = sampled_gaussian_rdp(q, 1.0 / c, alphas)
    if reverse == "bound":
        return forward, forward.copy()
    return forward, dprec_reverse_rdp(c, q, alphas, reverse="exact")


def _poisson_messages(q: float, n: int) -> tuple[int, bool]:
    """Messages counted in ``rho`` for one Poisson round at rate ``q`` among ``n`` clients.

    The expected number ``q n``, rounded up (to the nearest integer when ``q n`` is one up to
    rounding, e.g. ``0.3 * 10``); and whether ``q n`` is such an integer.
    """
    x = q * n
    nearest = round(x)
    if nearest >= 1 and abs(x - nearest) <= 1e-9 * x:
        return int(nearest), True
    return max(1, math.ceil(x)), False


def _overhead_or_zero(steps: int, c: float, bits: Optional[int]) -> float:
    return 0.0 if bits is None else dprec_overhead(steps, c, bits)


# --------------------------------------------------------------------------------------
# method="sound": threat models, relations, per-step curves, both-tails conversion
# --------------------------------------------------------------------------------------

#: The caveat of every ``method="paper"`` result.
PAPER_CAVEAT = (
    "the paper's Algorithm 7: treats every slot that misses the target as a draw from the prior p "
    "(other clients' updates zero); not a guarantee against a message observer"
)
_SERVER_ADD_REMOVE = (
    "an observer who knows which client sent each message sees whether the target client takes part at all"
)
_LOCAL_ADD_REMOVE = (
    "an observer of one client's messages sees whether the client sends anything at all; the local guarantee "
    "is for relation='zero' (the client's update against a zero update)"
)


_ONE_CLIENT_ADD_REMOVE = (
    "with one client (N = 1) add/remove has no bound: without the target no client is left to send anything, "
    "which any observer sees"
)
_REC_MESSAGES_ADD_REMOVE = (
    "no bound is proved for add/remove against an observer of DP-REC's messages (it knows the public seed, "
    "so each message shows all K candidates and the chosen index, and the joint-convexity reduction would "
    "need divergences between two clients' REC laws); use relation='zero', threat_model='central', or "
    "bits=None for the uncompressed Gaussian variant"
)


def _log_mix_rdp(q: float, x: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``log(1 - q + q exp(x)) / (a - 1)`` for ``x >= 0``, exact to rounding for tiny ``q expm1(x)``."""
    out = np.empty(alphas.shape)
    if q == 1.0:
        return x / (alphas - 1.0)
    small = x <= 700.0
    out[small] = np.log1p(q * np.expm1(x[small]))
    if np.any(~small):
        out[~small] = np.logaddexp(math.log1p(-q), math.log(q) + x[~small])
    return out / (alphas - 1.0)


#: Candidates per group above which the mean's moments are taken at this many (they only shrink as
#: K grows, so a smaller K is a valid, and here indistinguishable, upper bound; it bounds the work).
_REC_MOMENT_MAX_CANDIDATES = 1 << 30
#: Highest moment of the mean computed exactly (an (m x m) convolution); above it the reverse bound uses
#: Jensen's ``E[w_bar^m] <= E[w^m]`` (valid, looser), so orders up to MAX_ORDER cost no more than this.
_REC_EXACT_MOMENT_MAX = 512


def _log_mean_power_moments(x: float, top: int, k: int) -> np.ndarray:
    """``log E[w_bar^m]`` for ``m = 0 .. top``: ``w_bar`` the mean of ``k`` i.i.d. ``w = exp(sqrt(x) z - x/2)``.

    Exact: ``E[w^m] = exp(m (m-1) x / 2)``; moments of a sum of independent terms combine by
    binomial convolution ``E[(A+B)^n] = sum_i C(n, i) E[A^i] E[B^(n-i)]`` (non-negative terms, summed
    in log space), ``k`` terms by binary powering (``O(log k top^2)``).
    """
    m = np.arange(top + 1, dtype=np.float64)
    n, i = m[:, None], m[None, :]
    valid = i <= n
    nmi = np.where(valid, n - i, 0.0)
    lbin = np.where(valid, gammaln(n + 1.0) - gammaln(i + 1.0) - gammaln(nmi + 1.0), -np.inf)
    idx = nmi.astype(np.int64)

    def conv(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
        return logsumexp(lbin + la[None, :] + np.where(valid, lb[idx], -np.inf), axis=1)

    base = m * (m - 1.0) * (x / 2.0)
    result: Optional[np.ndarray] = None
    kk = int(k)
    while kk:
        if kk & 1:
            result = base if result is None else conv(result, base)
        kk >>= 1
        if kk:
            base = conv(base, base)
    assert result is not None
    out = result - m * math.log(k)
    out[: min(top, 1) + 1] = 0.0  # E[w_bar^0] = E[w_bar] = 1 exactly (the sum rounds to within ~1e-14)
    return out


def rec_message_log_moments(
    clip_multiplier: float, orders: Any, candidates: Optional[int] = None
) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on the log-moments of one DP-REC message as a server sees it, against a zero update.

    The observer knows the public seed, so a message shows every group's ``K`` candidates (i.i.d.
    from the prior ``p``) and the chosen index; with a zero update the index is uniform. With
    ``w_k = q(Delta_k) / p(Delta_k)`` (log-normal: ``log w ~ N(-x/2, x)``, ``x = c_g^2`` for a group
    whose part of the update has ``||phi_g|| = c_g sigma``), ``M_r = (1/K) sum_k w_k^r`` and
    ``w_bar = M_1``:

    * forward, ``E_0[(P_phi / P_0)^a] = E[M_a w_bar^-a]``. ``M_a`` increases and ``w_bar^-a``
      decreases in every ``w_k``, and the ``w_k`` are independent, so by Harris' (FKG) inequality
      ``E[M_a w_bar^-a] <= E[M_a] E[w_bar^-a]``; ``E[M_a] = E[w^a] = exp(a (a-1) x / 2)`` and, as
      ``w_bar`` is at least the geometric mean, ``E[w_bar^-a] <= E[w^(-a/K)]^K = exp(a (a + K) x / (2K))``:
      log-moment ``<= a^2 x (1 + 1/K) / 2``;
    * reverse, ``E_phi[(P_0 / P_phi)^a] = E[w_bar^(a-1) M_-(a-1)]``, by the same inequality at most
      ``E[w_bar^(a-1)] E[w^-(a-1)]``: log-moment ``<= a (a-1) x / 2 + log E[w_bar^(a-1)]``, the mean's
      moment computed exactly (:func:`_log_mean_power_moments`; above order 513, by Jensen
      ``E[w_bar^(a-1)] <= E[w^(a-1)]``, to bound the work).

    Groups are independent given the update, so a message's log-moment is the sum over its groups.
    Both bounds are convex in ``x`` and 0 at ``x = 0`` (``log E[w_bar^m]`` is the log of a positive
    combination of exponentials of ``x``), hence superadditive, and they only grow as ``K``
    shrinks (the sample mean's convex moments decrease in ``K``): under the global clip
    ``sum_g c_g^2 <= c^2``, the message is bounded by the value at ``x = c^2`` and the smallest
    group's ``K``, whatever the split. ``candidates=None`` takes ``K = 1`` (valid for any ``K``).
    Returns the forward and reverse log-moments, ``(a - 1)`` times the Renyi bounds. The Gaussian
    ``N(phi)`` against ``N(0)`` has ``a (a-1) c^2 / 2`` for both; REC's seed-visible reverse
    provably exceeds that at orders above ``2 + 2 log(K) / c^2`` (see
    ``tests/accounting/test_rec_messages.py``).
    """
    c = _check_clip_multiplier(clip_multiplier)
    alphas = check_orders(orders, integer=True)
    k = 1 if candidates is None else check_count(candidates, "candidates")
    k = min(k, _REC_MOMENT_MAX_CANDIDATES)
    x = c * c
    forward = alphas * alphas * x * (1.0 + 1.0 / k) / 2.0
    m = (alphas - 1.0).astype(np.int64)
    exact = _log_mean_power_moments(x, int(min(m.max(), _REC_EXACT_MOMENT_MAX)), k)
    jensen = m * (m - 1.0) * x / 2.0  # log E[w^m] >= log E[w_bar^m]
    mean_moments = np.where(m <= _REC_EXACT_MOMENT_MAX, exact[np.minimum(m, _REC_EXACT_MOMENT_MAX)], jensen)
    reverse = alphas * (alphas - 1.0) * x / 2.0 + mean_moments
    return forward, reverse


def _rec_candidates(bits: Optional[int], groups: Optional[int] = None) -> Optional[int]:
    """``K`` of the smallest group, or None for the Gaussian variant.

    ``bits`` is ``groups`` times the smallest group's bits (what :class:`dprec.rec.codec.DPRECCodec`
    passes), so ``K = 2^(bits // groups)``. Without ``groups`` the split is unknown and the smallest
    group may have a single bit: ``K = 2``, valid for every split (the bound only grows as ``K``
    shrinks).
    """
    if bits is None:
        return None
    if groups is None:
        return 2
    per_group = bits // max(1, int(groups))
    return 1 << min(max(per_group, 1), 30)


def _rec_attributed(
    c: float, q: float, alphas: np.ndarray, candidates: Optional[int] = None, bit: Optional[np.ndarray] = None
) -> tuple[np.ndarray, np.ndarray]:
    """Server view of one step with a DP-REC message at rate ``q`` (zero-out): forward and reverse RDP.

    ``bit``: the log-moment of a quantile bit released with the message (:func:`_bit_log_moment`),
    added to the message's inside the mixture (a product kernel: log-moments add).
    """
    log_f, log_r = rec_message_log_moments(c, alphas, candidates)
    if bit is not None:
        log_f, log_r = log_f + bit, log_r + bit
    return _log_mix_rdp(q, log_f, alphas), _log_mix_rdp(q, log_r, alphas)


def _reason_messages_add_remove(sampling: str) -> str:
    return (
        f"no bound is proved for add/remove under {sampling} sampling against a message observer (an added "
        "client changes the number of messages); use relation='zero' or sampling='with_replacement'"
    )


def _check_method(method: Any) -> str:
    if not isinstance(method, str) or method not in DPREC_METHODS:
        raise ValueError(f"method must be one of {DPREC_METHODS}, got {method!r}")
    return method


def _resolve(method: Any, threat_model: Any, relation: Any, sampling: str) -> tuple[str, Optional[str], Optional[str]]:
    """Validate ``method``/``threat_model``/``relation``; fill in the defaults ("server", "zero").

    ``method="paper"`` is only the paper's with-replacement analysis and takes no threat model or
    relation (ValueError naming ``method``).
    """
    method = _check_method(method)
    if method == "paper":
        if threat_model is not None or relation is not None:
            given = "threat_model" if threat_model is not None else "relation"
            raise ValueError(
                f"method='paper' is the paper's analysis, not a guarantee under a threat model; pass "
                f"method='sound' (got {given}={threat_model if threat_model is not None else relation!r}); "
                f"valid: method='sound' with threat_model in {THREAT_MODELS} and relation in {RELATIONS}, or "
                "method='paper' with neither"
            )
        if sampling != "with_replacement":
            raise ValueError(
                f"method='paper' is Algorithm 7, defined for sampling='with_replacement' only, got "
                f"sampling={sampling!r}; valid combinations: method='paper' with sampling='with_replacement', "
                f"or method='sound' with sampling in {SAMPLING_SCHEMES}"
            )
        return method, None, None
    tm = "server" if threat_model is None else check_threat_model(threat_model)
    rel = "zero" if relation is None else check_relation(relation)
    return method, tm, rel


def _attributed(c: float, q: float, alphas: np.ndarray, bit: Optional[np.ndarray] = None) -> np.ndarray:
    """ATTRIBUTED(q, c)(a) = log(1 - q + q exp(a (a-1) c^2 / 2)) / (a - 1).

    ``bit``: the log-moment of a quantile bit released with the message (:func:`_bit_log_moment`),
    added inside the mixture: ``log(1 - q + q exp(a (a-1) c^2 / 2 + bit)) / (a - 1)``, the Gaussian's
    ATTRIBUTED at ``sqrt(c^2 + 1/s^2)`` for ``bit = a (a-1) / (2 s^2)``.
    """
    if bit is None:
        return _poisson_round_rdp(c, q, alphas)
    with np.errstate(over="ignore"):
        x = alphas * (alphas - 1.0) * (c * c / 2.0) + bit
    return _log_mix_rdp(q, x, alphas)


def _bit_log_moment(quantile_noise: float, alphas: np.ndarray) -> np.ndarray:
    """Log-moment ``(a - 1) D_a = a (a - 1) / (2 s^2)`` of one quantile bit, both directions.

    The bit is sent as the integer ``Y = b M + Z``, ``b = 1[||update|| <= C]``, ``Z ~ N_Z(0, (s M)^2)``
    the discrete Gaussian, ``M`` a power of two (a float ``b + N(0, s^2)`` would leak ``b`` through its
    rounding). Against a zero update's (whose bit is 1) the means are at most ``M`` apart, and
    ``D_a(N_Z(mu, v) || N_Z(nu, v)) <= a (mu - nu)^2 / (2 v)`` for integers ``mu``, ``nu`` (Canonne,
    Kamath and Steinke 2020, section 2), with equality at integer orders: exactly the continuous
    Gaussian's moments at noise ``s``. ``inf`` where ``s^2`` underflows.
    """
    s = quantile_noise
    with np.errstate(over="ignore", divide="ignore"):
        return alphas * (alphas - 1.0) / 2.0 / (s * s)


def _sound_curves(
    c: float, q: float, alphas: np.ndarray, *, threat_model: str, relation: str, sampling: str, n: int,
    rec: Optional[int] = None, quantile_noise: Optional[float] = None,
) -> "tuple[np.ndarray, np.ndarray] | str":
    """Per-step (forward, reverse) curves of ``method="sound"``, or the reason there is none.

    ``rec=None``: the uncompressed Gaussian variant (``bits=None``). ``rec=K`` (candidates of the
    smallest group, :func:`_rec_candidates`): DP-REC's messages
    as sent (seed and index); for ``"server"`` and ``"messages"`` the message itself is bounded
    (:func:`rec_message_log_moments`), for ``"central"`` the Gaussian curves hold and REC's cost is a
    total-variation term added by :func:`_finish_sound`.

    ``quantile_noise=s``: every message also carries adaptive clipping's noisy quantile bit, a
    discrete Gaussian on a lattice (docs: *Which guarantee do I have?*, 4.10), folded into each
    message's bound where a route allows it: the bit's log-moment ``a (a-1) / (2 s^2)`` inside the
    attributed mixtures (:func:`_sound_curves_at`). Per order, the smaller of that and the bit-free
    curve plus the unamplified ``a / (2 s^2)`` (:func:`quantile_bits_rdp`; both are bounds); the
    latter alone where nothing is folded (add/remove with replacement against an observer without
    the attribution).
    """
    plain = _sound_curves_at(c, q, alphas, threat_model=threat_model, relation=relation, sampling=sampling, n=n,
                             rec=rec, quantile_noise=None)
    if quantile_noise is None or isinstance(plain, str):
        return plain
    unamplified = quantile_bits_rdp(quantile_noise, alphas)
    old = (plain[0] + unamplified, plain[1] + unamplified)
    if not 1.0 / quantile_noise <= MAX_CLIP_MULTIPLIER:
        return old  # absurdly small s: every curve is astronomically large (or inf) anyway
    folded = _sound_curves_at(c, q, alphas, threat_model=threat_model, relation=relation, sampling=sampling, n=n,
                              rec=rec, quantile_noise=quantile_noise)
    if folded is None:
        return old
    assert not isinstance(folded, str)
    return np.minimum(folded[0], old[0]), np.minimum(folded[1], old[1])


def _sound_curves_at(
    c: float, q: float, alphas: np.ndarray, *, threat_model: str, relation: str, sampling: str, n: int,
    rec: Optional[int], quantile_noise: Optional[float],
) -> "tuple[np.ndarray, np.ndarray] | str | None":
    """:func:`_sound_curves` without the minimum; ``quantile_noise`` folded where it can be (None: nowhere).

    With the bit, one message's release is ``(message, bit)``, the bit independent of the message
    given the update. Attributed routes (the server's, and those that use it by post-processing):
    the joint log-moment is the message's plus the bit's ``a (a-1) / (2 s^2)`` (:func:`_bit_log_moment`),
    inside the mixture. With replacement, against an observer without the attribution, the zero-out
    curve is that attributed one (post-processing) and add/remove has no folded bound (None). The
    bit-free routes there (4.3's sampled Gaussian and its exact reverse, 4.4's DOMINATED) rest on
    Gaussian geometry that the lattice bit does not share: a discrete Gaussian's hockey-stick
    divergences can exceed the continuous one's (on a coarse lattice, ``M = 1``, ``s = 0.3``, the
    total variation is 0.992 against 0.904), and the add/remove reverse of the actual slot exceeds
    the continuous joint Gaussian's there (``tests/accounting/test_quantile_bits.py``).
    """
    bit = None if quantile_noise is None else _bit_log_moment(quantile_noise, alphas)
    if rec and threat_model in ("server", "messages"):
        if relation == "add_remove":
            return _SERVER_ADD_REMOVE if threat_model == "server" else _REC_MESSAGES_ADD_REMOVE
        # "messages": the server's bound, by post-processing (dropping the attribution).
        return _rec_attributed(c, q, alphas, int(rec), bit)
    if threat_model == "server":
        if relation == "add_remove":
            return _SERVER_ADD_REMOVE
        curve = _attributed(c, q, alphas, bit)
        return curve, curve.copy()
    # "messages", and "central" (the same curves: the decoded sum is a function of the
    # unattributed messages; nothing better is proved).
    if sampling != "with_replacement":
        if relation == "add_remove":
            return _reason_messages_add_remove(sampling)
        curve = _attributed(c, q, alphas, bit)
        return curve, curve.copy()
    if bit is not None:
        # The bit is a discrete Gaussian on a lattice (sent as an integer: a float sum would leak the bit through
        # its rounding, Mironov 2012). Its Renyi divergences between two shifts are at most the continuous
        # Gaussian's (Canonne, Kamath and Steinke 2020, section 2), which is all the attributed mixture and the
        # unamplified bound need; the Gaussian-geometry routes below are not used with the bits.
        if relation == "add_remove":
            return None  # _sound_curves: the bit-free route plus the unamplified bit
        curve = _attributed(c, q, alphas, bit)
        return curve, curve.copy()
    if relation == "add_remove":
        if n < 2:
            # The reduction compares the target's slot with another client's: with N = 1 there is none, and a
            # run without the target releases nothing at all.
            return _ONE_CLIENT_ADD_REMOVE
        # Joint convexity: a sampled Gaussian at sensitivity 2C (noise multiplier 1 / (2c)).
        forward = sampled_gaussian_rdp(q, 0.5 / c, alphas)
        if q < 1.0 and 2.0 * c <= EXACT_REVERSE_MAX_CLIP:
            reverse = dprec_reverse_rdp(2.0 * c, q, alphas, reverse="exact")
        else:
            reverse = forward.copy()  # reverse <= forward (Mironov, Talwar and Zhang 2019)
        return forward, np.minimum(reverse, forward)
    # zero, with replacement: the smaller of ATTRIBUTED and the hockey-stick dominance bound (each
    # valid on its own; WBK's size-1 subsample bound never beat both, see the docs' privacy page, 4.4).
    curve = np.minimum(_attributed(c, q, alphas), _zero_out_dominated_rdp(c, q, alphas))
    return curve, curve.copy()


def _zero_out_dominated_rdp(c: float, q: float, alphas: np.ndarray) -> np.ndarray:
    """Renyi bound, both directions, on a slot ``P = (1-q) M + q N(phi)`` vs ``P' = (1-q) M + q N(0)``.

    ``M`` is any mixture of ``N(u_j, sigma^2 I)`` with ``||u_j|| <= C``, ``||phi|| <= C``, ``c = C / sigma``.
    Derivation (hockey-stick divergences ``H_g(P || Q) = E_Q[(dP/dQ - g)_+]``):

    1. Advanced joint convexity (Balle, Barthe and Gaboardi 2018, Theorem 2): for ``g' = 1 + q (g - 1)``
       and ``b = g' / g``, ``H_g'(P || P') = q H_g(N(phi) || (1-b) M + b N(0))``. Joint convexity of
       ``H_g`` and the Gaussian's hockey-stick growing with the distance of the means (at most ``2C``
       here) give ``H_g'(P || P') <= q H_g(N(2C) || N(0))``. The sampled Gaussian pair
       ``S = (1-q) N(0) + q N(2C)`` against ``N(0)`` has exactly ``H_g'(S || N(0)) = q H_g(N(2C) || N(0))``
       by the same theorem, so ``H_g'(P || P') <= H_g'(S || N(0))`` for every ``g' >= 1``; swapping
       ``phi`` and ``0`` gives the same for ``H_g'(P' || P)``.
    2. For ``f(t) = t^a`` and ``L = dP/dP'``, ``E_P'[L^a] = 1 + a (a-1) [int_1^inf g^(a-2) H_g(P || P') dg
       + int_1^inf u^(-a-1) H_u(P' || P) du]`` (Taylor's formula with integral remainder; both
       integrands are non-negative). By 1., the first integral is at most that of ``S`` against
       ``N(0)``, which is at most ``(E_N(0)[L_S^a] - 1) / (a (a-1)) = (exp((a-1) SG(a)) - 1) / (a (a-1))``;
       the second is at most ``int_1^inf H_u(S || N(0)) du = E[(L_S - 1)_+^2] / 2 <= chi^2(S || N(0)) / 2
       = q^2 (exp(4 c^2) - 1) / 2``.

    Hence ``D_a <= log(exp((a-1) SG(a)) + a (a-1) q^2 (exp(4 c^2) - 1) / 2) / (a-1)`` with
    ``SG = sampled_gaussian_rdp(q, 1 / (2c))``; for small ``q`` about twice ``SG`` at low orders and
    ``SG`` at high ones.

    Only the largest distance ``2C`` (in noise units ``2c``) between the target's point and the zero
    update's or any point of ``M`` enters, so the bound holds for any unit Gaussians in any dimension
    with those distances at most ``2c``. It is not used with adaptive clipping's quantile bits: those
    are discrete Gaussians, whose hockey-stick divergences step 1 cannot bound by the Gaussian's.
    """
    sg = sampled_gaussian_rdp(q, 0.5 / c, alphas)
    am1 = alphas - 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        x = am1 * sg  # log E[L_S^a]
        log_chi2 = 4.0 * c * c + math.log(-math.expm1(-4.0 * c * c))  # log(exp(4c^2) - 1), no overflow
        log_y = np.log(alphas * am1 / 2.0) + 2.0 * math.log(q) + log_chi2
        small = x <= 700.0
        out = np.empty(alphas.shape)
        # log(exp(x) + y) = log1p(expm1(x) + y): keeps tiny divergences exact
        out[small] = np.log1p(np.expm1(x[small]) + np.exp(np.minimum(log_y[small], 700.0)))
        out[~small] = np.logaddexp(x[~small], log_y[~small])
        out = np.where(np.isfinite(sg), out, np.inf)
    return out / am1


def dprec_step_rdp(
    clip_multiplier: float,
    sampling_rate: float,
    orders: Any = None,
    *,
    threat_model: str,
    relation: str,
    sampling: str,
    num_clients: int,
    bits: Optional[int] = None,
    groups: Optional[int] = None,
    quantile_noise: Optional[float] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step (one slot with replacement, one round otherwise) Renyi curves of ``method="sound"``.

    Returns ``(forward, reverse)``: bounds on ``D_a(P || P')`` and ``D_a(P' || P)`` of one step,
    where ``P`` is the observer's view with the target client and ``P'`` its neighbour (see
    *Which guarantee do I have?*, section 4, in the docs). Both are ``inf`` arrays where no bound is
    proved (``threat_model="server"`` with ``relation="add_remove"``; ``"messages"``/``"central"``
    with add/remove under Poisson or without-replacement sampling).

    Parameters
    ----------
    clip_multiplier : float
        ``c = C / sigma > 0``.
    sampling_rate : float
        ``q`` of one step: ``1/N`` for ``"with_replacement"`` (one slot), ``B/N`` otherwise (one round).
    orders : sequence of int, optional
        Integer orders ``>= 2``; default :data:`DPREC_DEFAULT_ORDERS`.
    threat_model : {"central", "messages", "server"}
    relation : {"add_remove", "zero"}
    sampling : {"with_replacement", "poisson", "without_replacement"}
    num_clients : int
        ``N`` (the number of clients).
    bits : int, optional
        ``None`` (default): the uncompressed Gaussian variant. Otherwise DP-REC's messages as sent:
        for ``"server"`` and ``"messages"`` the seed-visible message bound
        (:func:`rec_message_log_moments`; the curves do not depend on the number of bits); for
        ``"central"`` the Gaussian curves (REC's cost there is a total-variation term in delta).
    groups : int, optional
        Groups per message (REC's bound uses the smallest group's ``2^(bits // groups)`` candidates).
    quantile_noise : float, optional
        ``s > 0``: each message also carries adaptive clipping's noisy quantile bit
        ``1[||update|| <= C]`` with discrete Gaussian noise of scale ``s`` on a lattice, folded into
        the message's bound where the route allows it, else added unamplified (what
        :class:`DPRECRoundAccountant` composes with ``quantile_noise``; docs, 4.10). ``None``: no bits.
    """
    c = _check_clip_multiplier(clip_multiplier)
    q = check_probability(sampling_rate, "sampling_rate")
    alphas = _orders(orders)
    tm = check_threat_model(threat_model)
    rel = check_relation(relation)
    sampling = _check_sampling(sampling)
    n = check_count(num_clients, "num_clients")
    if bits is not None:
        check_bits(bits)
    s = None if quantile_noise is None else _check_quantile_noise(quantile_noise)
    out = _sound_curves(c, q, alphas, threat_model=tm, relation=rel, sampling=sampling, n=n,
                        rec=_rec_candidates(bits, groups), quantile_noise=s)
    if isinstance(out, str):
        return np.full(alphas.shape, np.inf), np.full(alphas.shape, np.inf)
    return out


def _both_tails(forward: np.ndarray, rev: np.ndarray, alphas: np.ndarray, delta_half: float) -> tuple[float, int]:
    """``max`` over directions of the improved (Balle et al.) conversion at ``delta_half``; (eps, index)."""
    ef = epsilon_per_order(alphas, forward, delta_half, method="balle")
    er = epsilon_per_order(alphas, rev, delta_half, method="balle")
    i_f, i_r = int(np.argmin(ef)), int(np.argmin(er))
    if ef[i_f] >= er[i_r]:
        return float(ef[i_f]), i_f
    return float(er[i_r]), i_r


def _check_quantile_noise(value: Any) -> float:
    """``quantile_noise``: a finite real number > 0 (TypeError for a non-number, bools included)."""
    return check_positive(value, "quantile_noise")


def quantile_bits_rdp(quantile_noise: float, orders: Any, messages_per_round: int = 1) -> np.ndarray:
    """Unamplified Renyi cost of adaptive clipping's noisy quantile bits, per order (both directions).

    With adaptive clipping (Andrew et al. 2021) every client message carries one noisy bit, sent as
    the integer ``b M + Z``: ``b = 1[||update|| <= C_t]``, ``Z ~ N_Z(0, (s M)^2)`` the exact discrete
    Gaussian, ``M`` a power of two, ``s = quantile_noise`` (in bit units, drawn by the client). The bit
    has sensitivity 1 (``M`` on the lattice: a zero update has norm 0, so its bit is 1; the target's
    is 0 or 1), so one bit costs at most the Gaussian's ``a / (2 s^2)`` at order ``a`` (exactly that
    at integer orders; Canonne, Kamath and Steinke 2020), in both directions; ``k =
    messages_per_round`` of them cost ``k a / (2 s^2)``. This is the per-message cost with no
    sampling amplification: the local guarantee adds it per message. :class:`DPRECRoundAccountant`
    folds the bits into each message's bound instead (much smaller when the step is subsampled),
    and uses this term only as a cap: the bit-free step plus ``a / (2 s^2)`` is also an upper bound
    (chain rule of the Renyi divergence; see the *Which guarantee do I have?* page, section 4.10).

    Parameters
    ----------
    quantile_noise : float
        ``s > 0``, the scale of the noise on each bit, in bit units (``s M`` on the lattice).
    orders : sequence of float
        Renyi orders ``> 1`` (``None``: :data:`DPREC_DEFAULT_ORDERS`).
    messages_per_round : int
        ``k``, the most messages (hence bits) one client sends in a round.

    Returns
    -------
    numpy.ndarray
        ``k a / (2 s^2)`` per order (``inf`` where it overflows, at absurdly small ``s``).
    """
    s = _check_quantile_noise(quantile_noise)
    alphas = check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders)
    k = check_count(messages_per_round, "messages_per_round")
    with np.errstate(over="ignore", divide="ignore"):  # s^2 under- or overflows: inf or 0, both correct limits
        return k * (alphas / 2.0) / (s * s)


def _local_epsilon_k(
    c: float, k: int, delta: float, bits: Optional[int], alphas: np.ndarray, groups: Optional[int] = None,
    quantile_noise: Optional[float] = None,
) -> float:
    """Epsilon of ``k`` messages of one client seen by the server, both tails.

    ``bits=None``: Gaussian messages, RDP ``k a c^2 / 2`` both ways. Otherwise DP-REC's messages as
    sent (seed and index): ``k`` times :func:`rec_message_log_moments` over ``a - 1``. With
    ``quantile_noise`` each message also carries a noisy quantile bit: ``k a / (2 s^2)`` more, both
    ways (the bit is independent of the message given the update: Renyi divergences of a product add).
    """
    if k == 0:
        return 0.0
    if bits is None:
        forward = k * alphas * (c * c / 2.0)
        rev = forward
    else:
        log_f, log_r = rec_message_log_moments(c, alphas, _rec_candidates(bits, groups))
        forward, rev = k * log_f / (alphas - 1.0), k * log_r / (alphas - 1.0)
    if quantile_noise is not None:
        extra = quantile_bits_rdp(quantile_noise, alphas, k)
        forward, rev = forward + extra, rev + extra
    return _both_tails(forward, rev, alphas, delta / 2.0)[0]


def rec_total_variation(messages: int, clip_multiplier: float, bits: int, groups: Optional[int] = None) -> float:
    """Total-variation cost of REC for an observer of decoded updates only (``threat_model="central"``).

    Per group, the chosen candidate's law is within ``12 rho_g / K_g`` of ``q`` in total variation
    (Agapiou et al. 2017's bias bound for self-normalised importance sampling, applied to indicator
    functions; the same bound Theorem 1 uses), ``rho_g = exp(c_g^2) <= exp(c^2)``. Groups and
    messages add up (a hybrid argument over the run), so the decoded run is within
    ``eta = messages * groups * 12 exp(c^2) / 2^(bits / groups)`` of the run of the Gaussian mechanism
    it simulates. ``bits`` is the TOTAL bits of one message, ``groups`` times the smallest group's
    bits; without ``groups`` the split is unknown and every bit is taken as its own group (``K = 2``,
    ``groups = bits``: the largest cost any split can have).
    """
    m = check_count(messages, "messages")
    c = _check_clip_multiplier(clip_multiplier)
    b = check_bits(bits)
    g = b if groups is None else check_count(groups, "groups")
    if g > b:
        raise ValueError(f"groups must be <= bits (every group has at least 1 bit), got {g} > {b}")
    per_group_bits = b // g
    log_eta = math.log(12.0) + math.log(m) + math.log(g) + c * c - per_group_bits * math.log(2.0)
    if log_eta >= 700.0:
        return math.inf
    # Floored at the smallest positive double (an over-estimate, so still valid): an eta lost to underflow
    # would drop the cost (1 + e^eps) eta exactly where e^eps is huge.
    return max(math.exp(log_eta), math.ulp(0.0))


def _rec_tv_cost(eps: float, eta: float) -> float:
    """``(1 + e^eps) eta`` without capping ``e^eps`` (inf where it overflows and ``eta > 0``)."""
    if eta <= 0.0:
        return 0.0
    log_cost = math.log(eta) + float(np.logaddexp(0.0, eps))
    return math.exp(log_cost) if log_cost < 700.0 else math.inf


def _central_rec_epsilon(
    forward: np.ndarray, rev: np.ndarray, alphas: np.ndarray, delta: float, eta: float
) -> tuple[float, int]:
    """Smallest ``eps`` with ``2 max(delta_f(eps), delta_r(eps)) + (1 + e^eps) eta <= delta`` (both
    tails of the Gaussian curves plus REC's total-variation cost, paid in both neighbouring runs)."""
    if eta <= 0.0:
        return _both_tails(forward, rev, alphas, delta / 2.0)
    eps, idx = _both_tails(forward, rev, alphas, (delta - 2.0 * eta) / 2.0)  # a lower bound (e^eps >= 1)
    for _ in range(200):
        half = (delta - _rec_tv_cost(eps, eta)) / 2.0
        if not half > 0.0:
            return math.inf, idx
        new, idx = _both_tails(forward, rev, alphas, half)
        if new <= eps * (1.0 + 1e-13) + 1e-13:
            break
        eps = new
    # The iteration increases to the smallest fixed point; check the returned eps, nudging it up if needed.
    for _ in range(200):
        d_f = rdp_to_delta(alphas, forward, eps, method="balle")[0]
        d_r = rdp_to_delta(alphas, rev, eps, method="balle")[0]
        if 2.0 * max(d_f, d_r) + _rec_tv_cost(eps, eta) <= delta:
            return eps, idx
        eps = eps * (1.0 + 1e-9) + 1e-9
    return math.inf, idx


def _max_participations(steps: int, q: float, tail: float) -> int:
    """Smallest ``k`` with ``P(Bin(steps, q) > k) <= tail``."""
    from scipy.stats import binom  # noqa: PLC0415

    if q >= 1.0:
        return steps
    k = int(min(steps, max(0.0, float(binom.isf(tail, steps, q)))))
    while k > 0 and binom.sf(k - 1, steps, q) <= tail:
        k -= 1
    while k < steps and binom.sf(k, steps, q) > tail:
        k += 1
    return k


def _local_guarantee(
    c: float, delta: float, bits: Optional[int], alphas: np.ndarray, *, steps: int, q: float,
    expected: Optional[float] = None, tail: Optional[float] = None, groups: Optional[int] = None,
    quantile_noise: Optional[float] = None,
) -> LocalGuarantee:
    """Contract item 8: per message, over the expected participations, over a high-probability maximum.

    ``quantile_noise``: each message also carries a noisy quantile bit (:func:`quantile_bits_rdp`).
    """
    tail = delta / 10.0 if tail is None else tail
    mean = steps * q if expected is None else expected
    expected_k = max(1, math.ceil(mean - 1e-9 * mean))
    k_max = _max_participations(steps, q, tail)
    s = quantile_noise
    return LocalGuarantee(
        per_message=_local_epsilon_k(c, 1, delta, bits, alphas, groups, s),
        expected_participations=expected_k,
        epsilon_expected=_local_epsilon_k(c, expected_k, delta, bits, alphas, groups, s),
        max_participations=k_max,
        epsilon_max=_local_epsilon_k(c, k_max, delta, bits, alphas, groups, s),
        delta_max=delta + tail,
        tail_probability=tail,
    )


def _sound_text(threat_model: str, sampling: Optional[str], steps: int, bits: Optional[int]) -> tuple[str, str]:
    composition = (
        f"{steps} {'slots' if sampling == 'with_replacement' else 'rounds'} composed (adaptive RDP composition), "
        "forward and reverse curves separately"
    )
    if bits is None:
        composition += "; the uncompressed Gaussian variant (bits=None: REC's own cost not included)"
        conversion = "rdp-balle, both tails: max over directions at delta / 2"
    elif threat_model == "central":
        composition += "; plus REC's total-variation distance eta to the Gaussian mechanism it simulates"
        conversion = "rdp-balle, both tails: max over directions at (delta - (1 + e^eps) eta) / 2"
    else:
        composition += "; DP-REC's messages as sent (seed and index), bounded per message (rec_message_log_moments)"
        conversion = "rdp-balle, both tails: max over directions at delta / 2"
    if threat_model == "central":
        composition += (
            "; the 'central' curves are the Gaussian mechanism's 'messages' ones (the decoded sum is a function "
            "of the decoded messages; nothing better is proved)"
        )
    return composition, conversion


def _finish_sound(
    curves: dict,
    alphas: np.ndarray,
    *,
    c: float,
    delta: float,
    bits: Optional[int],
    messages: int,
    steps: int,
    q: float,
    reverse: str,
    sampling: Optional[str],
    rounds: int,
    threat_model: str,
    relation: str,
    local: Optional[LocalGuarantee],
    groups: Optional[int] = None,
) -> DPRECAccounting:
    """Convert composed curves ``{relation: (F, R) or reason}`` into a sound :class:`DPRECAccounting`.

    ``overhead`` in the result is REC's total-variation cost ``eta`` for ``"central"`` with ``bits``
    (:func:`rec_total_variation`; it is paid as ``(1 + e^eps) eta`` of delta), else 0: the server and
    message observers' curves bound REC's messages themselves, and ``bits=None`` is the Gaussian variant.
    """
    overhead = 0.0
    if bits is not None and threat_model == "central":
        overhead = rec_total_variation(messages, c, bits, groups)
        if 2.0 * overhead >= delta:
            raise ValueError(
                f"bits={bits} (total bits of one message, "
                f"{f'{groups} group(s)' if groups is not None else 'groups not given: every bit taken as its own group'}"
                ") is too few for a central guarantee "
                f"at delta={delta:g}: REC's total-variation cost 12 exp(c^2) / 2^(bits/groups) per group and message "
                f"adds up to eta = {overhead:.3g} over {messages} messages, and delta must exceed (1 + e^eps) eta; "
                "use more bits per group, or threat_model='server'/'messages' (which bound REC's messages directly)"
            )
    epsilons: dict = {}
    reasons: dict = {}
    picked: Optional[tuple[float, int, np.ndarray, np.ndarray]] = None
    for rel in RELATIONS:
        entry = curves.get(rel)
        if entry is None:
            continue
        if isinstance(entry, str):
            epsilons[rel] = math.inf
            reasons[rel] = entry
            continue
        forward, rev = entry
        eps, idx = _central_rec_epsilon(forward, rev, alphas, delta, overhead)
        epsilons[rel] = eps
        if rel == relation:
            picked = (eps, idx, forward, rev)
    composition, conversion = _sound_text(threat_model, sampling, steps, bits)
    if picked is None:
        eps, order, fwd_v, rev_v = math.inf, math.nan, math.inf, math.inf
        lam = 0
    else:
        eps, idx, forward, rev = picked
        order, fwd_v, rev_v = float(alphas[idx]), float(forward[idx]), float(rev[idx])
        lam = int(order) - 1
    return DPRECAccounting(
        epsilon=eps, delta=delta, order=order, lam=lam, forward=fwd_v, reverse=rev_v, overhead=overhead,
        rho=messages * math.exp(min(c * c, 700.0)), steps=steps, sampling_rate=q, bits=bits,
        reverse_method=reverse, sampling=sampling, messages=messages, rounds=rounds, threat_model=threat_model,
        relation=relation, epsilons=epsilons, reasons=reasons, method="sound", conversion=conversion,
        composition=composition, local=local, caveat=None,
    )


def _no_guarantee_error(threat_model: str, relation: str, reason: str, what: str) -> ValueError:
    return ValueError(
        f"{what}: there is no guarantee for threat_model={threat_model!r} with relation={relation!r} ({reason}); "
        f"valid threat_model values are {THREAT_MODELS} and relation values {RELATIONS}; relation='zero' is "
        "finite for every threat model"
    )


def _sound_central(
    c: float, t: int, b: int, n: int, alphas: np.ndarray, sampling: str, threat_model: str,
    relations: tuple = RELATIONS, rec: Optional[int] = None,
) -> tuple[dict, int, float]:
    """Composed sound curves ``{relation: (F, R) or reason}`` of ``t`` rounds, steps and step rate."""
    q, per_round = _round_unit(sampling, b, n)
    steps = t * per_round
    curves: dict = {}
    for rel in relations:
        out = _sound_curves(c, q, alphas, threat_model=threat_model, relation=rel, sampling=sampling, n=n, rec=rec)
        curves[rel] = out if isinstance(out, str) else (steps * out[0], steps * out[1])
    return curves, steps, q


def _result(
    forward: np.ndarray,
    rev: np.ndarray,
    alphas: np.ndarray,
    *,
    c: float,
    delta: float,
    bits: Optional[int],
    messages: int,
    steps: int,
    q: float,
    reverse: str,
    sampling: Optional[str],
    rounds: int,
    local: Optional[LocalGuarantee] = None,
) -> DPRECAccounting:
    """The ``method="paper"`` result: Algorithm 7's ``min_lambda [k + m - log(delta - overhead) / lambda]``."""
    overhead = _overhead_or_zero(messages, c, bits)
    if overhead >= delta:
        raise _bits_error(overhead, delta, messages, c, bits, None)  # type: ignore[arg-type]
    eps_per_order = forward + rev - math.log(delta - overhead) / (alphas - 1.0)
    best = int(np.argmin(eps_per_order))
    return DPRECAccounting(
        epsilon=float(eps_per_order[best]),
        delta=delta,
        order=float(alphas[best]),
        lam=int(alphas[best]) - 1,
        forward=float(forward[best]),
        reverse=float(rev[best]),
        overhead=overhead,
        rho=messages * math.exp(min(c * c, 700.0)),
        steps=steps,
        sampling_rate=q,
        bits=bits,
        reverse_method=reverse,
        sampling=sampling,
        messages=messages,
        rounds=rounds,
        threat_model=None,
        relation=None,
        method="paper",
        conversion="Algorithm 7: eps = min_lambda [k + m - log(delta - overhead) / lambda] (moments accountant)",
        composition=f"{steps} steps, k and m summed (Theorem 1)",
        local=local,
        caveat=PAPER_CAVEAT,
    )


def _central(
    c: float, t: int, b: int, n: int, alphas: np.ndarray, sampling: str, reverse: str
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Composed forward and reverse curves of ``t`` rounds, the step count and the step rate."""
    q, per_round = _round_unit(sampling, b, n)
    steps = t * per_round
    f_unit, r_unit = _step_curves(c, b, n, alphas, sampling, reverse)
    return steps * f_unit, steps * r_unit, steps, q


def _central_inputs(
    rounds: Any, clients_per_round: Any, num_clients: Any, sampling: Any, reverse: Any
) -> tuple[int, int, int, str, str]:
    t = check_count(rounds, "rounds")
    b = check_count(clients_per_round, "clients_per_round")
    n = check_count(num_clients, "num_clients")
    if t * b > MAX_COUNT:  # the messages of the run, used in float64
        raise ValueError(f"rounds * clients_per_round must be <= 2**53 (the messages of the run), got {t} * {b}")
    sampling = _check_sampling(sampling)
    _check_clients(b, n, sampling)
    return t, b, n, sampling, _check_reverse_for(reverse, sampling)


def _orders(orders: Any) -> np.ndarray:
    return check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders, integer=True)


def _central_local(
    c: float, delta: float, bits: Optional[int], alphas: np.ndarray, steps: int, q: float, groups: Optional[int] = None
) -> LocalGuarantee:
    return _local_guarantee(c, delta, bits, alphas, steps=steps, q=q, groups=groups)


def dprec_epsilon(
    *,
    rounds: int,
    clients_per_round: int,
    num_clients: int,
    clip_multiplier: float,
    delta: float,
    bits: Optional[int],
    reverse: str = "bound",
    orders: Any = None,
    sampling: str = "with_replacement",
    threat_model: Optional[str] = None,
    relation: Optional[str] = None,
    method: str = "sound",
    groups: Optional[int] = None,
) -> DPRECAccounting:
    """Central (eps, delta) of DP-REC after ``rounds`` rounds, against a stated observer.

    ``method="sound"`` (default): the per-step curves of :func:`dprec_step_rdp` for
    ``threat_model`` and both relations, composed over ``T B`` slots (with replacement) or ``T``
    rounds (Poisson, without replacement), converted with both tails: ``eps = max`` over
    directions of the improved (Balle et al. 2020) RDP conversion at ``delta / 2`` (for
    ``"central"`` with ``bits``: at ``(delta - (1 + e^eps) eta) / 2``, ``eta`` REC's total-variation
    cost, :func:`rec_total_variation`, or the ``"messages"`` bound where that is smaller or ``eta``
    too large: it holds centrally by post-processing). Where no bound is proved (``"server"`` with ``"add_remove"``,
    or add/remove against a message observer under Poisson / without-replacement sampling) the
    epsilon is ``inf`` and ``reasons`` says why. The result carries both relations
    (``epsilons``) and the local guarantee (``local``).

    ``method="paper"``: Algorithm 7 as printed (``sampling="with_replacement"`` only; no
    ``threat_model``/``relation``), ``eps = min_lambda [k + m - log(delta - 12 rho / 2^b) / lambda]``;
    it reproduces the paper's table and is not a guarantee against a message observer (see
    ``caveat``).

    Parameters
    ----------
    rounds, clients_per_round, num_clients : int
        ``T``, ``B`` (clients per round; the expected number for ``"poisson"``) and ``N``.
    clip_multiplier : float
        ``c = C / sigma``.
    delta : float
        Target delta in (0, 1); the paper uses ``num_clients ** -1.1``.
    bits : int or None
        TOTAL bits ``b`` of one client message: bits per group times the number of groups
        (``DPRECCodec.layout(template).total_bits``; :meth:`dprec.rec.codec.DPRECCodec.epsilon` fills it
        in). ``None``: the uncompressed Gaussian mechanism DP-REC simulates (the paper's reported
        numbers omit the overhead likewise). With ``bits``, ``method="sound"`` accounts REC's
        messages as sent: against ``"server"``/``"messages"`` each message is bounded directly
        (seed and index visible, :func:`rec_message_log_moments`), against ``"central"`` REC's
        total-variation cost is added; ``method="paper"`` adds Theorem 1's ``12 rho / 2^b``.
    reverse : {"bound", "exact"}
        ``method="paper"``: how ``m`` is obtained (see :func:`dprec_reverse_rdp`); ``"bound"``
        reproduces the paper. ``method="sound"`` always uses the exact reverse curve where it
        differs from the forward one (this argument is validated but does not change its numbers).
    orders : sequence of int, optional
        Integer orders ``a = lambda + 1 >= 2``; default ``2 .. 257``.
    sampling : {"with_replacement", "poisson", "without_replacement"}
        How clients are drawn each round (see *Which guarantee do I have?* in the docs).
    threat_model : {"server", "messages", "central"}, optional
        Who observes (``method="sound"`` only); default ``"server"`` (a Flower server knows which
        client sent each message).
    relation : {"zero", "add_remove"}, optional
        The neighbouring relation of ``epsilon`` (``method="sound"`` only); default ``"zero"``,
        the only one finite against the server.
    method : {"sound", "paper"}
    groups : int, optional
        How many groups the message's ``bits`` are split over, ``bits`` being ``groups`` times the
        smallest group's bits (``DPRECCodec.layout(template).groups``; the codec passes it). REC's
        bounds use the smallest group's ``K = 2^(bits // groups)`` candidates (and, for
        ``"central"``, ``groups`` costs per message). ``None``: the split is unknown, so the
        bounds take the worst one (every bit its own group, ``K = 2``): valid, and much looser.

    Returns
    -------
    DPRECAccounting
        ``.guarantee`` gives the :class:`~dprec.accounting.guarantee.PrivacyGuarantee` view.

    Raises
    ------
    ValueError
        For invalid parameters (named; ``threat_model``/``relation``/``method`` with the valid
        choices), ``method="paper"`` with another sampling or with a threat model (naming
        ``method``), ``clients_per_round > num_clients`` outside ``"with_replacement"``, and when
        the bits are too few for the guarantee (``method="paper"``: ``delta <= 12 rho / 2^b``),
        naming ``bits``.
    """
    t, b, n, sampling, reverse = _central_inputs(rounds, clients_per_round, num_clients, sampling, reverse)
    method, tm, rel = _resolve(method, threat_model, relation, sampling)
    c = _check_clip_multiplier(clip_multiplier)
    delta = check_delta(delta)
    if bits is not None:
        bits = check_bits(bits)
    alphas = _orders(orders)
    if bits is not None and method == "paper":
        _enforce_bit_rule(messages=t * b, clip_multiplier=c, delta=delta, bits=bits, groups=None, warn=False)
    q_unit, per_round = _round_unit(sampling, b, n)
    local = _central_local(c, delta, bits, alphas, t * per_round, q_unit, groups)
    if method == "paper":
        forward, rev, steps, q = _central(c, t, b, n, alphas, sampling, reverse)
        return _result(
            forward, rev, alphas, c=c, delta=delta, bits=bits, messages=t * b, steps=steps, q=q, reverse=reverse,
            sampling=sampling, rounds=t, local=local,
        )
    assert tm is not None and rel is not None

    def route(observer: str) -> DPRECAccounting:
        curves, steps, q = _sound_central(c, t, b, n, alphas, sampling, observer, rec=_rec_candidates(bits, groups))
        return _finish_sound(
            curves, alphas, c=c, delta=delta, bits=bits, messages=t * b, steps=steps, q=q, reverse=reverse,
            sampling=sampling, rounds=t, threat_model=observer, relation=rel, local=local, groups=groups,
        )

    if tm != "central" or bits is None:
        return route(tm)
    return _central_rec(route, 2.0 * rec_total_variation(t * b, c, bits, groups) < delta)


def _central_rec(route: Any, payable: bool) -> DPRECAccounting:
    """REC's messages as sent against the central observer: the better of two sound routes, per relation.

    (1) The Gaussian curves plus REC's total-variation cost paid out of delta (``route("central")``;
    only when ``payable``: twice the cost below delta). (2) The bound on the messages
    themselves against a message observer (``route("messages")``): the central observer sees only
    models computed from the messages, so by post-processing that bound holds against it too.
    """
    via_messages = route("messages")
    via_tv = route("central") if payable else None  # unpayable: 2 eta >= delta (route("central") would raise)
    epsilons = {}
    reasons = {}
    for rel in RELATIONS:
        a = via_messages.epsilons.get(rel, math.inf)
        b_ = via_tv.epsilons.get(rel, math.inf) if via_tv is not None else math.inf
        epsilons[rel] = min(a, b_)
        if math.isinf(epsilons[rel]):
            reasons[rel] = via_messages.reasons.get(rel) or (via_tv.reasons.get(rel, "") if via_tv else "")
    # Which route gave each relation's number (the record's other fields describe the requested relation's).
    routes = "; ".join(
        f"{rel}: " + ("REC's total-variation route" if via_tv is not None and via_tv.epsilons.get(rel, math.inf)
                      <= via_messages.epsilons.get(rel, math.inf) else "the message observer's bound")
        for rel in RELATIONS if math.isfinite(epsilons[rel])
    )
    if via_tv is not None and via_tv.epsilon <= via_messages.epsilon:
        return _replace(via_tv, epsilons=epsilons, reasons=reasons,
                        composition=via_tv.composition + (f" (routes per relation: {routes})" if routes else ""))
    return _replace(
        via_messages, threat_model="central", epsilons=epsilons, reasons=reasons,
        composition=via_messages.composition + "; the message observer's bound, which holds against the central "
        "observer by post-processing ("
        + ("it beats paying REC's total-variation cost out of delta here)" if via_tv is not None
           else "REC's total-variation cost cannot be paid out of delta here)")
        + (f" (routes per relation: {routes})" if routes else ""),
    )


def _resolve_local(method: Any, threat_model: Any, relation: Any) -> tuple[str, Optional[str], Optional[str]]:
    method = _check_method(method)
    if method == "paper":
        return _resolve(method, threat_model, relation, "with_replacement")
    tm = "server" if threat_model is None else check_threat_model(threat_model)
    if tm != "server":
        raise ValueError(
            f"threat_model={tm!r}: the local guarantee is what an observer of one client's own messages learns, "
            "so threat_model must be 'server' (the valid choice here; 'messages' and 'central' observers are "
            "covered by dprec_epsilon's central guarantee)"
        )
    rel = "zero" if relation is None else check_relation(relation)
    return method, tm, rel


def dprec_local_epsilon(
    *,
    clip_multiplier: float,
    delta: float,
    bits: Optional[int],
    rounds: int = 1,
    orders: Any = None,
    threat_model: Optional[str] = None,
    relation: Optional[str] = None,
    method: str = "sound",
    groups: Optional[int] = None,
) -> DPRECAccounting:
    """Local (eps, delta) of DP-REC: what the ``rounds`` messages of one client reveal about it.

    The observer sees one client's messages, attributed (``threat_model="server"``, the only one
    accepted: a weaker observer is covered by the central guarantee), against the client's update
    replaced by a zero update (``relation="zero"``, the default), composed over ``rounds`` messages
    (no sampling amplification).

    * ``method="sound"``: with ``bits=None`` each message is the Gaussian ``N(phi, sigma^2)``
      against ``N(0, sigma^2)`` (Renyi divergence ``a c^2 / 2`` both ways); with ``bits`` it is
      DP-REC's message as sent, seed and index visible (:func:`rec_message_log_moments`: log-moments
      at most ``a^2 c^2 (1 + 1/K) / 2`` forward and ``a (a-1) c^2 / 2 + log E[w_bar^(a-1)]``
      reverse). Both tails: ``eps = max`` over directions of
      the improved (Balle et al.) conversion at ``delta / 2``; ``relation="add_remove"`` gives
      ``inf`` with the reason (the observer sees whether the client sends at all).
    * ``method="paper"``: Theorem 1 with ``c_lambda = lambda c^2 / 2`` (eq. (57)),
      ``eps = min_lambda [rounds (lambda + 1) c^2 - log(delta - 12 rho / 2^b) / lambda]``.

    ``bits`` is the TOTAL bits of one message, ``groups`` times the smallest group's bits; the REC
    bound uses that group's ``2^(bits // groups)`` candidates (``groups=None``: the worst split, ``K = 2``).
    """
    method, tm, rel = _resolve_local(method, threat_model, relation)
    steps = check_count(rounds, "rounds")
    c = _check_clip_multiplier(clip_multiplier)
    delta = check_delta(delta)
    if bits is not None:
        bits = check_bits(bits)
    alphas = _orders(orders)
    forward = steps * sampled_gaussian_rdp(1.0, 1.0 / c, alphas)
    if method == "paper":
        rev = steps * dprec_reverse_rdp(c, 1.0, alphas, reverse="exact")
        return _result(
            forward, rev, alphas, c=c, delta=delta, bits=bits, messages=steps, steps=steps, q=1.0, reverse="exact",
            sampling=None, rounds=steps,
        )
    assert tm is not None and rel is not None
    if bits is None:
        curves = {"zero": (forward, forward.copy()), "add_remove": _LOCAL_ADD_REMOVE}
    else:  # DP-REC's messages as sent: seed and index visible to the server
        log_f, log_r = rec_message_log_moments(c, alphas, _rec_candidates(bits, groups))
        curves = {"zero": (steps * log_f / (alphas - 1.0), steps * log_r / (alphas - 1.0)), "add_remove": _LOCAL_ADD_REMOVE}
    result = _finish_sound(
        curves, alphas, c=c, delta=delta, bits=bits, messages=steps, steps=steps, q=1.0, reverse="exact",
        sampling=None, rounds=steps, threat_model=tm, relation=rel, local=None,
    )
    composition = f"{steps} messages of one client composed (adaptive RDP composition); no sampling amplification"
    return _replace(result, composition=composition)


def _replace(result: DPRECAccounting, **changes: Any) -> DPRECAccounting:
    import dataclasses  # noqa: PLC0415

    return dataclasses.replace(result, **changes)


def dprec_delta(
    *,
    rounds: int,
    clients_per_round: int,
    num_clients: int,
    clip_multiplier: float,
    epsilon: float,
    bits: Optional[int],
    reverse: str = "bound",
    orders: Any = None,
    sampling: str = "with_replacement",
    threat_model: Optional[str] = None,
    relation: Optional[str] = None,
    method: str = "sound",
    groups: Optional[int] = None,
) -> tuple[float, float]:
    """Delta for a given epsilon; returns ``(delta, order)`` with ``delta`` capped at 1.

    ``method="sound"``: ``2 max_directions delta_balle(curve, eps)``, plus ``(1 + e^eps) eta`` for
    ``"central"`` with ``bits`` (:func:`rec_total_variation`) (the inverse of
    :func:`dprec_epsilon`'s both-tails conversion); where no bound is proved for ``threat_model`` and
    ``relation`` it returns ``(1.0, nan)`` (no guarantee). ``method="paper"``: Theorem 1,
    ``min_lambda exp(lambda (k + m - eps)) + 12 rho / 2^b``. ``order = lambda + 1``. Other
    parameters as in :func:`dprec_epsilon`.
    """
    t, b, n, sampling, reverse = _central_inputs(rounds, clients_per_round, num_clients, sampling, reverse)
    method, tm, rel = _resolve(method, threat_model, relation, sampling)
    c = _check_clip_multiplier(clip_multiplier)
    eps = check_epsilon(epsilon)
    if bits is not None:
        bits = check_bits(bits)
    alphas = _orders(orders)
    if method == "paper":
        forward, rev, _, _ = _central(c, t, b, n, alphas, sampling, reverse)
        log_delta = (alphas - 1.0) * (forward + rev - eps)
        best = int(np.argmin(log_delta))
        delta = math.exp(min(0.0, float(log_delta[best]))) + _overhead_or_zero(t * b, c, bits)
        return min(1.0, delta), float(alphas[best])
    assert tm is not None and rel is not None

    def route(observer: str) -> tuple[float, float]:
        curves, _, _ = _sound_central(c, t, b, n, alphas, sampling, observer, relations=(rel,),
                                      rec=_rec_candidates(bits, groups))
        entry = curves[rel]
        if isinstance(entry, str):
            return 1.0, math.nan
        d_f, o_f = rdp_to_delta(alphas, entry[0], eps, method="balle")
        d_r, o_r = rdp_to_delta(alphas, entry[1], eps, method="balle")
        d_half, order = (d_f, o_f) if d_f >= d_r else (d_r, o_r)
        eta = rec_total_variation(t * b, c, bits, groups) if bits is not None and observer == "central" else 0.0
        return min(1.0, 2.0 * d_half + _rec_tv_cost(eps, eta)), order

    if tm == "central" and bits is not None:  # the better of the two central routes (see _central_rec)
        return min(route("central"), route("messages"), key=lambda pair: pair[0])
    return route(tm)


def dprec_calibrate(
    *,
    target_epsilon: float,
    rounds: int,
    clients_per_round: int,
    num_clients: int,
    delta: float,
    bits: Optional[int],
    reverse: str = "bound",
    orders: Any = None,
    rtol: float = 1e-10,
    sampling: str = "with_replacement",
    threat_model: Optional[str] = None,
    relation: Optional[str] = None,
    method: str = "sound",
    groups: Optional[int] = None,
) -> float:
    """The clip multiplier ``c = C / sigma`` at which :func:`dprec_epsilon` equals ``target_epsilon``
    (to ``rtol``, and never above it: a root that rounding puts above the target is stepped down;
    for ``"central"`` with ``bits`` it may sit below the target where the better of the two central
    routes switches, see :func:`dprec_epsilon`).

    Same parameters as :func:`dprec_epsilon` (``bits`` the TOTAL bits of one message, ``sampling``
    the scheme, ``threat_model``/``relation``/``method`` as there). Epsilon increases with ``c``
    (every curve does), so the root is unique; it is found by Brent's method on ``[1e-6, c_max]``
    where ``c_max`` is doubled until epsilon exceeds the target (or, where bits cost delta -- the
    paper's overhead ``12 rho / 2^b``, or REC's total-variation cost for ``"central"`` -- until that
    cost reaches delta, beyond which epsilon is undefined).

    Raises
    ------
    ValueError
        For a ``threat_model``/``relation`` combination without a guarantee (naming both and the
        valid choices); when ``target_epsilon`` is below the floor that no ``c`` can go under with
        these orders, or above what any ``c`` reaches before the bits' cost (``method="paper"``:
        ``12 rho / 2^b``; ``"central"``: REC's total-variation cost) uses up ``delta``.
    """
    eps_target = check_positive(target_epsilon, "target_epsilon")
    t, b, n, sampling, reverse = _central_inputs(rounds, clients_per_round, num_clients, sampling, reverse)
    method, tm, rel = _resolve(method, threat_model, relation, sampling)
    delta = check_delta(delta)
    if bits is not None:
        bits = check_bits(bits)
    alphas = _orders(orders)
    rtol = check_positive(rtol, "rtol")
    messages = t * b
    if method == "sound":
        assert tm is not None and rel is not None
        probe = _sound_curves(1.0, _round_unit(sampling, b, n)[0], alphas[:1], threat_model=tm, relation=rel,
                              sampling=sampling, n=n, rec=_rec_candidates(bits, groups))
        if isinstance(probe, str):
            raise _no_guarantee_error(tm, rel, probe, "dprec_calibrate")

    def account(c: float) -> DPRECAccounting:
        if method == "paper":
            forward, rev, steps, q = _central(c, t, b, n, alphas, sampling, reverse)
            return _result(
                forward, rev, alphas, c=c, delta=delta, bits=bits, messages=messages, steps=steps, q=q,
                reverse=reverse, sampling=sampling, rounds=t,
            )
        curves, steps, q = _sound_central(  # type: ignore[arg-type]
            c, t, b, n, alphas, sampling, tm, relations=(rel,), rec=_rec_candidates(bits, groups)
        )
        return _finish_sound(
            curves, alphas, c=c, delta=delta, bits=bits, messages=messages, steps=steps, q=q, reverse=reverse,
            sampling=sampling, rounds=t, threat_model=tm, relation=rel, local=None, groups=groups,  # type: ignore[arg-type]
        )

    if method == "sound" and bits is not None and tm == "central":
        # The better of the two central routes (see _central_rec): nondecreasing in c, with a jump down where the
        # total-variation route stops being payable (so the result may sit below the target there).
        def account(c: float) -> DPRECAccounting:  # noqa: F811 - the central route replaces the plain one
            return dprec_epsilon(
                rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=delta, bits=bits,
                reverse=reverse, orders=alphas, sampling=sampling, threat_model=tm, relation=rel, groups=groups,
            )

    def excess(c: float) -> float:
        if method == "paper" and _overhead_or_zero(messages, c, bits) >= delta:
            return math.inf
        return account(c).epsilon - eps_target

    lo = 1e-6
    if excess(lo) >= 0.0:
        floor = account(lo).epsilon
        raise ValueError(
            f"target_epsilon={eps_target:g} is below {floor:.6g}, the smallest epsilon these orders can "
            f"certify at delta={delta:g} (log(1/delta)/lambda_max); add larger orders or raise the target"
        )
    hi = 1.0
    while excess(hi) < 0.0:
        lo, hi = hi, 2.0 * hi
        if hi > 64.0:
            raise ValueError(f"target_epsilon={eps_target:g} is not reached by any clip_multiplier <= 64")
    if math.isinf(excess(hi)):
        # Shrink hi into the region where the overhead is still below delta.
        good, bad = lo, hi
        for _ in range(200):
            mid = 0.5 * (good + bad)
            if math.isinf(excess(mid)):
                bad = mid
            elif excess(mid) < 0.0:
                good = mid
            else:
                hi = mid
                break
        else:
            raise ValueError(
                f"target_epsilon={eps_target:g} is not reachable: the bits' cost "
                f"({'the overhead 12*rho/2^b' if method == 'paper' else 'REC total variation (1 + e^eps) eta'}) "
                f"reaches delta={delta:g} first (bits={bits} total bits); use more bits per group"
            )
        lo = good
    c = float(brentq(excess, lo, hi, rtol=rtol, xtol=1e-14))
    # brentq may land a rounding error above the root; step down so the calibrated c never exceeds the target.
    for _ in range(64):
        if excess(c) <= 0.0:
            return c
        c = max(lo, c * (1.0 - 4.0 * rtol))
    return lo  # excess(lo) < 0 holds by the bracket


# --------------------------------------------------------------------------------------
# Round-by-round accountant
# --------------------------------------------------------------------------------------


class DPRECRoundAccountant:
    """DP-REC privacy accountant stepped once per federated round (a server loop's companion).

    Composes the scheme's per-round curves as rounds happen; the number of clients may change
    from round to round (one curve per distinct ``B`` or rate, each multiplied by its count,
    ``rho`` the sum of all ``B``). ``T`` rounds of a constant ``B`` give exactly
    :func:`dprec_epsilon`'s result. The model is :func:`dprec_epsilon`'s: the target's update
    against a zero update by default, against the observer ``threat_model`` (default ``"server"``),
    with ``method="sound"`` (default) or the paper's Algorithm 7 (``method="paper"``, with
    replacement only). Sound: per round the curves of :func:`dprec_step_rdp` (with ``bits``, REC's
    messages as sent, or for ``"central"`` the Gaussian curves plus REC's total-variation cost;
    ``bits=None`` the Gaussian variant); an unsampled client sends nothing, so unlike DP-FedAvg
    there is no sampled-Gaussian amplification against the server.
    Checks the bits up front for a planned ``rounds`` and before every :meth:`step` composes:
    ``method="paper"`` applies the bit-width rule (see *Which guarantee do I have?*, section 5),
    ``"central"`` with ``bits`` takes the better of two routes (the Gaussian curves plus REC's
    total-variation cost, or the message observer's bound, which holds centrally by
    post-processing), so it needs no check either; nor do the server and message observers.

    **Adaptive clipping** (``quantile_noise=s``, ``method="sound"`` only). Each message then also
    carries one noisy bit (Andrew et al. 2021), sent as the integer ``b M + Z``, ``b = 1[||update||
    <= C_t]``, ``Z ~ N_Z(0, (s M)^2)`` the exact discrete Gaussian, ``M`` a power of two (a float
    ``b + N(0, s^2)`` leaks ``b`` through its rounding); independent of the message given the update
    and released with it; ``c = C_t / sigma_t`` stays fixed. The bit is folded into each message's
    bound where a route allows it (the docs' section 4.10): against a zero update (whose bit is 1)
    its log-moment is at most ``a (a-1) / (2 s^2)`` (the continuous Gaussian's; Canonne, Kamath and
    Steinke 2020), and a message with its bit has the message's log-moment plus that (a product
    kernel). So the attributed curves (the server's, and the message and central observers' where
    they use it by post-processing, with replacement for zero-out too) are
    ``log(1 - q + q exp(m(a) + a (a-1) / (2 s^2))) / (a - 1)``, forward and reverse moments ``m``
    separately (the Gaussian variant's is ATTRIBUTED at ``sqrt(c^2 + 1/s^2)``); ``"central"`` with
    ``bits`` pays REC's total-variation cost on top, unchanged. Per order, each curve is capped by
    the old bound, the bit-free curve plus ``a / (2 s^2)`` per step, unamplified
    (:func:`quantile_bits_rdp`; also an upper bound, by the chain rule of the Renyi divergence).
    With replacement, against the message and central observers, add/remove has only that bound:
    the bit-free route (a sampled Gaussian at ``2c`` with its exact reverse) rests on Gaussian
    geometry the lattice bit does not share; zero-out there is the smaller of the attributed curve
    and the bit-free ``min(ATTRIBUTED, DOMINATED)`` plus the bits. In
    log-moments, with ``f(x) = log(1 - q + q e^x)``, ``x`` a message's and ``y`` a bit's, the folded
    attributed step is ``f(x + y)``; ``f(x + y) <= f(x) + y`` (why the old bound held), while
    accounting the bits as a separately subsampled mechanism, ``f(x) + f(y)``, would be unsound: the
    participation event is shared, and ``f(x) + f(y) <= f(x + y)``. The local
    guarantee adds ``a / (2 s^2)`` per message. Where the curves are ``inf`` with a reason they stay
    so. With ``quantile_noise``, ``T`` rounds no longer equal
    :func:`dprec_epsilon` (which has no bits)::

        acc = codec.accountant(template, num_clients=100, clients_per_round=10, delta=1e-5,
                               sampling="without_replacement", rounds=500)
        for t in range(500):
            ...  # sample 10 clients, aggregate their messages
            acc.step()
        print(acc.epsilon)

    Parameters
    ----------
    clip_multiplier : float
        ``c = C / sigma``.
    bits : int or None
        TOTAL bits of one client message (``None`` omits the overhead, as the paper's numbers do).
    num_clients : int
        ``N``.
    clients_per_round : int, optional
        Default ``B`` of :meth:`step` (the expected number for ``"poisson"``). Required unless
        ``sampling_rate`` is given.
    delta : float
        Target delta in (0, 1).
    sampling : {"with_replacement", "poisson", "without_replacement"}
    reverse : {"bound", "exact"}
        For ``"poisson"`` and ``"without_replacement"`` both give the same numbers.
    rounds : int, optional
        The planned number of rounds: the bit-width rule is checked for it now.
    groups : int, optional
        Groups per message (see :func:`dprec_epsilon`): with ``method="sound"`` REC's bounds use the
        smallest group's ``2^(bits // groups)`` candidates; ``None`` takes the worst split
        (``K = 2``). With ``method="paper"`` it only shapes the error and warning messages.
    orders : sequence of int, optional
        Integer Renyi orders; default :data:`DPREC_DEFAULT_ORDERS`.
    sampling_rate : float, optional
        ``"poisson"`` only, instead of ``clients_per_round``: the default rate ``q`` in (0, 1]
        of :meth:`step`, which need not be a multiple of ``1/N``. Each such round composes the
        exact Poisson round at rate ``q`` (above) and counts ``ceil(q N)`` messages in ``rho`` (the expected number,
        rounded up; exactly ``q N`` when that is an integer, so ``sampling_rate=B/N`` gives the
        same numbers as ``clients_per_round=B``). :attr:`clients_per_round` is then ``ceil(q N)``.
    threat_model, relation, method :
        As in :func:`dprec_epsilon`.
    quantile_noise : float, optional
        ``s > 0``: every message also carries adaptive clipping's noisy quantile bit with discrete
        Gaussian noise of scale ``s`` (in bit units, above). ``None`` (default): no bits, the
        numbers are unchanged.

    Raises
    ------
    ValueError
        For invalid parameters (named), and, with ``rounds``, when the planned run's overhead
        reaches delta (naming ``bits``); ``quantile_noise`` with ``method="paper"`` (the paper's
        algorithm has no bits), naming ``quantile_noise``. Warns :class:`DPRECPrivacyWarning`
        above 10% of delta.
    TypeError
        For a ``quantile_noise`` that is not a real number (bools included).
    """

    def __init__(
        self,
        *,
        clip_multiplier: float,
        bits: Optional[int],
        num_clients: int,
        clients_per_round: Optional[int] = None,
        delta: float,
        sampling: str = "with_replacement",
        reverse: str = "bound",
        rounds: Optional[int] = None,
        groups: Optional[int] = None,
        orders: Any = None,
        sampling_rate: Optional[float] = None,
        threat_model: Optional[str] = None,
        relation: Optional[str] = None,
        method: str = "sound",
        quantile_noise: Optional[float] = None,
    ) -> None:
        self._c = _check_clip_multiplier(clip_multiplier)
        self._bits = None if bits is None else check_bits(bits)
        self._n = check_count(num_clients, "num_clients")
        self._delta = check_delta(delta)
        self._sampling = _check_sampling(sampling)
        self._method, self._threat_model, self._relation = _resolve(method, threat_model, relation, self._sampling)
        self._quantile_noise = None if quantile_noise is None else _check_quantile_noise(quantile_noise)
        if self._quantile_noise is not None and self._method == "paper":
            raise ValueError(
                "quantile_noise is only for method='sound': the paper's Algorithm 7 has no adaptive clipping "
                f"(got quantile_noise={quantile_noise!r} with method='paper'); pass quantile_noise=None or "
                "method='sound'"
            )
        self._rate: Optional[float] = None
        if sampling_rate is None:
            if clients_per_round is None:
                raise TypeError("clients_per_round is required (or sampling_rate, for sampling='poisson')")
            self._b = check_count(clients_per_round, "clients_per_round")
        else:
            self._rate = self._check_rate(sampling_rate, clients_per_round)
            self._b = _poisson_messages(self._rate, self._n)[0]
        _check_clients(self._b, self._n, self._sampling)
        self._reverse = _check_reverse_for(reverse, self._sampling)
        self._groups = None if groups is None else check_count(groups, "groups")
        if self._groups is not None and self._bits is not None and self._groups > self._bits:
            raise ValueError(f"groups must be <= bits (every group has at least 1 bit), got {groups} > {bits}")
        self._alphas = _orders(orders)
        self._planned = None if rounds is None else check_count(rounds, "rounds")
        if self._reverse == "exact" and self._sampling == "with_replacement":
            # The exact reverse term has a limit on c: fail now rather than at the first step.
            dprec_reverse_rdp(self._c, 0.5, [2.0], reverse="exact")
        # Curve keys: B (an int; 0 for every B with replacement), or a Poisson rate q < 1 with q N not
        # an integer (a float, never equal to an int key).
        self._units: dict[float, int] = {}
        self._curves: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        self._sizes: set[float] = set()
        self._rate_sum = 0.0  # sum over rounds of the step rate, for the reported average rate
        self._rounds = 0
        self._messages = 0
        self._accounting: Optional[DPRECAccounting] = None
        self._warned = False
        if self._planned is not None:
            self._check_bits(self._planned * self._b, stacklevel=4)

    def _check_bits(self, messages: int, stacklevel: int) -> None:
        if self._method == "sound" and self._threat_model != "central":
            return  # the server and message observers' curves bound REC's messages themselves: no overhead
        if self._method == "sound":
            return  # "central" with bits falls back on the message observer's bound when REC's cost is too high
        overhead = _enforce_bit_rule(
            messages=messages, clip_multiplier=self._c, delta=self._delta, bits=self._bits, groups=self._groups,
            warn=not self._warned, stacklevel=stacklevel,
        )
        if overhead > OVERHEAD_WARN_FRACTION * self._delta:
            self._warned = True

    def _check_rate(self, sampling_rate: Any, clients_per_round: Any) -> float:
        if self._sampling != "poisson":
            raise ValueError(f"sampling_rate is only for sampling='poisson', not {self._sampling!r}")
        if clients_per_round is not None:
            raise ValueError("give clients_per_round or sampling_rate, not both")
        return check_probability(sampling_rate, "sampling_rate")

    def step(
        self, clients_per_round: Optional[int] = None, rounds: int = 1, *, sampling_rate: Optional[float] = None
    ) -> DPRECAccounting:
        """Compose ``rounds`` rounds of ``clients_per_round`` clients; return the accounting so far.

        Parameters
        ----------
        clients_per_round : int, optional
            ``B`` of these rounds (the expected number for ``"poisson"``); default the
            constructor's (its ``sampling_rate`` when it was given one).
        rounds : int
            How many such rounds (default 1).
        sampling_rate : float, optional
            ``"poisson"`` only, instead of ``clients_per_round``: the rate ``q`` in (0, 1] of
            these rounds (see the class's ``sampling_rate``; ``ceil(q N)`` messages per round
            count in ``rho``).

        Raises
        ------
        ValueError
            For invalid parameters, or when these rounds would bring the bits' cost to delta
            (``method="paper"``: the overhead ``12 rho / 2^b``), naming ``bits``; then nothing is
            composed. With
            ``method="paper"`` it warns :class:`DPRECPrivacyWarning` when the overhead first
            exceeds 10% of delta.
        """
        rate: Optional[float] = None
        if sampling_rate is not None:
            rate = self._check_rate(sampling_rate, clients_per_round)
        elif clients_per_round is None:
            rate = self._rate
        if rate is None:
            b = self._b if clients_per_round is None else check_count(clients_per_round, "clients_per_round")
            _check_clients(b, self._n, self._sampling)
            key: float = b
        else:
            b, whole = _poisson_messages(rate, self._n)
            key = b if whole else rate  # q N an integer: the same curve (and numbers) as clients_per_round=q N
        r = check_count(rounds, "rounds")
        messages = self._messages + r * b
        self._check_bits(messages, stacklevel=4)
        if self._sampling == "with_replacement":
            key = 0  # one curve for every B
        if key not in self._curves:
            key_rate = key if isinstance(key, float) else _round_unit(self._sampling, b, self._n)[0]
            if self._method == "sound":
                # "central" with bits also keeps the message observer's curves (see _central_rec).
                observers = [self._threat_model]
                if self._threat_model == "central" and self._bits is not None:
                    observers.append("messages")
                rec = _rec_candidates(self._bits, self._groups)
                self._curves[key] = {
                    (tm, rel): _sound_curves(self._c, key_rate, self._alphas, threat_model=tm, relation=rel,
                                             sampling=self._sampling, n=self._n, rec=rec,
                                             quantile_noise=self._quantile_noise)
                    for tm in observers for rel in RELATIONS
                }
            elif isinstance(key, float):
                self._curves[key] = _rate_curves(self._c, key, self._alphas, self._reverse, self._sampling)
            else:
                self._curves[key] = _step_curves(self._c, b, self._n, self._alphas, self._sampling, self._reverse)
        units = dict(self._units)
        units[key] = units.get(key, 0) + r * _round_unit(self._sampling, b, self._n)[1]
        sizes = self._sizes | {key}
        step_rate = key if isinstance(key, float) else b / self._n
        rate_sum = self._rate_sum + r * step_rate
        total_rounds = self._rounds + r
        if self._sampling == "with_replacement":
            q = 1.0 / self._n
        elif len(sizes) == 1:
            q = step_rate
        elif all(isinstance(k, int) for k in sizes):
            q = messages / (total_rounds * self._n)
        else:
            q = rate_sum / total_rounds
        steps = sum(units.values())
        # Participations: Bin(steps, q_max) dominates the count when rounds had different rates.
        if self._sampling == "with_replacement":
            expected, q_max = steps / self._n, 1.0 / self._n
        else:
            expected = rate_sum
            q_max = max(k if isinstance(k, float) else k / self._n for k in sizes)
        local = _local_guarantee(self._c, self._delta, self._bits, self._alphas, steps=steps, q=q_max, groups=self._groups,
                                 expected=expected, quantile_noise=self._quantile_noise)
        if self._method == "paper":
            forward, rev = self._compose(units, None)
            result = _result(
                forward, rev, self._alphas, c=self._c, delta=self._delta, bits=self._bits, messages=messages,
                steps=steps, q=q, reverse=self._reverse, sampling=self._sampling, rounds=total_rounds, local=local,
            )
        else:

            def route(observer: str) -> DPRECAccounting:
                curves: dict = {}
                for rel in RELATIONS:
                    entry = [self._curves[k][(observer, rel)] for k in units]
                    reason = next((e for e in entry if isinstance(e, str)), None)
                    curves[rel] = reason if reason is not None else self._compose(units, (observer, rel))
                return _finish_sound(
                    curves, self._alphas, c=self._c, delta=self._delta, bits=self._bits, messages=messages,
                    steps=steps, q=q, reverse=self._reverse, sampling=self._sampling, rounds=total_rounds,
                    threat_model=observer, relation=self._relation, local=local,  # type: ignore[arg-type]
                    groups=self._groups,
                )

            tm = self._threat_model
            assert tm is not None
            if tm == "central" and self._bits is not None:
                payable = 2.0 * rec_total_variation(messages, self._c, self._bits, self._groups) < self._delta
                result = _central_rec(route, payable)
            else:
                result = route(tm)
            if self._quantile_noise is not None:
                result = _replace(result, composition=result.composition + (
                    f"; with adaptive clipping's noisy quantile bits (one per message, noise scale "
                    f"quantile_noise = {self._quantile_noise:g}) folded into each message's bound: the bit's "
                    "a (a-1) / (2 s^2) (a discrete Gaussian on a lattice) added to the message's log-moment inside "
                    "the sampling mixture where the route allows it, else a / (2 s^2) per step unamplified (never "
                    "above that); the local guarantee includes them"
                ))
        self._units, self._sizes, self._rounds, self._messages = units, sizes, total_rounds, messages
        self._rate_sum = rate_sum
        self._accounting = result
        return result

    def _compose(self, units: dict, relation: Any) -> tuple[np.ndarray, np.ndarray]:
        forward = np.zeros(self._alphas.shape)
        rev = np.zeros(self._alphas.shape)
        for k in sorted(units):
            entry = self._curves[k] if relation is None else self._curves[k][relation]
            forward = forward + units[k] * entry[0]
            rev = rev + units[k] * entry[1]
        return forward, rev

    @property
    def threat_model(self) -> Optional[str]:
        """The threat model (None with ``method="paper"``)."""
        return self._threat_model

    @property
    def relation(self) -> Optional[str]:
        """The neighbouring relation of :attr:`epsilon` (None with ``method="paper"``)."""
        return self._relation

    @property
    def method(self) -> str:
        """``"sound"`` or ``"paper"``."""
        return self._method

    @property
    def epsilon(self) -> float:
        """Epsilon so far (0.0 before any round)."""
        return 0.0 if self._accounting is None else self._accounting.epsilon

    @property
    def accounting(self) -> Optional[DPRECAccounting]:
        """The full :class:`DPRECAccounting` so far (None before any round)."""
        return self._accounting

    @property
    def rounds(self) -> int:
        """Rounds composed so far."""
        return self._rounds

    @property
    def planned_rounds(self) -> Optional[int]:
        """The ``rounds`` given to the constructor (None if none)."""
        return self._planned

    @property
    def messages(self) -> int:
        """Client messages so far (sum of ``B`` over rounds), the ``rho`` count."""
        return self._messages

    @property
    def overhead(self) -> float:
        """The overhead ``12 rho / 2^b`` so far (0 before any round or when ``bits`` is None)."""
        if self._bits is None or self._messages == 0:
            return 0.0
        return dprec_overhead(self._messages, self._c, self._bits)

    @property
    def delta(self) -> float:
        """Target delta."""
        return self._delta

    @property
    def sampling(self) -> str:
        """The sampling scheme."""
        return self._sampling

    @property
    def reverse(self) -> str:
        """How the reverse term is obtained."""
        return self._reverse

    @property
    def num_clients(self) -> int:
        """``N``."""
        return self._n

    @property
    def clients_per_round(self) -> int:
        """Default ``B`` of :meth:`step` (``ceil(q N)`` when built with ``sampling_rate``)."""
        return self._b

    @property
    def sampling_rate(self) -> Optional[float]:
        """The constructor's ``sampling_rate`` (None when it was given ``clients_per_round``)."""
        return self._rate

    @property
    def clip_multiplier(self) -> float:
        """``c = C / sigma``."""
        return self._c

    @property
    def bits(self) -> Optional[int]:
        """TOTAL bits of one message (None: overhead omitted)."""
        return self._bits

    @property
    def groups(self) -> Optional[int]:
        """Groups per message, if given."""
        return self._groups

    @property
    def quantile_noise(self) -> Optional[float]:
        """Noise std ``s`` of adaptive clipping's quantile bits (None: no bits accounted)."""
        return self._quantile_noise

    def __repr__(self) -> str:
        qn = "" if self._quantile_noise is None else f", quantile_noise={self._quantile_noise!r}"
        return (
            f"DPRECRoundAccountant(sampling={self._sampling!r}, num_clients={self._n}, "
            f"clients_per_round={self._b}, clip_multiplier={self._c!r}, bits={self._bits}, delta={self._delta!r}"
            f"{qn}, rounds={self._rounds}, epsilon={self.epsilon:.6g})"
        )


# --------------------------------------------------------------------------------------
# Entry points for dprec.rec.codec (bits from a layout, the bit-width rule applied)
# --------------------------------------------------------------------------------------


def _codec_epsilon(
    *,
    clip_multiplier: float,
    bits: int,
    groups: int,
    rounds: Any,
    clients_per_round: Any,
    num_clients: Any,
    delta: Any,
    sampling: Any,
    reverse: Any,
    threat_model: Optional[str] = None,
    relation: Optional[str] = None,
    method: str = "sound",
) -> DPRECAccounting:
    t, b, n, sampling, reverse = _central_inputs(rounds, clients_per_round, num_clients, sampling, reverse)
    method, _, _ = _resolve(method, threat_model, relation, sampling)
    delta = check_delta(delta)
    if method == "paper":
        _enforce_bit_rule(
            messages=t * b, clip_multiplier=clip_multiplier, delta=delta, bits=bits, groups=groups, stacklevel=4
        )
    return dprec_epsilon(
        rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=clip_multiplier, delta=delta, bits=bits,
        reverse=reverse, sampling=sampling, threat_model=threat_model, relation=relation, method=method,
        groups=groups,
    )


def _codec_local_epsilon(
    *,
    clip_multiplier: float,
    bits: int,
    groups: int,
    delta: Any,
    rounds: Any,
    threat_model: Optional[str] = None,
    relation: Optional[str] = None,
    method: str = "sound",
) -> DPRECAccounting:
    method, _, _ = _resolve_local(method, threat_model, relation)
    t = check_count(rounds, "rounds")
    delta = check_delta(delta)
    if method == "paper":
        _enforce_bit_rule(
            messages=t, clip_multiplier=clip_multiplier, delta=delta, bits=bits, groups=groups, stacklevel=4
        )
    return dprec_local_epsilon(
        clip_multiplier=clip_multiplier, delta=delta, bits=bits, rounds=t, threat_model=threat_model,
        relation=relation, method=method, groups=groups,
    )
