"""Privacy accounting for DP-REC (Triastcyn, Reisser and Louizos; final version).

What is implemented
-------------------
Algorithm 7 (Appendix B.2.2) with the Gaussian prior ``p = N(0, sigma^2 I)`` and client
distribution ``q = N(phi, sigma^2 I)``, ``||phi|| <= C = c sigma``. Each of the ``T`` rounds samples
``B`` clients *with replacement* from ``N``, so the accountant composes ``T * B`` steps, each a
mixture ``mix = (1 - 1/N) p + (1/N) q`` (Section 3, "Privacy amplification"). For every Renyi
order ``a = lambda + 1`` (integer, ``lambda >= 1``):

* forward term ``k_lambda = T B D_a(mix || p)``, by eq. (62) (an equality for Gaussians; the
  ``<=`` only reflects the clipping ``||phi|| <= C``):
  ``D_a(mix || p) = 1/(a-1) log E_{k ~ Bin(a, 1/N)} exp((k^2 - k) c^2 / 2)``;
* reverse term ``m_lambda = T B D_a(p || mix)``, either ``reverse="bound"`` (``m <= k``, Mironov,
  Talwar and Zhang 2019, restated as eq. (59)) or ``reverse="exact"``, computed numerically (see
  :func:`dprec_reverse_rdp`);
* ``rho = T B exp(D_2(q || p)) = T B exp(c^2)`` (eq. (57) at order 2) and the importance-sampling
  overhead ``12 rho / 2^b`` (eq. (4), Agapiou et al. 2017), ``b`` = total bits of one client message;
* ``eps = min_lambda [k_lambda + m_lambda - log(delta - 12 rho / 2^b) / lambda]`` (Algorithm 7,
  last line; Theorem 1 solved for eps).

Which variant reproduces the paper
----------------------------------
``reverse="bound"`` (``k + m = 2k``) with the overhead omitted (``bits=None``) reproduces every
setting of Appendix C.2 with ``delta = N^-1.1`` to within 0.6% (MNIST 3.016 / 5.980, FEMNIST
1.003 / 3.016 / 5.988, Shakespeare 3.014); this is Theorem 1's ``2 lambda c_{lambda+1}`` form,
which the paper describes as "bound it by two times the first divergence". ``reverse="exact"``
is valid and tighter (MNIST 2.987 / 5.861) but is not what the paper reported. StackOverflow
(``N = 342477, T = 1500, B = 60, c = 1.227``): with 6 groups x 7 bits the overhead
``12 rho / 2^42 = 1.107e-6`` exceeds ``delta = N^-1.1 = 8.16e-7``, so Algorithm 7 is undefined;
with the overhead omitted this module gives 0.935 <= 1. The gap is the integer-order staircase:
at ``q = 1/N`` the composed ``k + m`` is below 1e-4 up to order 16, 0.08 at order 17 and over
1e4 from order 18 on, so ``eps ~ log(1/delta) / lambda`` at the largest usable integer lambda:
0.9346 at lambda = 15, 1.0013 at lambda = 14. Eps stays within 0.001 of 0.9346 for c from
1.226 to 1.25, and the c that reaches eps = 1 is 1.264.

Numerics
--------
Forward: the binomial sum of ``A_a - 1`` has only non-negative terms (see
:mod:`dprec.accounting.rdp`), so it is exact to rounding even at ``q = 1/N = 3e-6``.
Everything is vectorised over orders; one call for ``T B = 4e5`` steps and 256 orders takes a
few milliseconds (``bench/bench_accounting.py``), because all steps are identical and compose
by multiplication.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp

from ._checks import (
    check_bits,
    check_count,
    check_delta,
    check_epsilon,
    check_orders,
    check_positive,
    check_probability,
)
from .rdp import sampled_gaussian_rdp

__all__ = [
    "DPREC_DEFAULT_ORDERS",
    "DPRECAccounting",
    "EXACT_REVERSE_MAX_CLIP",
    "REVERSE_METHODS",
    "dprec_calibrate",
    "dprec_delta",
    "dprec_epsilon",
    "dprec_forward_rdp",
    "dprec_local_epsilon",
    "dprec_overhead",
    "dprec_reverse_rdp",
]

#: Renyi orders ``a = lambda + 1`` for lambda = 1 .. 256 (Algorithm 7 works with integer lambda).
DPREC_DEFAULT_ORDERS: np.ndarray = np.arange(2.0, 258.0)

REVERSE_METHODS = ("bound", "exact")

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

    Parameters
    ----------
    clip_multiplier : float
        ``c = C / sigma > 0``.
    sampling_rate : float
        ``q`` in (0, 1]; ``1/N`` for sampling with replacement (Algorithm 7).
    orders : sequence of int, optional
        Integer Renyi orders ``a = lambda + 1 >= 2``; default :data:`DPREC_DEFAULT_ORDERS`.
    """
    c = check_positive(clip_multiplier, "clip_multiplier")
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
    c = check_positive(clip_multiplier, "clip_multiplier")
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

    ``rho = steps * exp(D_2(q || p)) = steps * exp(c^2)`` (eq. (57) at order 2), ``b`` the total bits
    of one client message; the constant 12 is from the importance-sampling bound eq. (4)
    (Agapiou et al. 2017). This amount of delta is spent whatever epsilon is.
    """
    steps = check_count(steps, "steps")
    c = check_positive(clip_multiplier, "clip_multiplier")
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
        ``steps * exp(c^2)``.
    steps : int
        Composed steps, ``T * B`` (``rounds`` for the local guarantee).
    sampling_rate : float
        ``1/N`` (1 for the local guarantee).
    bits : int or None
    reverse : str
        ``"bound"`` or ``"exact"``.
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


def _curves(c: float, q: float, steps: int, alphas: np.ndarray, reverse: str) -> tuple[np.ndarray, np.ndarray]:
    forward = steps * sampled_gaussian_rdp(q, 1.0 / c, alphas)
    if reverse == "bound":
        return forward, forward.copy()
    return forward, steps * dprec_reverse_rdp(c, q, alphas, reverse="exact")


def _overhead_or_zero(steps: int, c: float, bits: Optional[int]) -> float:
    return 0.0 if bits is None else dprec_overhead(steps, c, bits)


def _effective_log_delta(delta: float, overhead: float, bits: Optional[int]) -> float:
    if overhead >= delta:
        raise ValueError(
            f"delta={delta:.6g} must exceed the DP-REC overhead 12*rho/2^b = {overhead:.6g} (bits={bits}): "
            "Algorithm 7 needs log(delta - 12*rho/2^b); use more bits per message, fewer steps, "
            "a smaller clip_multiplier or a larger delta"
        )
    return math.log(delta - overhead)


def _account(c: float, q: float, steps: int, delta: float, bits: Optional[int], alphas: np.ndarray, reverse: str):
    forward, rev = _curves(c, q, steps, alphas, reverse)
    overhead = _overhead_or_zero(steps, c, bits)
    log_delta = _effective_log_delta(delta, overhead, bits)
    eps_per_order = forward + rev - log_delta / (alphas - 1.0)
    best = int(np.argmin(eps_per_order))
    return DPRECAccounting(
        epsilon=float(eps_per_order[best]),
        delta=delta,
        order=float(alphas[best]),
        lam=int(alphas[best]) - 1,
        forward=float(forward[best]),
        reverse=float(rev[best]),
        overhead=overhead,
        rho=steps * math.exp(min(c * c, 700.0)),
        steps=steps,
        sampling_rate=q,
        bits=bits,
        reverse_method=reverse,
    )


def _central_inputs(rounds: Any, clients_per_round: Any, num_clients: Any) -> tuple[int, float]:
    t = check_count(rounds, "rounds")
    b = check_count(clients_per_round, "clients_per_round")
    n = check_count(num_clients, "num_clients")
    return t * b, 1.0 / n


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
) -> DPRECAccounting:
    """Central (eps, delta) of DP-REC after ``rounds`` rounds (final paper, Algorithm 7 / Theorem 1).

    ``rounds * clients_per_round`` steps at sampling rate ``1/num_clients`` (sampling with
    replacement, Appendix C.2), ``eps = min_lambda [k + m - log(delta - 12 rho / 2^b) / lambda]``.

    Parameters
    ----------
    rounds, clients_per_round, num_clients : int
        ``T``, ``B`` (clients drawn per round, with replacement) and ``N``.
    clip_multiplier : float
        ``c = C / sigma``.
    delta : float
        Target delta in (0, 1); the paper uses ``num_clients ** -1.1``.
    bits : int or None
        Total bits ``b`` of one client message (e.g. 7 per group times the number of groups).
        ``None`` omits the overhead ``12 rho / 2^b``, as the paper's reported numbers do; the
        result is then only valid when that term is negligible against ``delta``.
    reverse : {"bound", "exact"}
        How ``m`` is obtained (see :func:`dprec_reverse_rdp`); ``"bound"`` reproduces the paper.
    orders : sequence of int, optional
        Integer orders ``a = lambda + 1 >= 2``; default ``2 .. 257``.

    Raises
    ------
    ValueError
        For invalid parameters, and when ``delta <= 12 rho / 2^b``.
    """
    steps, q = _central_inputs(rounds, clients_per_round, num_clients)
    c = check_positive(clip_multiplier, "clip_multiplier")
    delta = check_delta(delta)
    if bits is not None:
        bits = check_bits(bits)
    reverse = _check_reverse(reverse)
    alphas = check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders, integer=True)
    return _account(c, q, steps, delta, bits, alphas, reverse)


def dprec_local_epsilon(
    *,
    clip_multiplier: float,
    delta: float,
    bits: Optional[int],
    rounds: int = 1,
    orders: Any = None,
) -> DPRECAccounting:
    """Local (eps, delta) of DP-REC, against a server that sees a client's messages (no amplification).

    Theorem 1 with ``c_lambda = lambda c^2 / 2`` (eq. (57), both directions equal for Gaussians
    of equal variance) composed over the ``rounds`` in which the client took part:
    ``eps = min_lambda [rounds (lambda + 1) c^2 - log(delta - 12 rho / 2^b) / lambda]``.
    """
    steps = check_count(rounds, "rounds")
    c = check_positive(clip_multiplier, "clip_multiplier")
    delta = check_delta(delta)
    if bits is not None:
        bits = check_bits(bits)
    alphas = check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders, integer=True)
    return _account(c, 1.0, steps, delta, bits, alphas, "exact")


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
) -> tuple[float, float]:
    """Delta for a given epsilon: Theorem 1, ``min_lambda exp(lambda (k + m - eps)) + 12 rho / 2^b``.

    Returns ``(delta, order)`` with ``delta`` capped at 1 and ``order = lambda + 1``.
    """
    steps, q = _central_inputs(rounds, clients_per_round, num_clients)
    c = check_positive(clip_multiplier, "clip_multiplier")
    eps = check_epsilon(epsilon)
    if bits is not None:
        bits = check_bits(bits)
    reverse = _check_reverse(reverse)
    alphas = check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders, integer=True)
    forward, rev = _curves(c, q, steps, alphas, reverse)
    log_delta = (alphas - 1.0) * (forward + rev - eps)
    best = int(np.argmin(log_delta))
    delta = math.exp(min(0.0, float(log_delta[best]))) + _overhead_or_zero(steps, c, bits)
    return min(1.0, delta), float(alphas[best])


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
) -> float:
    """The clip multiplier ``c = C / sigma`` at which :func:`dprec_epsilon` equals ``target_epsilon``.

    Epsilon increases with ``c`` (every term of Algorithm 7 does), so the root is unique; it is
    found by Brent's method on ``[1e-6, c_max]`` where ``c_max`` is doubled until epsilon exceeds
    the target (or the overhead reaches delta, beyond which epsilon is undefined).

    Raises
    ------
    ValueError
        When ``target_epsilon`` is below the floor ``log(1/delta) / lambda_max`` that no ``c``
        can go under with these orders, or above what any ``c`` reaches before the overhead
        ``12 rho / 2^b`` uses up ``delta``.
    """
    eps_target = check_positive(target_epsilon, "target_epsilon")
    steps, q = _central_inputs(rounds, clients_per_round, num_clients)
    delta = check_delta(delta)
    if bits is not None:
        bits = check_bits(bits)
    reverse = _check_reverse(reverse)
    alphas = check_orders(DPREC_DEFAULT_ORDERS if orders is None else orders, integer=True)
    rtol = check_positive(rtol, "rtol")

    def excess(c: float) -> float:
        overhead = _overhead_or_zero(steps, c, bits)
        if overhead >= delta:
            return math.inf
        return _account(c, q, steps, delta, bits, alphas, reverse).epsilon - eps_target

    lo = 1e-6
    if excess(lo) >= 0.0:
        floor = _account(lo, q, steps, delta, bits, alphas, reverse).epsilon
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
                f"target_epsilon={eps_target:g} is not reachable: the overhead 12*rho/2^b reaches "
                f"delta={delta:g} first (bits={bits})"
            )
        lo = good
    return float(brentq(excess, lo, hi, rtol=rtol, xtol=1e-14))
