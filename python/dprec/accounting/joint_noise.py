"""Joint noise scaling across clients (Heikkila et al.; see *Privacy accounting* in the docs).

Each of N clients runs S local DP-SGD steps per round, adding Gaussian noise of standard deviation
``sigma_i * C`` to each clipped (norm C), Poisson-subsampled (rate q) gradient sum. Through secure
aggregation only the sum of the clients' model updates is released; the paper's sum-dominated
mechanisms argument (Definition 4.2, Theorem 4.7) lets the accountant treat the released sum as
one Gaussian mechanism with ``sigma_total = sqrt(sum_i sigma_i^2)`` per local step. With
honest-but-curious clients (paper, Section 3: "any client could potentially remove its own
noise from the aggregated results, the noise from the other N-1 clients needs to guarantee the
target DP level") the curious client's own share is discounted: dprec removes the *largest*
share, the worst case over which client is curious (for equal shares: ``sqrt(N-1) sigma``).

Accounting: every local step is one step of the Poisson-sampled Gaussian mechanism
at rate q with noise multiplier ``sigma_total`` (Mironov, Talwar and Zhang 2019, via
:func:`dprec.accounting.rdp.sampled_gaussian_rdp`), composed over ``S * T`` steps, converted to
(eps, delta) with Mironov's ``eps = min_a [RDP(a) + log(1/delta)/(a-1)]`` (Renyi DP, 2017,
Proposition 3) by default.

With the default orders (the integers 2..256) it reproduces the paper's Table 1 (see *Privacy
accounting* in the docs).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

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
from .baselines import gaussian_guarantee
from .guarantee import PrivacyGuarantee, check_relation, check_threat_model
from .rdp import rdp_to_epsilon, sampled_gaussian_rdp

__all__ = [
    "JOINT_NOISE_DEFAULT_ORDERS",
    "LOCAL_STEPS_CAVEAT",
    "client_sigma_for_total",
    "joint_noise_calibrate",
    "joint_noise_epsilon",
    "joint_noise_guarantee",
    "joint_noise_rdp",
    "sigma_total",
    "sigma_total_equal",
]

#: The integers 2..256 (these reproduce the paper's Table 1; see *Privacy accounting* in the docs).
JOINT_NOISE_DEFAULT_ORDERS: np.ndarray = np.arange(2.0, 257.0)


def sigma_total(client_sigmas: Sequence[float], *, honest_but_curious: bool = False) -> float:
    """``sqrt(sum_i sigma_i^2)`` over the clients' noise multipliers (Heikkila et al.).

    Parameters
    ----------
    client_sigmas : sequence of float
        Each client's noise multiplier ``sigma_i >= 0`` (noise std over clipping norm C).
    honest_but_curious : bool
        Discount one client's own noise (it could subtract it from the aggregate): the largest
        share is dropped, the worst case over which client is curious. Needs N >= 2.

    Returns
    -------
    float
        The noise multiplier of the aggregate, for accounting against one client's sensitivity C.
    """
    try:
        sig = np.atleast_1d(np.asarray(client_sigmas, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise TypeError("client_sigmas must be a sequence of numbers") from exc
    if sig.ndim != 1 or sig.size == 0:
        raise ValueError("client_sigmas must be a non-empty one-dimensional sequence")
    if not np.all(np.isfinite(sig)):
        raise ValueError("client_sigmas must be finite")
    if np.any(sig < 0.0):
        raise ValueError(f"client_sigmas must be >= 0, got minimum {sig.min()!r}")
    if not isinstance(honest_but_curious, (bool, np.bool_)):
        raise TypeError("honest_but_curious must be a bool")
    squares = np.sort(sig * sig)
    if honest_but_curious:
        if sig.size < 2:
            raise ValueError("client_sigmas needs at least 2 clients when honest_but_curious=True")
        squares = squares[:-1]
    return float(math.sqrt(float(np.sum(squares))))


def sigma_total_equal(client_sigma: float, num_clients: int, *, honest_but_curious: bool = False) -> float:
    """Equal shares: ``sqrt(N) sigma`` (``sqrt(N-1) sigma`` with honest-but-curious clients).

    Heikkila et al., Lemma 4.3 / Theorem 4.7 (the summed Gaussian noises are one Gaussian with the
    summed variance) and Section 3 for the N-1 count.
    """
    sigma = check_nonnegative(client_sigma, "client_sigma")
    n = check_count(num_clients, "num_clients", minimum=2 if honest_but_curious else 1)
    counted = n - 1 if honest_but_curious else n
    return math.sqrt(counted) * sigma


def client_sigma_for_total(total_sigma: float, num_clients: int, *, honest_but_curious: bool = False) -> float:
    """Equal share each client must add so that the aggregate has ``total_sigma``.

    ``total / sqrt(N)``, or ``total / sqrt(N-1)`` with honest-but-curious clients (inverse of
    :func:`sigma_total_equal`; Heikkila et al., Lemma 4.3 / Theorem 4.7).
    """
    total = check_nonnegative(total_sigma, "total_sigma")
    n = check_count(num_clients, "num_clients", minimum=2 if honest_but_curious else 1)
    counted = n - 1 if honest_but_curious else n
    return total / math.sqrt(counted)


def joint_noise_rdp(
    orders: Any, noise_multiplier: float, sampling_rate: float, local_steps: int = 1, rounds: int = 1
) -> np.ndarray:
    """RDP of S local steps per round over T rounds: ``S * T`` sampled-Gaussian steps.

    Parameters
    ----------
    orders : float or sequence of float
        Renyi orders, each > 1.
    noise_multiplier : float
        ``sigma_total`` of the aggregate (see :func:`sigma_total`), >= 0.
    sampling_rate : float
        Poisson rate q of each local step, in (0, 1].
    local_steps, rounds : int
        S >= 1 and T >= 1.

    Returns
    -------
    numpy.ndarray
        The composed RDP ``S * T * RDP_sampled_gaussian(q, sigma_total)`` at each order.
    """
    alphas = check_orders(orders)
    q = check_probability(sampling_rate, "sampling_rate")
    s = check_count(local_steps, "local_steps")
    t = check_count(rounds, "rounds")
    return (s * t) * sampled_gaussian_rdp(q, noise_multiplier, alphas)


def joint_noise_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    delta: float,
    *,
    local_steps: int = 1,
    rounds: int = 1,
    orders: Any = None,
    method: str = "mironov",
    threat_model: str = "central",
    relation: str = "zero",
) -> tuple[float, float]:
    """(eps, best order) for S local steps per round over T rounds with ``sigma_total``.

    Mironov's conversion by default; ``method="balle"`` for the tighter one. ``orders`` defaults to
    the integers 2..256 (:data:`JOINT_NOISE_DEFAULT_ORDERS`). ``threat_model`` (``"central"``,
    ``"messages"`` or ``"server"``): the same number for all three (every observer sees only the
    noisy sum through secure aggregation). ``relation``: ``"zero"`` (default; a client's update
    replaced by zero, every client still adding its noise share); ``"add_remove"`` gives
    ``(inf, nan)``: removing a client also removes its share of the noise.
    :func:`joint_noise_guarantee` returns the full result, by PLD where available.
    """
    check_threat_model(threat_model)
    if check_relation(relation) == "add_remove":
        return math.inf, math.nan
    alphas = JOINT_NOISE_DEFAULT_ORDERS.copy() if orders is None else check_orders(orders)
    delta = check_delta(delta)
    rdp = joint_noise_rdp(alphas, noise_multiplier, sampling_rate, local_steps, rounds)
    return rdp_to_epsilon(alphas, rdp, delta, method=method)


def joint_noise_guarantee(
    noise_multiplier: float,
    sampling_rate: float,
    delta: float,
    *,
    local_steps: int = 1,
    rounds: int = 1,
    threat_model: str = "central",
    relation: str = "zero",
    conversion: str = "auto",
    orders: Any = None,
) -> PrivacyGuarantee:
    """Joint noise through secure aggregation as a :class:`~dprec.accounting.guarantee.PrivacyGuarantee`.

    ``S * T`` Poisson-sampled Gaussian steps with ``sigma_total`` (:func:`sigma_total`), the noise
    added by the clients: finite for all three threat models (the observer sees only the noisy
    sum) under ``relation="zero"`` (the default); ``"add_remove"`` is ``inf`` with the reason (removing
    a client removes its noise share). ``conversion``: ``"auto"`` (PLD through ``dp_accounting`` when it
    imports, else ``"rdp-balle"``), ``"pld"``, ``"rdp-balle"`` or ``"rdp-mironov"``; see
    :func:`dprec.accounting.gaussian_guarantee`.
    """
    s = check_count(local_steps, "local_steps")
    t = check_count(rounds, "rounds")
    result = gaussian_guarantee(
        noise_multiplier, delta, sample_rate=sampling_rate, steps=s * t, threat_model=threat_model,
        relation=relation, secure_aggregation=True, noise="clients", conversion=conversion, orders=orders,
        mechanism="joint-noise",
    )
    if s > 1:
        import dataclasses  # noqa: PLC0415

        result = dataclasses.replace(result, caveat=LOCAL_STEPS_CAVEAT)
    return result


#: Why more than one local step per round rests on the paper's argument, not on a proof dprec checks.
LOCAL_STEPS_CAVEAT = (
    "local_steps > 1 follows Heikkila et al.'s sum-dominated argument (Theorem 4.7), which treats each client's "
    "local iterate as given; but that iterate is private, masked only by the client's own noise share, and one "
    "example moves every later gradient of its client. With local_steps = 1 (every step at the released model) "
    "the bound is the sampled Gaussian's, proved"
)


def joint_noise_calibrate(
    target_epsilon: float,
    sampling_rate: float,
    delta: float,
    *,
    local_steps: int = 1,
    rounds: int = 1,
    orders: Any = None,
    method: str = "mironov",
) -> float:
    """Smallest noise multiplier (of the aggregate) with :func:`joint_noise_epsilon` <= target.

    For the paper's per-client calibration ("sigma_LDP", Table 1) call it with the client's own
    steps; the averaged model of N such clients then has ``sigma_total_equal(sigma_LDP, N)``.
    """
    target = check_epsilon(target_epsilon, "target_epsilon")
    if target == 0.0:
        raise ValueError("target_epsilon must be > 0 (epsilon 0 needs infinite noise)")
    check_probability(sampling_rate, "sampling_rate")

    def eps(sigma: float) -> float:
        return joint_noise_epsilon(
            sigma, sampling_rate, delta, local_steps=local_steps, rounds=rounds, orders=orders, method=method
        )[0]

    lo, hi = 1e-2, 1.0
    while eps(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e9:
            raise ValueError(f"no noise multiplier up to 1e9 reaches target_epsilon={target!r}")
    while eps(lo) <= target:
        hi, lo = lo, lo / 2.0
        if lo < 1e-9:
            return hi
    # xtol relative to the bracket: an absolute 1e-12 is only 1e-6 of sigma ~ 1e-6 (huge targets),
    # which left hundreds of the 1e-10 steps below to do.
    sigma = brentq(lambda s: eps(s) - target, lo, hi, xtol=1e-12 * lo, rtol=1e-12)
    while eps(sigma) > target:
        sigma *= 1.0 + 1e-10
    return check_positive(sigma, "noise_multiplier")
