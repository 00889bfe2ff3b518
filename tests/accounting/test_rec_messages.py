"""DP-REC's messages as sent (contract, REVISIONS 2 and 3): the seed-visible per-message bound against
the exact divergences of REC, its composition over groups, and REC's total-variation cost for a central
observer.

The bound (REVISION 3, Harris/FKG with the mean's exact moments), with ``x = c^2`` and ``K`` candidates
of the smallest group: forward log-moment ``a^2 x (1 + 1/K) / 2``, reverse ``a (a-1) x / 2 +
log E[w_bar^(a-1)]``. The tests write it out independently: the mean's moments come from cumulants
(those of a sum of independent terms add) in high precision (mpmath), not from the library's
binomial convolution.

The "truths" come from tests/privacy_numerics.py (REC at d = 1, sigma = 1, K candidates, the public
seed known to the observer: all K candidates and the chosen index seen), which never calls dprec's
accounting.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from dprec.accounting import (  # noqa: E402 - after the SciPy check
    Accountant,
    DPRECEvent,
    DPRECRoundAccountant,
    dprec_calibrate,
    dprec_delta,
    dprec_epsilon,
    dprec_local_epsilon,
    dprec_step_rdp,
)
from dprec.accounting.dprec_rec import (  # noqa: E402
    _log_mean_power_moments,
    _rec_candidates,
    rec_message_log_moments,
    rec_total_variation,
)
from tests import privacy_numerics as pn  # noqa: E402

KS = (2, 4, 16, 128)
CS = (0.3, 0.545, 1.0, 2.0)
ORDERS = list(range(2, 17))
A = np.array(ORDERS, dtype=float)
MNIST = dict(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=100**-1.1)


#: The library evaluates the mean's moments at no more than 2^30 candidates (a smaller K is a valid, larger,
#: bound); the hand computations below take the same K.
CAP = 2**30


@functools.lru_cache(maxsize=None)
def _mean_log_moments_cached(x: float, top: int, k: int) -> tuple:
    import mpmath

    with mpmath.workdps(60):
        xx = mpmath.mpf(x)
        mu = [mpmath.exp(n * (n - 1) * xx / 2) for n in range(top + 1)]  # E[w^n], w = exp(sqrt(x) Z - x/2)
        binom = [[mpmath.mpf(math.comb(n, j)) for j in range(n + 1)] for n in range(top + 1)]
        kappa = [mpmath.mpf(0)] * (top + 1)  # cumulants of w, from its moments
        for n in range(1, top + 1):
            kappa[n] = mu[n] - mpmath.fsum(binom[n - 1][j - 1] * kappa[j] * mu[n - j] for j in range(1, n))
        kk = mpmath.mpf(k)
        s = [mpmath.mpf(1)] + [mpmath.mpf(0)] * top  # moments of the sum: cumulants K kappa
        for n in range(1, top + 1):
            s[n] = mpmath.fsum(binom[n - 1][j - 1] * kk * kappa[j] * s[n - j] for j in range(1, n + 1))
        return tuple(float(mpmath.log(s[n]) - n * mpmath.log(kk)) for n in range(top + 1))


def mean_log_moments(x: float, top: int, k: int) -> np.ndarray:
    """log E[w_bar^m], m = 0 .. top, w_bar the mean of k i.i.d. lognormal w (E[w] = 1, Var log w = x), by cumulants."""
    return np.array(_mean_log_moments_cached(float(x), int(top), int(k)))


def rec_bound(c: float, orders, k) -> tuple[np.ndarray, np.ndarray]:
    """REVISION 3's per-message (forward, reverse) log-moments, written out (K = None -> 1; capped as dprec does)."""
    k = 1 if k is None else min(int(k), CAP)
    a = np.asarray(orders, dtype=float)
    x = c * c
    mean = mean_log_moments(x, int(a.max()) - 1, k)
    return a * a * x * (1.0 + 1.0 / k) / 2.0, a * (a - 1.0) * x / 2.0 + mean[(a - 1.0).astype(int)]


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
    # K = 1 (candidates=None): (a^2 c^2, (a-1)^2 c^2), REVISION 2's Jensen bound.
    f, r = rec_message_log_moments(0.7, [2, 3, 10])
    np.testing.assert_allclose(f, np.array([4.0, 9.0, 100.0]) * 0.49, rtol=1e-14)
    np.testing.assert_allclose(r, np.array([1.0, 4.0, 81.0]) * 0.49, rtol=1e-14)
    f1, r1 = rec_message_log_moments(0.7, [2, 3, 10], candidates=1)
    np.testing.assert_array_equal(f, f1)
    np.testing.assert_array_equal(r, r1)
    # K = 2 in closed form: E[((w1 + w2)/2)^m] = 2^-m sum_i C(m, i) E[w^i] E[w^(m-i)], E[w^i] = exp(i(i-1)x/2).
    c, x = 0.7, 0.49
    a = np.array([2.0, 3.0, 10.0])
    f2, r2 = rec_message_log_moments(c, a, candidates=2)
    np.testing.assert_allclose(f2, a * a * x * 0.75, rtol=1e-14)
    for ai, ri in zip(a.astype(int), r2):
        m = ai - 1
        mean = sum(math.comb(m, i) * math.exp((i * (i - 1) + (m - i) * (m - i - 1)) * x / 2) for i in range(m + 1))
        assert ri == pytest.approx(ai * (ai - 1) * x / 2 + math.log(mean / 2**m), rel=1e-13)
    with pytest.raises(ValueError, match="clip_multiplier"):
        rec_message_log_moments(0.0, [2])
    with pytest.raises(ValueError, match="orders"):
        rec_message_log_moments(1.0, [2.5])
    with pytest.raises(ValueError, match="candidates"):
        rec_message_log_moments(1.0, [2], candidates=0)


def test_candidates_none_is_k1_and_the_k_cap():
    a = np.arange(2.0, 258.0)
    for c in (0.3, 1.0, 1.745):
        f, r = rec_message_log_moments(c, a)
        np.testing.assert_allclose(f, a * a * c * c, rtol=1e-14)
        np.testing.assert_allclose(r, (a - 1) ** 2 * c * c, rtol=1e-13)
        # The cap: 2^40 candidates are taken at 2^30 (a valid bound: fewer candidates bound more).
        big = rec_message_log_moments(c, a, candidates=2**40)
        capped = rec_message_log_moments(c, a, candidates=2**30)
        np.testing.assert_array_equal(big[0], capped[0])
        np.testing.assert_array_equal(big[1], capped[1])
        # ... and is indistinguishable from the uncapped value (the bound at K -> inf is the Gaussian's
        # a(a-1)c^2/2 plus a vanishing term): the forward differs from a^2 c^2/2 by a^2 c^2 / 2^31.
        np.testing.assert_allclose(capped[0], a * a * c * c / 2, rtol=1e-9)


def test_log_mean_power_moments_by_enumeration_cumulants_and_monte_carlo():
    # Direct multinomial enumeration at K = 2, 3: E[(sum_k w_k)^m] = sum over n_1 + .. + n_K = m of
    # m! / prod n_k! prod E[w^(n_k)].
    x, top = 0.4, 14
    for k in (2, 3):
        lib = _log_mean_power_moments(x, top, k)
        for m in range(top + 1):
            total = 0.0
            for ns in itertools.product(range(m + 1), repeat=k):
                if sum(ns) == m:
                    coef = math.factorial(m) / math.prod(math.factorial(n) for n in ns)
                    total += coef * math.exp(sum(n * (n - 1) for n in ns) * x / 2)
            assert lib[m] == pytest.approx(math.log(total) - m * math.log(k), rel=1e-12, abs=1e-14), (k, m)
    # Cumulants (mpmath) at large K and orders, the range the accounting uses.
    for x, top, k in ((0.297, 256, 2**20), (0.09, 256, 2**30), (3.04, 256, 2), (4.0, 15, 128)):
        np.testing.assert_allclose(_log_mean_power_moments(x, top, k), mean_log_moments(x, top, k), rtol=1e-12, atol=1e-10)
    # Monte Carlo, fixed seed: K = 4, x = 0.3, m = 1..4.
    x, k, n = 0.3, 4, 400_000
    rng = np.random.default_rng(20240617)
    wbar = np.exp(math.sqrt(x) * rng.standard_normal((n, k)) - x / 2).mean(axis=1)
    lib = _log_mean_power_moments(x, 4, k)
    for m in range(1, 5):
        v = wbar**m
        mc, se = v.mean(), v.std() / math.sqrt(n)
        assert abs(mc - math.exp(lib[m])) < 5 * se, (m, mc, math.exp(lib[m]), se)
    assert lib[0] == 0.0 and abs(lib[1]) < 1e-14  # E[w_bar] = 1


def test_bound_is_non_increasing_in_k():
    a = np.arange(2.0, 130.0)
    for c in (0.3, 1.0, 2.0):
        prev_f, prev_r = rec_message_log_moments(c, a)
        for k in (2, 3, 4, 7, 16, 128, 2**10, 2**20, 2**30):
            f, r = rec_message_log_moments(c, a, candidates=k)
            assert np.all(f <= prev_f) and np.all(r <= prev_r + 1e-13 * (1 + prev_r)), (c, k)
            # and never below the Gaussian a(a-1)c^2/2 (the mean's moments are >= 1 by Jensen; to rounding)
            assert np.all(r >= a * (a - 1) * c * c / 2 - 1e-12) and np.all(f > a * (a - 1) * c * c / 2)
            prev_f, prev_r = f, r
        mean = _log_mean_power_moments(c * c, 40, 1)
        for k in (2, 5, 33, 1000):
            nxt = _log_mean_power_moments(c * c, 40, k)
            assert np.all(nxt <= mean + 1e-12 * (1 + np.abs(mean))), (c, k)
            mean = nxt


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("k", KS)
def test_bound_is_above_the_exact_seed_visible_log_moments(exact, c, k):
    bound_f, bound_r = rec_message_log_moments(c, ORDERS, candidates=k)
    ex_f, ex_r = exact[(c, k)]
    assert np.all(np.isfinite(ex_f)) and np.all(np.isfinite(ex_r)) and np.all(ex_f > 0) and np.all(ex_r > 0)
    # The library's bound is the formula written out here.
    hand_f, hand_r = rec_bound(c, A, k)
    np.testing.assert_allclose(bound_f, hand_f, rtol=1e-13)
    np.testing.assert_allclose(bound_r, hand_r, rtol=1e-12, atol=1e-12)
    # Exact seed-visible log-moments below the bound (the reverse is tight: within 0.03% at c = 2, K = 128).
    tol = 1e-9 * (1.0 + bound_f)
    assert np.all(ex_f <= bound_f + tol), (ex_f, bound_f)
    assert np.all(ex_r <= bound_r + 1e-9 * (1.0 + bound_r)), (ex_r, bound_r)
    # Tighter than REVISION 2's K-free bound (a^2 c^2, (a-1)^2 c^2), which still holds.
    old_f, old_r = rec_message_log_moments(c, ORDERS)
    assert np.all(bound_f < old_f) and np.all(bound_r <= old_r * (1 + 1e-13))
    assert np.all(ex_r <= old_r + tol) and np.all(ex_f <= old_f + tol)


def test_the_gaussian_curve_fails_where_the_new_bound_holds(exact):
    # The exact reverse exceeds the Gaussian a (a-1) c^2 / 2 at orders above about 2 + 2 log(K) / c^2:
    # the old (Gaussian) per-message curve was not a bound on what the server sees; the new one is.
    gauss = A * (A - 1.0) / 2.0
    failures = 0
    for (c, k), (_, ex_r) in exact.items():
        bad = ex_r > gauss * c * c * (1 + 1e-9)
        failures += int(bad.sum())
        bound_r = rec_message_log_moments(c, ORDERS, candidates=k)[1]
        assert np.all(ex_r <= bound_r * (1 + 1e-9))
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
        for frac in (0.25, 0.5):
            c1, c2 = math.sqrt(frac) * c, math.sqrt(1.0 - frac) * c
            fwd1, fwd2 = pn.rec_joint_forward(c1, [2, 16], ORDERS), pn.rec_joint_forward(c2, [2, 16], ORDERS)
            for k in (2, 16):
                bound_f, bound_r = rec_message_log_moments(c, ORDERS, candidates=k)
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
        (3, (ratio**2).mean(axis=1), pn.rec_joint_reverse(c, k, [3])[0], rec_message_log_moments(c, [3], k)[1][0]),
        (2, (ratio**-2.0).mean(axis=1), pn.rec_joint_forward(c, [k], [2])[k][0], rec_message_log_moments(c, [2], k)[0][0]),
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
    log_f, log_r = rec_bound(c, a, 2**12)
    for tm in ("server", "messages"):
        for sampling, n in (("with_replacement", 100), ("poisson", 100), ("without_replacement", 100)):
            kw = dict(threat_model=tm, relation="zero", sampling=sampling, num_clients=n)
            f, r = dprec_step_rdp(c, q, a, **kw, bits=12, groups=1)
            np.testing.assert_allclose(f, np.log1p(q * np.expm1(log_f)) / (a - 1), rtol=1e-12)
            np.testing.assert_allclose(r, np.log1p(q * np.expm1(log_r)) / (a - 1), rtol=1e-11)
            # K = 2^(bits // groups), the smallest group's: 13 bits over 2 groups is K = 2^6; capped at 2^30.
            f6, r6 = dprec_step_rdp(c, q, a, **kw, bits=6, groups=1)
            for other in (dprec_step_rdp(c, q, a, **kw, bits=13, groups=2), dprec_step_rdp(c, q, a, **kw, bits=12, groups=2)):
                np.testing.assert_array_equal(other[0], f6)
                np.testing.assert_array_equal(other[1], r6)
            f30, r30 = dprec_step_rdp(c, q, a, **kw, bits=30, groups=1)
            f60, r60 = dprec_step_rdp(c, q, a, **kw, bits=60, groups=1)
            np.testing.assert_array_equal(f30, f60)
            np.testing.assert_array_equal(r30, r60)
            # More candidates, a smaller curve; all above the Gaussian variant's.
            g, _ = dprec_step_rdp(c, q, a, **kw)
            assert np.all(f6 > f) and np.all(f > f60) and np.all(f60 > g)
            assert np.all(r6 >= r) and np.all(r >= r60 - 1e-14) and np.all(r60 >= g - 1e-14) and np.all(r6[1:] > r60[1:])
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
    r = dprec_epsilon(**MNIST, bits=20, groups=1, threat_model=tm, relation="zero")
    a = np.arange(2.0, 258.0)
    log_f, log_r = rec_bound(0.545, a, 2**20)
    fwd = 10_000 * np.logaddexp(math.log(0.99), math.log(0.01) + log_f) / (a - 1)
    rev = 10_000 * np.logaddexp(math.log(0.99), math.log(0.01) + log_r) / (a - 1)
    half = MNIST["delta"] / 2
    assert r.epsilon == pytest.approx(max(_balle(fwd, a, half), _balle(rev, a, half)), rel=1e-10)
    assert r.overhead == 0.0 and r.epsilons["add_remove"] == math.inf
    assert ("seed" if tm == "messages" else "sees whether the target client takes part") in r.reasons["add_remove"]
    # The smallest group's K: 6 groups x 7 bits is K = 2^7, as one group of 7 bits; fewer candidates cost more.
    seven = dprec_epsilon(**MNIST, bits=7, groups=1, threat_model=tm)
    assert dprec_epsilon(**MNIST, bits=42, groups=6, threat_model=tm).epsilon == seven.epsilon
    assert seven.epsilon > r.epsilon
    # At most REVISION 2's K-free value (K = 1, i.e. one bit).
    assert dprec_epsilon(**MNIST, bits=1, groups=1, threat_model=tm).epsilon > seven.epsilon


# ---------------------------------------------------------------------------------------
# Central: REC's total-variation cost
# ---------------------------------------------------------------------------------------


def test_rec_total_variation_formula():
    for m, c, bits, groups in [(1, 0.5, 8, 1), (10_000, 0.545, 40, 1), (500, 1.0, 136, 4), (7, 2.0, 43, 6)]:
        expected = m * groups * 12 * math.exp(c * c) / 2 ** (bits // groups)
        assert rec_total_variation(m, c, bits, groups) == pytest.approx(expected, rel=1e-12)
    # 43 bits over 6 groups: 7 per group (floor), the same as 42.
    assert rec_total_variation(7, 2.0, 43, 6) == rec_total_variation(7, 2.0, 42, 6)
    # Per group, not total: 6 groups of 7 bits cost 6 * 2^35 times one group of 42.
    assert rec_total_variation(1, 1.0, 42, 6) / rec_total_variation(1, 1.0, 42, 1) == pytest.approx(6 * 2**35)
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
    kw = dict(MNIST, bits=bits, groups=1, threat_model="central", relation=relation)
    r = dprec_epsilon(**kw)
    eta = 10_000 * 12 * math.exp(0.545**2) / 2**bits
    assert r.overhead == pytest.approx(eta, rel=1e-12)
    a = np.arange(2.0, 258.0)
    f, rv = dprec_step_rdp(0.545, 0.01, a, threat_model="central", relation=relation, sampling="with_replacement",
                           num_clients=100)
    f, rv = 10_000 * f, 10_000 * rv

    def used(eps):
        return 2 * max(_balle_delta(f, a, eps), _balle_delta(rv, a, eps)) + (1 + math.exp(eps)) * eta

    # The total-variation route's epsilon, solved here by bisection on its delta budget.
    grid = np.linspace(0.0, 50.0, 5001)  # the budget first falls with eps (RDP), then rises ((1 + e^eps) eta)
    first = next(i for i, e in enumerate(grid) if used(e) <= MNIST["delta"])
    lo, hi = grid[first - 1], grid[first]
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if used(mid) <= MNIST["delta"] else (mid, hi)
    tv = hi
    assert 0.1 * MNIST["delta"] < (1 + math.exp(tv)) * eta < MNIST["delta"]  # not negligible here
    # The central result is the better of that route and the message observer's bound (post-processing).
    messages = dprec_epsilon(**dict(kw, threat_model="messages"))
    assert r.epsilon == pytest.approx(min(tv, messages.epsilon), rel=1e-6)
    assert r.threat_model == "central"
    if tv < messages.epsilon:
        assert r.overhead == pytest.approx(eta, rel=1e-12)
        # dprec_delta is its inverse, (1 + e^eps) eta included.
        d, _ = dprec_delta(**{k: v for k, v in kw.items() if k != "delta"}, epsilon=r.epsilon)
        assert d == pytest.approx(MNIST["delta"], rel=1e-6)
    else:
        assert r.overhead == 0.0 and "post-processing" in r.composition
    # Never more than either route; more than the Gaussian variant (by more than rounding).
    gauss = dprec_epsilon(**dict(kw, bits=None))
    assert gauss.epsilon * (1 + 1e-3) < r.epsilon <= messages.epsilon
    # Without groups the split is unknown: the worst one (every bit its own group, K = 2) cannot pay REC's cost,
    # so the central guarantee is the message observer's bound at K = 2.
    worst = dprec_epsilon(**dict(kw, groups=None))
    assert worst.epsilon == dprec_epsilon(**dict(kw, groups=None, threat_model="messages")).epsilon


def test_central_errors_name_bits():
    # 2 eta >= delta: 20 bits in one group at MNIST (eta = 0.15), the paper's 6 x 7 bits per group (eta = 7.6e4),
    # 25 bits (eta = 4.8e-3), and 26 bits without groups (the worst split: 26 one-bit groups).
    # REC's cost cannot be paid, so the central guarantee is the message observer's bound (post-processing).
    for bits, groups in ((20, 1), (42, 6), (25, 1), (26, None)):
        eta = rec_total_variation(10_000, 0.545, bits, groups)
        assert 2 * eta >= MNIST["delta"]
        central = dprec_epsilon(**MNIST, bits=bits, groups=groups, threat_model="central")
        messages = dprec_epsilon(**MNIST, bits=bits, groups=groups, threat_model="messages")
        assert central.epsilon == messages.epsilon < math.inf and central.overhead == 0.0
    # 26 bits in one group: 2 eta < delta, admitted; but (1 + e^eps) eta <= delta has no solution above the Gaussian
    # variant's epsilon: that route gives nothing, the message bound remains.
    assert 2 * rec_total_variation(10_000, 0.545, 26, 1) < MNIST["delta"]
    assert dprec_epsilon(**MNIST, bits=26, groups=1, threat_model="central").epsilon == \
        dprec_epsilon(**MNIST, bits=26, groups=1, threat_model="messages").epsilon
    with pytest.raises(ValueError, match="groups must be <= bits"):
        dprec_epsilon(**MNIST, bits=5, groups=6, threat_model="central")


# ---------------------------------------------------------------------------------------
# The local guarantee
# ---------------------------------------------------------------------------------------


def test_local_guarantee_uses_the_rec_moments_with_bits():
    c, k, delta = 0.545, 30, 1e-5
    a = np.arange(2.0, 258.0)
    log_f, log_r = rec_bound(c, a, 2**20)
    rec = dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=20, groups=1, rounds=k)
    expected = max(_balle(k * log_f / (a - 1), a, delta / 2), _balle(k * log_r / (a - 1), a, delta / 2))
    assert rec.epsilon == pytest.approx(expected, rel=1e-10) and rec.overhead == 0.0
    gauss = dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=None, rounds=k)
    assert gauss.epsilon == pytest.approx(_balle(k * a * c * c / 2, a, delta / 2), rel=1e-12)
    assert gauss.epsilon < rec.epsilon
    # K: capped at 2^30; per group (40 bits over 2 groups is K = 2^20); fewer candidates cost more.
    assert dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=60, groups=1, rounds=k).epsilon == \
        dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=30, groups=1, rounds=k).epsilon
    assert dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=40, groups=2, rounds=k).epsilon == rec.epsilon
    assert dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=7, groups=1, rounds=k).epsilon > rec.epsilon
    # The central result's local guarantee likewise.
    assert dprec_epsilon(**MNIST, bits=20, groups=1).local.epsilon_max > \
        dprec_epsilon(**MNIST, bits=None).local.epsilon_max


def test_central_cost_is_not_capped_at_large_epsilon():
    # FEMNIST at c = 1.745: the Gaussian variant's epsilon is about 2289, so (1 + e^eps) eta <= delta needs
    # eta below e^-2289 delta, i.e. over 3300 bits in one group; e^eps must not be capped (at e^700).
    kw = dict(rounds=4000, clients_per_round=100, num_clients=3500, clip_multiplier=1.745, delta=3500**-1.1,
              threat_model="central", relation="zero")
    gauss = dprec_epsilon(**kw, bits=None).epsilon
    assert 2000 < gauss < math.inf
    msg = {b: dprec_epsilon(**dict(kw, threat_model="messages"), bits=b, groups=1).epsilon for b in (1100, 1200)}
    assert dprec_epsilon(**kw, bits=1100, groups=1).epsilon == msg[1100]  # the total-variation route gives nothing
    # Past about 1100 bits eta underflows a double: it is floored at the smallest positive one (conservative),
    # never 0 (which would drop REC's cost and give the Gaussian variant's epsilon).
    assert rec_total_variation(400_000, 1.745, 1200, 1) == math.ulp(0.0)
    assert dprec_epsilon(**kw, bits=1200, groups=1).epsilon == msg[1200] > gauss
    d, _ = dprec_delta(**{k: v for k, v in kw.items() if k != "delta"}, bits=1100, groups=1, epsilon=800.0)
    d_msg, _ = dprec_delta(**{k: v for k, v in dict(kw, threat_model="messages").items() if k != "delta"},
                           bits=1100, groups=1, epsilon=800.0)
    assert d == d_msg


# ---------------------------------------------------------------------------------------
# bits without groups: the split is unknown, so the worst one (every bit its own group, K = 2)
# ---------------------------------------------------------------------------------------


def test_bits_without_groups_take_the_smallest_possible_group():
    # K of the smallest group: 2^(bits // groups) with groups; without, a group may have one bit: K = 2.
    for bits in (1, 2, 7, 12, 28, 64, 1100):
        assert _rec_candidates(bits, None) == 2 == _rec_candidates(bits, bits)
    assert _rec_candidates(28, 4) == 2**7 and _rec_candidates(28, 1) == 2**28 and _rec_candidates(64, 1) == 2**30
    assert _rec_candidates(None, None) is None and _rec_candidates(None, 4) is None
    # Central: every bit its own group, groups = bits, 12 exp(c^2) / 2 per bit and message.
    for m, c, bits in ((1, 0.5, 8), (10_000, 0.545, 40), (7, 2.0, 43)):
        worst = m * bits * 12 * math.exp(c * c) / 2
        assert rec_total_variation(m, c, bits) == pytest.approx(worst, rel=1e-12)
        assert rec_total_variation(m, c, bits) == rec_total_variation(m, c, bits, bits)
        # Never below an explicit split, and strictly above one group.
        assert all(rec_total_variation(m, c, bits) >= rec_total_variation(m, c, bits, g) for g in range(1, bits + 1))
        assert rec_total_variation(m, c, bits) > rec_total_variation(m, c, bits, 1)


@pytest.mark.parametrize("tm", ["server", "messages"])
def test_bits_without_groups_are_accounted_as_one_bit_groups(tm):
    kw = dict(MNIST, threat_model=tm, relation="zero")
    a = np.arange(2.0, 40.0)
    step = dict(threat_model=tm, relation="zero", sampling="with_replacement", num_clients=100)
    for bits in (1, 4, 7, 12):
        unknown = dprec_epsilon(**kw, bits=bits)
        assert unknown.epsilon == dprec_epsilon(**kw, bits=bits, groups=bits).epsilon
        for got, want in zip(dprec_step_rdp(0.545, 0.01, a, **step, bits=bits),
                             dprec_step_rdp(0.545, 0.01, a, **step, bits=bits, groups=bits)):
            np.testing.assert_array_equal(got, want)
        # The seed-visible bound at K = 2, mixed at the rate and composed over the run, by hand.
        log_f, log_r = rec_bound(0.545, np.arange(2.0, 258.0), 2)
        aa = np.arange(2.0, 258.0)
        fwd = 10_000 * np.logaddexp(math.log(0.99), math.log(0.01) + log_f) / (aa - 1)
        rev = 10_000 * np.logaddexp(math.log(0.99), math.log(0.01) + log_r) / (aa - 1)
        half = MNIST["delta"] / 2
        assert unknown.epsilon == pytest.approx(max(_balle(fwd, aa, half), _balle(rev, aa, half)), rel=1e-10)
        # Never below any explicit split; equal wherever the smallest group has one bit (bits // groups == 1).
        by_groups = {g: dprec_epsilon(**kw, bits=bits, groups=g).epsilon for g in range(1, bits + 1)}
        assert all(unknown.epsilon >= e for e in by_groups.values())
        assert all(e == unknown.epsilon for g, e in by_groups.items() if bits // g == 1)
        if bits > 1:
            assert unknown.epsilon > by_groups[1]
        # dprec_delta and the local guarantee (against the server, the only local observer) likewise.
        d_none, _ = dprec_delta(**{k: v for k, v in kw.items() if k != "delta"}, bits=bits, epsilon=unknown.epsilon)
        d_bits, _ = dprec_delta(**{k: v for k, v in kw.items() if k != "delta"}, bits=bits, groups=bits,
                                epsilon=unknown.epsilon)
        assert d_none == d_bits == pytest.approx(MNIST["delta"], rel=1e-6)
        local = dprec_local_epsilon(clip_multiplier=0.545, delta=1e-5, bits=bits, rounds=3)
        assert local.epsilon == dprec_local_epsilon(clip_multiplier=0.545, delta=1e-5, bits=bits, groups=bits,
                                                    rounds=3).epsilon
        assert all(local.epsilon >= dprec_local_epsilon(clip_multiplier=0.545, delta=1e-5, bits=bits, groups=g,
                                                        rounds=3).epsilon for g in range(1, bits + 1))
    # The calibration, the round accountant and the Accountant's events agree.
    c_none = dprec_calibrate(target_epsilon=60.0, **{k: v for k, v in kw.items() if k != "clip_multiplier"}, bits=28)
    c_bits = dprec_calibrate(target_epsilon=60.0, **{k: v for k, v in kw.items() if k != "clip_multiplier"}, bits=28,
                             groups=28)
    c_four = dprec_calibrate(target_epsilon=60.0, **{k: v for k, v in kw.items() if k != "clip_multiplier"}, bits=28,
                             groups=4)
    assert c_none == c_bits < c_four
    rounds_kw = dict(clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=MNIST["delta"],
                     threat_model=tm, relation="zero")
    acc_none = DPRECRoundAccountant(bits=28, **rounds_kw).step(rounds=100).epsilon
    acc_bits = DPRECRoundAccountant(bits=28, groups=28, **rounds_kw).step(rounds=100).epsilon
    acc_four = DPRECRoundAccountant(bits=28, groups=4, **rounds_kw).step(rounds=100).epsilon
    assert acc_none == acc_bits > acc_four

    def event_epsilon(groups):
        ev = DPRECEvent(clip_multiplier=0.545, sampling_rate=0.01, bits=28, groups=groups, num_clients=100)
        return Accountant(threat_model=tm, relation="zero").compose(ev, count=1000).get_epsilon(MNIST["delta"])

    assert event_epsilon(None) == event_epsilon(28) > event_epsilon(4)


def test_central_bits_without_groups_pay_every_bit_as_a_group():
    # eta = messages * bits * 12 exp(c^2) / 2 >= 6 for any run: the worst split never pays out of delta < 1.
    # dprec_epsilon then falls back on the message observer's bound (which holds centrally by post-processing).
    for bits in (28, 64, 1100):
        for groups in (None, bits):
            assert 2 * rec_total_variation(10_000, 0.545, bits, groups) >= MNIST["delta"]
            assert dprec_epsilon(**MNIST, bits=bits, groups=groups, threat_model="central").epsilon == \
                dprec_epsilon(**MNIST, bits=bits, groups=groups, threat_model="messages").epsilon
    # One group of 1100 bits is admitted (eta about 1e-326 is floored at the smallest double).
    assert math.isfinite(dprec_epsilon(**MNIST, bits=1100, groups=1, threat_model="central").epsilon)
    # The Accountant's REC cost: groups = bits.
    for groups, g in ((None, 40), (40, 40), (4, 4), (1, 1)):
        ev = DPRECEvent(clip_multiplier=0.545, sampling_rate=0.01, bits=40, groups=groups, num_clients=100)
        acc = Accountant(threat_model="central", relation="zero").compose(ev, count=10_000)
        assert acc.rec_total_variation == pytest.approx(rec_total_variation(10_000, 0.545, 40, g), rel=1e-9)
    rkw = dict(bits=40, rounds=1, clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=MNIST["delta"])
    central = DPRECRoundAccountant(**rkw, threat_model="central").step()
    assert central.epsilon == DPRECRoundAccountant(**rkw, threat_model="messages").step().epsilon


def test_reviewers_example_64_one_bit_groups_are_not_one_64_bit_group():
    # A message of 64 groups of 1 bit (bits=64, groups=64) has K = 2 per group; accounting bits=64 as one
    # group of 64 bits (K = 2^64, capped at 2^30) understated its epsilon. Without groups: the worst split.
    kw = dict(clip_multiplier=1.0, delta=1e-8, bits=64)
    unknown = dprec_local_epsilon(**kw)
    sixty_four = dprec_local_epsilon(**kw, groups=64)
    one = dprec_local_epsilon(**kw, groups=1)
    assert unknown.epsilon == sixty_four.epsilon
    assert unknown.epsilon > one.epsilon * 1.2  # 8.68 against 6.79
    # By hand: one message, the seed-visible bound at K = 2.
    a = np.arange(2.0, 258.0)
    log_f, log_r = rec_bound(1.0, a, 2)
    expected = max(_balle(log_f / (a - 1), a, 1e-8 / 2), _balle(log_r / (a - 1), a, 1e-8 / 2))
    assert unknown.epsilon == pytest.approx(expected, rel=1e-10)


def test_large_orders_take_jensen_above_the_exact_moments():
    # Orders above 513 use E[w_bar^m] <= E[w^m] (Jensen) instead of the (m x m) exact convolution, so a
    # MAX_ORDER-sized request costs what order 513 does; below the switch the exact moments are used.
    from dprec.accounting import dprec_rec
    from dprec.accounting._checks import MAX_ORDER

    top = dprec_rec._REC_EXACT_MOMENT_MAX
    a = np.array([2.0, top + 1.0, top + 2.0, float(MAX_ORDER)])
    x = 0.3
    _, rev = dprec_rec.rec_message_log_moments(math.sqrt(x), a, candidates=64)
    m = a - 1.0
    exact = dprec_rec._log_mean_power_moments(x, top, 64)
    np.testing.assert_allclose(rev[:2], a[:2] * m[:2] * x / 2 + exact[[1, top]], rtol=1e-12)
    np.testing.assert_allclose(rev[2:], a[2:] * m[2:] * x / 2 + m[2:] * (m[2:] - 1) * x / 2, rtol=1e-12)
    assert exact[top] < top * (top - 1) * x / 2  # the exact moment is the tighter one where it is used
