"""Sampled Gaussian RDP and the RDP -> (eps, delta) conversions (dprec.accounting.rdp).

Cross-checked against dp_accounting's RdpAccountant (a test-only dependency) and, where
dp_accounting's fractional-order series is known to be inaccurate (orders near 1), against an
independent numerical integral.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from dprec.accounting import (
    DEFAULT_ORDERS,
    rdp_to_delta,
    rdp_to_epsilon,
    sampled_gaussian_rdp,
)

# (q, noise_multiplier, steps, delta): ordinary DP-SGD settings and extreme ones (tiny and
# unit sampling rates, tiny and huge noise, tiny deltas, huge step counts).
PARAMETER_SETS = [
    (0.01, 1.1, 1000, 1e-5),
    (0.01, 1.1, 10_000, 1e-5),
    (0.004, 1.0, 60_000, 1e-5),
    (0.1, 0.69, 1, 1e-5),
    (0.1, 0.69, 10, 1e-5),
    (0.256, 1.0, 100, 1e-6),
    (1.0, 1.0, 1, 1e-5),
    (1.0, 5.0, 100, 1e-5),
    (1.0, 0.3, 1, 1e-3),
    (0.999, 2.0, 10, 1e-5),
    (1e-6, 0.5, 1000, 1e-5),
    (3e-6, 0.8, 90_000, 8e-7),
    (1e-5, 0.6, 1_000_000, 1e-10),
    (1e-3, 10.0, 1000, 1e-5),
    (0.05, 50.0, 100, 1e-5),
    (0.2, 0.1, 1, 1e-5),
    (0.5, 0.5, 1, 1e-2),
    (0.01, 0.6, 5000, 1e-12),
    (0.02, 2.0, 100_000, 1e-9),
    (0.3, 1.5, 1000, 1e-5),
    (0.001, 0.9, 1_000_000, 1e-6),
    (0.05, 3.0, 1, 0.5),
    (0.01, 1.0, 1, 1e-300),
]


def _dp_accounting():
    return pytest.importorskip("dp_accounting", reason="dp_accounting (test extra) is not installed")


def _reference_rdp(q: float, sigma: float, alpha: float) -> float:
    """Independent check: D_a(mix || p) by adaptive quadrature of E_p[(mix/p)^a] - 1."""

    def integrand(z: float) -> float:
        t = (2.0 * z - 1.0) / (2.0 * sigma * sigma)  # log of the density ratio N(1,s^2)/N(0,s^2)
        log_ratio = np.logaddexp(math.log1p(-q), math.log(q) + t) if t > 30.0 else math.log1p(q * math.expm1(t))
        log_phi = -z * z / (2.0 * sigma * sigma) - math.log(sigma * math.sqrt(2.0 * math.pi))
        power = alpha * log_ratio
        if abs(power) < 1.0:  # (mix/p)^a - 1 without cancellation
            return math.exp(log_phi) * math.expm1(power)
        return math.exp(log_phi + power) - math.exp(log_phi)

    z0 = sigma * sigma * math.log(1.0 / q - 1.0) + 0.5
    points = sorted({-10.0 * sigma, 0.0, z0, alpha, 1.0})
    total = 0.0
    for a, b in zip([-np.inf] + points, points + [np.inf]):
        value, _ = integrate.quad(integrand, a, b, epsabs=0.0, epsrel=1e-13, limit=400)
        total += value
    return math.log1p(total) / (alpha - 1.0)


@pytest.mark.parametrize("q, sigma, steps, delta", PARAMETER_SETS)
def test_epsilon_and_delta_match_dp_accounting(q, sigma, steps, delta):
    dpa = _dp_accounting()
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

    # End to end on integer orders. At fractional orders dp_accounting 0.6's series stops once a
    # term is below e^-30 in absolute terms, which leaves errors of up to ~5% near order 1 (5e-4
    # at order 2.5), or drops the order altogether; ours match an independent quadrature there
    # instead (test_fractional_orders_match_quadrature).
    integer_orders = [float(a) for a in DEFAULT_ORDERS if a == int(a)]
    theirs = dpa.rdp.RdpAccountant(orders=integer_orders)
    theirs.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
    ours_rdp = steps * sampled_gaussian_rdp(q, sigma, integer_orders)
    their_rdp = np.asarray(theirs._rdp)  # the composed curve (no public accessor in 0.6)
    np.testing.assert_allclose(ours_rdp, their_rdp, rtol=1e-6, atol=1e-300)

    our_eps, our_order = rdp_to_epsilon(integer_orders, ours_rdp, delta, method="balle")
    their_eps, their_order = theirs.get_epsilon_and_optimal_order(delta)
    assert our_eps == pytest.approx(their_eps, rel=1e-6, abs=1e-12)
    if their_eps > 0:
        assert our_order == their_order
    for eps in (our_eps, 2.0 * our_eps + 0.1):
        our_delta, _ = rdp_to_delta(integer_orders, ours_rdp, eps, method="balle")
        assert our_delta == pytest.approx(theirs.get_delta(eps), rel=1e-6, abs=1e-300)

    # The conversion alone, on our full curve (fractional orders included).
    full = steps * sampled_gaussian_rdp(q, sigma, DEFAULT_ORDERS)
    their_eps, their_order = rdp_lib.compute_epsilon(list(DEFAULT_ORDERS), full, delta)
    our_eps, our_order = rdp_to_epsilon(DEFAULT_ORDERS, full, delta, method="balle")
    assert our_eps == pytest.approx(their_eps, rel=1e-6, abs=1e-12)
    their_delta, _ = rdp_lib.compute_delta(list(DEFAULT_ORDERS), full, our_eps + 0.05)
    assert rdp_to_delta(DEFAULT_ORDERS, full, our_eps + 0.05, method="balle")[0] == pytest.approx(their_delta, rel=1e-6, abs=1e-300)


@pytest.mark.parametrize(
    "q, sigma, alpha",
    [(0.01, 1.1, 1.1), (0.05, 50.0, 1.1), (1e-3, 10.0, 1.5), (0.1, 0.69, 1.1), (0.5, 0.5, 1.3), (0.01, 1.1, 2.5), (0.9, 0.7, 7.25), (1e-5, 0.6, 12.5)],
)
def test_fractional_orders_match_quadrature(q, sigma, alpha):
    ours = sampled_gaussian_rdp(q, sigma, [alpha])[0]
    assert ours == pytest.approx(_reference_rdp(q, sigma, alpha), rel=1e-7)


@pytest.mark.parametrize("q, sigma, alpha", [(0.01, 1.1, 2), (1e-6, 0.5, 5), (0.3, 2.0, 40), (0.9, 0.7, 3)])
def test_integer_orders_match_quadrature(q, sigma, alpha):
    ours = sampled_gaussian_rdp(q, sigma, [alpha])[0]
    assert ours == pytest.approx(_reference_rdp(q, sigma, alpha), rel=1e-7)


def test_integer_orders_keep_precision_for_tiny_values():
    # A - 1 ~ C(2,2) q^2 expm1(1/s^2) ~ 1e-24: a plain log(sum) would round it to 0.
    value = sampled_gaussian_rdp(1e-12, 1.0, [2])[0]
    assert value == pytest.approx(1e-24 * math.expm1(1.0), rel=1e-12)


def test_special_cases():
    orders = np.array([1.5, 2.0, 32.0])
    np.testing.assert_allclose(sampled_gaussian_rdp(1.0, 2.0, orders), orders / 8.0)
    assert np.all(np.isinf(sampled_gaussian_rdp(0.1, 0.0, orders)))
    np.testing.assert_array_equal(sampled_gaussian_rdp(0.1, math.inf, orders), 0.0)
    # Monotone in q and in 1/sigma, and increasing in the order.
    r = sampled_gaussian_rdp(0.01, 1.0, DEFAULT_ORDERS)
    assert np.all(np.diff(r) > 0)
    assert np.all(sampled_gaussian_rdp(0.02, 1.0, DEFAULT_ORDERS) > r)
    assert np.all(sampled_gaussian_rdp(0.01, 0.9, DEFAULT_ORDERS) > r)


def test_vanishing_noise_is_infinite_rdp_without_errors():
    orders = np.array([1.5, 2.0, 2.5, 200.5, 1000.0])
    # Below s ~ 7e-151 the RDP (~ a / (2 s^2)) exceeds 1e300 at every order: reported as inf.
    # The fractional-order series used to overflow there and raise RuntimeError.
    for s in (6e-151, 1e-152, 1e-155, 1e-200, 5e-324):
        assert np.all(np.isinf(sampled_gaussian_rdp(0.1, s, orders))), s
        assert np.all(np.isinf(sampled_gaussian_rdp(1e-300, s, orders))), s
    # Just above the threshold the values are finite and ~ a / (2 s^2).
    value = sampled_gaussian_rdp(0.1, 1e-150, [2.0])[0]
    assert value == pytest.approx(1.0 / 1e-300, rel=1e-12)


def test_conversions_formulas_and_ordering():
    orders = np.array([2.0, 4.0, 8.0, 16.0])
    rdp = np.array([0.1, 0.3, 0.9, 3.0])
    delta = 1e-5
    eps_m, order_m = rdp_to_epsilon(orders, rdp, delta)
    expected = rdp + math.log(1 / delta) / (orders - 1)
    assert eps_m == pytest.approx(expected.min())
    assert order_m == orders[np.argmin(expected)]
    eps_b, _ = rdp_to_epsilon(orders, rdp, delta, method="balle")
    assert eps_b < eps_m  # the Balle et al. conversion is never looser
    # delta(eps) inverts eps(delta) for Mironov at the optimal order.
    d, _ = rdp_to_delta(orders, rdp, eps_m)
    assert d == pytest.approx(delta, rel=1e-12)
    # Infinite RDP everywhere gives infinite epsilon and delta 1.
    assert rdp_to_epsilon([2.0], [math.inf], 1e-5)[0] == math.inf
    assert rdp_to_delta([2.0], [math.inf], 1.0)[0] == 1.0


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: sampled_gaussian_rdp(0.0, 1.0, [2]), "q"),
        (lambda: sampled_gaussian_rdp(1.5, 1.0, [2]), "q"),
        (lambda: sampled_gaussian_rdp(math.nan, 1.0, [2]), "q"),
        (lambda: sampled_gaussian_rdp(0.1, -1.0, [2]), "noise_multiplier"),
        (lambda: sampled_gaussian_rdp(0.1, 1.0, [1.0]), "orders"),
        (lambda: sampled_gaussian_rdp(0.1, 1.0, []), "orders"),
        (lambda: sampled_gaussian_rdp(0.1, 1.0, [2, math.inf]), "orders"),
        (lambda: rdp_to_epsilon([2.0], [0.1], 0.0), "delta"),
        (lambda: rdp_to_epsilon([2.0], [0.1], 1.0), "delta"),
        (lambda: rdp_to_epsilon([2.0], [-0.1], 1e-5), "rdp"),
        (lambda: rdp_to_epsilon([2.0, 3.0], [0.1], 1e-5), "rdp"),
        (lambda: rdp_to_epsilon([2.0], [0.1], 1e-5, method="tight"), "method"),
        (lambda: rdp_to_delta([2.0], [0.1], -1.0), "epsilon"),
        (lambda: rdp_to_delta([2.0], [math.nan], 1.0), "rdp"),
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_wrong_types_are_rejected():
    with pytest.raises(TypeError, match="q"):
        sampled_gaussian_rdp(True, 1.0, [2])
    with pytest.raises(TypeError, match="noise_multiplier"):
        sampled_gaussian_rdp(0.1, "1", [2])
