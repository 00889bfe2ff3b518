"""Privacy of QMGeo (Wang and Gursoy): the paper's formulas, and the exact Renyi divergence.

Two different things live here, and they must not be confused:

1. **The paper's formulas, as printed** (``qmgeo_paper_eq20``, ``qmgeo_paper_eq23``,
   ``qmgeo_paper_eq25``, ``qmgeo_paper_eq26``, ``qmgeo_paper_eq27``), to reproduce the paper's
   numbers. They are not guarantees for dprec's quantizer.
2. **The exact Renyi divergence of the implemented quantizer** (the corrected pmf,
   :func:`qmgeo_pmf` / :func:`qmgeo_log_pmf`): :func:`qmgeo_renyi_divergence` for two given
   inputs, :func:`qmgeo_rdp` for the worst case over ``d`` coordinates with optional Poisson
   subsampling (Zhu and Wang 2019, integer orders only), and :func:`qmgeo_guarantee`.

**Over the whole interval ``[-Wmax, Wmax]`` the divergence is infinite, for every p and R**: the
end points are quantized deterministically to the two end levels, so the quantizer alone gives no
privacy for arbitrary inputs. :func:`qmgeo_rdp` returns ``inf`` then, and a finite value only when
the inputs are restricted to a finite set (``inputs=``), e.g. values strictly between the levels.

See the *Privacy accounting* page of the documentation for each formula, the neighbouring
relation and worst case, and why the paper's eq. (27) is not a bound; the *QMGeo* page states the
corrected pmf.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
from scipy.special import logsumexp

from ._checks import (
    MAX_INPUTS,
    check_count,
    check_delta,
    check_finite,
    check_levels,
    check_orders,
    check_positive,
    check_probability,
)
from ._subsampling import poisson_subsampled_rdp

__all__ = [
    "qmgeo_guarantee",
    "qmgeo_log_pmf",
    "qmgeo_paper_eq20",
    "qmgeo_paper_eq23",
    "qmgeo_paper_eq25",
    "qmgeo_paper_eq26",
    "qmgeo_paper_eq27",
    "qmgeo_pmf",
    "qmgeo_rdp",
    "qmgeo_renyi_divergence",
]


def _check_levels(levels: Any) -> int:
    return check_levels(levels, "levels")


def _check_p(p: Any) -> float:
    return check_probability(p, "p")


def _check_order_scalar(alpha: Any) -> float:
    alpha = check_finite(alpha, "alpha")
    if not alpha > 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha!r}")
    return alpha


# --------------------------------------------------------------------------------------------
# The paper's formulas, as printed
# --------------------------------------------------------------------------------------------


def qmgeo_paper_eq20(levels: int, p: float) -> float:
    """Wang and Gursoy, eq. (20)-(21): ``eps = -(ln p + (R-2) ln(1-p))``, as printed.

    The paper's pure-DP epsilon of one quantized coordinate, derived from the ratio
    ``(1/2) / ((1/2) p (1-p)^(R-2))``. It is **not** a guarantee for dprec's corrected pmf, whose
    epsilon over ``[-Wmax, Wmax]`` is infinite (see the module docstring).

    Parameters
    ----------
    levels : int
        R, the number of quantization levels, ``2 <= R <= MAX_LEVELS = 2**16``.
    p : float
        Geometric success probability in (0, 1); ``p = 1`` gives ``inf`` (for R > 2).
    """
    levels = _check_levels(levels)
    p = _check_p(p)
    if p == 1.0:
        return 0.0 if levels == 2 else math.inf
    return -(math.log(p) + (levels - 2) * math.log1p(-p))


def qmgeo_paper_eq26(levels: int, p: float, dim: int, sampling_rate: float) -> float:
    """Wang and Gursoy, eq. (26): ``eps = -d kappa (ln p + (R-2) ln(1-p))``, as printed.

    eq. (20) times the dimension d and the sampling rate kappa (the paper's combination of
    composition over coordinates with amplification by sampling). Labelled as the paper's
    formula; not a guarantee for dprec's quantizer.
    """
    dim = check_count(dim, "dim")
    kappa = check_probability(sampling_rate, "sampling_rate")
    return dim * kappa * qmgeo_paper_eq20(levels, p)


def qmgeo_paper_eq23(alpha: float, levels: int, p: float) -> float:
    """Wang and Gursoy, eq. (23), the sum evaluated numerically exactly as printed.

    ``1/(a-1) log sum_{i=1}^{R} (p q^(i-1) / (1-q^(R-1)))^a / (q^(R+1-i) p / (1-q^(R-1)))^(a-1)``,
    the paper's Renyi divergence between a truncated geometric on the R levels and its mirror
    image. (Its normaliser ``1 - q^(R-1)`` and the mirror's exponent ``R+1-i`` are kept as
    printed.) Labelled as the paper's formula; compare with the closed form (25).
    """
    alpha = _check_order_scalar(alpha)
    levels = _check_levels(levels)
    p = _check_p(p)
    if p == 1.0:
        return math.inf
    log_q = math.log1p(-p)
    log_norm = math.log(p) - math.log(-math.expm1((levels - 1) * log_q))
    i = np.arange(1, levels + 1, dtype=np.float64)
    log_num = alpha * (log_norm + (i - 1.0) * log_q)
    log_den = (alpha - 1.0) * (log_norm + (levels + 1.0 - i) * log_q)
    return float(logsumexp(log_num - log_den)) / (alpha - 1.0)


def qmgeo_paper_eq25(alpha: float, levels: int, p: float) -> float:
    """Wang and Gursoy, eq. (25), as printed (signed; negative at alpha = 2 for the paper's p, R).

    ``eps(a) <= 1/(1-a) log{ p q^(-2a + (1-a) R + 1) / (1 - q^(R-1))
                             * a (q^((2a-1) R) - 1) / (q^(2a-1) - 1) }``, q = 1 - p.

    Labelled as the paper's formula. Note the prefactor ``1/(1-a)`` (negative for a > 1), which
    is what makes the printed value negative; the paper reports absolute values.
    """
    alpha = _check_order_scalar(alpha)
    levels = _check_levels(levels)
    p = _check_p(p)
    if p == 1.0:
        raise ValueError("p must be < 1 in eq. (25) (it divides by q^(2a-1) - 1 = -1 and takes log q)")
    q = 1.0 - p
    log_q = math.log(q)
    log_first = math.log(p) + (-2.0 * alpha + (1.0 - alpha) * levels + 1.0) * log_q - math.log1p(-(q ** (levels - 1)))
    # a (q^((2a-1)R) - 1) / (q^(2a-1) - 1): both factors are negative for 0 < q < 1, ratio > 0.
    ratio = alpha * math.expm1((2.0 * alpha - 1.0) * levels * log_q) / math.expm1((2.0 * alpha - 1.0) * log_q)
    return (log_first + math.log(ratio)) / (1.0 - alpha)


def qmgeo_paper_eq27(
    alpha: float,
    levels: int,
    p: float,
    dim: int,
    sampling_rate: float,
    *,
    absolute: bool = False,
) -> float:
    """Wang and Gursoy, eq. (27): ``kappa^2 d`` times eq. (25), as printed.

    Parameters
    ----------
    alpha : float
        Renyi order > 1 (the paper evaluates alpha = 2).
    levels, p : int, float
        R and the geometric parameter, as in eq. (25).
    dim : int
        d, the number of coordinates.
    sampling_rate : float
        kappa in (0, 1].
    absolute : bool
        Return ``|eq. (27)|``: the paper's reported per-round values (2.626 for p = 0.9, R = 8;
        4.492 for p = 0.9, R = 16; d = 3562, kappa = 0.005333, alpha = 2) are the absolute
        values of the printed formula, which is negative there.

    Returns
    -------
    float
        The printed formula's value (signed unless ``absolute``). Labelled as the paper's
        formula: it is not a bound on dprec's quantizer (see *Privacy accounting* in the docs).
    """
    dim = check_count(dim, "dim")
    kappa = check_probability(sampling_rate, "sampling_rate")
    value = kappa * kappa * dim * qmgeo_paper_eq25(alpha, levels, p)
    return abs(value) if absolute else value


# --------------------------------------------------------------------------------------------
# The implemented (corrected) pmf and its exact Renyi divergence
# --------------------------------------------------------------------------------------------


def qmgeo_log_pmf(w: float, levels: int, p: float, w_max: float = 1.0) -> np.ndarray:
    """Natural log of the corrected QMGeo pmf for one input (``-inf`` for mass 0).

    Wang and Gursoy, eqs. (9)-(11), with the branch weights and normalisers corrected (the printed
    eq. (9) swaps the weights; (10)-(11) divide by zero at the edges; the *QMGeo* page of the docs
    states the corrected pmf).

    Parameters
    ----------
    w : float
        Input in ``[-w_max, w_max]``.
    levels : int
        R, ``2 <= R <= MAX_LEVELS = 2**16``.
    p : float
        Geometric success probability in (0, 1]; p = 1 is plain stochastic rounding.
    w_max : float
        Clipping bound Wmax > 0.

    Returns
    -------
    numpy.ndarray
        float64 array of length R: ``log P(output = Bin(j))`` for j = 0..R-1.
    """
    return _log_pmf(w, levels, p, w_max, "w")


def _log_pmf(w: Any, levels: Any, p: Any, w_max: Any, name: str) -> np.ndarray:
    """:func:`qmgeo_log_pmf` with the input's parameter name (``w`` or ``w_prime``) for errors."""
    levels = _check_levels(levels)
    p = _check_p(p)
    w_max = check_positive(w_max, "w_max")
    w = check_finite(w, name)
    if abs(w) > w_max:
        raise ValueError(f"{name} must be in [-w_max, w_max] = [{-w_max!r}, {w_max!r}], got {w!r}")
    step = 2.0 * w_max / (levels - 1)
    r = min(int(math.floor((w + w_max) / step)), levels - 2)
    theta = (w - (-w_max + r * step)) / step
    theta = min(max(theta, 0.0), 1.0)  # rounding of (w + w_max) / step can leave [0, 1] by an ulp
    j = np.arange(levels, dtype=np.float64)
    out = np.full(levels, -np.inf)
    with np.errstate(divide="ignore"):
        log_down = math.log1p(-theta) if theta < 1.0 else -math.inf
        log_up = math.log(theta) if theta > 0.0 else -math.inf
    if p == 1.0:
        out[r] = log_down
        out[r + 1] = log_up
        return out
    log_p, log_q = math.log(p), math.log1p(-p)
    # Normalisers 1 - q^(r+1) (levels r..0) and 1 - q^(R-r-1) (levels r+1..R-1).
    log_norm_down = math.log(-math.expm1((r + 1) * log_q))
    log_norm_up = math.log(-math.expm1((levels - r - 1) * log_q))
    down = j <= r
    out[down] = log_down + log_p + (r - j[down]) * log_q - log_norm_down
    out[~down] = log_up + log_p + (j[~down] - r - 1.0) * log_q - log_norm_up
    return out


def qmgeo_pmf(w: float, levels: int, p: float, w_max: float = 1.0) -> np.ndarray:
    """The corrected QMGeo pmf (Wang and Gursoy, eqs. (9)-(11) corrected), see :func:`qmgeo_log_pmf`."""
    return np.exp(qmgeo_log_pmf(w, levels, p, w_max))


_CHUNK_ELEMENTS = 1 << 20


def _renyi_from_logs(alphas: np.ndarray, log_p: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """D_a(P || Q) for discrete P, Q given by their log-pmfs, at each order a > 1."""
    support = log_p > -np.inf
    if np.any(log_q[support] == -np.inf):
        return np.full(alphas.shape, np.inf)  # P has mass where Q has none
    lp, lq = log_p[support], log_q[support]
    out = np.empty(alphas.shape)
    # All orders at once, in chunks of at most _CHUNK_ELEMENTS (orders x levels) values.
    chunk = max(1, _CHUNK_ELEMENTS // max(1, lp.size))
    for start in range(0, alphas.size, chunk):
        a = alphas[start : start + chunk, None]
        out[start : start + chunk] = logsumexp(a * lp[None, :] + (1.0 - a) * lq[None, :], axis=1) / (a[:, 0] - 1.0)
    # A divergence is >= 0; round-off can give -1e-17 for identical inputs.
    return np.maximum(out, 0.0)


def qmgeo_renyi_divergence(
    orders: Any,
    w: float,
    w_prime: float,
    levels: int,
    p: float,
    w_max: float = 1.0,
) -> np.ndarray:
    """Exact ``D_a(P_w || P_w')`` between the corrected QMGeo output distributions of two inputs.

    A finite sum over the R output levels, computed in log space:
    ``D_a(P || Q) = 1/(a-1) log sum_j P(j)^a Q(j)^(1-a)``; ``inf`` when P puts mass on a level
    where Q puts none (e.g. ``w = +w_max``, ``w_prime = -w_max``).

    Parameters
    ----------
    orders : float or sequence of float
        Renyi orders, each > 1.
    w, w_prime : float
        The two inputs, in ``[-w_max, w_max]``.
    levels, p, w_max
        As in :func:`qmgeo_pmf`.

    Returns
    -------
    numpy.ndarray
        float64, one value per order.
    """
    alphas = check_orders(orders)
    log_p = _log_pmf(w, levels, p, w_max, "w")
    log_q = _log_pmf(w_prime, levels, p, w_max, "w_prime")
    return _renyi_from_logs(alphas, log_p, log_q)


def _coordinate_rdp(
    alphas: np.ndarray, levels: int, p: float, w_max: float, inputs: Optional[np.ndarray]
) -> np.ndarray:
    """sup over ordered input pairs of D_a(P_w || P_w') for one coordinate."""
    if inputs is None:
        # w = -w_max and w = +w_max have disjoint output supports (see the module docstring).
        return np.full(alphas.shape, np.inf)
    logs = [qmgeo_log_pmf(float(w), levels, p, w_max) for w in inputs]
    worst = np.zeros(alphas.shape)
    for i, log_a in enumerate(logs):
        for k, log_b in enumerate(logs):
            if i != k:
                worst = np.maximum(worst, _renyi_from_logs(alphas, log_a, log_b))
    return worst


def qmgeo_rdp(
    orders: Any,
    levels: int,
    p: float,
    *,
    dim: int = 1,
    sampling_rate: float = 1.0,
    inputs: Any = None,
    w_max: float = 1.0,
) -> np.ndarray:
    """Per-round RDP of d-coordinate QMGeo (corrected pmf), exact worst case, optional subsampling.

    ``rdp(a) = ZW_q( d * sup_{w != w' in inputs} D_a(P_w || P_w') )`` where ``ZW_q`` is the
    Zhu-Wang (2019) general Poisson-subsampling bound at rate q = ``sampling_rate`` (identity at
    q = 1; ``inf`` at non-integer orders when q < 1). The neighbouring relation: one record
    changes each coordinate's input to any other allowed input (see *Privacy accounting* in the
    docs).

    Parameters
    ----------
    orders : float or sequence of float
        Renyi orders, each > 1.
    levels : int
        R, ``2 <= R <= MAX_LEVELS = 2**16``.
    p : float
        Geometric success probability in (0, 1].
    dim : int
        d, the number of coordinates quantized per round (composition over coordinates).
    sampling_rate : float
        Poisson sampling rate of records, in (0, 1] (the paper's kappa).
    inputs : sequence of float, optional
        The finite set of values a coordinate can take (each in ``[-w_max, w_max]``, at least two
        and at most :data:`~dprec.accounting._checks.MAX_INPUTS` = 1024 distinct values; the
        cost grows like their number squared). ``None`` means the whole interval ``[-w_max, w_max]``, for which the
        supremum is infinite for every p and R (``-w_max`` and ``+w_max`` are quantized
        deterministically to the two end levels), so the result is ``inf`` at every order.
    w_max : float
        Clipping bound Wmax > 0.

    Returns
    -------
    numpy.ndarray
        float64 RDP per round, one value per order (compose rounds by adding).
    """
    alphas = check_orders(orders)
    levels = _check_levels(levels)
    p = _check_p(p)
    dim = check_count(dim, "dim")
    q = check_probability(sampling_rate, "sampling_rate")
    w_max = check_positive(w_max, "w_max")
    grid: Optional[np.ndarray] = None
    if inputs is not None:
        try:
            grid = np.atleast_1d(np.asarray(inputs, dtype=np.float64))
        except (TypeError, ValueError) as exc:
            raise TypeError("inputs must be a sequence of numbers") from exc
        if grid.ndim != 1:
            raise ValueError(f"inputs must be one-dimensional, got shape {grid.shape}")
        if not np.all(np.isfinite(grid)):
            raise ValueError("inputs must be finite")
        if np.any(np.abs(grid) > w_max):
            raise ValueError(f"inputs must lie in [-w_max, w_max] = [{-w_max!r}, {w_max!r}]")
        grid = np.unique(grid)
        if grid.size < 2:
            raise ValueError("inputs must contain at least two distinct values")
        if grid.size > MAX_INPUTS:
            raise ValueError(
                f"inputs must have at most MAX_INPUTS = {MAX_INPUTS} distinct values (every ordered pair is "
                f"compared), got {grid.size}"
            )

    def base(a: np.ndarray) -> np.ndarray:
        return dim * _coordinate_rdp(a, levels, p, w_max, grid)

    return poisson_subsampled_rdp(alphas, q, base)


def qmgeo_guarantee(
    levels: int,
    p: float,
    delta: float,
    *,
    rounds: int = 1,
    participation_rate: float = 1.0,
    threat_model: str = "server",
    relation: str = "zero",
    conversion: str = "rdp-balle",
    orders: Any = None,
    **params: Any,
):
    """QMGeo over ``rounds`` rounds as a :class:`~dprec.accounting.guarantee.PrivacyGuarantee`.

    QMGeo is a local randomizer: each participating client's message has the per-message curve
    ``D(a) = qmgeo_rdp(a, levels, p, **params)`` (``dim``, ``sampling_rate``, ``inputs``, ``w_max``).
    A client takes part in a round with probability ``participation_rate`` (``q``), attributed
    as in DP-REC's sound accounting: per round ``log(1 - q + q exp((a-1) D(a))) / (a-1)`` (an
    absent client sends nothing in both neighbouring runs), composed over ``rounds``. This holds
    against the ``"server"`` and hence (post-processing) ``"messages"`` and ``"central"``, for
    ``relation="zero"`` (the client's input replaced); ``"add_remove"`` is ``inf`` with the reason
    (an added client adds a message). ``conversion``: ``"rdp-balle"`` (default) or ``"rdp-mironov"``.
    """
    from .baselines import _check_conversion, _rdp_guarantee  # noqa: PLC0415
    from .guarantee import check_relation, check_threat_model  # noqa: PLC0415

    tm = check_threat_model(threat_model)
    rel = check_relation(relation)
    conv = _check_conversion(conversion, pld_ok=False)
    alphas = check_orders(np.arange(2.0, 257.0) if orders is None else orders)
    delta = check_delta(delta)
    t = check_count(rounds, "rounds")
    q = check_probability(participation_rate, "participation_rate")
    per_message = np.asarray(qmgeo_rdp(alphas, levels, p, **params), dtype=np.float64)
    with np.errstate(over="ignore"):
        x = (alphas - 1.0) * per_message
        if q == 1.0:
            per_round = per_message
        else:
            per_round = np.logaddexp(math.log1p(-q), math.log(q) + x) / (alphas - 1.0)
    per_round = np.where(np.isinf(per_message), np.inf, per_round)
    curve = t * per_round
    reason = (
        "QMGeo is a local randomizer whose curve is for replacing a client's input (relation='zero'); an added "
        "or removed client adds or removes a message"
    )
    return _rdp_guarantee(
        "qmgeo", lambda r: reason if r == "add_remove" else curve, alphas, delta, threat_model=tm, relation=rel,
        conversion=conv, sampling="poisson" if q < 1.0 else None,
        composition=f"{t} rounds, attributed participation at rate {q:g} (RDP composition)",
    )
