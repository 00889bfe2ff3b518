"""The Accountant (dprec.accounting.accountant): heterogeneous composition, DP-REC included."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dprec.accounting import (
    DEFAULT_ORDERS,
    Accountant,
    DPRECEvent,
    GaussianEvent,
    RdpEvent,
    SampledGaussianEvent,
    dprec_epsilon,
    dprec_overhead,
    rdp_to_epsilon,
    sampled_gaussian_rdp,
)


def test_matches_dp_accounting_for_mixed_gaussian_events():
    dpa = pytest.importorskip("dp_accounting", reason="dp_accounting (test extra) is not installed")
    orders = [float(a) for a in DEFAULT_ORDERS if a == int(a)]  # see test_accounting_rdp for why
    ours = Accountant(orders=orders)
    ours.compose(SampledGaussianEvent(sampling_rate=0.01, noise_multiplier=1.1), count=500)
    ours.compose(GaussianEvent(noise_multiplier=20.0), count=3)
    for _ in range(200):
        ours.step(noise_multiplier=0.9, sample_rate=0.004)
    theirs = dpa.rdp.RdpAccountant(orders=orders)
    theirs.compose(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1)), 500)
    theirs.compose(dpa.GaussianDpEvent(20.0), 3)
    theirs.compose(dpa.PoissonSampledDpEvent(0.004, dpa.GaussianDpEvent(0.9)), 200)
    for delta in (1e-5, 1e-9):
        assert ours.get_epsilon(delta) == pytest.approx(theirs.get_epsilon(delta), rel=1e-6)
    for eps in (0.5, 2.0):
        assert ours.get_delta(eps) == pytest.approx(theirs.get_delta(eps), rel=1e-6)


def test_dprec_events_reproduce_the_dprec_accountant():
    n, t, b, c = 100, 1000, 10, 0.545
    delta = n**-1.1
    for reverse, bits in (("bound", None), ("exact", None), ("bound", 40)):
        # The paper's Algorithm 7 has no threat model: Accountant(threat_model=None).
        acc = Accountant(threat_model=None, relation=None, orders=np.arange(2, 258))
        for _ in range(10):  # rounds composed in ten chunks
            acc.compose(DPRECEvent(clip_multiplier=c, sampling_rate=1 / n, bits=bits, reverse=reverse, method="paper"), count=t * b // 10)
        direct = dprec_epsilon(rounds=t, clients_per_round=b, num_clients=n, clip_multiplier=c, delta=delta, bits=bits, reverse=reverse,
                               method="paper")
        eps, order = acc.get_epsilon_and_optimal_order(delta)
        assert eps == pytest.approx(direct.epsilon, rel=1e-12)
        assert order == direct.order
        assert acc.overhead_delta == pytest.approx(direct.overhead, rel=1e-12)


def test_dprec_composes_with_gaussian_steps():
    orders = DEFAULT_ORDERS
    acc = Accountant(threat_model=None, orders=orders)
    dprec = DPRECEvent(clip_multiplier=1.0, sampling_rate=0.01, bits=48, method="paper")
    acc.compose(dprec, count=500).compose(SampledGaussianEvent(0.02, 1.2), count=300)
    integer = orders == np.floor(orders)
    # Fractional orders drop out (eq. 62 is defined at integer orders only).
    assert np.all(np.isinf(acc.rdp[~integer]))
    expected_curve = 500 * 2 * sampled_gaussian_rdp(0.01, 1.0, orders[integer]) + 300 * sampled_gaussian_rdp(0.02, 1.2, orders[integer])
    np.testing.assert_allclose(acc.rdp[integer], expected_curve, rtol=1e-12)
    overhead = dprec_overhead(500, 1.0, 48)
    assert acc.overhead_delta == pytest.approx(overhead)
    eps = acc.get_epsilon(1e-6)
    assert eps == pytest.approx(rdp_to_epsilon(orders[integer], expected_curve, 1e-6 - overhead)[0], rel=1e-12)
    assert acc.get_delta(eps) == pytest.approx(1e-6, rel=1e-9)
    # Auto picks Mironov once DP-REC is present; Balle is refused with a reason.
    assert acc.get_epsilon(1e-6, method="mironov") == eps
    with pytest.raises(ValueError, match="method"):
        acc.get_epsilon(1e-6, method="balle")


def test_auto_uses_balle_without_dprec():
    acc = Accountant().compose(SampledGaussianEvent(0.01, 1.0), count=1000)
    assert acc.get_epsilon(1e-5) == acc.get_epsilon(1e-5, method="balle")
    assert acc.get_epsilon(1e-5) < acc.get_epsilon(1e-5, method="mironov")


def test_generic_rdp_event_and_history():
    acc = Accountant(orders=[2.0, 4.0, 8.0])
    event = RdpEvent(lambda a: 0.1 * a, name="linear")
    acc.compose(event, count=3)
    np.testing.assert_allclose(acc.rdp, 0.3 * np.array([2.0, 4.0, 8.0]))
    assert acc.history == [(event, 3)]
    assert Accountant().get_epsilon(1e-5) == 0.0
    assert Accountant().get_delta(1.0) == 0.0
    with pytest.raises(ValueError, match="linear"):
        Accountant(orders=[2.0]).compose(RdpEvent(lambda a: -a, name="linear"))


def test_overhead_larger_than_delta_fails_clearly():
    # StackOverflow at 42 bits: 90_000 steps at c = 1.227.
    delta = 342_477**-1.1
    ev = dict(clip_multiplier=1.227, sampling_rate=1 / 342_477, bits=42, groups=1)  # one group of 42 bits
    # method="paper" (no threat model): Theorem 1's 12 rho / 2^b >= delta.
    paper = Accountant(threat_model=None, orders=np.arange(2, 40))
    paper.compose(DPRECEvent(**ev, method="paper"), count=90_000)
    with pytest.raises(ValueError, match="overhead"):
        paper.get_epsilon(delta)
    assert paper.get_delta(100.0) == pytest.approx(dprec_overhead(90_000, 1.227, 42), rel=1e-6)
    # Sound, central: REC's total-variation cost eta = 90_000 * 12 e^(c^2) / 2^42 = 1.1e-6 > delta / 2.
    eta = 90_000 * 12 * math.exp(1.227**2) / 2**42
    central = Accountant(threat_model="central", relation="zero", orders=np.arange(2, 40))
    central.compose(DPRECEvent(**ev), count=90_000)
    assert central.overhead_delta == 0.0 and central.rec_total_variation == pytest.approx(eta, rel=1e-9)
    with pytest.raises(ValueError, match=r"total-variation.*bits"):
        central.get_epsilon(delta)
    for eps in (0.5, 3.0):  # delta(eps) pays (1 + e^eps) eta on top of the conversion
        assert central.get_delta(eps) >= min(1.0, (1 + math.exp(eps)) * eta)
    # Sound, server: REC's messages bounded directly, no overhead, any bits.
    server = Accountant(threat_model="server", relation="zero", orders=np.arange(2, 40))
    server.compose(DPRECEvent(**ev), count=90_000)
    assert server.overhead_delta == 0.0 and server.rec_total_variation == 0.0
    assert math.isfinite(server.get_epsilon(delta))
    # The bits enter through the smallest group's K = 2^(bits // groups): 42 bits in 6 groups is K = 2^7, as one
    # group of 7 bits, and costs more than 42 bits in one group (K = 2^42, taken at 2^30).
    seven = Accountant(threat_model="server", relation="zero", orders=np.arange(2, 40))
    seven = seven.compose(DPRECEvent(**dict(ev, bits=7)), count=90_000).get_epsilon(delta)
    six = Accountant(threat_model="server", relation="zero", orders=np.arange(2, 40))
    assert six.compose(DPRECEvent(**dict(ev, groups=6)), count=90_000).get_epsilon(delta) == seven
    assert seven > server.get_epsilon(delta)
    with pytest.raises(ValueError, match="groups must be <= bits"):
        DPRECEvent(**dict(ev, bits=5, groups=6))


@pytest.mark.parametrize(
    "call, exc, name",
    [
        (lambda: SampledGaussianEvent(1.5, 1.0), ValueError, "sampling_rate"),
        (lambda: SampledGaussianEvent(0.1, -1.0), ValueError, "noise_multiplier"),
        (lambda: GaussianEvent(-2.0), ValueError, "noise_multiplier"),
        (lambda: DPRECEvent(0.0, 0.1, bits=7), ValueError, "clip_multiplier"),
        (lambda: DPRECEvent(1.0, 0.1, bits=0), ValueError, "bits"),
        (lambda: DPRECEvent(1.0, 0.1, bits=7, reverse="x"), ValueError, "reverse"),
        (lambda: RdpEvent(3.0), TypeError, "rdp_fn"),
        (lambda: Accountant(orders=[0.5]), ValueError, "orders"),
        (lambda: Accountant().compose("gaussian"), TypeError, "event"),
        (lambda: Accountant().compose(GaussianEvent(1.0), count=-1), ValueError, "count"),
        (lambda: Accountant().get_epsilon(1.5), ValueError, "delta"),
        (lambda: Accountant().get_delta(-0.1), ValueError, "epsilon"),
        (lambda: Accountant().compose(GaussianEvent(1.0)).get_epsilon(1e-5, method="x"), ValueError, "method"),
    ],
)
def test_bad_input_names_the_parameter(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_infinite_noise_and_zero_noise():
    acc = Accountant().compose(GaussianEvent(math.inf), count=5)
    assert acc.get_epsilon(1e-5) == 0.0
    acc = Accountant().compose(GaussianEvent(0.0))
    assert acc.get_epsilon(1e-5) == math.inf


def test_ddg_skellam_qmgeo_events_wrap_their_rdp_functions():
    from dprec.accounting import DDGEvent, QMGeoEvent, SkellamEvent, ddg_rdp, qmgeo_rdp, skellam_rdp

    orders = np.array([2.0, 3.0, 8.0])
    ddg = dict(l2_sensitivity=1.0, noise_stddev=5.0, num_clients=10, dim=100)
    qm = dict(levels=8, p=0.9, dim=3)
    for event_cls, fn, params in ((DDGEvent, ddg_rdp, ddg), (SkellamEvent, skellam_rdp, ddg), (QMGeoEvent, qmgeo_rdp, qm)):
        acc = Accountant(orders=orders).compose(event_cls(params), count=4)
        np.testing.assert_allclose(acc.rdp, 4 * np.asarray(fn(orders, **params)), rtol=1e-12)
        assert acc.get_epsilon(1e-5) >= 0.0
    with pytest.raises(ValueError, match="noise_stddev"):
        DDGEvent(dict(ddg, noise_stddev=-1.0))


def test_keyword_events_and_opacus_names():
    from dprec.accounting import DDGEvent, QMGeoEvent, SkellamEvent

    ddg = dict(l2_sensitivity=1.0, noise_stddev=5.0, num_clients=10, dim=100)
    # Keyword construction, as dp_accounting's events; the dict form stays, and is copied.
    assert DDGEvent(**ddg) == DDGEvent(ddg) == DDGEvent(params=ddg)
    params = dict(ddg)
    event = SkellamEvent(params)
    params["noise_stddev"] = 0.001
    assert event.params["noise_stddev"] == 5.0
    orders = np.array([2.0, 3.0])
    inputs = [-0.5, 0.5]
    np.testing.assert_array_equal(
        Accountant(orders=orders).compose(QMGeoEvent(levels=8, p=0.9, inputs=inputs)).rdp,
        Accountant(orders=orders).compose(QMGeoEvent(dict(levels=8, p=0.9, inputs=inputs))).rdp,
    )
    with pytest.raises(ValueError, match="noise_stddev"):
        DDGEvent(**dict(ddg, noise_stddev=-1.0))
    with pytest.raises(TypeError, match="noise_stddev"):
        DDGEvent(ddg, noise_stddev=2.0)  # given twice
    with pytest.raises(TypeError, match="params"):
        SkellamEvent([1.0])
    # Opacus' name for eps(delta).
    acc = Accountant().step(noise_multiplier=1.1, sample_rate=0.01)
    assert acc.get_privacy_spent(delta=1e-5) == acc.get_epsilon_and_optimal_order(1e-5)


def test_dprec_event_exact_reverse_limit_is_checked_at_construction():
    with pytest.raises(ValueError, match="clip_multiplier"):
        DPRECEvent(150.0, 0.01, bits=None, reverse="exact")
    DPRECEvent(150.0, 0.01, bits=None)  # the bound has no limit
    DPRECEvent(150.0, 1.0, bits=None, reverse="exact")  # nor the local (q = 1) case
