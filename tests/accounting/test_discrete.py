"""DDG and Skellam accounting: bounds vs exact numerical divergences, limits, calibration, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import skellam

from dprec.accounting._subsampling import poisson_subsampled_rdp
from dprec.accounting.discrete import (
    MIN_SUMMED_NOISE,
    ddg_concentrated_epsilon,
    ddg_epsilon,
    ddg_noise_for_epsilon,
    ddg_rdp,
    ddg_tau,
    rounded_l2_sensitivity,
    skellam_epsilon,
    skellam_noise_for_epsilon,
    skellam_rdp,
)
from dprec.accounting.rdp import sampled_gaussian_rdp

ORDERS = np.array([2.0, 3.0, 5.0, 10.0, 20.0, 50.0])


# ---------------------------------------------------------------- independent exact divergences


def _log_convolve(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """log of the convolution of two pmfs given as log arrays (exact in log space, no underflow)."""
    m = la[:, None] + lb[None, :]
    n_out = la.size + lb.size - 1
    out = np.full(n_out, -np.inf)
    for shift in range(-(la.size - 1), lb.size):
        diag = np.diagonal(m, offset=shift)
        out[shift + la.size - 1] = logsumexp(diag)
    return out


def _sum_of_discrete_gaussians_logpmf(sigma: float, n: int, half_width: int) -> np.ndarray:
    z = np.arange(-half_width, half_width + 1, dtype=np.float64)
    one = -z * z / (2.0 * sigma * sigma)
    one -= logsumexp(one)
    out = one
    for _ in range(n - 1):
        out = _log_convolve(out, one)
    return out


def _renyi_shift(log_pmf: np.ndarray, shift: int, alpha: float) -> float:
    """D_a(Z || Z + shift) for an integer shift, from the log-pmf of Z on a symmetric grid."""
    lp, lq = log_pmf[shift:], log_pmf[:-shift]
    terms = alpha * lp + (1.0 - alpha) * lq
    assert max(terms[0], terms[-1]) < terms.max() - 60.0  # the grid is wide enough for this order
    return float(logsumexp(terms)) / (alpha - 1.0)


#: Orders near 1 too: the accountants' default orders start at 1.01, and that is where small noise breaks the bounds.
NEAR_ONE = np.array([1.05, 1.1, 1.25, 1.5])


@pytest.mark.parametrize("sigma", [0.3, 0.45, 0.5, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 10])
@pytest.mark.parametrize("shift", [1, 3])
def test_ddg_bound_dominates_exact_divergence_1d(sigma, n, shift):
    # 1-D, granularity 1: Delta1 = Delta2 = shift. The grid is wide enough for order 50.
    orders = np.concatenate([NEAR_ONE, ORDERS])
    log_pmf = _sum_of_discrete_gaussians_logpmf(sigma, n, 220)
    exact = np.array([_renyi_shift(log_pmf, shift, a) for a in orders])
    bound = ddg_rdp(orders, l2_sensitivity=shift, noise_stddev=sigma, num_clients=n, dim=1)
    if n > 1 and sigma < MIN_SUMMED_NOISE:
        # No bound claimed: the forms fail there (e.g. n = 3, sigma 0.3, order 1.05).
        assert np.all(np.isinf(bound))
        return
    assert np.all(exact <= bound * (1 + 1e-9)), (exact, bound)
    if n == 1:  # a single discrete Gaussian, an integer shift, integer orders: a Delta^2 / (2 sigma^2), exactly
        integer = orders == np.floor(orders)
        np.testing.assert_allclose(exact[integer], orders[integer] * shift**2 / (2 * sigma**2), rtol=1e-9)
        np.testing.assert_allclose(bound[integer], exact[integer], rtol=1e-9)


@pytest.mark.parametrize("sigma, n", [(0.4, 3), (0.7, 2), (1.5, 4)])
def test_ddg_bound_dominates_exact_divergence_2d(sigma, n):
    # Shift (1, 1): Delta2 = sqrt(2), Delta1 = 2; independent coordinates -> divergences add.
    orders = np.concatenate([NEAR_ONE, ORDERS])
    log_pmf = _sum_of_discrete_gaussians_logpmf(sigma, n, 150)
    exact = 2 * np.array([_renyi_shift(log_pmf, 1, a) for a in orders])
    bound = ddg_rdp(orders, l2_sensitivity=math.sqrt(2), l1_sensitivity=2.0, noise_stddev=sigma, num_clients=n, dim=2)
    if sigma < MIN_SUMMED_NOISE:
        assert np.all(np.isinf(bound))
        return
    assert np.all(exact <= bound * (1 + 1e-9)), (exact, bound)


def test_ddg_large_noise_approaches_continuous_gaussian():
    # tau -> 0 for large sigma/gamma: RDP -> a Delta2^2 / (2 n sigma^2)
    orders = np.array([2.0, 8.0, 32.0])
    for n in (1, 10, 100):
        got = ddg_rdp(orders, l2_sensitivity=3.0, noise_stddev=4.0, num_clients=n, dim=1000)
        np.testing.assert_allclose(got, orders * 9.0 / (2 * n * 16.0), rtol=1e-12)
    assert ddg_tau(4.0, 100) < 1e-60
    # small noise per client: tau matters and the bound exceeds the Gaussian value
    small = ddg_rdp(orders, l2_sensitivity=3.0, noise_stddev=0.4, num_clients=50, dim=1000)
    assert np.all(small > orders * 9.0 / (2 * 50 * 0.16))


def test_ddg_tau_and_concentrated_epsilon_formulas():
    sigma, n, gamma = 0.9, 4, 0.5
    want_tau = 10 * sum(math.exp(-2 * math.pi**2 * (sigma / gamma) ** 2 * k / (k + 1)) for k in range(1, n))
    assert ddg_tau(sigma, n, gamma) == pytest.approx(want_tau, rel=1e-14)
    assert ddg_tau(sigma, 1, gamma) == 0.0
    l2, d = 2.0, 16
    want = min(
        math.sqrt(l2**2 / (n * sigma**2) + 0.5 * want_tau * d), l2 / (math.sqrt(n) * sigma) + want_tau * math.sqrt(d)
    )
    assert ddg_concentrated_epsilon(l2, sigma, n, d, gamma) == pytest.approx(want, rel=1e-14)
    # ddg_rdp never exceeds Theorem E.1's a eps^2 / 2
    assert np.all(
        ddg_rdp(ORDERS, l2_sensitivity=l2, noise_stddev=sigma, num_clients=n, dim=d, granularity=gamma)
        <= ORDERS * want**2 / 2 * (1 + 1e-14)
    )


def test_rounded_l2_sensitivity():
    c, d, gamma = 1.0, 1024, 0.01
    det = (c + gamma * math.sqrt(d)) ** 2
    cond = c * c + gamma**2 * d / 4 + math.sqrt(2 * math.log(1e5)) * gamma * (c + gamma * math.sqrt(d) / 2)
    assert rounded_l2_sensitivity(c, d, gamma, beta=1e-5) == pytest.approx(math.sqrt(min(det, cond)))
    assert rounded_l2_sensitivity(c, d, gamma) == pytest.approx(c + gamma * math.sqrt(d))
    # a coarser grid inflates the norm more
    assert rounded_l2_sensitivity(c, d, 0.1, beta=1e-5) > rounded_l2_sensitivity(c, d, 0.01, beta=1e-5) > c


def test_huge_parameters_give_limits_not_overflow_errors():
    # Python's float ** raises OverflowError where a product gives inf; every square is a product.
    assert rounded_l2_sensitivity(1e300, 16, 0.1) == pytest.approx(1e300)
    assert rounded_l2_sensitivity(1e300, 16, 0.1, beta=1e-5) == pytest.approx(1e300)
    assert ddg_tau(1e300, 5) == 0.0
    assert ddg_concentrated_epsilon(1.0, 1e300, 5, 16) == 0.0
    np.testing.assert_array_equal(ddg_rdp(ORDERS, l2_sensitivity=1.0, noise_stddev=1e300, num_clients=5, dim=16), 0.0)
    np.testing.assert_array_equal(skellam_rdp(ORDERS, l2_sensitivity=1.0, noise_stddev=1e300, dim=16), 0.0)
    # Noise so small that sigma^2 underflows: infinite (or astronomically large) RDP, no exception.
    tiny = ddg_rdp(ORDERS, l2_sensitivity=1.0, noise_stddev=1e-200, num_clients=5, dim=16, granularity=1e-200)
    assert np.all(tiny > 1e300)
    assert np.all(np.isinf(skellam_rdp(ORDERS, l2_sensitivity=1.0, noise_stddev=1e-200, dim=16)))
    np.testing.assert_array_equal(skellam_rdp(ORDERS, l2_sensitivity=0.0, noise_stddev=1e-200, dim=16), 0.0)


@pytest.mark.parametrize("variance", [0.5, 1.0, 3.0, 10.0, 100.0])
@pytest.mark.parametrize("shift", [1, 2, 5])
def test_skellam_bound_dominates_exact_divergence(variance, shift):
    z = np.arange(-4000, 4001)
    lp = skellam.logpmf(z, variance / 2, variance / 2)
    lq = skellam.logpmf(z - shift, variance / 2, variance / 2)
    ok = np.isfinite(lp) & np.isfinite(lq)  # scipy's log-pmf underflows to -inf far out
    terms = [a * lp[ok] + (1 - a) * lq[ok] for a in ORDERS]
    for t in terms:  # the dropped tails must be negligible: the summand has died out at both ends
        assert max(t[0], t[-1]) < t.max() - 60.0
    exact = np.array([logsumexp(t) / (a - 1) for a, t in zip(ORDERS, terms)])
    bound = skellam_rdp(ORDERS, l2_sensitivity=shift, noise_stddev=math.sqrt(variance), dim=1)
    assert np.all(exact <= bound), (exact, bound)


def test_skellam_large_variance_approaches_gaussian():
    variance, shift = 1e4, 3
    z = np.arange(-3000, 3001)
    lp = skellam.logpmf(z, variance / 2, variance / 2)
    lq = skellam.logpmf(z - shift, variance / 2, variance / 2)
    ok = np.isfinite(lp) & np.isfinite(lq)  # scipy underflows to -inf ~30 std out; negligible there
    exact = np.array([logsumexp(a * lp[ok] + (1 - a) * lq[ok]) / (a - 1) for a in ORDERS[:4]])
    gauss = ORDERS[:4] * shift**2 / (2 * variance)
    bound = skellam_rdp(ORDERS[:4], l2_sensitivity=shift, noise_stddev=math.sqrt(variance), dim=1)
    np.testing.assert_allclose(exact, gauss, rtol=2e-3)
    np.testing.assert_allclose(bound, gauss, rtol=2e-3)


def test_skellam_scaling_and_summation():
    # Scaling: granularity gamma with (Delta, sigma) equals granularity 1 with (Delta/gamma, sigma/gamma).
    a = skellam_rdp(ORDERS, l2_sensitivity=0.3, l1_sensitivity=0.9, noise_stddev=0.2, dim=10, granularity=0.01)
    b = skellam_rdp(ORDERS, l2_sensitivity=30.0, l1_sensitivity=90.0, noise_stddev=20.0, dim=10)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    # n clients of std sigma equal one client of std sqrt(n) sigma (Skellam is closed under sums)
    c = skellam_rdp(ORDERS, l2_sensitivity=5.0, noise_stddev=3.0, num_clients=7, dim=10)
    e = skellam_rdp(ORDERS, l2_sensitivity=5.0, noise_stddev=3.0 * math.sqrt(7), dim=10)
    np.testing.assert_allclose(c, e, rtol=1e-12)
    # large scale: Gaussian limit a Delta2^2 / (2 sigma^2)
    g = skellam_rdp(ORDERS, l2_sensitivity=1.0, noise_stddev=1.0, dim=10, granularity=1e-6)
    np.testing.assert_allclose(g, ORDERS / 2, rtol=1e-4)


def test_subsampling_bound_dominates_exact_sampled_gaussian():
    orders = np.arange(2.0, 41.0)
    for q in (0.01, 0.1, 0.5):
        for s in (0.7, 1.0, 3.0):
            exact = sampled_gaussian_rdp(q, s, orders)
            bound = poisson_subsampled_rdp(orders, q, lambda a, s=s: a / (2 * s * s))
            assert np.all(exact <= bound * (1 + 1e-9))
            assert bound[0] == pytest.approx(exact[0], rel=1e-9)  # tight at order 2
            assert np.all(bound <= orders / (2 * s * s))  # never worse than no subsampling


def test_sampled_discrete_mechanisms():
    orders = np.array([2.0, 3.0, 10.0, 2.5])
    full = ddg_rdp(orders, l2_sensitivity=1.0, noise_stddev=1.0, num_clients=10, dim=100)
    sub = ddg_rdp(orders, l2_sensitivity=1.0, noise_stddev=1.0, num_clients=10, dim=100, sampling_rate=0.01)
    assert np.all(sub[:3] < full[:3]) and np.isinf(sub[3])
    full = skellam_rdp(orders, l2_sensitivity=1.0, noise_stddev=0.5, num_clients=10, dim=100, granularity=0.01)
    sub = skellam_rdp(
        orders, l2_sensitivity=1.0, noise_stddev=0.5, num_clients=10, dim=100, granularity=0.01, sampling_rate=0.01
    )
    assert np.all(sub[:3] < full[:3]) and np.isinf(sub[3])


@pytest.mark.parametrize("method", ["mironov", "balle"])
def test_calibration_round_trips(method):
    common = dict(
        l2_sensitivity=1.2,
        num_clients=20,
        dim=256,
        delta=1e-5,
        steps=100,
        sampling_rate=0.05,
        granularity=0.05,
        method=method,
    )
    sigma = ddg_noise_for_epsilon(2.0, **common)
    eps, _ = ddg_epsilon(noise_stddev=sigma, **common)
    assert 2.0 - 1e-6 < eps <= 2.0
    assert ddg_epsilon(noise_stddev=sigma * (1 - 1e-4), **common)[0] > 2.0
    sk = dict(
        l2_sensitivity=1.2,
        num_clients=20,
        dim=256,
        delta=1e-5,
        steps=100,
        sampling_rate=0.05,
        granularity=0.05,
        method=method,
    )
    sigma = skellam_noise_for_epsilon(2.0, **sk)
    eps, _ = skellam_epsilon(noise_stddev=sigma, **sk)
    assert 2.0 - 1e-6 < eps <= 2.0
    assert skellam_epsilon(noise_stddev=sigma * (1 - 1e-4), **sk)[0] > 2.0


def test_epsilon_decreases_with_noise_and_grows_with_steps():
    base = dict(l2_sensitivity=1.0, num_clients=5, dim=64, delta=1e-6)
    e1 = ddg_epsilon(noise_stddev=1.0, **base)[0]
    e2 = ddg_epsilon(noise_stddev=2.0, **base)[0]
    e3 = ddg_epsilon(noise_stddev=1.0, steps=10, **base)[0]
    assert e2 < e1 < e3
    s1 = skellam_epsilon(noise_stddev=1.0, **base)[0]
    s2 = skellam_epsilon(noise_stddev=2.0, **base)[0]
    assert s2 < s1


DDG = dict(l2_sensitivity=1.0, noise_stddev=1.0, num_clients=3, dim=4)
SK = dict(l2_sensitivity=1.0, noise_stddev=1.0, dim=4)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: ddg_rdp([2.0], **{**DDG, "noise_stddev": -1.0}), "noise_stddev"),
        (lambda: ddg_rdp([2.0], **{**DDG, "noise_stddev": 0.0}), "noise_stddev"),
        (lambda: ddg_rdp([2.0], **{**DDG, "l2_sensitivity": -1.0}), "l2_sensitivity"),
        (lambda: ddg_rdp([2.0], **{**DDG, "l1_sensitivity": -1.0}), "l1_sensitivity"),
        (lambda: ddg_rdp([2.0], **{**DDG, "num_clients": 0}), "num_clients"),
        (lambda: ddg_rdp([2.0], **{**DDG, "dim": 0}), "dim"),
        (lambda: ddg_rdp([2.0], **{**DDG, "granularity": 0.0}), "granularity"),
        (lambda: ddg_rdp([2.0], **{**DDG, "sampling_rate": 0.0}), "sampling_rate"),
        (lambda: ddg_rdp([2.0], **{**DDG, "sampling_rate": 1.01}), "sampling_rate"),
        (lambda: ddg_rdp([1.0], **DDG), "orders"),
        (lambda: ddg_epsilon(**DDG, delta=0.0), "delta"),
        (lambda: ddg_epsilon(**DDG, delta=1.0), "delta"),
        (lambda: ddg_epsilon(**DDG, delta=1e-5, steps=0), "steps"),
        (lambda: ddg_epsilon(**DDG, delta=1e-5, method="x"), "method"),
        (lambda: ddg_noise_for_epsilon(-1.0, l2_sensitivity=1.0, num_clients=3, dim=4, delta=1e-5), "target_epsilon"),
        (lambda: ddg_noise_for_epsilon(0.0, l2_sensitivity=1.0, num_clients=3, dim=4, delta=1e-5), "target_epsilon"),
        (lambda: ddg_noise_for_epsilon(1.0, l2_sensitivity=1.0, num_clients=3, dim=4, delta=2.0), "delta"),
        (lambda: ddg_tau(1.0, 0), "num_clients"),
        (lambda: rounded_l2_sensitivity(1.0, 16, 0.1, beta=1.0), "beta"),
        (lambda: rounded_l2_sensitivity(-1.0, 16, 0.1), "clip"),
        (lambda: rounded_l2_sensitivity(1.0, 16, -0.1), "granularity"),
        (lambda: skellam_rdp([2.0], **{**SK, "noise_stddev": -2.0}), "noise_stddev"),
        (lambda: skellam_rdp([2.0], **{**SK, "sampling_rate": 0.0}), "sampling_rate"),
        (lambda: skellam_rdp([2.0], **{**SK, "granularity": float("inf")}), "granularity"),
        (lambda: skellam_epsilon(**SK, delta=-1e-5), "delta"),
        (lambda: skellam_noise_for_epsilon(-0.5, l2_sensitivity=1.0, dim=4, delta=1e-5), "target_epsilon"),
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_nan_and_wrong_types_are_rejected():
    with pytest.raises(ValueError, match="noise_stddev"):
        ddg_rdp([2.0], **{**DDG, "noise_stddev": float("nan")})
    with pytest.raises(TypeError, match="num_clients"):
        ddg_rdp([2.0], **{**DDG, "num_clients": 2.5})
    with pytest.raises(TypeError, match="l2_sensitivity"):
        skellam_rdp([2.0], **{**SK, "l2_sensitivity": "1"})
