"""DP-REC's messages as sent (contract, REVISION 2): the seed-visible per-message bound against the
exact divergences of REC, its composition over groups, and REC's total-variation cost for a central
observer.

The "truths" come from tests/privacy_numerics.py (REC at d = 1, sigma = 1, K candidates, the public
seed known to the observer: all K candidates and the chosen index seen), which never calls dprec's
accounting.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from dprec.accounting import (  # noqa: E402 - after the SciPy check
    dprec_delta,
    dprec_epsilon,
    dprec_local_epsilon,
    dprec_step_rdp,
)
from dprec.accounting.dprec_rec import rec_message_log_moments, rec_total_variation  # noqa: E402

from . import privacy_numerics as pn  # noqa: E402

KS = (2, 4, 16, 128)
CS = (0.3, 0.545, 1.0, 2.0)
ORDERS = list(range(2, 17))
A = np.array(ORDERS, dtype=float)
MNIST = dict(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=100**-1.1)


def _balle(curve, a, delta):
    eps = curve + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    return float(max(0.0, eps.min()))


def _balle_delta(curve, a, eps):
    """The improved conversion's delta at eps (Balle et al. 2020), written out by hand."""
    return math.exp(float(((a - 1.0) * (curve - eps) + (a - 1.0) * np.log1p(-1.0 / a) - np.log(a)).min()))


@pytest.fixture(scope="module")
def exact():
    """(c, K) -> (exact forward, exact reverse) seed-visible log-moments (a-1) D_a of one REC group."""
    out = {}
    for c in CS:
        fwd = pn.rec_joint_forward(c, KS, ORDERS)
        for k in KS:
            out[(c, k)] = ((A - 1.0) * fwd[k], (A - 1.0) * pn.rec_joint_reverse(c, k, ORDERS))
    return out


# ---------------------------------------------------------------------------------------
# One message, one group: the bound against the exact seed-visible log-moments
# ---------------------------------------------------------------------------------------


def test_formula():
    f, r = rec_message_log_moments(0.7, [2, 3, 10])
    np.testing.assert_allclose(f, np.array([4.0, 9.0, 100.0]) * 0.49, rtol=1e-15)
    np.testing.assert_allclose(r, np.array([1.0, 4.0, 81.0]) * 0.49, rtol=1e-15)
    with pytest.raises(ValueError, match="clip_multiplier"):
        rec_message_log_moments(0.0, [2])
    with pytest.raises(ValueError, match="orders"):
        rec_message_log_moments(1.0, [2.5])


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("k", KS)
def test_bound_is_above_the_exact_seed_visible_log_moments(exact, c, k):
    bound_f, bound_r = rec_message_log_moments(c, ORDERS)
    ex_f, ex_r = exact[(c, k)]
    assert np.all(np.isfinite(ex_f)) and np.all(np.isfinite(ex_r)) and np.all(ex_f > 0) and np.all(ex_r > 0)
    # The derivation's intermediate step (Jensen), log(1/K + (1 - 1/K) exp(beta c^2)), already holds;
    # the returned bound drops the 1/K.
    jensen_f = np.logaddexp(-math.log(k), math.log1p(-1.0 / k) + A * A * c * c)
    jensen_r = np.logaddexp(-math.log(k), math.log1p(-1.0 / k) + (A - 1.0) ** 2 * c * c)
    tol = 1e-9 * (1.0 + bound_f)
    assert np.all(ex_f <= jensen_f + tol) and np.all(jensen_f <= bound_f + tol)
    assert np.all(ex_r <= jensen_r + tol) and np.all(jensen_r <= bound_r + tol)


def test_the_gaussian_curve_fails_where_the_new_bound_holds(exact):
    # The exact reverse exceeds the Gaussian a (a-1) c^2 / 2 at orders above about 2 + 2 log(K) / c^2:
    # the old (Gaussian) per-message curve was not a bound on what the server sees; the new one is.
    gauss = A * (A - 1.0) / 2.0
    failures = 0
    for (c, k), (_, ex_r) in exact.items():
        bad = ex_r > gauss * c * c * (1 + 1e-9)
        failures += int(bad.sum())
        bound_r = rec_message_log_moments(c, ORDERS)[1]
        assert np.all(ex_r[bad] <= bound_r[bad])
        if k == 2 and c >= 0.545:
            assert bad.any(), (c, k)
            # Beyond the threshold every order fails.
            assert np.all(bad[A > 2 + 2 * math.log(k) / (c * c) + 1])
    assert failures > 40
    # K = 2, c = 1, order 16: the exact reverse is about 1.8x the Gaussian's.
    ex_r = exact[(1.0, 2)][1]
    assert ex_r[-1] / (16 * 15 / 2) > 1.7


def test_two_groups_are_below_the_bound_at_the_total_norm(exact):
    # Superadditivity: the norm split over two groups as (x, c^2 - x), the groups' exact log-moments add
    # (independent given the update) and stay below the bound at c.
    for c in (1.0, 2.0):
        bound_f, bound_r = rec_message_log_moments(c, ORDERS)
        for frac in (0.25, 0.5):
            c1, c2 = math.sqrt(frac) * c, math.sqrt(1.0 - frac) * c
            fwd1, fwd2 = pn.rec_joint_forward(c1, [2, 16], ORDERS), pn.rec_joint_forward(c2, [2, 16], ORDERS)
            for k in (2, 16):
                f1, f2 = (A - 1.0) * fwd1[k], (A - 1.0) * fwd2[k]
                r1 = (A - 1.0) * pn.rec_joint_reverse(c1, k, ORDERS)
                r2 = (A - 1.0) * pn.rec_joint_reverse(c2, k, ORDERS)
                assert np.all(f1 + f2 <= bound_f * (1 + 1e-9)), (c, frac, k)
                assert np.all(r1 + r2 <= bound_r * (1 + 1e-9)), (c, frac, k)
                # and a split never costs more than one group at the whole norm, for the bound's shape:
                assert np.all(r1 + r2 <= exact[(c, k)][1] + 1e-9 * (1 + bound_r))


def test_monte_carlo_cross_check():
    # Seed-visible REC, c = 0.545, K = 4: candidates x_1..x_K ~ N(0, 1), w = exp(c x - c^2 / 2). The
    # reverse moment E_0[(P_0 / P_phi)^(a-1)] = E[(1/K) sum_k (w_bar / w_k)^(a-1)], the forward
    # E_0[(P_phi / P_0)^a] = E[(1/K) sum_k (w_k / w_bar)^a].
    c, k, n = 0.545, 4, 400_000
    rng = np.random.default_rng(20240616)
    w = np.exp(c * rng.standard_normal((n, k)) - c * c / 2)
    ratio = w.mean(axis=1, keepdims=True) / w
    for a, values, truth, bound in (
        (3, (ratio**2).mean(axis=1), pn.rec_joint_reverse(c, k, [3])[0], rec_message_log_moments(c, [3])[1][0]),
        (2, (ratio**-2.0).mean(axis=1), pn.rec_joint_forward(c, [k], [2])[k][0], rec_message_log_moments(c, [2])[0][0]),
    ):
        mc, se = values.mean(), values.std() / math.sqrt(n)
        assert abs(mc - math.exp((a - 1) * truth)) < 5 * se, (a, mc, math.exp((a - 1) * truth), se)
        assert math.log(mc + 5 * se) < bound


# ---------------------------------------------------------------------------------------
# The sound accounting's curves with bits
# ---------------------------------------------------------------------------------------


def test_step_curves_with_bits_are_the_rec_bound_mixed_at_the_rate():
    c, q = 0.545, 0.01
    a = np.arange(2.0, 40.0)
    log_f, log_r = rec_message_log_moments(c, a)
    for tm in ("server", "messages"):
        for sampling, n in (("with_replacement", 100), ("poisson", 100), ("without_replacement", 100)):
            f, r = dprec_step_rdp(c, q, a, threat_model=tm, relation="zero", sampling=sampling, num_clients=n, bits=12)
            np.testing.assert_allclose(f, np.log1p(q * np.expm1(log_f)) / (a - 1), rtol=1e-12)
            np.testing.assert_allclose(r, np.log1p(q * np.expm1(log_r)) / (a - 1), rtol=1e-12)
            # The bits do not enter; and the curve is above the Gaussian variant's.
            f2, _ = dprec_step_rdp(c, q, a, threat_model=tm, relation="zero", sampling=sampling, num_clients=n, bits=60)
            g, _ = dprec_step_rdp(c, q, a, threat_model=tm, relation="zero", sampling=sampling, num_clients=n)
            np.testing.assert_array_equal(f, f2)
            assert np.all(f > g)
    # Central: the Gaussian curves (REC's cost is a total-variation term in delta).
    for rel in ("zero", "add_remove"):
        with_bits = dprec_step_rdp(c, q, a, threat_model="central", relation=rel, sampling="with_replacement",
                                   num_clients=100, bits=12)
        gauss = dprec_step_rdp(c, q, a, threat_model="central", relation=rel, sampling="with_replacement",
                               num_clients=100)
        np.testing.assert_array_equal(with_bits[0], gauss[0])
        np.testing.assert_array_equal(with_bits[1], gauss[1])
    # Add/remove against the server or a message observer: no bound for REC's messages.
    for tm in ("server", "messages"):
        f, r = dprec_step_rdp(c, q, a, threat_model=tm, relation="add_remove", sampling="with_replacement",
                              num_clients=100, bits=12)
        assert np.all(np.isinf(f)) and np.all(np.isinf(r))


@pytest.mark.parametrize("tm", ["server", "messages"])
def test_server_and_messages_epsilon_with_bits_by_hand(tm):
    r = dprec_epsilon(**MNIST, bits=20, threat_model=tm, relation="zero")
    a = np.arange(2.0, 258.0)
    log_f, log_r = rec_message_log_moments(0.545, a)
    fwd = 10_000 * np.logaddexp(math.log(0.99), math.log(0.01) + log_f) / (a - 1)
    rev = 10_000 * np.logaddexp(math.log(0.99), math.log(0.01) + log_r) / (a - 1)
    half = MNIST["delta"] / 2
    assert r.epsilon == pytest.approx(max(_balle(fwd, a, half), _balle(rev, a, half)), rel=1e-12)
    assert r.overhead == 0.0 and r.epsilons["add_remove"] == math.inf
    assert ("seed" if tm == "messages" else "sees whether the target client takes part") in r.reasons["add_remove"]
    assert r.epsilon == dprec_epsilon(**MNIST, bits=7, threat_model=tm).epsilon  # any bits


# ---------------------------------------------------------------------------------------
# Central: REC's total-variation cost
# ---------------------------------------------------------------------------------------


def test_rec_total_variation_formula():
    for m, c, bits, groups in [(1, 0.5, 8, None), (10_000, 0.545, 40, 1), (500, 1.0, 136, 4), (7, 2.0, 43, 6)]:
        g = 1 if groups is None else groups
        expected = m * g * 12 * math.exp(c * c) / 2 ** (bits // g)
        assert rec_total_variation(m, c, bits, groups) == pytest.approx(expected, rel=1e-12)
    # 43 bits over 6 groups: 7 per group (floor), the same as 42.
    assert rec_total_variation(7, 2.0, 43, 6) == rec_total_variation(7, 2.0, 42, 6)
    # Per group, not total: 6 groups of 7 bits cost 6 * 2^35 times one group of 42.
    assert rec_total_variation(1, 1.0, 42, 6) / rec_total_variation(1, 1.0, 42) == pytest.approx(6 * 2**35)
    assert rec_total_variation(10**6, 30.0, 1) == math.inf  # exp(900) overflows: inf, not an error
    with pytest.raises(ValueError, match="groups must be <= bits"):
        rec_total_variation(1, 1.0, 5, 6)
    for bad, name in ((dict(messages=0), "messages"), (dict(clip_multiplier=-1.0), "clip_multiplier"),
                      (dict(bits=0), "bits"), (dict(groups=0), "groups")):
        kw = dict(messages=1, clip_multiplier=1.0, bits=8, groups=1)
        kw.update(bad)
        with pytest.raises(ValueError, match=name):
            rec_total_variation(**kw)


@pytest.mark.parametrize("relation, bits", [("zero", 39), ("add_remove", 34)])
def test_central_epsilon_is_the_smallest_fixed_point(relation, bits):
    # eta = 10^4 * 12 e^0.297 / 2^bits (2.9e-7 at 39 bits, 9.4e-6 at 34), paid as (1 + e^eps) eta: about a
    # third of delta = 6.3e-3 at the epsilons here (about 9 for zero, 5.5 for add/remove).
    kw = dict(MNIST, bits=bits, threat_model="central", relation=relation)
    r = dprec_epsilon(**kw)
    eta = 10_000 * 12 * math.exp(0.545**2) / 2**bits
    assert r.overhead == pytest.approx(eta, rel=1e-12)
    a = np.arange(2.0, 258.0)
    f, rv = dprec_step_rdp(0.545, 0.01, a, threat_model="central", relation=relation, sampling="with_replacement",
                           num_clients=100)
    f, rv = 10_000 * f, 10_000 * rv

    def used(eps):
        return 2 * max(_balle_delta(f, a, eps), _balle_delta(rv, a, eps)) + (1 + math.exp(eps)) * eta

    assert 0.1 * MNIST["delta"] < (1 + math.exp(r.epsilon)) * eta < MNIST["delta"]  # not negligible here
    assert used(r.epsilon) <= MNIST["delta"] * (1 + 1e-9)
    assert used(r.epsilon * (1 - 1e-6)) > MNIST["delta"]  # a slightly smaller eps violates it
    # dprec_delta is its inverse, (1 + e^eps) eta included.
    d, _ = dprec_delta(**{k: v for k, v in kw.items() if k != "delta"}, epsilon=r.epsilon)
    assert d == pytest.approx(MNIST["delta"], rel=1e-6)
    # More than the Gaussian variant (by more than rounding); fewer bits cost more; the cost is per group:
    # the same bits per group in two groups doubles eta.
    gauss = dprec_epsilon(**dict(kw, bits=None))
    assert gauss.epsilon * (1 + 1e-3) < r.epsilon < dprec_epsilon(**dict(kw, bits=bits - 1)).epsilon
    two = dprec_epsilon(**dict(kw, bits=2 * bits), groups=2)
    assert two.overhead == pytest.approx(2 * eta, rel=1e-12) and two.epsilon > r.epsilon
    assert dprec_epsilon(**kw, groups=1) == r


def test_central_errors_name_bits():
    # 2 eta >= delta: 20 bits at MNIST (eta = 0.15), the paper's 6 x 7 bits per group (eta = 7.6e4), 25 bits
    # (eta = 4.8e-3).
    for bits, groups in ((20, None), (42, 6), (25, 1)):
        eta = rec_total_variation(10_000, 0.545, bits, groups)
        assert 2 * eta >= MNIST["delta"]
        with pytest.raises(ValueError, match=rf"bits={bits}"):
            dprec_epsilon(**MNIST, bits=bits, groups=groups, threat_model="central")
    # 26 bits: 2 eta < delta, admitted; but (1 + e^eps) eta <= delta has no solution above the Gaussian
    # variant's epsilon: inf.
    assert 2 * rec_total_variation(10_000, 0.545, 26) < MNIST["delta"]
    assert dprec_epsilon(**MNIST, bits=26, threat_model="central").epsilon == math.inf
    with pytest.raises(ValueError, match="groups must be <= bits"):
        dprec_epsilon(**MNIST, bits=5, groups=6, threat_model="central")


# ---------------------------------------------------------------------------------------
# The local guarantee
# ---------------------------------------------------------------------------------------


def test_local_guarantee_uses_the_rec_moments_with_bits():
    c, k, delta = 0.545, 30, 1e-5
    a = np.arange(2.0, 258.0)
    log_f, log_r = rec_message_log_moments(c, a)
    rec = dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=20, rounds=k)
    expected = max(_balle(k * log_f / (a - 1), a, delta / 2), _balle(k * log_r / (a - 1), a, delta / 2))
    assert rec.epsilon == pytest.approx(expected, rel=1e-12) and rec.overhead == 0.0
    gauss = dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=None, rounds=k)
    assert gauss.epsilon == pytest.approx(_balle(k * a * c * c / 2, a, delta / 2), rel=1e-12)
    assert gauss.epsilon < rec.epsilon
    assert dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=60, rounds=k).epsilon == rec.epsilon
    # The central result's local guarantee likewise.
    assert dprec_epsilon(**MNIST, bits=20).local.epsilon_max > dprec_epsilon(**MNIST, bits=None).local.epsilon_max


def test_central_cost_is_not_capped_at_large_epsilon():
    # FEMNIST at c = 1.745: the Gaussian variant's epsilon is about 2289, so (1 + e^eps) eta <= delta needs
    # eta below e^-2289 delta, i.e. over 3300 bits in one group; e^eps must not be capped (at e^700).
    kw = dict(rounds=4000, clients_per_round=100, num_clients=3500, clip_multiplier=1.745, delta=3500**-1.1,
              threat_model="central", relation="zero")
    gauss = dprec_epsilon(**kw, bits=None).epsilon
    assert 2000 < gauss < math.inf
    assert dprec_epsilon(**kw, bits=1100).epsilon == math.inf
    # Past about 1100 bits eta underflows a double: it is floored at the smallest positive one (conservative),
    # never 0 (which would drop REC's cost and give the Gaussian variant's epsilon).
    assert rec_total_variation(400_000, 1.745, 1200) == math.ulp(0.0)
    assert dprec_epsilon(**kw, bits=1200).epsilon == math.inf
    d, _ = dprec_delta(**{k: v for k, v in kw.items() if k != "delta"}, bits=1100, epsilon=800.0)
    assert d == 1.0
