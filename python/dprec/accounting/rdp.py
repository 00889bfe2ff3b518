"""Renyi differential privacy of the (Poisson-)sampled Gaussian mechanism, and RDP -> (eps, delta).

:func:`sampled_gaussian_rdp`
    One step of the Poisson-sampled Gaussian mechanism (Mironov, Talwar and Zhang 2019), at
    integer and fractional orders.
:func:`sampled_gaussian_rdp_without_replacement`
    The Gaussian mechanism on a fixed-size sample drawn without replacement, replace-one
    adjacency (Wang, Balle and Kasiviswanathan, AISTATS 2019).
:func:`participation_rdp`
    A round whose observer sees whether the target took part (no amplification).
:func:`rdp_to_epsilon`, :func:`rdp_to_delta`, :func:`epsilon_per_order`
    RDP to (eps, delta): ``method="mironov"`` (Mironov 2017, Proposition 3) or the tighter
    ``method="balle"`` (Balle et al. 2020 / Canonne, Kamath and Steinke 2020).

Orders default to :data:`DEFAULT_ORDERS`; curves are NumPy arrays over the orders. See the
*Privacy accounting* page of the documentation for the papers and equations each function
follows and for the numerics (which sums are free of cancellation, and how accurate fractional
orders are).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import gammaln, log_ndtr, logsumexp

from ._checks import check_count, check_delta, check_epsilon, check_nonnegative, check_orders, check_probability

__all__ = [
    "CONVERSION_METHODS",
    "DEFAULT_ORDERS",
    "epsilon_per_order",
    "rdp_to_delta",
    "rdp_to_epsilon",
    "sampled_gaussian_rdp",
    "sampled_gaussian_rdp_without_replacement",
]

#: Renyi orders used when none are given: dense near 1 (small-eps, large-delta regimes),
#: every integer up to 64 and a sparse tail for very small eps/large noise.
DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [
        1.0 + np.arange(1, 100) / 10.0,  # 1.1 ... 10.9
        np.arange(11.0, 64.0),  # 11 ... 63
        np.array([64.0, 80.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 1024.0]),
    ]
)

CONVERSION_METHODS = ("mironov", "balle")

# Fractional-order series: stop once a block's largest term is below this fraction of the sum.
_SERIES_LOG_TOL = math.log(1e-17)
_SERIES_BLOCK = 64
_SERIES_MAX_TERMS = 4_000_000


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(exp(x) - 1) for x > 0 without overflow (x up to 1e308) or loss of precision near 0."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    big = x > 30.0
    out[big] = x[big] + np.log1p(-np.exp(-x[big]))
    out[~big] = np.log(np.expm1(x[~big]))
    return out


def _log_a_minus_one_int(q: float, sigma: float, alpha: int) -> float:
    """log(A_alpha - 1) for integer alpha >= 2 (Mironov-Talwar-Zhang 2019, Sec. 3.3, integer case).

    Every term of the binomial sum of ``A_alpha - 1`` is >= 0, so this is cancellation-free.
    """
    k = np.arange(2, alpha + 1, dtype=np.float64)
    log_terms = (
        gammaln(alpha + 1.0)
        - gammaln(k + 1.0)
        - gammaln(alpha - k + 1.0)
        + k * math.log(q)
        + (alpha - k) * math.log1p(-q)
        + _log_expm1((k * k - k) / (2.0 * sigma * sigma))
    )
    return float(logsumexp(log_terms))


def _signed_logaddexp(la: float, sa: float, lb: np.ndarray, sb: np.ndarray) -> tuple[float, float]:
    """(log|s|, sign(s)) of ``sa*exp(la) + sum(sb*exp(lb))``."""
    values = np.append(lb, la)
    signs = np.append(sb, sa)
    log_abs, sign = logsumexp(values, b=signs, return_sign=True)
    return float(log_abs), float(sign)


def _log_a_frac(q: float, sigma: float, alpha: float) -> float:
    """log(A_alpha) for fractional alpha (Mironov-Talwar-Zhang 2019, Sec. 3.3, fractional case).

    ``A = sum_i C(a, i) [ (1-q)^(a-i) q^i exp((i^2-i)/(2 s^2)) Phi((z0 - i)/s)
                         + q^(a-i) (1-q)^i exp(((a-i)^2-(a-i))/(2 s^2)) Phi(((a-i) - z0)/s) ]``
    with ``z0 = s^2 log(1/q - 1) + 1/2`` and Phi the standard normal cdf (log_ndtr keeps the
    far tails finite in log space).
    """
    z0 = sigma * sigma * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    two_s2 = 2.0 * sigma * sigma
    floor_alpha = math.floor(alpha)
    total_log, total_sign = -math.inf, 1.0
    start, block_size = 0, _SERIES_BLOCK
    while start < _SERIES_MAX_TERMS:
        # Blocks double in size: most series end within the first block, slow (polynomially
        # decaying) ones near q = 1/2 need thousands of terms.
        i = np.arange(start, start + block_size, dtype=np.float64)
        # |C(alpha, i)| via log|Gamma|; the sign flips once for every factor (alpha - j) < 0, j < i.
        log_binom = gammaln(alpha + 1.0) - gammaln(i + 1.0) - gammaln(alpha - i + 1.0)
        binom_sign = np.where(np.maximum(0.0, i - floor_alpha - 1.0) % 2 == 1, -1.0, 1.0)
        j = alpha - i
        log_left = log_binom + (alpha - i) * log_1mq + i * log_q + (i * i - i) / two_s2 + log_ndtr((z0 - i) / sigma)
        log_right = log_binom + j * log_q + i * log_1mq + (j * j - j) / two_s2 + log_ndtr((j - z0) / sigma)
        block = np.concatenate([log_left, log_right])
        signs = np.concatenate([binom_sign, binom_sign])
        total_log, total_sign = _signed_logaddexp(total_log, total_sign, block, signs)
        start += block_size
        block_size = min(2 * block_size, 65536)
        if start > alpha + 1 and np.max(block) < total_log + _SERIES_LOG_TOL:
            break
    else:  # pragma: no cover - needs alpha ~ 1 and q ~ 1/2 with sigma ~ 0.1 at once
        raise RuntimeError(f"sampled Gaussian RDP series did not converge at order {alpha}")
    if total_sign <= 0:  # A >= 1 mathematically; a non-positive sum means the series lost all precision
        raise RuntimeError(f"sampled Gaussian RDP series lost precision at order {alpha}")
    return total_log


def sampled_gaussian_rdp(q: float, noise_multiplier: float, orders: Any) -> np.ndarray:
    """RDP of one step of the Poisson-sampled Gaussian mechanism, at each order.

    Implements Mironov, Talwar and Zhang (2019), Section 3.3: the Renyi divergence
    ``D_a((1-q) N(0, s^2) + q N(1, s^2) || N(0, s^2))`` with ``s = noise_multiplier`` (noise
    standard deviation over L2 sensitivity), which upper-bounds the RDP of adding
    ``N(0, s^2 C^2)`` to a sum of C-clipped contributions, each record included independently
    with probability ``q`` (add/remove-one adjacency). Integer and fractional orders.

    Parameters
    ----------
    q : float
        Sampling rate, in (0, 1]. ``q = 1`` is the plain Gaussian mechanism, ``a / (2 s^2)``.
    noise_multiplier : float
        ``s >= 0``; ``0`` (or below 7e-151, where the RDP exceeds 1e300) gives infinite RDP,
        ``inf`` gives zero.
    orders : float or sequence of float
        Renyi orders, each > 1.

    Returns
    -------
    numpy.ndarray
        float64 RDP per step, same length as ``orders``; compose T steps by multiplying by T.
    """
    q = check_probability(q, "q")
    sigma = check_nonnegative(noise_multiplier, "noise_multiplier", allow_inf=True)
    alphas = check_orders(orders)
    if sigma * sigma < 5e-301:  # 1 / (2 s^2) > 1e300, or s = 0
        # No noise, or so little (s < 7e-151) that the RDP, about a / (2 s^2), exceeds 1e300 at
        # every order: reported as inf (the fractional series would overflow on the way).
        return np.full(alphas.shape, np.inf)
    if math.isinf(sigma):
        return np.zeros(alphas.shape)
    if q == 1.0:
        return alphas / (2.0 * sigma * sigma)
    out = np.empty(alphas.shape)
    cache: dict[float, float] = {}
    for n, alpha in enumerate(alphas.tolist()):
        if alpha not in cache:
            if alpha.is_integer():
                log_am1 = _log_a_minus_one_int(q, sigma, int(alpha))
                # log A = log(1 + (A - 1)), exact for tiny A - 1 and overflow-free for huge A.
                cache[alpha] = float(np.logaddexp(0.0, log_am1)) / (alpha - 1.0)
            else:
                cache[alpha] = _log_a_frac(q, sigma, alpha) / (alpha - 1.0)
        out[n] = cache[alpha]
    return out


# The forward-difference refinement is used for j <= this; above it only the theorem's
# 2 e^{(j-1) eps(j)} arm (still an upper bound: the refinement takes a minimum), which keeps the
# O(j^2) recursion bounded whatever orders are asked for (dp_accounting switches at 256).
_WOR_MAX_DIFFERENCE_ORDER = 1024


def _log_forward_differences(a: float, top: int) -> np.ndarray:
    """``log Delta^l f(0)`` for ``l = 0 .. top``, ``f(x) = exp(a x (x - 1))``, ``a > 0`` finite.

    The recursion of the docs' *Privacy accounting* page (numerics): every term is >= 0, so no
    cancellation.
    ``D_1 = 0`` (``log = -inf``); ``D_l > 0`` for every other ``l``.
    """
    log_d = np.full(top + 1, -np.inf)
    log_d[0] = 0.0
    if top < 2:
        return log_d
    log_beta = float(_log_expm1(np.array([2.0 * a]))[0])
    log_fact = gammaln(np.arange(top + 1, dtype=np.float64) + 1.0)
    # exp(2 a l) - 1 for the diagonal term, l = 1 .. top - 1.
    log_diag = _log_expm1(2.0 * a * np.arange(1, top, dtype=np.float64))
    idx = np.arange(top + 1)
    # Per i: -log i! + 2 a i - i log beta (+ log D_i below); per level: log level! + level log beta.
    row = -log_fact + 2.0 * a * idx - idx * log_beta
    terms = np.empty(top + 1)
    for level in range(1, top):
        # C(level, i) beta^(level - i) exp(2 a i) D_i for i < level (D_1 = 0 contributes nothing),
        # and the diagonal expm1(2 a level) D_level; a hand-rolled log-sum-exp (this loop is hot).
        t = terms[: level + 1]
        np.add(row[:level], log_d[:level], out=t[:level])
        t[:level] -= log_fact[level - idx[:level]]
        t[:level] += log_fact[level] + level * log_beta
        t[level] = log_d[level] + log_diag[level - 1]
        peak = t.max()
        log_d[level + 1] = peak + math.log(float(np.exp(t - peak).sum()))
    return log_d


def _wor_log_a_minus_one(gamma: float, a: float, orders: np.ndarray) -> np.ndarray:
    """``log(A_alpha - 1)`` of the without-replacement bound at integer ``orders`` (each >= 2).

    ``A_alpha = 1 + gamma^2 C(alpha, 2) min(4 (e^{eps(2)} - 1), 2 e^{eps(2)})
    + sum_{j=3}^{alpha} gamma^j C(alpha, j) min(4 sqrt(D_{2 floor(j/2)} D_{2 ceil(j/2)}), 2 e^{(j-1) eps(j)})``
    where the base Gaussian's RDP is ``eps(j) = a j`` (``a = 1 / (2 s^2)`` for noise ``s`` times the
    sensitivity), so ``(j - 1) eps(j) = a j (j - 1)`` and ``D_l`` are the forward differences of
    ``exp(a x (x - 1))``; ``e^{eps(inf)} = inf`` makes the theorem's ``min(2, (e^{eps(inf)} - 1)^j)``
    equal 2. Vectorised: one (orders x j) matrix.
    """
    max_order = int(orders.max())
    j = np.arange(2, max_order + 1, dtype=np.float64)
    log_term = math.log(2.0) + (j - 1.0) * j * a
    refine = int(min(max_order, _WOR_MAX_DIFFERENCE_ORDER))
    log_d = _log_forward_differences(a, refine + (refine % 2))
    jr = np.arange(3, refine + 1)
    if jr.size:
        half = 0.5 * (log_d[2 * (jr // 2)] + log_d[2 * ((jr + 1) // 2)])
        log_term[1 : refine - 1] = np.minimum(log_term[1 : refine - 1], math.log(4.0) + half)
    log_e2m1 = float(_log_expm1(np.array([2.0 * a]))[0])
    log_term[0] = min(math.log(4.0) + log_e2m1, math.log(2.0) + 2.0 * a)
    log_term = log_term + j * math.log(gamma) - gammaln(j + 1.0)
    # log C(alpha, j) = log alpha! - log j! - log (alpha - j)!; entries with j > alpha drop out.
    log_fact = gammaln(np.arange(max_order + 1, dtype=np.float64) + 1.0)
    diff = orders.astype(np.int64)[:, None] - np.arange(2, max_order + 1)[None, :]
    mat = np.where(diff >= 0, log_term[None, :] - log_fact[np.maximum(diff, 0)], -np.inf)
    peak = mat.max(axis=1)
    return log_fact[orders.astype(np.int64)] + peak + np.log(np.exp(mat - peak[:, None]).sum(axis=1))


def sampled_gaussian_rdp_without_replacement(
    sample_size: int, population: int, noise_multiplier: float, orders: Any
) -> np.ndarray:
    """RDP of the Gaussian mechanism on a fixed-size sample drawn without replacement.

    Each step draws exactly ``m = sample_size`` of the ``n = population`` records uniformly at
    random without replacement, sums their contributions, each clipped to L2 norm ``C``, and adds
    ``N(0, (noise_multiplier * C)^2 I)``. This is DP-FedAvg with exactly ``m`` of ``n`` clients per
    round (what Flower's ``FedAvg`` samples), and the DP-REC accountant's
    ``sampling="without_replacement"``.

    Adjacency: **replace-one** (``n`` is public; neighbouring datasets differ in the *value* of
    one record). Two clipped contributions differ by up to ``2C``, so the base Gaussian mechanism's
    RDP is ``eps(a) = a (2C)^2 / (2 (noise_multiplier C)^2) = 2 a / noise_multiplier^2``, and the
    returned curve is Wang, Balle and Kasiviswanathan's bound (AISTATS 2019; see *Privacy
    accounting* in the docs) at sampling ratio ``gamma = m / n`` applied to it, capped by the unsampled
    ``2 a / noise_multiplier^2`` (subsampling never hurts). ``noise_multiplier`` here is relative
    to the add/remove sensitivity ``C``, as in :func:`sampled_gaussian_rdp`; dp_accounting's
    ``SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(z))`` (under ``REPLACE_ONE``) gives
    the same curve for ``z = noise_multiplier / 2``, its noise multiplier being relative to the
    replace-one sensitivity. A replace-one guarantee also covers replacing a record by a zero
    contribution.

    Parameters
    ----------
    sample_size : int
        ``m``, records (clients) per step, ``1 <= m <= population``.
    population : int
        ``n``, the number of records (clients), public.
    noise_multiplier : float
        Noise standard deviation over ``C`` (``>= 0``); ``0`` gives infinite RDP, ``inf`` zero.
    orders : float or sequence of float
        Renyi orders, each > 1. Integer orders get the theorem's bound; a fractional order gets
        the linear interpolation of ``(a - 1) rdp(a)`` between its neighbouring integers (an upper
        bound, the log-moment being convex), as dp_accounting does.

    Returns
    -------
    numpy.ndarray
        float64 RDP of one step at each order; compose T steps by multiplying by T.

    Notes
    -----
    Cost: a recursion of ``O(min(alpha_max, 1024)^2)`` and one ``(orders x alpha_max)`` matrix;
    about a millisecond for the 256 integer orders of DP-REC. For ``j > 1024`` only the
    theorem's ``2 e^{(j-1) eps(j)}`` arm is used (a valid, slightly looser bound).
    """
    n = check_count(population, "population")
    m = check_count(sample_size, "sample_size")
    if m > n:
        raise ValueError(f"sample_size must be <= population ({n}), got {m}")
    z = check_nonnegative(noise_multiplier, "noise_multiplier", allow_inf=True)
    alphas = check_orders(orders)
    base = 2.0 / (z * z) if z > 0.0 else math.inf  # eps(a) = base * a
    if base == 0.0:  # infinite (or astronomically large) noise
        return np.zeros(alphas.shape)
    if not base < 1e300:
        return np.full(alphas.shape, np.inf)
    plain = alphas * base
    if m == n or base * float(np.ceil(alphas.max())) ** 2 > 1e250:
        # No sampling; or so little noise that the theorem's log-moments overflow float64, where
        # the unsampled RDP (a valid upper bound, and astronomically large anyway) is returned.
        return plain
    lo = np.floor(alphas)
    hi = np.ceil(alphas)
    needed = np.unique(np.concatenate([lo, hi]))
    needed = needed[needed >= 2.0]
    log_moment = {1.0: 0.0}  # (alpha - 1) rdp(alpha) = log A_alpha; 0 at alpha = 1
    if needed.size:
        values = np.logaddexp(0.0, _wor_log_a_minus_one(m / n, base, needed))
        log_moment.update(zip(needed.tolist(), values.tolist()))
    at_lo = np.array([log_moment[v] for v in lo.tolist()])
    at_hi = np.array([log_moment[v] for v in hi.tolist()])
    frac = alphas - lo
    moment = (1.0 - frac) * at_lo + frac * at_hi
    return np.minimum(moment / (alphas - 1.0), plain)


def _check_curve(orders: Any, rdp: Any) -> tuple[np.ndarray, np.ndarray]:
    alphas = check_orders(orders)
    try:
        values = np.atleast_1d(np.asarray(rdp, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise TypeError("rdp must be a number or a sequence of numbers") from exc
    if values.shape != alphas.shape:
        raise ValueError(f"rdp must have one value per order: got {values.shape} values for {alphas.shape} orders")
    if np.any(np.isnan(values)):
        raise ValueError("rdp must not contain NaN")
    if np.any(values < -_ROUNDING):
        raise ValueError(f"rdp must be >= 0 (a Renyi divergence), got minimum {values.min()!r}")
    # A divergence of 0 computed as a difference may come out a few ulps below it (e.g. a clip
    # multiplier of 1e-10): taken as 0, which only raises the curve.
    return alphas, np.maximum(values, 0.0)


#: How far below 0 a computed divergence may come out by rounding alone.
_ROUNDING = 1e-12


def _check_method(method: str) -> str:
    if method not in CONVERSION_METHODS:
        raise ValueError(f"method must be one of {CONVERSION_METHODS}, got {method!r}")
    return method


def epsilon_per_order(orders: Any, rdp: Any, delta: float, *, method: str = "mironov") -> np.ndarray:
    """The (eps, delta)-DP epsilon implied by each order's RDP value (see :func:`rdp_to_epsilon`).

    Mironov (2017), Proposition 3, or Balle et al. (2020), Theorem 21 / Canonne et al. (2020),
    Proposition 12 (``method="balle"``), evaluated order by order without the minimum.
    """
    alphas, values = _check_curve(orders, rdp)
    delta = check_delta(delta)
    method = _check_method(method)
    with np.errstate(over="ignore", invalid="ignore"):
        if method == "mironov":
            # Mironov (2017), Proposition 3.
            eps = values + math.log(1.0 / delta) / (alphas - 1.0)
        else:
            # Balle et al. (2020), Theorem 21 = Canonne-Kamath-Steinke (2020), Proposition 12.
            eps = values + np.log1p(-1.0 / alphas) - (math.log(delta) + np.log(alphas)) / (alphas - 1.0)
            # Bretagnolle-Huber: delta >= sqrt(1 - exp(-rdp)) already holds at eps = 0.
            eps = np.where(delta * delta + np.expm1(-values) >= 0.0, 0.0, eps)
    eps = np.where(np.isinf(values), np.inf, eps)
    return np.maximum(eps, 0.0)


def rdp_to_epsilon(orders: Any, rdp: Any, delta: float, *, method: str = "mironov") -> tuple[float, float]:
    """Smallest epsilon such that an RDP curve implies (epsilon, delta)-DP, and its order.

    ``method="mironov"``: Mironov (2017), Proposition 3,
    ``eps = min_a rdp(a) + log(1/delta) / (a - 1)``.
    ``method="balle"``: Balle et al. (2020), Theorem 21 / Canonne, Kamath and Steinke (2020),
    Proposition 12, ``eps = min_a rdp(a) + log(1 - 1/a) - (log delta + log a) / (a - 1)``,
    plus the Bretagnolle-Huber shortcut ``eps = 0`` when ``sqrt(1 - exp(-rdp(a))) <= delta``.
    Never larger than Mironov's; the same conversion as dp_accounting's RdpAccountant.

    Parameters
    ----------
    orders, rdp : sequences of float
        Orders (> 1) and the RDP value at each order (>= 0; ``inf`` allowed).
    delta : float
        Target delta in (0, 1).
    method : {"mironov", "balle"}

    Returns
    -------
    (epsilon, order) : tuple of float
        ``epsilon`` is ``inf`` when every order's RDP is infinite.
    """
    alphas = check_orders(orders)
    eps = epsilon_per_order(alphas, rdp, delta, method=method)
    best = int(np.argmin(eps))
    return float(eps[best]), float(alphas[best])


def rdp_to_delta(orders: Any, rdp: Any, epsilon: float, *, method: str = "mironov") -> tuple[float, float]:
    """Smallest delta such that an RDP curve implies (epsilon, delta)-DP, and its order.

    ``method="mironov"``: Mironov (2017), Proposition 3 solved for delta,
    ``delta = min_a exp((a - 1) (rdp(a) - eps))``.
    ``method="balle"``: Balle et al. (2020), Theorem 21 / Canonne et al. (2020), Proposition 12,
    ``delta = min_a exp((a - 1)(rdp(a) - eps + log(1 - 1/a)) - log a)``, and at every order at most
    the Bretagnolle-Huber bound ``sqrt(1 - exp(-rdp(a)))``.

    Returns
    -------
    (delta, order) : tuple of float
        ``delta`` is capped at 1.
    """
    alphas, values = _check_curve(orders, rdp)
    eps = check_epsilon(epsilon)
    method = _check_method(method)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if method == "mironov":
            log_delta = (alphas - 1.0) * (values - eps)
        else:
            log_delta = (alphas - 1.0) * (values - eps + np.log1p(-1.0 / alphas)) - np.log(alphas)
            log_tv = np.where(values > 0.0, 0.5 * np.log1p(-np.exp(-values)), -np.inf)
            log_delta = np.minimum(log_delta, log_tv)
    log_delta = np.where(np.isinf(values), 0.0, log_delta)
    best = int(np.argmin(log_delta))
    return float(min(1.0, math.exp(min(0.0, log_delta[best])))), float(alphas[best])


def participation_rdp(sampling_rate: float, rdp: Any, orders: Any) -> np.ndarray:
    """RDP of a round in which the target takes part with probability ``q`` and the observer sees whether.

    ``log(1 - q + q exp((a - 1) rdp(a))) / (a - 1)``: the outputs with and without the target's
    participation are told apart (the observer knows who sent a message), so the round is a mixture
    with a visible component, and this is its Renyi divergence exactly when ``rdp`` is that of a
    participation (both directions, if ``rdp`` bounds both). No amplification by a hidden sample.
    """
    from ._checks import check_probability  # noqa: PLC0415

    q = check_probability(sampling_rate, "sampling_rate")
    a = np.asarray(orders, dtype=np.float64)
    x = (a - 1.0) * np.asarray(rdp, dtype=np.float64)
    if q == 1.0:
        return np.asarray(rdp, dtype=np.float64).copy()
    out = np.empty(x.shape)
    small = x <= 700.0
    out[small] = np.log1p(q * np.expm1(x[small]))
    out[~small] = np.logaddexp(math.log1p(-q), math.log(q) + x[~small])  # exp(x) would overflow
    return out / (a - 1.0)

