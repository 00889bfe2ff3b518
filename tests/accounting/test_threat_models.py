"""Threat models and relations on every guarantee (issue 30): sound DP-REC, baselines, the Accountant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from dprec.accounting import (
    RELATIONS,
    THREAT_MODELS,
    Accountant,
    DDGEvent,
    DPRECEvent,
    DPRECRoundAccountant,
    GaussianEvent,
    PrivacyGuarantee,
    RdpEvent,
    SampledGaussianEvent,
    dprec_calibrate,
    dprec_delta,
    dprec_epsilon,
    dprec_local_epsilon,
    dprec_step_rdp,
    gaussian_guarantee,
    joint_noise_guarantee,
    sampled_gaussian_epsilon,
    sampled_gaussian_rdp,
    sampled_gaussian_rdp_without_replacement,
)
from dprec.accounting.dprec_rec import _codec_epsilon, _codec_local_epsilon, dprec_reverse_rdp
from dprec.accounting.rdp import DEFAULT_ORDERS, rdp_to_epsilon

MNIST = dict(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=100**-1.1, bits=None)
ORDERS = np.arange(2.0, 258.0)


def _balle(curve, a, delta):
    eps = curve + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    return float(max(0.0, eps.min()))


def _attributed(q, c, a):
    return np.logaddexp(math.log1p(-q), math.log(q) + a * (a - 1.0) * c * c / 2.0) / (a - 1.0)


# Which (sampling, threat model, relation) combinations are finite: the contract's table.
FINITE = {
    ("with_replacement", "server", "zero"), ("with_replacement", "messages", "zero"),
    ("with_replacement", "messages", "add_remove"), ("with_replacement", "central", "zero"),
    ("with_replacement", "central", "add_remove"),
    ("poisson", "server", "zero"), ("poisson", "messages", "zero"), ("poisson", "central", "zero"),
    ("without_replacement", "server", "zero"), ("without_replacement", "messages", "zero"),
    ("without_replacement", "central", "zero"),
}


@pytest.mark.parametrize("sampling", ["with_replacement", "poisson", "without_replacement"])
@pytest.mark.parametrize("threat_model", THREAT_MODELS)
@pytest.mark.parametrize("relation", RELATIONS)
def test_every_combination_is_finite_or_infinite_with_a_reason(sampling, threat_model, relation):
    r = dprec_epsilon(**MNIST, sampling=sampling, threat_model=threat_model, relation=relation)
    assert (r.threat_model, r.relation, r.method) == (threat_model, relation, "sound")
    assert set(r.epsilons) == set(RELATIONS) and r.epsilons[relation] == r.epsilon
    g = r.guarantee
    assert isinstance(g, PrivacyGuarantee) and g.details is r
    if (sampling, threat_model, relation) in FINITE:
        assert math.isfinite(r.epsilon) and r.finite and relation not in r.reasons
    else:
        assert r.epsilon == math.inf and not g.finite
        assert len(r.reasons[relation]) > 20 and r.reasons[relation] in g.summary()
        with pytest.raises(ValueError, match="threat_model") as info:
            dprec_calibrate(target_epsilon=5.0, rounds=1000, clients_per_round=10, num_clients=100,
                            delta=100**-1.1, bits=None, sampling=sampling, threat_model=threat_model,
                            relation=relation)
        assert "relation" in str(info.value) and str(THREAT_MODELS) in str(info.value)
        assert dprec_delta(rounds=1000, clients_per_round=10, num_clients=100, clip_multiplier=0.545, epsilon=5.0,
                           bits=None, sampling=sampling, threat_model=threat_model, relation=relation)[0] == 1.0
    # dprec_step_rdp gives the same finiteness.
    q = 0.01 if sampling == "with_replacement" else 0.1
    fwd, rev = dprec_step_rdp(0.545, q, ORDERS, threat_model=threat_model, relation=relation, sampling=sampling,
                              num_clients=100)
    assert np.all(np.isfinite(fwd)) == ((sampling, threat_model, relation) in FINITE)


def test_server_add_remove_reason_and_central_equals_messages():
    r = dprec_epsilon(**MNIST, threat_model="server", relation="add_remove")
    assert "takes part at all" in r.reasons["add_remove"]
    for rel in RELATIONS:
        m = dprec_epsilon(**MNIST, threat_model="messages", relation=rel)
        c = dprec_epsilon(**MNIST, threat_model="central", relation=rel)
        assert c.epsilon == m.epsilon
    assert "nothing better is proved" in dprec_epsilon(**MNIST, threat_model="central").composition


def test_step_curves_are_the_contract_formulas():
    c, n = 0.545, 100
    q = 1 / n
    f, r = dprec_step_rdp(c, q, ORDERS, threat_model="messages", relation="add_remove", sampling="with_replacement",
                          num_clients=n)
    np.testing.assert_allclose(f, sampled_gaussian_rdp(q, 1 / (2 * c), ORDERS), rtol=1e-12)
    np.testing.assert_allclose(r, dprec_reverse_rdp(2 * c, q, ORDERS, reverse="exact"), rtol=1e-12)
    assert np.all(r <= f * (1 + 1e-12))
    f, r = dprec_step_rdp(c, q, ORDERS, threat_model="messages", relation="zero", sampling="with_replacement",
                          num_clients=n)
    a = np.asarray(ORDERS, dtype=float)
    sg = sampled_gaussian_rdp(q, 1 / (2 * c), ORDERS)
    # The hockey-stick dominance bound, written out again: log(E_S[L^a] + a(a-1) q^2 chi^2(N(2c)||N(0)) / 2) / (a-1).
    dominated = np.logaddexp((a - 1) * sg, np.log(a * (a - 1) * q * q * np.expm1(4 * c * c) / 2)) / (a - 1)
    expected = np.minimum(_attributed(q, c, ORDERS), dominated)
    np.testing.assert_allclose(f, expected, rtol=1e-9)
    np.testing.assert_array_equal(f, r)
    # Each bound is the smaller one somewhere on this grid (low orders: dominance), so the min matters;
    # and the size-1 subsample bound (WBK), also valid, is nowhere below the curve.
    assert np.any(dominated < _attributed(q, c, ORDERS)) and np.any(dominated > _attributed(q, c, ORDERS))
    assert np.all(sampled_gaussian_rdp_without_replacement(1, n, 1 / c, ORDERS) >= f * (1 - 1e-12))
    f, r = dprec_step_rdp(c, 0.1, ORDERS, threat_model="server", relation="zero", sampling="poisson", num_clients=n)
    np.testing.assert_allclose(f, _attributed(0.1, c, ORDERS), rtol=1e-12)


def test_paper_reproduction_and_its_labels():
    paper = dprec_epsilon(**MNIST, method="paper")
    assert paper.epsilon == pytest.approx(3.016, abs=1e-3)
    assert paper.threat_model is None and paper.relation is None and paper.method == "paper"
    assert "not a guarantee against a message observer" in paper.caveat
    assert paper.guarantee.caveat == paper.caveat and paper.local is not None


@pytest.mark.parametrize("threat_model", THREAT_MODELS)
def test_sound_is_never_below_the_paper_at_mnist(threat_model):
    paper = dprec_epsilon(**MNIST, method="paper").epsilon
    for rel in RELATIONS:
        r = dprec_epsilon(**MNIST, threat_model=threat_model, relation=rel)
        assert r.epsilon >= paper
    # The exact epsilon of the Gaussian counterexample under add/remove is about 4.3:
    # the sound bound must not be below it.
    assert dprec_epsilon(**MNIST, threat_model="messages", relation="add_remove").epsilon >= 4.3


@pytest.mark.parametrize("threat_model, bits", [("messages", None), ("central", None), ("central", 40)])
def test_both_tails_is_the_max_of_the_balle_conversions_at_half_delta(threat_model, bits):
    # Add/remove with replacement: the sampled Gaussian at 2c forward, the exact reverse, both tails at
    # delta / 2. With bits (central only: REC's seed-visible messages have no add/remove bound), REC's
    # total-variation cost eta is paid as (1 + e^eps) eta: eps is the fixed point of the conversion at
    # (delta - (1 + e^eps) eta) / 2.
    kw = dict(MNIST, bits=bits, groups=1)  # one group of `bits` bits
    r = dprec_epsilon(**kw, threat_model=threat_model, relation="add_remove")
    c, q, steps = 0.545, 0.01, 10_000
    fwd = steps * sampled_gaussian_rdp(q, 1 / (2 * c), ORDERS)
    rev = steps * dprec_reverse_rdp(2 * c, q, ORDERS, reverse="exact")
    eta = 0.0 if bits is None else 12 * 10_000 * math.exp(c * c) / 2**bits
    assert r.overhead == pytest.approx(eta, rel=1e-12) and (eta == 0.0) == (bits is None)
    half = (MNIST["delta"] - (1 + math.exp(r.epsilon)) * eta) / 2
    fixed = max(_balle(fwd, ORDERS, half), _balle(rev, ORDERS, half))
    # (the implementation may nudge eps up by ~1e-9 so that the delta check holds after rounding; never down)
    assert r.epsilon == pytest.approx(fixed, rel=1e-8) and r.epsilon >= fixed * (1 - 1e-12)
    # Halving delta costs something: the full-delta conversion would be smaller.
    assert r.epsilon > _balle(fwd, ORDERS, MNIST["delta"] - 2 * eta)
    if bits is not None:
        # REC's cost is paid: above the Gaussian variant's epsilon, and not by the (delta - 2 eta) / 2 lower bound.
        gauss = dprec_epsilon(**dict(MNIST, bits=None), threat_model=threat_model, relation="add_remove").epsilon
        lower = max(_balle(fwd, ORDERS, MNIST["delta"] / 2 - eta), _balle(rev, ORDERS, MNIST["delta"] / 2 - eta))
        assert r.epsilon > lower > gauss
        # A seed-visible message observer has no add/remove bound for REC's messages.
        msg = dprec_epsilon(**kw, threat_model="messages", relation="add_remove")
        assert msg.epsilon == math.inf and "seed" in msg.reasons["add_remove"]


def test_local_guarantee_by_hand():
    c, n, t, b, delta = 0.7, 50, 20, 5, 1e-4
    r = dprec_epsilon(rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=delta, bits=None,
                      sampling="poisson")
    loc = r.local
    steps, q, tail = t, b / n, delta / 10
    k_max = next(k for k in range(steps + 1) if binom.sf(k, steps, q) <= tail)
    assert loc.max_participations == k_max and binom.sf(k_max - 1, steps, q) > tail
    assert loc.expected_participations == 2  # T q = 2
    assert loc.tail_probability == tail and loc.delta_max == pytest.approx(delta + tail)

    def by_hand(k):
        return _balle(k * ORDERS * c * c / 2, ORDERS, delta / 2)

    assert loc.per_message == pytest.approx(by_hand(1), rel=1e-12)
    assert loc.epsilon_expected == pytest.approx(by_hand(2), rel=1e-12)
    assert loc.epsilon_max == pytest.approx(by_hand(k_max), rel=1e-12)
    # The local epsilon function is the same number.
    assert dprec_local_epsilon(clip_multiplier=c, delta=delta, bits=None, rounds=2).epsilon == pytest.approx(by_hand(2))
    assert "local" in r.summary()


def test_local_epsilon_threat_model_and_relation():
    r = dprec_local_epsilon(clip_multiplier=0.5, delta=1e-5, bits=None, relation="add_remove")
    assert r.epsilon == math.inf and "sends anything" in r.reasons["add_remove"]
    with pytest.raises(ValueError, match="threat_model"):
        dprec_local_epsilon(clip_multiplier=0.5, delta=1e-5, bits=None, threat_model="central")
    with pytest.raises(ValueError, match="method"):
        dprec_local_epsilon(clip_multiplier=0.5, delta=1e-5, bits=None, threat_model="server", method="paper")


def test_bad_inputs_name_the_argument_and_list_the_choices():
    with pytest.raises(ValueError, match=r"threat_model must be one of \('central', 'messages', 'server'\)"):
        dprec_epsilon(**MNIST, threat_model="curious")
    with pytest.raises(ValueError, match=r"relation must be one of \('add_remove', 'zero'\)"):
        dprec_epsilon(**MNIST, relation="replace")
    with pytest.raises(ValueError, match=r"method must be one of \('sound', 'paper'\)"):
        dprec_epsilon(**MNIST, method="tight")
    with pytest.raises(ValueError, match="method='paper'.*with_replacement"):
        dprec_epsilon(**MNIST, method="paper", sampling="poisson")
    with pytest.raises(ValueError, match="method='paper' is the paper's analysis"):
        dprec_epsilon(**MNIST, method="paper", threat_model="messages")
    with pytest.raises(ValueError, match="threat_model"):
        Accountant(threat_model="shuffler")
    with pytest.raises(ValueError, match="conversion"):
        sampled_gaussian_epsilon(1.0, 0.1, 10, 1e-5, conversion="exact")
    with pytest.raises(ValueError, match="threat_model"):
        DPRECRoundAccountant(clients_per_round=10, num_clients=100, clip_multiplier=0.5, delta=1e-5, bits=None,
                             threat_model="x")


def test_calibration_round_trips_under_the_sound_method():
    kw = dict(rounds=1000, clients_per_round=10, num_clients=100, delta=100**-1.1, bits=None,
              threat_model="messages", relation="add_remove")
    c = dprec_calibrate(target_epsilon=6.0, **kw)
    assert dprec_epsilon(clip_multiplier=c, **kw).epsilon == pytest.approx(6.0, rel=1e-8)
    assert c < dprec_calibrate(target_epsilon=6.0, **dict(kw, threat_model=None, relation=None), method="paper")


def test_round_accountant_and_codec_entry_points_match_dprec_epsilon():
    for tm, rel in (("server", "zero"), ("messages", "add_remove")):
        acc = DPRECRoundAccountant(clients_per_round=10, num_clients=100, clip_multiplier=0.545, delta=100**-1.1,
                                   bits=60, groups=1, threat_model=tm, relation=rel)
        got = acc.step(rounds=50)
        direct = dprec_epsilon(**dict(MNIST, rounds=50, bits=60, groups=1), threat_model=tm, relation=rel)
        assert got == direct and acc.threat_model == tm and acc.relation == rel
        # The codec passes its groups (here 4 x 15 bits: K = 2^15 for REC's message bound); so must the direct call.
        codec = _codec_epsilon(clip_multiplier=0.545, bits=60, groups=4, rounds=50, clients_per_round=10,
                               num_clients=100, delta=100**-1.1, sampling="with_replacement", reverse="bound",
                               threat_model=tm, relation=rel)
        grouped = dprec_epsilon(**dict(MNIST, rounds=50, bits=60), groups=4, threat_model=tm, relation=rel)
        assert codec == grouped
        grouped_acc = DPRECRoundAccountant(clients_per_round=10, num_clients=100, clip_multiplier=0.545,
                                           delta=100**-1.1, bits=60, groups=4, threat_model=tm, relation=rel)
        assert grouped_acc.step(rounds=50) == grouped
        if (tm, rel) == ("server", "zero"):
            assert grouped.epsilon > direct.epsilon  # K = 2^15 against 2^30 (60 bits in one group, capped)
    assert _codec_epsilon(clip_multiplier=0.545, bits=60, groups=4, rounds=50, clients_per_round=10, num_clients=100,
                          delta=100**-1.1, sampling="with_replacement", reverse="bound").threat_model == "server"
    local = _codec_local_epsilon(clip_multiplier=0.545, bits=60, groups=4, delta=1e-5, rounds=3)
    assert local.threat_model == "server" and local.relation == "zero"
    assert local == dprec_local_epsilon(clip_multiplier=0.545, bits=60, groups=4, delta=1e-5, rounds=3)
    assert local.epsilon > dprec_local_epsilon(clip_multiplier=0.545, bits=60, groups=1, delta=1e-5, rounds=3).epsilon


def test_dp_fedavg_threat_models_and_pld_is_tighter_at_the_demo_settings():
    pytest.importorskip("dp_accounting")
    # The demo: N = 100, B = 10 (q = 0.1), T = 300, delta = N^-1.1; z for eps ~ 16 and ~ 6.
    delta = 100**-1.1
    for z in (0.62, 0.9, 1.3):
        pld = sampled_gaussian_epsilon(z, 0.1, 300, delta, conversion="pld")
        rdp = sampled_gaussian_epsilon(z, 0.1, 300, delta, conversion="rdp-balle")
        assert pld.conversion.startswith("pld") and rdp.conversion == "rdp-balle"
        assert pld.epsilon < rdp.epsilon
        assert sampled_gaussian_epsilon(z, 0.1, 300, delta).conversion.startswith("pld")  # auto
    assert sampled_gaussian_epsilon(1.0, 0.1, 300, delta, threat_model="server").epsilon == math.inf
    assert sampled_gaussian_epsilon(1.0, 0.1, 300, delta, threat_model="server", secure_aggregation=True).epsilon == math.inf
    assert sampled_gaussian_epsilon(1.0, 0.1, 300, delta, threat_model="messages").epsilon == math.inf
    # Secure aggregation hides the messages but not how many there are: the message observer sees whether the
    # target took part, so zero-out gets the participation mixture of the unsampled Gaussian (no amplification),
    # written out here; add/remove is inf with that reason.
    secagg = sampled_gaussian_epsilon(1.0, 0.1, 300, delta, threat_model="messages", secure_aggregation=True)
    central = sampled_gaussian_epsilon(1.0, 0.1, 300, delta)
    assert central.epsilons["zero"] == central.epsilon == central.epsilons["add_remove"]
    assert secagg.epsilon == math.inf and "masked messages" in secagg.reasons["add_remove"]
    a = np.asarray(DEFAULT_ORDERS, dtype=float)
    mixture = 300 * np.logaddexp(math.log(0.9), math.log(0.1) + (a - 1.0) * a / 2.0) / (a - 1.0)
    assert secagg.epsilons["zero"] == pytest.approx(rdp_to_epsilon(a, mixture, delta, method="balle")[0], rel=1e-12)
    assert secagg.epsilons["zero"] > central.epsilon and "zero" not in secagg.reasons
    assert "participation seen" in secagg.sampling and secagg.conversion == "rdp-balle"
    # Without client sampling there is nothing to hide: the central number.
    full = sampled_gaussian_epsilon(3.0, 1.0, 5, delta, threat_model="messages", secure_aggregation=True,
                                    conversion="rdp-balle")
    assert full.epsilons["zero"] == sampled_gaussian_epsilon(3.0, 1.0, 5, delta, conversion="rdp-balle").epsilon
    g = sampled_gaussian_epsilon(1.0, 0.1, 300, delta, threat_model="server")
    assert "unnoised sum" in g.reasons["add_remove"]
    # Joint noise: finite for all three under zero-out (the default), the same number; add/remove is
    # inf (removing a client removes its noise share).
    values = {tm: joint_noise_guarantee(1.0, 0.1, delta, rounds=300, threat_model=tm).epsilon for tm in THREAT_MODELS}
    assert len(set(values.values())) == 1 and math.isfinite(values["server"])
    for tm in THREAT_MODELS:
        ar = joint_noise_guarantee(1.0, 0.1, delta, rounds=300, threat_model=tm, relation="add_remove")
        assert ar.epsilon == math.inf and "share of the noise" in ar.reasons["add_remove"]


def test_rdp_balle_baseline_is_the_hand_conversion():
    g = gaussian_guarantee(1.1, 1e-5, sample_rate=0.01, steps=1000, conversion="rdp-balle", orders=ORDERS)
    assert g.epsilon == pytest.approx(_balle(1000 * sampled_gaussian_rdp(0.01, 1.1, ORDERS), ORDERS, 1e-5), rel=1e-12)


def test_accountant_threat_models():
    delta = 1e-5
    # DP-FedAvg noise: central only; joint noise and DDG: all three.
    for tm in THREAT_MODELS:
        acc = Accountant(threat_model=tm).compose(SampledGaussianEvent(0.01, 1.1), count=100)
        g = acc.guarantee(delta)
        assert g.threat_model == tm and g.relation == "zero"  # the Accountant's default relation
        if tm == "central":
            assert math.isfinite(acc.get_epsilon(delta)) and g.finite
        else:
            assert acc.get_epsilon(delta) == math.inf and "unnoised" in g.reasons["add_remove"]
            assert acc.get_delta(1.0) == 1.0
        joint = Accountant(threat_model=tm).compose(SampledGaussianEvent(0.01, 1.1, noise="clients"), count=100)
        assert joint.get_epsilon(delta) == Accountant().compose(SampledGaussianEvent(0.01, 1.1), count=100).get_epsilon(delta)
        assert "share of the noise" in joint.guarantee(delta).reasons["add_remove"]  # distributed noise: zero only
        ddg = Accountant(threat_model=tm, orders=ORDERS).compose(
            DDGEvent(l2_sensitivity=1.0, noise_stddev=5.0, num_clients=10, dim=100), count=10)
        assert math.isfinite(ddg.get_epsilon(delta))
        assert ddg.guarantee(delta).epsilons["add_remove"] == math.inf
    # RdpEvent: declared threat models.
    ev = RdpEvent(lambda a: 0.01 * a, name="lin", threat_models=("central", "messages"))
    assert math.isfinite(Accountant(threat_model="messages").compose(ev).get_epsilon(delta))
    assert "lin" in Accountant(threat_model="server").compose(ev).guarantee(delta).reasons["add_remove"]
    with pytest.raises(ValueError, match="threat_models"):
        RdpEvent(lambda a: a, threat_models=("everyone",))
    # Plain Gaussian, zero relation.
    g = Accountant(relation="zero").compose(GaussianEvent(3.0), count=2).guarantee(delta)
    assert g.epsilons["zero"] == g.epsilons["add_remove"] == g.epsilon


@pytest.mark.parametrize(
    "tm, rel, bits",
    [("server", "zero", 50), ("messages", "zero", 50), ("messages", "add_remove", None), ("central", "zero", 50),
     ("central", "add_remove", 50), ("central", "zero", None)],
)
def test_accountant_dprec_events_equal_dprec_epsilon(tm, rel, bits):
    acc = Accountant(threat_model=tm, relation=rel, orders=ORDERS)
    ev = DPRECEvent(clip_multiplier=0.545, sampling_rate=0.01, bits=bits, groups=1, num_clients=100)
    for _ in range(10):
        acc.compose(ev, count=1000)
    direct = dprec_epsilon(**dict(MNIST, bits=bits, groups=1), threat_model=tm, relation=rel)
    assert math.isfinite(direct.epsilon)
    eta = 0.0 if bits is None or tm != "central" else 12 * 10_000 * math.exp(0.545**2) / 2**50
    # (with eta the fixed point may be nudged up by ~1e-9 after rounding, differently for 10 x 1000 and 10000 steps)
    assert acc.get_epsilon(MNIST["delta"]) == pytest.approx(direct.epsilon, rel=1e-12 if eta == 0.0 else 1e-8)
    # Sound events add no unconditional overhead; REC's total-variation cost (central, bits) accumulates apart.
    assert acc.overhead_delta == 0.0
    assert acc.rec_total_variation == pytest.approx(eta, rel=1e-9) and direct.overhead == pytest.approx(eta, rel=1e-9)
    assert acc.get_delta(direct.epsilon) == pytest.approx(MNIST["delta"], rel=1e-6)
    if bits is not None and tm != "central":
        # REC's seed-visible message curves: the bits enter through K = 2^(bits // groups) (capped at 2^30, so
        # 50 bits is 30), fewer candidates cost more; the cost is far above the Gaussian variant.
        assert dprec_epsilon(**dict(MNIST, bits=8, groups=1), threat_model=tm, relation=rel).epsilon > direct.epsilon
        assert dprec_epsilon(**dict(MNIST, bits=30, groups=1), threat_model=tm, relation=rel).epsilon == direct.epsilon
        grouped = Accountant(threat_model=tm, relation=rel, orders=ORDERS).compose(
            DPRECEvent(clip_multiplier=0.545, sampling_rate=0.01, bits=48, groups=6, num_clients=100), count=10_000)
        assert grouped.get_epsilon(MNIST["delta"]) == pytest.approx(
            dprec_epsilon(**dict(MNIST, bits=48), groups=6, threat_model=tm, relation=rel).epsilon, rel=1e-12)
        assert direct.epsilon > 2 * dprec_epsilon(**MNIST, threat_model=tm, relation=rel).epsilon
        assert math.isinf(Accountant(threat_model=tm, relation="add_remove").compose(ev).get_epsilon(1e-5))
    # A paper event has no threat model: inf with the caveat as the reason.
    paper = Accountant(threat_model=tm).compose(DPRECEvent(0.545, 0.01, bits=None, method="paper"), count=10)
    assert paper.get_epsilon(1e-5) == math.inf
    assert "Algorithm 7" in paper.guarantee(1e-5).reasons[rel]
