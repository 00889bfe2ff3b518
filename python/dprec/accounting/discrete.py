"""RDP of the distributed discrete Gaussian (DDG) and Skellam mechanisms; epsilon and calibration.

Each of ``n`` clients scales its clipped vector by ``1/gamma`` (granularity ``gamma``), rounds it
to the integers and adds integer noise; secure aggregation reveals only the sum.

Distributed discrete Gaussian (Kairouz, Liu and Steinke 2021; Chen et al.'s Theorem E.1, with
its errata)
    :func:`ddg_rdp`, :func:`ddg_epsilon`, :func:`ddg_noise_for_epsilon`, :func:`ddg_guarantee`;
    :func:`ddg_concentrated_epsilon` and :func:`ddg_tau` (Theorem E.1's terms);
    :func:`rounded_l2_sensitivity`, the L2 sensitivity after conditional randomized rounding.
Skellam (Agarwal, Kairouz and Liu 2021)
    :func:`skellam_rdp`, :func:`skellam_epsilon`, :func:`skellam_noise_for_epsilon`,
    :func:`skellam_guarantee`.

``sampling_rate < 1`` amplifies a curve by Zhu and Wang's (2019) general Poisson-subsampling
bound, at integer orders only (other orders get ``inf``; :data:`DISCRETE_DEFAULT_ORDERS` are the
integers 2..256). RDP is converted to (eps, delta) by
:func:`dprec.accounting.rdp.rdp_to_epsilon` (``method="mironov"`` or ``"balle"``).

See the *Privacy accounting* page of the documentation for the formulas, the errata in Theorem
E.1, and how far each formula was confirmed (some only through a secondary source, all checked
numerically against exact Renyi divergences).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np
from scipy.optimize import brentq

from ._checks import (
    check_count,
    check_delta,
    check_epsilon,
    check_nonnegative,
    check_orders,
    check_positive,
    check_probability,
)
from ._subsampling import poisson_subsampled_rdp
from .guarantee import NOISE_SHARE_REASON, PrivacyGuarantee, check_relation, check_threat_model
from .rdp import participation_rdp, rdp_to_epsilon

__all__ = [
    "DISCRETE_DEFAULT_ORDERS",
    "MIN_SUMMED_NOISE",
    "ddg_concentrated_epsilon",
    "ddg_epsilon",
    "ddg_guarantee",
    "ddg_noise_for_epsilon",
    "ddg_rdp",
    "ddg_tau",
    "rounded_l2_sensitivity",
    "skellam_epsilon",
    "skellam_guarantee",
    "skellam_noise_for_epsilon",
    "skellam_rdp",
]

#: Integer orders 2..256: the subsampling bound (Zhu-Wang) needs integer orders.
DISCRETE_DEFAULT_ORDERS: np.ndarray = np.arange(2.0, 257.0)


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def rounded_l2_sensitivity(clip: float, dim: int, granularity: float, beta: float = 0.0) -> float:
    """L2 norm bound after scaling by 1/gamma and conditional randomized rounding (Theorem E.1).

    Chen et al., Theorem E.1 (after Kairouz et al. 2021, conditional randomized rounding):
    ``Delta2^2 = min{ c^2 + gamma^2 d/4 + sqrt(2 log(1/beta)) gamma (c + gamma sqrt(d)/2),
    (c + gamma sqrt(d))^2 }``, in the original (unscaled) units. ``beta = 0`` (unconditional
    rounding) leaves only the second, deterministic bound.

    Parameters
    ----------
    clip : float
        c > 0, the L2 clipping norm.
    dim : int
        d, the (padded) dimension.
    granularity : float
        gamma > 0, the rounding grid spacing.
    beta : float
        Rounding bias parameter in [0, 1).
    """
    c = check_positive(clip, "clip")
    d = check_count(dim, "dim")
    gamma = check_positive(granularity, "granularity")
    beta = check_nonnegative(beta, "beta")
    if not beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    # The deterministic bound is kept as a norm (not squared) so that huge inputs cannot overflow.
    deterministic = c + gamma * math.sqrt(d)
    if beta == 0.0:
        return deterministic
    conditional = (
        c * c
        + gamma * gamma * d / 4.0
        + math.sqrt(2.0 * math.log(1.0 / beta)) * gamma * (c + 0.5 * gamma * math.sqrt(d))
    )
    return min(math.sqrt(conditional), deterministic)


def _default_l1(l2: float, dim: int, granularity: float) -> float:
    # Any vector: ||x||_1 <= sqrt(d) ||x||_2. On the grid gamma*Z^d every nonzero coordinate has
    # |x_j| >= gamma, so ||x||_1 <= ||x||_2^2 / gamma as well.
    return l2 * min(math.sqrt(dim), l2 / granularity)


def _sensitivity_params(
    l2_sensitivity: Any, noise_stddev: Any, num_clients: Any, dim: Any, granularity: Any, l1_sensitivity: Any
) -> tuple[float, float, int, int, float, float]:
    """Check the parameters DDG and Skellam share, in one order for both (the first bad one is named).

    ``l1_sensitivity=None`` becomes the default bound of :func:`_default_l1`.
    """
    l2 = check_nonnegative(l2_sensitivity, "l2_sensitivity")
    sigma = check_positive(noise_stddev, "noise_stddev")
    n = check_count(num_clients, "num_clients")
    d = check_count(dim, "dim")
    gamma = check_positive(granularity, "granularity")
    l1 = _default_l1(l2, d, gamma) if l1_sensitivity is None else check_nonnegative(l1_sensitivity, "l1_sensitivity")
    return l2, sigma, n, d, gamma, l1


def _composed_epsilon(
    mechanism_rdp: Callable[..., np.ndarray], orders: Any, delta: Any, steps: Any, method: str, **mechanism: Any
) -> tuple[float, float]:
    """(eps, best order) of ``steps`` compositions of ``mechanism_rdp(orders, **mechanism)`` at ``delta``.

    What :func:`ddg_epsilon` and :func:`skellam_epsilon` share: ``orders`` (default
    :data:`DISCRETE_DEFAULT_ORDERS`), ``delta`` and ``steps`` are checked before the mechanism's
    own parameters; RDP composes additively over steps (Mironov 2017, Proposition 1) and
    :func:`dprec.accounting.rdp.rdp_to_epsilon` converts.
    """
    alphas = DISCRETE_DEFAULT_ORDERS.copy() if orders is None else check_orders(orders)
    delta = check_delta(delta)
    steps = check_count(steps, "steps")
    threat_model = mechanism.pop("threat_model", "central")
    rdp = _observed_rdp(mechanism_rdp, alphas, threat_model, mechanism)
    return rdp_to_epsilon(alphas, steps * rdp, delta, method=method)


def _observed_rdp(mechanism_rdp: Callable[..., np.ndarray], alphas: np.ndarray, threat_model: str,
                  params: dict) -> np.ndarray:
    """One round's RDP against ``threat_model``.

    ``"central"`` (the observer sees the released sum only, the client sample hidden): Poisson
    amplification at ``sampling_rate`` inside ``mechanism_rdp``. ``"messages"`` and ``"server"``:
    every client that takes part sends a (masked) message, so the server sees who took part and a
    message observer sees how many; the sample is not hidden, and the round is the participation
    mixture of the unsampled mechanism (:func:`dprec.accounting.rdp.participation_rdp`).
    """
    q = params.get("sampling_rate", 1.0)
    if threat_model == "central" or q == 1.0:
        return mechanism_rdp(alphas, **params)
    check_probability(q, "sampling_rate")
    full = mechanism_rdp(alphas, **{**params, "sampling_rate": 1.0})
    return participation_rdp(q, full, alphas)


def _noise_for_epsilon(
    mechanism_epsilon: Callable[..., tuple[float, float]], target_epsilon: Any, **params: Any
) -> float:
    """Smallest ``noise_stddev`` with ``mechanism_epsilon(noise_stddev=..., **params)[0] <= target_epsilon``.

    What :func:`ddg_noise_for_epsilon` and :func:`skellam_noise_for_epsilon` share; the epsilon
    of either mechanism decreases in sigma, which :func:`_calibrate` relies on.
    """
    target = check_epsilon(target_epsilon, "target_epsilon")
    if target == 0.0:
        raise ValueError("target_epsilon must be > 0 (epsilon 0 needs infinite noise)")
    mechanism_epsilon(noise_stddev=1.0, **params)  # validates every parameter once, up front
    return _calibrate(lambda s: mechanism_epsilon(noise_stddev=s, **params)[0], target, "noise_stddev")


def _calibrate(eps_of_sigma: Callable[[float], float], target: float, name: str) -> float:
    """Smallest sigma with eps(sigma) <= target, for eps decreasing in sigma (bisection on log)."""
    lo, hi = 1e-3, 1.0
    while eps_of_sigma(hi) > target:
        lo, hi = hi, hi * 4.0
        if hi > 1e12:
            raise ValueError(f"no {name} up to 1e12 reaches the target epsilon {target!r}")
    while eps_of_sigma(lo) <= target:
        hi, lo = lo, lo / 4.0
        if lo < 1e-12:
            return hi
    root = brentq(lambda t: eps_of_sigma(math.exp(t)) - target, math.log(lo), math.log(hi), xtol=1e-12, rtol=1e-12)
    sigma = math.exp(root)
    # brentq may stop a hair on the wrong side; step up until the target holds.
    while eps_of_sigma(sigma) > target:
        sigma *= 1.0 + 1e-10
    return sigma


# --------------------------------------------------------------------------------------------
# Distributed discrete Gaussian
# --------------------------------------------------------------------------------------------


# ddg_tau sums its first this many terms exactly and bounds the rest (cost independent of num_clients).
_TAU_EXACT_TERMS = 1 << 20


#: The smallest per-client integer noise ``sigma / gamma`` for which :func:`ddg_rdp` claims a bound on a sum of two
#: or more discrete Gaussians. Below it the Theorem E.1 / Proposition 14 forms fall under the exact Renyi
#: divergence at orders near 1 (n = 3, sigma / gamma = 0.3, order 1.05: exact 4.39, bound 3.83); checked
#: above it in the tests, orders 1.05 to 50 included. A single client (no sum) needs no such floor.
MIN_SUMMED_NOISE = 0.5


def ddg_tau(noise_stddev: float, num_clients: int, granularity: float = 1.0) -> float:
    """Kairouz et al. (2021), Theorem 1 / Chen et al. Theorem E.1: the tau term.

    ``tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 (sigma/gamma)^2 k / (k+1))``; 0 for one client (a
    single discrete Gaussian needs no correction). Beyond ``2**20`` clients the terms past the
    ``2**20``-th are bounded by that term (they decrease with ``k``), so the cost does not grow
    with ``num_clients`` and the result stays an upper bound.
    """
    sigma = check_positive(noise_stddev, "noise_stddev")
    n = check_count(num_clients, "num_clients")
    gamma = check_positive(granularity, "granularity")
    ratio = sigma / gamma
    k = np.arange(1, min(n, _TAU_EXACT_TERMS + 1), dtype=np.float64)
    a = 2.0 * math.pi**2 * (ratio * ratio)
    total = float(np.sum(np.exp(-a * k / (k + 1.0))))
    if n - 1 > _TAU_EXACT_TERMS:
        # The terms decrease with k, so the remaining n - 1 - K are at most the (K + 1)-th each:
        # an upper bound (conservative), within a factor exp(a / (K + 2)) of the exact tail.
        top = _TAU_EXACT_TERMS + 1.0
        total += (n - 1 - _TAU_EXACT_TERMS) * math.exp(-a * top / (top + 1.0))
    return 10.0 * total


def ddg_concentrated_epsilon(
    l2_sensitivity: float,
    noise_stddev: float,
    num_clients: int,
    dim: int,
    granularity: float = 1.0,
) -> float:
    """Chen et al., Theorem E.1 (Kairouz et al. 2021, Theorem 1), with its erratum (see the docs).

    ``eps = min{ sqrt(Delta2^2 / (n sigma^2) + tau d / 2), Delta2 / (sqrt(n) sigma) + tau sqrt(d) }``;
    the summed mechanism is ``(1/2) eps^2``-concentrated DP, i.e. ``(a, a eps^2 / 2)``-RDP.

    Parameters
    ----------
    l2_sensitivity : float
        Delta2 >= 0, the L2 sensitivity of one client's rounded vector, in original units (see
        :func:`rounded_l2_sensitivity`).
    noise_stddev : float
        sigma > 0, each client's discrete Gaussian parameter in original units (the client adds
        ``gamma * N_Z(0, sigma^2 / gamma^2)``).
    num_clients : int
        n >= 1, the number of clients whose noise is summed.
    dim : int
        d >= 1.
    granularity : float
        gamma > 0.
    """
    l2, sigma, n, d, gamma, _ = _sensitivity_params(l2_sensitivity, noise_stddev, num_clients, dim, granularity, 0.0)
    tau = ddg_tau(sigma, n, gamma)
    s2 = l2 / (math.sqrt(n) * sigma)  # Delta2 / (sqrt(n) sigma); n sigma^2 itself can underflow to 0
    first = math.sqrt(s2 * s2 + 0.5 * tau * d)
    second = s2 + tau * math.sqrt(d)
    return min(first, second)


def ddg_rdp(
    orders: Any,
    *,
    l2_sensitivity: float,
    noise_stddev: float,
    num_clients: int,
    dim: int,
    granularity: float = 1.0,
    l1_sensitivity: Optional[float] = None,
    sampling_rate: float = 1.0,
) -> np.ndarray:
    """Per-step RDP of the (Poisson-sampled) distributed discrete Gaussian mechanism.

    Unsampled: the minimum of Theorem E.1's ``a eps^2 / 2`` (:func:`ddg_concentrated_epsilon`) and
    the three per-order forms of Kairouz et al. Proposition 14 / eq. (17) (see *Privacy
    accounting* in the docs; the latter confirmed via a secondary source only). Sampled (``sampling_rate < 1``): Zhu-Wang's
    general Poisson-subsampling bound at integer orders, ``inf`` at the others. With two or more clients and a
    per-client integer noise ``noise_stddev / granularity`` below :data:`MIN_SUMMED_NOISE` (0.5): ``inf`` at every
    order (the forms fall under the exact divergence near order 1 there; no bound is claimed).

    Parameters
    ----------
    orders : float or sequence of float
        Renyi orders, each > 1.
    l2_sensitivity, noise_stddev, num_clients, dim, granularity
        As in :func:`ddg_concentrated_epsilon`.
    l1_sensitivity : float, optional
        Delta1 of one client's rounded vector, original units; default
        ``Delta2 * min(sqrt(d), Delta2 / gamma)`` (valid for any vector on the grid gamma Z^d).
    sampling_rate : float
        Poisson sampling rate of records (or clients) in (0, 1].

    Returns
    -------
    numpy.ndarray
        float64 RDP of one step at each order.
    """
    alphas = check_orders(orders)
    l2, sigma, n, d, gamma, l1 = _sensitivity_params(
        l2_sensitivity, noise_stddev, num_clients, dim, granularity, l1_sensitivity
    )
    q = check_probability(sampling_rate, "sampling_rate")
    if n > 1 and sigma / gamma < MIN_SUMMED_NOISE:
        # Below it the bounds fail for sums of discrete Gaussians near order 1 (exact divergence above them):
        # no bound is claimed.
        return np.full(alphas.shape, np.inf)
    tau = ddg_tau(sigma, n, gamma)
    eps_cdp = ddg_concentrated_epsilon(l2, sigma, n, d, gamma)
    s2 = l2 / (math.sqrt(n) * sigma)
    s1 = l1 / (math.sqrt(n) * sigma)

    def base(a: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # tiny noise: the bounds overflow to inf, correctly
            theorem_e1 = a * eps_cdp * eps_cdp / 2.0
            prop14_a = a * s2 * s2 / 2.0 + tau * d
            prop14_b = a / 2.0 * (s2 * s2 + 2.0 * s1 * tau + tau * tau * d)
            prop14_c = a / 2.0 * (s2 + math.sqrt(d) * tau) * (s2 + math.sqrt(d) * tau)
        return np.minimum.reduce([theorem_e1, prop14_a, prop14_b, prop14_c])

    return poisson_subsampled_rdp(alphas, q, base)


def ddg_epsilon(
    *,
    l2_sensitivity: float,
    noise_stddev: float,
    num_clients: int,
    dim: int,
    delta: float,
    steps: int = 1,
    sampling_rate: float = 1.0,
    granularity: float = 1.0,
    l1_sensitivity: Optional[float] = None,
    orders: Any = None,
    method: str = "mironov",
    threat_model: str = "central",
    relation: str = "zero",
) -> tuple[float, float]:
    """(eps, best order) of ``steps`` compositions of :func:`ddg_rdp` at the given delta.

    Under secure aggregation every observer (``threat_model`` ``"central"``, ``"messages"`` or
    ``"server"``) sees only the modular sum; the curve is for one client's update changing while every
    client adds its noise share (``relation="zero"``, the default). ``"add_remove"`` gives
    ``(inf, nan)``: removing a client also removes its share of the noise. With ``sampling_rate < 1``
    the default ``threat_model="central"`` is Poisson-amplified (the sample hidden; every round must
    carry exactly ``num_clients`` noise shares whoever is drawn, see :class:`dprec.secagg.DDGPipeline`);
    ``"messages"`` and ``"server"`` see who (or how many) took part and get the participation mixture.
    :func:`ddg_guarantee` returns the full :class:`~dprec.accounting.guarantee.PrivacyGuarantee`.

    RDP composes additively over steps; the conversion is
    :func:`dprec.accounting.rdp.rdp_to_epsilon` (Mironov 2017, Prop. 3 by default). ``orders``
    defaults to the integers 2..256.
    """
    tm = check_threat_model(threat_model)
    if check_relation(relation) == "add_remove":
        return math.inf, math.nan  # NOISE_SHARE_REASON: see ddg_guarantee / skellam_guarantee
    return _composed_epsilon(
        ddg_rdp,
        orders,
        delta,
        steps,
        method,
        threat_model=tm,
        l2_sensitivity=l2_sensitivity,
        noise_stddev=noise_stddev,
        num_clients=num_clients,
        dim=dim,
        granularity=granularity,
        l1_sensitivity=l1_sensitivity,
        sampling_rate=sampling_rate,
    )


def ddg_noise_for_epsilon(
    target_epsilon: float,
    *,
    l2_sensitivity: float,
    num_clients: int,
    dim: int,
    delta: float,
    steps: int = 1,
    sampling_rate: float = 1.0,
    granularity: float = 1.0,
    l1_sensitivity: Optional[float] = None,
    orders: Any = None,
    method: str = "mironov",
    threat_model: str = "central",
) -> float:
    """Smallest per-client ``noise_stddev`` (original units) with :func:`ddg_epsilon` <= target.

    Inverts the DDG accounting of :func:`ddg_rdp` (Chen et al., Theorem E.1; Kairouz et al. 2021).

    The epsilon of :func:`ddg_epsilon` decreases in sigma (both 1/sigma and tau do), so the
    answer is found by root finding on log sigma and then nudged up until the target holds.
    """
    return _noise_for_epsilon(
        ddg_epsilon,
        target_epsilon,
        l2_sensitivity=l2_sensitivity,
        num_clients=num_clients,
        dim=dim,
        delta=delta,
        steps=steps,
        sampling_rate=sampling_rate,
        granularity=granularity,
        l1_sensitivity=l1_sensitivity,
        orders=orders,
        method=method,
        threat_model=threat_model,
    )


# --------------------------------------------------------------------------------------------
# Skellam
# --------------------------------------------------------------------------------------------


def skellam_rdp(
    orders: Any,
    *,
    l2_sensitivity: float,
    noise_stddev: float,
    num_clients: int = 1,
    dim: int,
    granularity: float = 1.0,
    l1_sensitivity: Optional[float] = None,
    sampling_rate: float = 1.0,
) -> np.ndarray:
    """Per-step RDP of the (Poisson-sampled, distributed, scaled) Skellam mechanism.

    Agarwal, Kairouz and Liu (2021), multi-dimensional Skellam RDP bound (see *Privacy accounting* in the docs), in
    the integer domain ``s = 1/gamma``: with ``D2 = s Delta2``, ``D1 = s Delta1`` and total
    variance ``mu = s^2 n sigma^2``,
    ``eps(a) = a D2^2 / (2 mu) + min( ((2a - 1) D2^2 + 6 D1) / (4 mu^2), 3 D1 / (2 mu) )``.
    Sampled: Zhu-Wang general bound at integer orders, ``inf`` at the others.

    Parameters
    ----------
    orders : float or sequence of float
        Renyi orders, each > 1.
    l2_sensitivity : float
        Delta2 >= 0 of one client's rounded vector, original units.
    noise_stddev : float
        sigma > 0, each client's Skellam noise standard deviation in original units (the client
        adds ``gamma * Sk`` with ``Var(Sk) = sigma^2 / gamma^2``).
    num_clients : int
        n >= 1; the summed noise is Skellam with variance ``n sigma^2`` (closure under summation).
    dim : int
        d >= 1 (used for the default L1 sensitivity).
    granularity : float
        gamma > 0 (the paper's scale is ``1/gamma``).
    l1_sensitivity : float, optional
        Delta1, original units; default ``Delta2 * min(sqrt(d), Delta2 / gamma)``.
    sampling_rate : float
        Poisson sampling rate in (0, 1].
    """
    alphas = check_orders(orders)
    l2, sigma, n, d, gamma, l1 = _sensitivity_params(
        l2_sensitivity, noise_stddev, num_clients, dim, granularity, l1_sensitivity
    )
    q = check_probability(sampling_rate, "sampling_rate")
    d2 = l2 / gamma
    d1 = l1 / gamma
    mu = n * (sigma / gamma) * (sigma / gamma)

    def base(a: np.ndarray) -> np.ndarray:
        if d2 == 0.0 and d1 == 0.0:
            return np.zeros(a.shape)
        if mu == 0.0:  # (sigma / gamma)^2 underflowed: no noise to speak of
            return np.full(a.shape, np.inf)
        with np.errstate(over="ignore"):
            correction = np.minimum(((2.0 * a - 1.0) * d2 * d2 + 6.0 * d1) / (4.0 * mu * mu), 3.0 * d1 / (2.0 * mu))
            return a * d2 * d2 / (2.0 * mu) + correction

    return poisson_subsampled_rdp(alphas, q, base)


def skellam_epsilon(
    *,
    l2_sensitivity: float,
    noise_stddev: float,
    dim: int,
    delta: float,
    num_clients: int = 1,
    steps: int = 1,
    sampling_rate: float = 1.0,
    granularity: float = 1.0,
    l1_sensitivity: Optional[float] = None,
    orders: Any = None,
    method: str = "mironov",
    threat_model: str = "central",
    relation: str = "zero",
) -> tuple[float, float]:
    """(eps, best order) of ``steps`` compositions of :func:`skellam_rdp` at the given delta.

    Under secure aggregation every observer (``threat_model`` ``"central"``, ``"messages"`` or
    ``"server"``) sees only the modular sum; the curve is for one client's update changing while every
    client adds its noise share (``relation="zero"``, the default). ``"add_remove"`` gives
    ``(inf, nan)``: removing a client also removes its share of the noise. With ``sampling_rate < 1``
    the default ``threat_model="central"`` is Poisson-amplified (the sample hidden; every round must
    carry exactly ``num_clients`` noise shares whoever is drawn, see :class:`dprec.secagg.DDGPipeline`);
    ``"messages"`` and ``"server"`` see who (or how many) took part and get the participation mixture.
    :func:`skellam_guarantee` returns the full :class:`~dprec.accounting.guarantee.PrivacyGuarantee`.

    Agarwal, Kairouz and Liu (2021), the multi-dimensional Skellam RDP bound (see *Privacy accounting* in the docs),
    composed additively, converted by :func:`dprec.accounting.rdp.rdp_to_epsilon` (Mironov 2017,
    Prop. 3 by default). ``orders`` defaults to the integers 2..256.
    """
    tm = check_threat_model(threat_model)
    if check_relation(relation) == "add_remove":
        return math.inf, math.nan  # NOISE_SHARE_REASON: see ddg_guarantee / skellam_guarantee
    return _composed_epsilon(
        skellam_rdp,
        orders,
        delta,
        steps,
        method,
        threat_model=tm,
        l2_sensitivity=l2_sensitivity,
        noise_stddev=noise_stddev,
        num_clients=num_clients,
        dim=dim,
        granularity=granularity,
        l1_sensitivity=l1_sensitivity,
        sampling_rate=sampling_rate,
    )


def skellam_noise_for_epsilon(
    target_epsilon: float,
    *,
    l2_sensitivity: float,
    dim: int,
    delta: float,
    num_clients: int = 1,
    steps: int = 1,
    sampling_rate: float = 1.0,
    granularity: float = 1.0,
    l1_sensitivity: Optional[float] = None,
    orders: Any = None,
    method: str = "mironov",
    threat_model: str = "central",
) -> float:
    """Smallest per-client Skellam ``noise_stddev`` (original units) with epsilon <= target.

    Inverts :func:`skellam_epsilon` (Agarwal, Kairouz and Liu 2021) by root finding on log sigma.
    """
    return _noise_for_epsilon(
        skellam_epsilon,
        target_epsilon,
        l2_sensitivity=l2_sensitivity,
        dim=dim,
        delta=delta,
        num_clients=num_clients,
        steps=steps,
        sampling_rate=sampling_rate,
        granularity=granularity,
        l1_sensitivity=l1_sensitivity,
        orders=orders,
        method=method,
        threat_model=threat_model,
    )


def _secagg_guarantee(
    mechanism: str, rdp_fn: Callable[..., np.ndarray], *, delta: Any, steps: Any, orders: Any, threat_model: Any,
    relation: Any, conversion: Any, params: dict,
) -> PrivacyGuarantee:
    from .baselines import _check_conversion, _rdp_guarantee  # noqa: PLC0415

    tm = check_threat_model(threat_model)
    rel = check_relation(relation)
    conv = _check_conversion(conversion, pld_ok=False)
    alphas = DISCRETE_DEFAULT_ORDERS.copy() if orders is None else check_orders(orders)
    delta = check_delta(delta)
    t = check_count(steps, "steps")
    curve = t * _observed_rdp(rdp_fn, alphas, tm, dict(params))
    q = params.get("sampling_rate", 1.0)
    sampling = None
    if q < 1.0:
        sampling = "poisson (hidden from the observer)" if tm == "central" else (
            "poisson, participation seen (a client's masked message shows it took part: no amplification)")
    return _rdp_guarantee(
        mechanism, lambda r: NOISE_SHARE_REASON if r == "add_remove" else curve, alphas, delta, threat_model=tm,
        relation=rel, conversion=conv, sampling=sampling,
        composition=f"{t} compositions (RDP) of the modular sum under secure aggregation",
    )


def ddg_guarantee(
    *,
    delta: float,
    steps: int = 1,
    orders: Any = None,
    threat_model: str = "central",
    relation: str = "zero",
    conversion: str = "rdp-balle",
    **params: Any,
) -> PrivacyGuarantee:
    """:func:`ddg_epsilon` as a PrivacyGuarantee, finite under ``relation="zero"`` for every threat model
    (secure aggregation: only the modular sum is seen); ``"add_remove"`` is ``inf`` with the reason
    (removing a client removes its noise share). With ``sampling_rate < 1`` only ``"central"`` gets
    Poisson amplification: a participating client's masked message shows the server that it took part
    (and a message observer how many did), so ``"messages"`` and ``"server"`` compose the participation
    mixture of the unsampled round (:func:`dprec.accounting.rdp.participation_rdp`). ``params`` are those of
    :func:`ddg_rdp` (``l2_sensitivity``, ``noise_stddev``, ``num_clients``, ``dim``, ...);
    ``conversion`` ``"rdp-balle"`` (default), ``"rdp-mironov"`` or ``"auto"`` (= ``"rdp-balle"``)."""
    return _secagg_guarantee("ddg", ddg_rdp, delta=delta, steps=steps, orders=orders, threat_model=threat_model,
                             relation=relation, conversion=conversion, params=params)


def skellam_guarantee(
    *,
    delta: float,
    steps: int = 1,
    orders: Any = None,
    threat_model: str = "central",
    relation: str = "zero",
    conversion: str = "rdp-balle",
    **params: Any,
) -> PrivacyGuarantee:
    """:func:`skellam_epsilon` as a PrivacyGuarantee (see :func:`ddg_guarantee`); ``params`` are those
    of :func:`skellam_rdp`."""
    return _secagg_guarantee("skellam", skellam_rdp, delta=delta, steps=steps, orders=orders,
                             threat_model=threat_model, relation=relation, conversion=conversion, params=params)
