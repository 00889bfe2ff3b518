"""The DP-REC accountant (final paper, Algorithm 7, Appendix B.2.2, eq. (62), Appendix C.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from dprec.accounting import (
    dprec_calibrate,
    dprec_delta,
    dprec_epsilon,
    dprec_forward_rdp,
    dprec_local_epsilon,
    dprec_overhead,
    dprec_reverse_rdp,
    sampled_gaussian_rdp,
)

# Appendix C.2: (task, N, T, B, c, stated eps); delta = N^-1.1 (Figure 3).
PAPER_SETTINGS = [
    ("MNIST", 100, 1000, 10, 0.545, 3.0),
    ("MNIST", 100, 1000, 10, 0.87, 6.0),
    ("FEMNIST", 3500, 4000, 100, 0.77, 1.0),
    ("FEMNIST", 3500, 4000, 100, 1.41, 3.0),
    ("FEMNIST", 3500, 4000, 100, 1.745, 6.0),
    ("Shakespeare", 660, 200, 66, 1.435, 3.0),
]
SO = dict(rounds=1500, clients_per_round=60, num_clients=342_477, clip_multiplier=1.227, method="paper")


def _paper(n, t, b, c, **kw):
    # The paper's table is Algorithm 7 as printed: method="paper".
    return dprec_epsilon(rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=n**-1.1, method="paper", **kw)


@pytest.mark.parametrize("task, n, t, b, c, stated", PAPER_SETTINGS)
def test_reproduces_paper_settings(task, n, t, b, c, stated):
    # The variant that matches: reverse bounded by forward (k + m = 2k), overhead omitted.
    result = _paper(n, t, b, c, bits=None, reverse="bound")
    assert result.epsilon == pytest.approx(stated, rel=0.015), task
    # The exact reverse term is tighter, never looser.
    exact = _paper(n, t, b, c, bits=None, reverse="exact")
    assert exact.epsilon <= result.epsilon
    assert result.reverse == result.forward


def test_stackoverflow_is_below_the_stated_epsilon_and_literal_algorithm_fails():
    delta = SO["num_clients"] ** -1.1
    result = dprec_epsilon(**SO, delta=delta, bits=None)
    assert result.epsilon <= 1.0
    assert result.epsilon == pytest.approx(0.9346, abs=1e-3)
    # 6 groups x 7 bits = 42 bits: 12 rho / 2^42 = 1.107e-6 > delta = 8.16e-7.
    overhead = dprec_overhead(1500 * 60, 1.227, 42)
    assert overhead == pytest.approx(12 * 90_000 * math.exp(1.227**2) / 2**42)
    assert overhead > delta
    with pytest.raises(ValueError, match="overhead"):
        dprec_epsilon(**SO, delta=delta, bits=42)
    # With 7 more bits the overhead is 1% of delta and the result barely moves.
    assert dprec_epsilon(**SO, delta=delta, bits=49).epsilon == pytest.approx(result.epsilon, abs=2e-3)


def test_stackoverflow_gap_is_the_integer_order_staircase():
    # At q = 1/N = 2.9e-6 the RDP is negligible up to order ~16 and explodes from ~18 on, so
    # eps ~ log(1/delta) / lambda_max: a staircase in c. c = 1.227 sits on the lambda = 15 step.
    delta = SO["num_clients"] ** -1.1
    result = dprec_epsilon(**SO, delta=delta, bits=None)
    assert result.lam == 15
    assert 0.0 < result.epsilon - math.log(1 / delta) / 15 < 1e-4
    # The neighbouring steps: lambda = 14 is 1.0013, lambda = 16 is 0.876 + a composition term
    # that is already 0.077 at c = 1.227.
    assert math.log(1 / delta) / 14 == pytest.approx(1.0013, abs=1e-4)
    # The c that reaches eps = 1 here is 1.264 (still on lambda = 15): 3% above the paper's c.
    kw = {k: v for k, v in SO.items() if k != "clip_multiplier"}
    c_one = dprec_calibrate(target_epsilon=1.0, delta=delta, bits=None, **kw)
    assert c_one == pytest.approx(1.2642, abs=1e-3)
    assert dprec_epsilon(**dict(SO, clip_multiplier=c_one), delta=delta, bits=None).lam == 15


def test_forward_is_eq62_binomial_expectation():
    c, q = 0.9, 0.01
    for a in (2, 3, 7, 20):
        k = np.arange(a + 1)
        pmf = np.array([math.comb(a, int(j)) for j in k]) * q**k * (1 - q) ** (a - k)
        expected = math.log(np.sum(pmf * np.exp((k * k - k) * c * c / 2))) / (a - 1)
        assert dprec_forward_rdp(c, q, [a])[0] == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(dprec_forward_rdp(c, q), sampled_gaussian_rdp(q, 1 / c, np.arange(2, 258)))


@pytest.mark.parametrize("q, c, a", [(0.01, 0.545, 5), (1 / 342_477, 1.227, 16), (0.3, 3.0, 100), (0.5, 0.5, 257), (1e-3, 8.0, 3), (1 / 3500, 1.41, 7)])
def test_exact_reverse_matches_adaptive_quadrature(q, c, a):
    def integrand(u: float) -> float:
        log_ratio = math.log1p(q * math.expm1(c * u - c * c / 2)) if c * u < 700 else math.log(q) + c * u - c * c / 2
        power = -(a - 1) * log_ratio
        phi = math.exp(-u * u / 2) / math.sqrt(2 * math.pi)
        return phi * math.expm1(power) if abs(power) < 1 else phi * (math.exp(power) - 1.0)

    split = c / 2 + math.log((1 - q) / q) / c
    pieces = [-np.inf, -6.0, 0.0, 6.0] + ([split] if split > 6.0 else []) + [np.inf]
    total = sum(integrate.quad(integrand, lo, hi, epsabs=0.0, epsrel=1e-13, limit=400)[0] for lo, hi in zip(pieces, pieces[1:]))
    expected = math.log1p(total) / (a - 1)
    assert dprec_reverse_rdp(c, q, [a])[0] == pytest.approx(expected, rel=1e-9)


def test_exact_reverse_large_c_limit_cap_and_chunking(monkeypatch):
    import warnings

    from dprec.accounting import dprec_rec

    orders = np.arange(2, 258)
    # For large c the components separate: D_a(p || mix) -> log(1/(1-q)) from below, no warnings.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rev = dprec_reverse_rdp(60.0, 0.01, orders)
    np.testing.assert_allclose(rev, -math.log1p(-0.01), rtol=1e-12)
    assert np.all(rev <= -math.log1p(-0.01) * (1 + 1e-12))
    # The grid grows like c: above EXACT_REVERSE_MAX_CLIP the exact method refuses, naming c.
    assert dprec_rec.EXACT_REVERSE_MAX_CLIP == 100.0
    dprec_reverse_rdp(100.0, 0.01, [2, 3])
    with pytest.raises(ValueError, match="clip_multiplier"):
        dprec_reverse_rdp(100.5, 0.01, [2, 3])
    with pytest.raises(ValueError, match="clip_multiplier"):
        dprec_epsilon(**dict(BASE, clip_multiplier=1e300), reverse="exact", method="paper")
    assert np.all(np.isinf(dprec_reverse_rdp(1e100, 0.01, [2, 3], reverse="bound")) | (dprec_reverse_rdp(1e100, 0.01, [2, 3], reverse="bound") > 1e199))
    with pytest.raises(ValueError, match="clip_multiplier must be at most"):  # c^2 would overflow: refused
        dprec_reverse_rdp(1e300, 0.01, [2, 3], reverse="bound")
    # q = 1 needs no grid: a c^2 / 2 at any c.
    assert dprec_reverse_rdp(1e3, 1.0, [2])[0] == pytest.approx(1e6)
    # Orders are processed in chunks that bound memory; the chunking does not change the values
    # (beyond the last bits of the BLAS dot products).
    whole = dprec_reverse_rdp(2.0, 1e-3, orders)
    monkeypatch.setattr(dprec_rec, "_CHUNK_ELEMENTS", 3 * 1000)
    np.testing.assert_allclose(dprec_reverse_rdp(2.0, 1e-3, orders), whole, rtol=1e-13)


def test_reverse_is_below_forward_and_grows_with_c():
    orders = np.arange(2, 258)
    for q in (1e-5, 0.01, 0.3):
        previous = np.zeros(orders.size)
        for c in (0.3, 0.8, 1.5, 3.0):
            rev = dprec_reverse_rdp(c, q, orders)
            assert np.all(rev <= dprec_forward_rdp(c, q, orders) * (1 + 1e-12))
            assert np.all(rev > previous)  # worst case at ||phi|| = C
            previous = rev
    np.testing.assert_array_equal(dprec_reverse_rdp(0.9, 0.01, reverse="bound"), dprec_forward_rdp(0.9, 0.01))


def test_overhead_enters_as_log_of_delta_minus_overhead():
    kw = dict(rounds=100, clients_per_round=10, num_clients=1000, clip_multiplier=1.0, delta=1e-5, method="paper")
    free = dprec_epsilon(**kw, bits=None)
    paid = dprec_epsilon(**kw, bits=34)
    assert paid.overhead == pytest.approx(12 * 1000 * math.e / 2**34)
    lam = paid.lam
    expected = paid.forward + paid.reverse - math.log(1e-5 - paid.overhead) / lam
    assert paid.epsilon == pytest.approx(expected, rel=1e-12)
    assert paid.epsilon > free.epsilon


def test_delta_inverts_epsilon():
    kw = dict(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.545)
    for bits, method in ((None, "paper"), (40, "paper"), (None, "sound"), (40, "sound")):
        kw["method"] = method
        result = dprec_epsilon(**kw, delta=1e-3, bits=bits)
        delta, order = dprec_delta(**kw, epsilon=result.epsilon, bits=bits)
        assert delta == pytest.approx(1e-3, rel=1e-9)
        assert order == result.order


def test_local_guarantee():
    c, delta = 0.545, 1e-5
    result = dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=None, rounds=3, method="paper")
    lam = np.arange(1, 257)
    expected = np.min(3 * (lam + 1) * c * c - math.log(delta) / lam)
    assert result.epsilon == pytest.approx(expected, rel=1e-12)
    # Amplification only helps.
    central = dprec_epsilon(rounds=3, clients_per_round=1, num_clients=100, clip_multiplier=c, delta=delta, bits=None,
                            method="paper")
    assert central.epsilon < result.epsilon


@pytest.mark.parametrize("task, n, t, b, c, stated", PAPER_SETTINGS)
def test_calibration_finds_c_for_target(task, n, t, b, c, stated):
    found = dprec_calibrate(target_epsilon=stated, rounds=t, clients_per_round=b, num_clients=n, delta=n**-1.1, bits=None,
                            method="paper")
    assert _paper(n, t, b, found, bits=None).epsilon == pytest.approx(stated, rel=1e-8)
    assert found == pytest.approx(c, rel=0.02)  # the paper's c, to its 3 digits and 1.5% in eps


def test_calibration_limits():
    kw = dict(rounds=10, clients_per_round=10, num_clients=100, delta=1e-5, bits=None, method="paper")
    with pytest.raises(ValueError, match="target_epsilon"):
        dprec_calibrate(target_epsilon=0.01, **kw)  # below log(1/delta)/256
    # With 32 bits the overhead 12 * 100 exp(c^2) / 2^32 reaches delta at c ~ 1.9.
    with_bits = dict(kw, bits=32)
    c = dprec_calibrate(target_epsilon=2.0, **with_bits)
    assert dprec_epsilon(clip_multiplier=c, **with_bits).epsilon == pytest.approx(2.0, rel=1e-8)
    with pytest.raises(ValueError, match="overhead"):
        dprec_calibrate(target_epsilon=50.0, **with_bits)


BASE = dict(rounds=10, clients_per_round=5, num_clients=100, clip_multiplier=1.0, delta=1e-5, bits=None)


@pytest.mark.parametrize(
    "change, name",
    [
        (dict(delta=0.0), "delta"),
        (dict(delta=1.0), "delta"),
        (dict(delta=-1e-5), "delta"),
        (dict(clip_multiplier=-1.0), "clip_multiplier"),
        (dict(clip_multiplier=0.0), "clip_multiplier"),
        (dict(clip_multiplier=math.nan), "clip_multiplier"),
        (dict(rounds=0), "rounds"),
        (dict(clients_per_round=0), "clients_per_round"),
        (dict(num_clients=0), "num_clients"),
        (dict(bits=0), "bits"),
        (dict(reverse="tight"), "reverse"),
        (dict(orders=[2.5, 3]), "orders"),
        (dict(orders=[1]), "orders"),
    ],
)
def test_bad_input_names_the_parameter(change, name):
    with pytest.raises(ValueError, match=name):
        dprec_epsilon(**dict(BASE, **change))


def test_bad_input_other_functions():
    with pytest.raises(ValueError, match="sampling_rate"):
        dprec_forward_rdp(1.0, 1.5)
    with pytest.raises(ValueError, match="sampling_rate"):
        dprec_reverse_rdp(1.0, 0.0)
    with pytest.raises(ValueError, match="steps"):
        dprec_overhead(0, 1.0, 7)
    with pytest.raises(ValueError, match="epsilon"):
        dprec_delta(rounds=1, clients_per_round=1, num_clients=10, clip_multiplier=1.0, epsilon=-1.0, bits=None)
    with pytest.raises(ValueError, match="target_epsilon"):
        dprec_calibrate(target_epsilon=0.0, rounds=1, clients_per_round=1, num_clients=10, delta=1e-5, bits=None)
    with pytest.raises(TypeError, match="rounds"):
        dprec_epsilon(**dict(BASE, rounds=2.5))
