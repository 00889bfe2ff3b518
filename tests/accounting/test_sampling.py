"""DP-REC accounting under the three sampling schemes, the round accountant and the bit-width rule."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")

from dprec import DPRECCodec  # noqa: E402
from dprec.accounting import (  # noqa: E402 - after the SciPy check
    SAMPLING_SCHEMES,
    DPRECPrivacyWarning,
    DPRECRoundAccountant,
    dprec_calibrate,
    dprec_delta,
    dprec_epsilon,
    dprec_min_bits,
    dprec_overhead,
    sampled_gaussian_rdp,
    sampled_gaussian_rdp_without_replacement,
)
from tests.accounting.test_rec_messages import rec_bound  # noqa: E402 - the REVISION 3 bound written out by hand

ORDERS = np.array([2, 3, 4, 5, 6, 8, 11, 16, 23, 32], dtype=float)  # small: dp_accounting's WOR is O(a^3)


def _dpa():
    return pytest.importorskip("dp_accounting")


def _poisson_round(q: float, c: float, orders) -> np.ndarray:
    """The exact RDP of one Poisson DP-REC round: log(1 - q + q exp(a (a-1) c^2 / 2)) / (a-1)."""
    a = np.asarray(orders, dtype=float)
    return np.logaddexp(math.log1p(-q), math.log(q) + a * (a - 1.0) * c * c / 2.0) / (a - 1.0)


def _dpa_wor(n: int, m: int, z: float, orders) -> np.ndarray:
    dpa = _dpa()
    acc = dpa.rdp.RdpAccountant(orders=list(orders), neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z)))
    return np.asarray(acc._rdp)


def _moments_eps(curve: np.ndarray, orders: np.ndarray, delta: float) -> float:
    """Algorithm 7's eps with k = m = curve and no overhead."""
    return float(np.min(2.0 * curve - math.log(delta) / (orders - 1.0)))


def _sound_eps(curve: np.ndarray, orders: np.ndarray, delta: float, overhead: float = 0.0) -> float:
    """method="sound" with one symmetric curve: the improved RDP conversion (Balle et al. 2020,
    Theorem 21) at delta' = (delta - overhead) / 2 (both tails), written out by hand."""
    a = np.asarray(orders, dtype=float)
    half = (delta - overhead) / 2.0
    eps = curve + np.log1p(-1.0 / a) - (math.log(half) + np.log(a)) / (a - 1.0)
    return float(max(0.0, np.min(eps)))


def _rec_round(q: float, c: float, orders, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A Poisson round of DP-REC's messages as sent (seed and index visible to the server), K candidates
    (REVISION 3): log(1 - q + q exp(L)) / (a-1) with L = a^2 c^2 (1 + 1/K) / 2 forward and
    a (a-1) c^2 / 2 + log E[w_bar^(a-1)] reverse (the mean's moments by cumulants, in the rec_messages tests)."""
    a = np.asarray(orders, dtype=float)
    log_f, log_r = rec_bound(c, a, k)
    fwd = np.logaddexp(math.log1p(-q), math.log(q) + log_f) / (a - 1.0)
    rev = np.logaddexp(math.log1p(-q), math.log(q) + log_r) / (a - 1.0)
    return fwd, rev


def test_scheme_names():
    assert SAMPLING_SCHEMES == ("with_replacement", "poisson", "without_replacement")


# ---------------------------------------------------------------------------------------
# The curves against dp_accounting
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, m, z", [(100, 10, 1.0), (1000, 10, 0.5), (3500, 100, 2.0), (50, 1, 0.3), (10**6, 100, 8.0)]
)
def test_without_replacement_curve_matches_dp_accounting(n, m, z):
    orders = np.concatenate([ORDERS, [1.5, 2.5, 7.25]])  # fractional orders: interpolated log-moment
    ours = sampled_gaussian_rdp_without_replacement(m, n, z, orders)
    # dp_accounting's noise multiplier is relative to the replace-one sensitivity 2C: z / 2.
    theirs = _dpa_wor(n, m, z / 2.0, orders)
    np.testing.assert_allclose(ours, np.minimum(theirs, 2.0 * orders / z**2), rtol=1e-10)
    # With the add/remove convention fed straight to dp_accounting the curve would be 4x smaller
    # at small orders: the sensitivity convention matters and is checked.
    assert np.all(ours[:3] > 2.0 * _dpa_wor(n, m, z, orders[:3]))


def test_without_replacement_curve_matches_300_digit_arithmetic():
    # Large noise: the alternating forward differences cancel massively; the recursion must not.
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 300
    m, n, z = 50, 100, 5.0
    a = mp.mpf(2) / z**2  # base RDP eps(j) = a j (replace-one sensitivity 2C)
    gamma = mp.mpf(m) / n

    def diff(ell: int):  # Delta^ell of exp(a x (x - 1)) at 0
        return mp.fsum((-1) ** (ell - i) * mp.binomial(ell, i) * mp.e ** (a * i * (i - 1)) for i in range(ell + 1))

    orders = [2, 3, 7, 20, 41]
    ours = sampled_gaussian_rdp_without_replacement(m, n, z, orders)
    for alpha, value in zip(orders, ours):
        total = gamma**2 * mp.binomial(alpha, 2) * min(4 * (mp.e ** (2 * a) - 1), 2 * mp.e ** (2 * a))
        for j in range(3, alpha + 1):
            refined = 4 * mp.sqrt(diff(2 * (j // 2)) * diff(2 * ((j + 1) // 2)))
            total += gamma**j * mp.binomial(alpha, j) * min(refined, 2 * mp.e ** ((j - 1) * j * a))
        expected = min(float(mp.log1p(total) / (alpha - 1)), 2 * alpha / z**2)
        assert value == pytest.approx(expected, rel=1e-12), alpha


@pytest.mark.parametrize("n, b, c", [(100, 10, 0.545), (3500, 100, 1.41), (660, 66, 1.435), (1000, 1, 2.0)])
def test_without_replacement_round_is_the_attributed_divergence(n, b, c):
    # The target is drawn with probability B/N and otherwise sends nothing: the Poisson round's
    # exact divergence at q = B/N, the same in both directions, whatever ``reverse`` says.
    t, delta = 50, n**-1.1
    kw = dict(rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=delta, bits=None, orders=ORDERS)
    result = dprec_epsilon(**kw, sampling="without_replacement")
    curve = _poisson_round(b / n, c, ORDERS)
    assert result.epsilon == pytest.approx(_sound_eps(t * curve, ORDERS, delta), rel=1e-12)
    assert result.forward == result.reverse
    assert (result.steps, result.sampling_rate, result.sampling) == (t, b / n, "without_replacement")
    exact = dprec_epsilon(**kw, sampling="without_replacement", reverse="exact")
    assert exact.epsilon == result.epsilon
    assert dprec_epsilon(**kw, sampling="poisson").epsilon == result.epsilon


def test_without_replacement_does_not_use_the_symmetric_mechanism_bound():
    # Wang-Balle-Kasiviswanathan's bound (replace-one, sensitivity 2C) is for mechanisms symmetric
    # in the clients. A server that knows who sent each message sees the target's absence as an
    # atom of its own, and then the exact divergence exceeds that bound at small c: the
    # accountant must not use it (an earlier version did).
    orders = np.arange(2.0, 40.0)
    n, b, c = 100, 10, 0.3
    wbk = sampled_gaussian_rdp_without_replacement(b, n, 1.0 / c, orders)
    attributed = _poisson_round(b / n, c, orders)
    assert np.any(attributed > wbk)
    result = DPRECRoundAccountant(clients_per_round=b, num_clients=n, clip_multiplier=c, delta=1e-5, bits=None,
                                  sampling="without_replacement", orders=orders).step()
    np.testing.assert_allclose(result.forward, attributed[list(orders).index(result.order)], rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Poisson sampling: an unsampled client sends nothing, so a round is (1-q) {no message} +
# q N(phi, sigma^2) against (1-q) {no message} + q N(0, sigma^2): no sampled-Gaussian amplification
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "q, c, a",
    [(0.1, 0.5, 2), (0.1, 0.5, 8), (0.01, 1.0, 3), (0.3, 0.2, 16), (1e-4, 2.0, 5), (0.5, 3.0, 10), (1.0, 0.7, 6)],
)
def test_poisson_round_is_the_closed_form(q, c, a):
    expected = math.log(1.0 - q + q * math.exp(a * (a - 1) * c * c / 2.0)) / (a - 1)
    for reverse in ("bound", "exact"):  # the divergence is exact and symmetric: both give the same
        acc = DPRECRoundAccountant(sampling_rate=q, num_clients=1000, clip_multiplier=c, delta=1e-5, bits=None,
                                   sampling="poisson", reverse=reverse, orders=[a])
        step = acc.step(rounds=7)
        assert step.forward == pytest.approx(7 * expected, rel=1e-12)
        assert step.reverse == step.forward
    b, n = round(q * 1000), 1000
    if b >= 1:
        kw = dict(rounds=50, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=n**-1.1, bits=None,
                  orders=[a], sampling="poisson")
        bound, exact = dprec_epsilon(**kw), dprec_epsilon(**kw, reverse="exact")
        assert bound.forward == pytest.approx(50 * expected, rel=1e-12) and bound.reverse == bound.forward
        assert exact.epsilon == bound.epsilon and exact.reverse_method == "exact"


def test_poisson_round_closed_form_is_stable():
    # Tiny divergences keep their relative accuracy; huge ones neither overflow nor warn.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc = DPRECRoundAccountant(sampling_rate=1e-6, num_clients=10**7, clip_multiplier=1e-4, delta=1e-5,
                                   bits=None, sampling="poisson", orders=[2])
        tiny = acc.step().forward
        # log1p(q expm1(c^2)) = q c^2 (1 + c^2 / 2 - q c^2 / 2 + ...) at a = 2; a plain logaddexp
        # would be off by 1.5e-7 relative here.
        assert tiny == pytest.approx(1e-14 * (1 + 0.5e-8), rel=1e-12)
        orders = np.array([2.0, 100.0, 257.0])
        big = dprec_epsilon(rounds=1, clients_per_round=1, num_clients=10, clip_multiplier=30.0, delta=1e-5,
                            bits=None, orders=orders, sampling="poisson")
    # a (a-1) c^2 / 2 is far beyond exp's range: the log is log q + a (a-1) c^2 / 2.
    assert big.forward == pytest.approx((math.log(0.1) + big.order * (big.order - 1) * 450.0) / (big.order - 1),
                                        rel=1e-12)
    # q = 1: two Gaussians, a c^2 / 2 exactly.
    full = DPRECRoundAccountant(sampling_rate=1.0, num_clients=3, clip_multiplier=0.7, delta=1e-5, bits=None,
                                sampling="poisson", orders=[2, 5]).step()
    assert full.forward == full.order * 0.7 * 0.7 / 2.0


def _renyi_by_quadrature(p_atom: float, p_parts, q_parts, a: float) -> float:
    """D_a(P || Q) for P, Q = a common atom of mass p_atom + 1-D Gaussian mixtures (weight, mean, var)."""
    from scipy.integrate import quad
    from scipy.special import logsumexp

    def log_mix(x, parts):
        return logsumexp([math.log(w) - (x - m) ** 2 / (2 * v) - 0.5 * math.log(2 * math.pi * v) for w, m, v in parts])

    centre = a * max(m for _, m, _ in p_parts) + (1 - a) * min(m for _, m, _ in q_parts)
    lo, hi = min(centre, 0.0) - 60.0, max(centre, 0.0) + 60.0
    integral, _ = quad(lambda x: math.exp(a * log_mix(x, p_parts) + (1 - a) * log_mix(x, q_parts)), lo, hi,
                       points=[centre], limit=400, epsabs=0.0, epsrel=1e-12)
    return math.log(p_atom + integral) / (a - 1)


@pytest.mark.parametrize("q, c, a", [(0.1, 0.5, 2), (0.02, 1.3, 4), (0.3, 0.8, 7), (1.0, 0.6, 3), (1.0, 1.5, 5)])
def test_poisson_round_matches_quadrature_both_directions(q, c, a):
    # The target's part of a round, sigma = 1, ||phi|| = c (only phi's direction matters: the
    # orthogonal coordinates are N(0, 1) in both runs). The no-message atom has mass 1 - q in both.
    target = [(q, c, 1.0)]
    zero = [(q, 0.0, 1.0)]
    forward = _renyi_by_quadrature(1.0 - q, target, zero, a)
    reverse = _renyi_by_quadrature(1.0 - q, zero, target, a)
    acc = DPRECRoundAccountant(sampling_rate=q, num_clients=50, clip_multiplier=c, delta=1e-5, bits=None,
                               sampling="poisson", orders=[a])
    step = acc.step()
    assert step.forward == pytest.approx(forward, rel=1e-8)
    assert step.reverse == pytest.approx(reverse, rel=1e-8)


def test_poisson_covers_the_aggregate_only_view_that_the_old_curve_missed():
    # The review's counterexample: N = 2, q = 0.1, c = 0.5 (sigma = 1). The adversary sees only the
    # sum of the participants' decoded messages; the other client has a zero update. The sum is
    # empty (an atom, the same in both runs) with probability (1-q)^2, otherwise a Gaussian whose
    # variance is the random number of participants.
    q, c, n = 0.1, 0.5, 2
    with_phi = [(q * (1 - q), c, 1.0), ((1 - q) * q, 0.0, 1.0), (q * q, c, 2.0)]
    with_zero = [(q * (1 - q), 0.0, 1.0), ((1 - q) * q, 0.0, 1.0), (q * q, 0.0, 2.0)]
    for a in (2, 4, 8):
        accounted = DPRECRoundAccountant(sampling_rate=q, num_clients=n, clip_multiplier=c, delta=1e-5, bits=None,
                                         sampling="poisson", orders=[a]).step().forward
        true_fwd = _renyi_by_quadrature((1 - q) ** 2, with_phi, with_zero, a)
        true_rev = _renyi_by_quadrature((1 - q) ** 2, with_zero, with_phi, a)
        assert max(true_fwd, true_rev) <= accounted
        # The old accounting (the sampled Gaussian, as for DP-FedAvg) undercounts this view.
        old = sampled_gaussian_rdp(q, 1.0 / c, [a])[0]
        assert true_fwd > old and true_rev > old


@pytest.mark.parametrize("n, b, c", [(100, 10, 0.545), (100, 10, 0.5), (3500, 100, 1.41), (1000, 1, 2.0),
                                     (200, 150, 0.8)])
def test_scheme_ordering_on_the_tested_grid(n, b, c):
    # Poisson and without replacement have the same exact round at q = B/N. Against the server,
    # with replacement costs at least as much (B log1p(y) >= log1p(B y): the target can be drawn
    # several times in a round); the paper's with-replacement model (a mixture with the prior)
    # costs the least on this grid.
    kw = dict(rounds=100, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=1e-5, bits=None)
    eps = {s: dprec_epsilon(**kw, sampling=s).epsilon for s in SAMPLING_SCHEMES}
    assert eps["poisson"] == eps["without_replacement"]
    assert eps["with_replacement"] >= eps["poisson"]
    assert dprec_epsilon(**kw, method="paper").epsilon <= eps["poisson"]


def test_the_three_schemes_at_the_flower_example():
    # T = 1000, B = 10, N = 100, c = 0.5, delta = N^-1.1, overhead omitted. Poisson's best order
    # is 2: T log(0.9 + 0.1 e^{0.25}) + log(1/2) - log(delta / 2) - log 2 (Balle et al. at order 2,
    # both tails: delta / 2).
    kw = dict(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.5, delta=100**-1.1, bits=None)
    eps = {s: dprec_epsilon(**kw, sampling=s) for s in SAMPLING_SCHEMES}
    poisson = 1000 * math.log(0.9 + 0.1 * math.exp(0.25)) + math.log(0.5) - math.log(100**-1.1 / 2) - math.log(2)
    assert eps["poisson"].order == 2.0 and eps["poisson"].epsilon == pytest.approx(poisson, rel=1e-12)
    assert eps["poisson"].epsilon == pytest.approx(32.38, abs=0.01)
    assert eps["without_replacement"].epsilon == eps["poisson"].epsilon
    assert dprec_epsilon(**kw, method="paper").epsilon == pytest.approx(2.70, abs=0.01)


def test_with_replacement_is_unchanged():
    kw = dict(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=100**-1.1, bits=None)
    default = dprec_epsilon(**kw, method="paper")
    assert default == dprec_epsilon(**kw, sampling="with_replacement", method="paper")
    assert default.epsilon == pytest.approx(3.0157, abs=5e-4)  # the paper's MNIST 3.0
    assert (default.steps, default.sampling_rate, default.messages, default.rounds) == (10_000, 0.01, 10_000, 1000)


def test_poisson_reverse_methods_agree():
    # The Poisson round's divergence is exact and symmetric: "bound" and "exact" give the same.
    kw = dict(rounds=100, clients_per_round=10, num_clients=1000, clip_multiplier=1.0, delta=1e-5, bits=None)
    bound = dprec_epsilon(**kw, sampling="poisson")
    exact = dprec_epsilon(**kw, sampling="poisson", reverse="exact")
    assert dataclasses.replace(exact, reverse_method="bound") == bound
    assert exact.reverse == exact.forward == pytest.approx(100 * _poisson_round(0.01, 1.0, [exact.order])[0],
                                                           rel=1e-12)
    # No quadrature, so no limit on c (the with-replacement exact reverse has one).
    big = dict(kw, clip_multiplier=150.0)
    assert dprec_epsilon(**big, sampling="poisson", reverse="exact").epsilon == dprec_epsilon(
        **big, sampling="poisson").epsilon
    DPRECRoundAccountant(clients_per_round=10, num_clients=1000, clip_multiplier=150.0, delta=1e-5, bits=None,
                         sampling="poisson", reverse="exact")
    with pytest.raises(ValueError, match="clip_multiplier"):
        dprec_epsilon(**big, reverse="exact", method="paper")


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
def test_delta_and_calibration_follow_the_scheme(sampling):
    kw = dict(rounds=200, clients_per_round=20, num_clients=2000, bits=40, sampling=sampling)
    result = dprec_epsilon(**kw, clip_multiplier=0.9, delta=1e-6)
    delta, order = dprec_delta(**kw, clip_multiplier=0.9, epsilon=result.epsilon)
    assert delta == pytest.approx(1e-6, rel=1e-9) and order == result.order
    c = dprec_calibrate(target_epsilon=2.0, delta=1e-6, **kw)
    assert dprec_epsilon(**kw, clip_multiplier=c, delta=1e-6).epsilon == pytest.approx(2.0, rel=1e-8)


# ---------------------------------------------------------------------------------------
# Round accountant
# ---------------------------------------------------------------------------------------

RUN = dict(num_clients=500, clip_multiplier=0.8, delta=1e-6, bits=45)


@pytest.mark.parametrize(
    "sampling, reverse",
    [(s, "bound") for s in SAMPLING_SCHEMES] + [("with_replacement", "exact"), ("poisson", "exact")],
)
def test_stepping_equals_dprec_epsilon_exactly(sampling, reverse):
    acc = DPRECRoundAccountant(clients_per_round=25, sampling=sampling, reverse=reverse, **RUN)
    assert acc.epsilon == 0.0 and acc.accounting is None and acc.rounds == 0
    for t in range(1, 31):
        step = acc.step()
        assert step is acc.accounting and acc.rounds == t
    expected = dprec_epsilon(rounds=30, clients_per_round=25, sampling=sampling, reverse=reverse, **RUN)
    assert acc.accounting == expected  # every field, bit for bit
    assert acc.epsilon == expected.epsilon
    # Composing many rounds at once is the same.
    bulk = DPRECRoundAccountant(clients_per_round=25, sampling=sampling, reverse=reverse, **RUN)
    assert bulk.step(rounds=30) == expected


@pytest.mark.parametrize("sampling", ["poisson", "without_replacement"])
@pytest.mark.parametrize("bits", [None, 45])
def test_varying_clients_per_round(sampling, bits):
    acc = DPRECRoundAccountant(clients_per_round=10, sampling=sampling, **dict(RUN, bits=bits, groups=1))
    acc.step()
    acc.step(clients_per_round=40)
    result = acc.step(rounds=2)
    orders = np.arange(2.0, 258.0)
    if bits is None:  # the Gaussian variant: the same exact round for both schemes
        fwd = {b: _poisson_round(b / 500, 0.8, orders) for b in (10, 40)}
        rev = fwd
    else:  # REC's messages as sent (server, zero): the seed-visible per-message bound, no overhead
        # 45 bits in one group: K = 2^45, which dprec (validly) takes at its cap 2^30
        fwd, rev = ({b: _rec_round(b / 500, 0.8, orders, 2**30)[i] for b in (10, 40)} for i in (0, 1))
    expected = max(_sound_eps(3 * fwd[10] + fwd[40], orders, 1e-6), _sound_eps(3 * rev[10] + rev[40], orders, 1e-6))
    assert result.epsilon == pytest.approx(expected, rel=1e-10)
    assert result.overhead == 0.0
    assert (result.messages, result.rounds, result.steps) == (70, 4, 4)
    assert result.sampling_rate == pytest.approx(70 / (4 * 500))
    assert result.rho == pytest.approx(70 * math.exp(0.64))
    # More clients in a round cost more privacy than fewer.
    fewer = DPRECRoundAccountant(clients_per_round=10, sampling=sampling, **dict(RUN, bits=bits, groups=1))
    fewer = fewer.step(rounds=4)
    assert fewer.epsilon < result.epsilon


def test_varying_clients_with_replacement_counts_steps():
    acc = DPRECRoundAccountant(clients_per_round=4, **RUN)
    acc.step()
    result = acc.step(clients_per_round=6)
    single = dprec_epsilon(rounds=1, clients_per_round=10, **RUN)  # 10 steps at rate 1/N either way
    assert result.epsilon == single.epsilon and result.steps == 10 and result.rounds == 2


def test_accountant_properties():
    acc = DPRECRoundAccountant(clients_per_round=7, sampling="poisson", rounds=12, groups=5, **RUN)
    assert (acc.num_clients, acc.clients_per_round, acc.sampling, acc.delta, acc.bits, acc.groups) == (
        500, 7, "poisson", 1e-6, 45, 5
    )
    assert (acc.clip_multiplier, acc.reverse, acc.planned_rounds, acc.messages, acc.overhead) == (
        0.8, "bound", 12, 0, 0.0
    )
    acc.step()
    assert acc.messages == 7 and acc.overhead == dprec_overhead(7, 0.8, 45)
    assert "poisson" in repr(acc)
    # bits=None omits the overhead (the paper's reported numbers).
    free = DPRECRoundAccountant(clients_per_round=7, **dict(RUN, bits=None))
    assert free.step().overhead == 0.0


# ---------------------------------------------------------------------------------------
# The bit-width rule
# ---------------------------------------------------------------------------------------

RULE = dict(num_clients=1000, clients_per_round=10, clip_multiplier=1.0, delta=1e-5)


def test_min_bits_is_the_smallest_that_satisfies_the_rule():
    for messages, c, delta, groups, fraction in [
        (10_000, 0.545, 1e-5, 4, 0.1),
        (90_000, 1.227, 342_477**-1.1, 6, 0.1),
        (1, 0.1, 0.5, 1, 0.1),
        (10**6, 3.0, 1e-9, 3, 0.01),
    ]:
        k = dprec_min_bits(messages=messages, clip_multiplier=c, delta=delta, groups=groups, fraction=fraction)
        assert dprec_overhead(messages, c, groups * k) <= fraction * delta
        if k > 1:
            assert dprec_overhead(messages, c, groups * (k - 1)) > fraction * delta
    # StackOverflow: 6 groups x 7 bits is too few (overhead 1.36 delta); 8 per group give 2.1% of delta.
    assert dprec_min_bits(messages=90_000, clip_multiplier=1.227, delta=342_477**-1.1, groups=6) == 8
    assert dprec_min_bits(messages=1, clip_multiplier=0.1, delta=0.5) == 8  # 12 e^0.01 / 2^8 = 0.047 <= 0.05


def test_dprec_epsilon_error_explains_total_bits():
    # 7 bits for a whole MNIST run: the old message was a bare "overhead 1.26e+03". The bit-width rule
    # is Theorem 1's (method="paper").
    kw = dict(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=1e-5)
    need = dprec_min_bits(messages=10_000, clip_multiplier=0.545, delta=1e-5)
    with pytest.raises(ValueError, match=r"bits=7 is too few: `bits` is the TOTAL bits of one client message") as err:
        dprec_epsilon(**kw, bits=7, method="paper")
    text = str(err.value)
    assert "bits per group x number of groups" in text and "layout(template).total_bits" in text
    assert "= 1.26e+03 is 1.26e+08 times delta=1e-05" in text
    assert f"at least {need} total bits" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dprec_epsilon raises but never warns
        dprec_epsilon(**kw, bits=need - 1, method="paper")
        # Sound, against the server or a message observer: REC's messages are bounded directly, any bits
        # (fewer candidates per group cost more, no error).
        for tm in ("server", "messages"):
            few, many = (dprec_epsilon(**kw, bits=b, groups=1, threat_model=tm) for b in (7, 64))
            assert math.isfinite(few.epsilon) and few.epsilon > many.epsilon and few.overhead == 0.0
    # Sound, central: REC's total-variation cost 12 * 10^4 * e^0.297 / 2^7 is far above delta / 2, so the
    # central guarantee is the message observer's bound (it holds centrally by post-processing), no error.
    central = dprec_epsilon(**kw, bits=7, groups=1, threat_model="central")
    messages = dprec_epsilon(**kw, bits=7, groups=1, threat_model="messages")
    assert central.threat_model == "central" and central.epsilon == messages.epsilon
    assert central.epsilons == messages.epsilons and "post-processing" in central.composition


def test_planned_rounds_are_checked_up_front():
    # method="paper" (Theorem 1's overhead): 50 rounds x 10 clients: 12 * 500 * e / 2^b: b = 28 gives
    # 6.1e-5 >= delta; b = 32 gives 3.8e-6 (38%); b = 36 is fine.
    with pytest.raises(ValueError, match=r"bits: the message has 4 groups x 7 bits = 28 total bits") as err:
        DPRECRoundAccountant(bits=28, groups=4, rounds=50, method="paper", **RULE)
    k = dprec_min_bits(messages=500, clip_multiplier=1.0, delta=1e-5, groups=4)
    assert f"at least {k} bits per group" in str(err.value)
    with pytest.warns(DPRECPrivacyWarning, match="bits") as record:
        acc = DPRECRoundAccountant(bits=32, groups=4, rounds=50, method="paper", **RULE)
    assert len(record) == 1 and record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.step(rounds=50)  # already warned for the plan: not again
        DPRECRoundAccountant(bits=36, groups=4, rounds=50, method="paper", **RULE).step(rounds=50)
        # Sound against the server (the default) or a message observer: no bit-width rule at all.
        for tm in ("server", "messages"):
            DPRECRoundAccountant(bits=28, groups=4, rounds=50, threat_model=tm, **RULE).step(rounds=50)
    # Without a plan the constructor cannot know.
    DPRECRoundAccountant(bits=28, method="paper", **RULE)
    # Sound, central: REC's total-variation cost per group, eta = 500 * 4 * 12 e / 2^(bits / 4), would have
    # to stay below delta / 2 (7 bits per group are far too few, 33 too, 34 do). Where it cannot be paid, the
    # central guarantee is the message observer's bound, which holds centrally by post-processing: no error.
    def run(bits, groups, tm="central"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return DPRECRoundAccountant(bits=bits, groups=groups, rounds=50, threat_model=tm, **RULE).step(rounds=50)

    for bits in (28, 132):
        central, messages = run(bits, 4), run(bits, 4, "messages")
        assert central.epsilon == messages.epsilon < math.inf and central.threat_model == "central"
    central, one = run(136, 4), run(132, 1)
    eta = 500 * 4 * 12 * math.e / 2**34
    assert one.overhead == pytest.approx(500 * 12 * math.e / 2**132, rel=1e-12)
    # At 136 bits the cost is admitted, but (1 + e^eps) eta <= delta needs eps < log(delta / eta - 1) = 0.49,
    # below the Gaussian variant's epsilon: that route gives nothing, the message observer's bound applies.
    gauss = DPRECRoundAccountant(bits=None, threat_model="central", **RULE).step(rounds=50)
    assert gauss.epsilon > math.log(1e-5 / eta - 1)
    assert central.epsilon == run(136, 4, "messages").epsilon and central.overhead == 0.0
    assert gauss.epsilon <= one.epsilon < gauss.epsilon * (1 + 1e-6)  # eta = 1e-36: nothing to pay
    assert one.epsilon < run(132, 1, "messages").epsilon  # paying eta beats the message bound here
    roomy = run(192, 4)
    assert gauss.epsilon < roomy.epsilon <= run(192, 4, "messages").epsilon


def test_steps_warn_when_crossing_ten_percent_and_refuse_to_reach_delta():
    # method="paper", bits = 32: overhead per 10-client round 12 * 10 * e / 2^32 = 7.6e-8 (0.76% of delta).
    acc = DPRECRoundAccountant(bits=32, method="paper", **RULE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.step(rounds=13)  # 9.9% of delta
    with pytest.warns(DPRECPrivacyWarning, match="bits") as record:
        acc.step()  # 10.6%: crosses
    assert len(record) == 1 and record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.step(rounds=100)  # warned once
    before = acc.accounting
    assert acc.rounds == 114
    with pytest.raises(ValueError, match=r"bits=32 is too few.*TOTAL bits.*overhead"):
        acc.step(rounds=100)  # would reach 1.6 delta: nothing composed
    assert acc.rounds == 114 and acc.accounting is before and acc.messages == 1140


def test_central_steps_fall_back_on_the_message_bound_when_rec_total_variation_reaches_half_delta():
    # Sound, central, bits = 32: REC's eta per 10-client round is 12 * 10 * e / 2^32 = 7.6e-8; 65 rounds
    # give 2 eta = 9.87e-6 < delta, the 66th would reach 1.0025e-5: from there the central guarantee is the
    # message observer's bound (post-processing), composed like any other round. No warning, no error.
    acc = DPRECRoundAccountant(bits=32, groups=1, threat_model="central", **RULE)
    msg = DPRECRoundAccountant(bits=32, groups=1, threat_model="messages", **RULE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = acc.step(rounds=65)
        after = acc.step()
    m65, m66 = msg.step(rounds=65), msg.step()
    assert out.epsilon <= m65.epsilon
    if out.overhead > 0.0:  # the total-variation route won at 65 rounds
        assert out.overhead == pytest.approx(650 * 12 * math.e / 2**32, rel=1e-12)
    assert after.epsilon == m66.epsilon and after.overhead == 0.0 and acc.rounds == 66 and acc.messages == 660
    # The server's guarantee depends on the bits only through the smallest group's K = 2^(bits // groups);
    # no overhead, no refusal.
    server = [DPRECRoundAccountant(bits=b, groups=1, **RULE).step(rounds=200) for b in (8, 32)]
    assert server[0].epsilon > server[1].epsilon and server[0].overhead == server[1].overhead == 0.0
    grouped = DPRECRoundAccountant(bits=32, groups=4, **RULE).step(rounds=200)
    assert grouped == dataclasses.replace(server[0], bits=32)


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: dprec_epsilon(**dict(RULE, bits=None), rounds=1, sampling="uniform"), ValueError, "sampling"),
        (lambda: dprec_epsilon(**dict(RULE, bits=None), rounds=1, sampling=None), ValueError, "sampling"),
        (lambda: dprec_delta(rounds=1, clients_per_round=1, num_clients=10, clip_multiplier=1.0, epsilon=1.0,
                             bits=None, sampling="x"), ValueError, "sampling"),
        (lambda: dprec_calibrate(target_epsilon=1.0, rounds=1, clients_per_round=1, num_clients=10, delta=1e-5,
                                 bits=None, sampling="x"), ValueError, "sampling"),
        (lambda: dprec_epsilon(**dict(RULE, bits=None, clients_per_round=1001), rounds=1, sampling="poisson"),
         ValueError, "clients_per_round"),
        (lambda: DPRECRoundAccountant(bits=40, sampling="x", **RULE), ValueError, "sampling"),
        (lambda: DPRECRoundAccountant(bits=40, sampling="without_replacement", reverse="both", **RULE), ValueError,
         "reverse"),
        (lambda: DPRECRoundAccountant(bits=40, rounds=0, **RULE), ValueError, "rounds"),
        (lambda: DPRECRoundAccountant(bits=40, groups=41, **RULE), ValueError, "groups"),
        (lambda: DPRECRoundAccountant(bits=0, **RULE), ValueError, "bits"),
        (lambda: DPRECRoundAccountant(bits=40, **RULE).step(clients_per_round=0), ValueError, "clients_per_round"),
        (lambda: DPRECRoundAccountant(bits=40, sampling="poisson", **RULE).step(clients_per_round=1001), ValueError,
         "clients_per_round"),
        (lambda: DPRECRoundAccountant(bits=40, **RULE).step(rounds=0), ValueError, "rounds"),
        (lambda: DPRECRoundAccountant(bits=40, **RULE).step(rounds=1.5), TypeError, "rounds"),
        (lambda: dprec_min_bits(messages=0, clip_multiplier=1.0, delta=1e-5), ValueError, "messages"),
        (lambda: dprec_min_bits(messages=1, clip_multiplier=1.0, delta=1e-5, groups=0), ValueError, "groups"),
        (lambda: dprec_min_bits(messages=1, clip_multiplier=1.0, delta=1e-5, fraction=1.0), ValueError, "fraction"),
        (lambda: sampled_gaussian_rdp_without_replacement(11, 10, 1.0, [2]), ValueError, "sample_size"),
        (lambda: sampled_gaussian_rdp_without_replacement(1, 0, 1.0, [2]), ValueError, "population"),
        (lambda: sampled_gaussian_rdp_without_replacement(1, 10, -1.0, [2]), ValueError, "noise_multiplier"),
        (lambda: sampled_gaussian_rdp_without_replacement(1, 10, 1.0, [1.0]), ValueError, "orders"),
    ],
)
def test_bad_arguments_are_named(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_without_replacement_edge_cases():
    orders = np.array([2.0, 3.5, 10.0])
    # Everyone sampled: the plain Gaussian with sensitivity 2C.
    np.testing.assert_allclose(sampled_gaussian_rdp_without_replacement(10, 10, 2.0, orders), 2 * orders / 4.0)
    assert np.all(sampled_gaussian_rdp_without_replacement(1, 10, math.inf, orders) == 0.0)
    assert np.all(np.isinf(sampled_gaussian_rdp_without_replacement(1, 10, 0.0, orders)))
    # Large orders stay finite and below the cap; the curve grows with the order.
    big = sampled_gaussian_rdp_without_replacement(1, 1000, 3.0, np.array([2.0, 100.0, 1500.0]))
    assert np.all(np.isfinite(big)) and np.all(np.diff(big) > 0) and big[-1] <= 2 * 1500 / 9.0


# --------------------------------------------------------------------------------------
# The round accountant's sampling_rate path (Poisson rates that are not multiples of 1/N;
# used by dprec.flower.DPRECStrategy(sampling="poisson"))
ACC = dict(clip_multiplier=0.5, bits=64, groups=1, num_clients=10, delta=1e-5, sampling="poisson")


def test_accountant_sampling_rate_equals_clients_per_round_when_integral():
    # 0.3 * 10 is 3 up to rounding: the same curve, the same rho count, the same numbers.
    by_count, by_rate = DPRECRoundAccountant(clients_per_round=3, **ACC), DPRECRoundAccountant(sampling_rate=0.3, **ACC)
    assert by_rate.clients_per_round == 3 and by_rate.sampling_rate == 0.3 and by_count.sampling_rate is None
    for _ in range(4):
        assert by_rate.step() == by_count.step()
    stepped = DPRECRoundAccountant(clients_per_round=5, **ACC)
    for _ in range(4):
        stepped.step(sampling_rate=0.3)
    assert stepped.accounting == by_count.accounting
    whole = dprec_epsilon(rounds=4, clients_per_round=3, num_clients=10, clip_multiplier=0.5, delta=1e-5, bits=64,
                          groups=1, sampling="poisson")
    assert by_rate.accounting == whole


def test_accountant_sampling_rate_between_multiples():
    acc = DPRECRoundAccountant(sampling_rate=0.25, **ACC)
    assert acc.clients_per_round == 3  # ceil(2.5): the expected count, rounded up, in rho
    result = acc.step(rounds=6)
    alphas = np.arange(2.0, 258.0)
    # bits: REC's messages as sent (server, zero), the seed-visible bound at rate 0.25, no overhead
    # (64 bits in one group: K taken at dprec's cap 2^30).
    fwd, rev = _rec_round(0.25, 0.5, alphas, 2**30)
    eps = max(_sound_eps(6 * fwd, alphas, 1e-5), _sound_eps(6 * rev, alphas, 1e-5))
    assert result.epsilon == pytest.approx(eps, rel=1e-10)
    assert (result.sampling_rate, result.messages, result.steps, result.rounds) == (0.25, 18, 6, 6)
    assert result.overhead == 0.0
    # The Gaussian variant (bits=None): the exact Poisson round at rate 0.25.
    gauss = DPRECRoundAccountant(sampling_rate=0.25, **dict(ACC, bits=None)).step(rounds=6)
    assert gauss.epsilon == pytest.approx(_sound_eps(6 * _poisson_round(0.25, 0.5, alphas), alphas, 1e-5), rel=1e-12)
    assert gauss.epsilon < result.epsilon
    # Central with bits: the Gaussian curves, REC's eta = 18 * 12 e^0.25 / 2^64 paid as (1 + e^eps) eta.
    central = DPRECRoundAccountant(sampling_rate=0.25, threat_model="central", **ACC).step(rounds=6)
    assert central.overhead == pytest.approx(18 * 12 * math.exp(0.25) / 2**64, rel=1e-12)
    assert central.epsilon == pytest.approx(gauss.epsilon, rel=1e-8) and central.epsilon >= gauss.epsilon
    lo = dprec_epsilon(rounds=6, clients_per_round=2, num_clients=10, clip_multiplier=0.5, delta=1e-5, bits=64,
                       groups=1, sampling="poisson")
    hi = dprec_epsilon(rounds=6, clients_per_round=3, num_clients=10, clip_multiplier=0.5, delta=1e-5, bits=64,
                       groups=1, sampling="poisson")
    assert lo.epsilon < result.epsilon < hi.epsilon
    # Mixed rates: the curves add up; the reported rate is the average.
    mixed = DPRECRoundAccountant(sampling_rate=0.25, **ACC)
    mixed.step(rounds=2)
    out = mixed.step(clients_per_round=2)
    assert out.sampling_rate == pytest.approx((2 * 0.25 + 0.2) / 3) and out.messages == 8


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: DPRECRoundAccountant(sampling_rate=0.0, **ACC), ValueError, "sampling_rate"),
        (lambda: DPRECRoundAccountant(sampling_rate=1.5, **ACC), ValueError, "sampling_rate"),
        (lambda: DPRECRoundAccountant(sampling_rate=0.5, clients_per_round=5, **ACC), ValueError, "not both"),
        (lambda: DPRECRoundAccountant(**ACC), TypeError, "clients_per_round"),
        (lambda: DPRECRoundAccountant(sampling_rate=0.5, **dict(ACC, sampling="without_replacement")), ValueError,
         "sampling_rate"),
        (lambda: DPRECRoundAccountant(clients_per_round=2, **dict(ACC, sampling="with_replacement")).step(
            sampling_rate=0.5), ValueError, "sampling_rate"),
        (lambda: DPRECRoundAccountant(clients_per_round=2, **ACC).step(2, sampling_rate=0.5), ValueError, "not both"),
    ],
)
def test_accountant_sampling_rate_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_codec_accountant_passes_the_sampling_rate():
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.5, bits=16)
    template = {"w": np.zeros(4, np.float32), "b": np.zeros(3, np.float32), "c": np.zeros(1, np.float32)}
    acc = codec.accountant(template, num_clients=10, delta=1e-5, sampling="poisson", sampling_rate=0.25)
    # 3 tensors of 16 bits: 48 total bits in 3 groups (K = 2^16 for the server's bound).
    ref = DPRECRoundAccountant(sampling_rate=0.25, **dict(ACC, bits=48, groups=3))
    assert acc.step(rounds=3) == ref.step(rounds=3)
    one_group = DPRECRoundAccountant(sampling_rate=0.25, **dict(ACC, bits=48, groups=1))
    assert one_group.step(rounds=3).epsilon < acc.accounting.epsilon


