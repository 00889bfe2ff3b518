"""Adaptive clipping's noisy quantile bits in DP-REC's round accountant (``quantile_noise``).

Each message carries one bit ``1[||update|| <= C_t] + N(0, s^2)``: sensitivity 1, Renyi cost
``a / (2 s^2)`` per bit, added unamplified per step (a slot with replacement, a round otherwise) to
every finite curve (docs: *Which guarantee do I have?*, section 4.10).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from scipy import integrate  # noqa: E402

from dprec import DPRECCodec  # noqa: E402
from dprec.accounting import (  # noqa: E402 - after the SciPy check
    RELATIONS,
    SAMPLING_SCHEMES,
    THREAT_MODELS,
    DPRECRoundAccountant,
    dprec_epsilon,
    dprec_local_epsilon,
    dprec_step_rdp,
    epsilon_per_order,
    quantile_bits_rdp,
    rec_message_log_moments,
)
from dprec.accounting.dprec_rec import DPREC_DEFAULT_ORDERS  # noqa: E402

N, B, T = 100, 10, 20
RUN = dict(clip_multiplier=0.545, num_clients=N, clients_per_round=B, delta=1e-3)
# bits=None (the Gaussian variant), REC as sent in 6 groups of 7 bits, and one 60-bit group (whose
# "central" route pays REC's total-variation cost).
VARIANTS = [(None, None), (42, 6), (60, 1)]
ORDERS = DPREC_DEFAULT_ORDERS


def _fields(result):
    return {f.name: repr(getattr(result, f.name)) for f in dataclasses.fields(result)}


def _per_round(sampling):
    """(steps per round, k = most messages of one client in a round)."""
    return (B, B) if sampling == "with_replacement" else (1, 1)


def _mix(q, x):
    """f(x) = log(1 - q + q e^x), computed independently of the library."""
    if q == 1.0:
        return x
    return np.logaddexp(math.log1p(-q), math.log(q) + x)


# --------------------------------------------------------------------------------------
# quantile_noise=None changes nothing; the added term is the closed form
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
@pytest.mark.parametrize("threat_model", THREAT_MODELS)
@pytest.mark.parametrize("bits,groups", VARIANTS)
def test_none_is_bit_identical(sampling, threat_model, bits, groups):
    kw = dict(RUN, bits=bits, groups=groups, sampling=sampling, threat_model=threat_model)
    plain = DPRECRoundAccountant(**kw)
    none = DPRECRoundAccountant(**kw, quantile_noise=None)
    assert none.quantile_noise is None
    r_plain, r_none = plain.step(rounds=T), none.step(rounds=T)
    assert _fields(r_none) == _fields(r_plain) == _fields(dprec_epsilon(rounds=T, **kw))
    assert repr(none) == repr(plain) and "quantile" not in r_none.summary()


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
def test_quantile_bits_rdp_closed_form(sampling):
    s = 1.7
    _, k = _per_round(sampling)
    got = quantile_bits_rdp(s, ORDERS, messages_per_round=k)
    assert np.allclose(got, k * ORDERS / (2.0 * s * s), rtol=1e-14, atol=0.0)
    assert np.allclose(quantile_bits_rdp(s, [2.5, 7.0]), np.array([2.5, 7.0]) / (2.0 * s * s), rtol=1e-14, atol=0.0)
    assert np.array_equal(quantile_bits_rdp(s, None), quantile_bits_rdp(s, DPREC_DEFAULT_ORDERS))


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
@pytest.mark.parametrize("threat_model", THREAT_MODELS)
@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("bits,groups", [(None, None), (42, 6)])
def test_added_term_is_k_a_over_2s2_per_round(sampling, threat_model, relation, bits, groups):
    s = 2.0
    kw = dict(RUN, bits=bits, groups=groups, sampling=sampling, threat_model=threat_model, relation=relation)
    base = DPRECRoundAccountant(**kw).step(rounds=T)
    with_bits = DPRECRoundAccountant(**kw, quantile_noise=s).step(rounds=T)
    # Infinite stays infinite, with the same reason, for both relations.
    for rel in RELATIONS:
        if math.isinf(base.epsilons[rel]):
            assert with_bits.epsilons[rel] == math.inf and with_bits.reasons[rel] == base.reasons[rel]
        else:
            assert with_bits.epsilons[rel] > base.epsilons[rel]
    if not base.finite:
        return
    steps_per_round, k = _per_round(sampling)
    observer = threat_model
    if threat_model == "central" and bits is not None:
        observer = "messages"  # at these settings REC's total variation cannot be paid: the messages route
        assert "message observer's bound" in with_bits.composition
    step = dprec_step_rdp(
        0.545,
        B / N if sampling != "with_replacement" else 1.0 / N,
        ORDERS,
        threat_model=observer,
        relation=relation,
        sampling=sampling,
        num_clients=N,
        bits=bits,
        groups=groups,
    )
    extra = T * k * ORDERS / (2.0 * s * s)
    forward = T * steps_per_round * step[0] + extra
    rev = T * steps_per_round * step[1] + extra
    i = int(np.flatnonzero(ORDERS == with_bits.order)[0])
    assert with_bits.forward == pytest.approx(forward[i], rel=1e-12)
    assert with_bits.reverse == pytest.approx(rev[i], rel=1e-12)
    # The whole curves: both tails of the hand-composed curves at delta / 2 give the same epsilon.
    eps = max(
        epsilon_per_order(ORDERS, forward, RUN["delta"] / 2, method="balle").min(),
        epsilon_per_order(ORDERS, rev, RUN["delta"] / 2, method="balle").min(),
    )
    assert with_bits.epsilon == pytest.approx(eps, rel=1e-12)
    assert with_bits.epsilons[relation] == with_bits.epsilon
    assert "quantile bits" in with_bits.summary() and "quantile bits" in with_bits.composition


def test_rounds_of_different_sizes_add_one_term_per_step():
    s = 3.0
    for sampling in SAMPLING_SCHEMES:
        acc = DPRECRoundAccountant(**dict(RUN, bits=None, sampling=sampling), quantile_noise=s)
        acc.step(clients_per_round=5, rounds=3)
        got = acc.step(clients_per_round=8, rounds=2)
        i = int(np.flatnonzero(ORDERS == got.order)[0])
        wr = sampling == "with_replacement"
        steps = 3 * 5 + 2 * 8 if wr else 3 + 2  # slots, or rounds
        assert got.steps == steps
        base = sum(
            r
            * (b if wr else 1)
            * dprec_step_rdp(
                0.545,
                1.0 / N if wr else b / N,
                ORDERS,
                threat_model="server",
                relation="zero",
                sampling=sampling,
                num_clients=N,
            )[0][i]
            for b, r in [(5, 3), (8, 2)]
        )
        assert got.forward == pytest.approx(base + steps * ORDERS[i] / (2 * s * s), rel=1e-12)


# --------------------------------------------------------------------------------------
# Monotonicity and the s -> inf limit
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
@pytest.mark.parametrize("bits,groups", [(None, None), (42, 6)])
def test_epsilon_grows_as_s_shrinks_and_tends_to_no_bits(sampling, bits, groups):
    kw = dict(RUN, bits=bits, groups=groups, sampling=sampling)
    none = DPRECRoundAccountant(**kw).step(rounds=T)
    eps, local = [], []
    for s in [1e200, 1e12, 1e4, 100.0, 10.0, 3.0, 1.0, 0.3, 0.1]:
        r = DPRECRoundAccountant(**kw, quantile_noise=s).step(rounds=T)
        eps.append(r.epsilon)
        local.append((r.local.per_message, r.local.epsilon_expected, r.local.epsilon_max))
    assert all(b > a for a, b in zip(eps[2:], eps[3:]))  # strictly, once the bits register
    assert all(b >= a for a, b in zip(eps, eps[1:]))
    assert all(all(y >= x for x, y in zip(a, b)) for a, b in zip(local, local[1:]))
    assert eps[0] == none.epsilon  # a / (2 s^2) = 0 in float64
    assert eps[1] == pytest.approx(none.epsilon, rel=1e-9)
    assert local[0] == (none.local.per_message, none.local.epsilon_expected, none.local.epsilon_max)
    assert eps[-1] > 10 * none.epsilon


# --------------------------------------------------------------------------------------
# The two inequalities of f(x) = log(1 - q + q e^x)
# --------------------------------------------------------------------------------------

QS = [1e-9, 1e-6, 1e-3, 0.01, 0.1, 0.5, 0.9, 1.0 - 1e-9, 1.0]
XS = [0.0, 1e-12, 1e-6, 1e-3, 0.1, 0.5, 1.0, 5.0, 30.0, 200.0, 700.0, 5000.0]


@pytest.mark.parametrize("q", QS)
def test_shared_participation_inequalities(q):
    x = np.array(XS)[:, None]
    y = np.array(XS)[None, :]
    fxy = _mix(q, x + y)
    fx, fy = _mix(q, x), _mix(q, y)
    tol = 1e-12 * np.maximum(1.0, np.abs(fxy))
    # Sound: the bits added unamplified bound the exact mixture of the joint kernel.
    assert np.all(fxy <= fx + y + tol)
    # Accounting the bits as a separately subsampled mechanism would understate it.
    assert np.all(fx + fy <= fxy + tol)
    if 0.0 < q < 1.0 - 1e-6:
        assert (fxy - fx - fy)[XS.index(5.0), XS.index(5.0)] > 0.0
    # The identity behind the second: e^f(x+y) - e^(f(x)+f(y)) = q (1 - q) (e^x - 1) (e^y - 1).
    xs, ys = np.meshgrid(np.array(XS[:8]), np.array(XS[:8]))
    lhs = np.exp(_mix(q, xs + ys)) - np.exp(_mix(q, xs) + _mix(q, ys))
    rhs = q * (1.0 - q) * np.expm1(xs) * np.expm1(ys)
    assert np.allclose(lhs, rhs, rtol=1e-9, atol=1e-12 * np.exp(xs + ys).max())


@pytest.mark.parametrize("q", [1e-4, 0.01, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("c", [0.1, 0.545, 2.0])
@pytest.mark.parametrize("s", [0.2, 1.0, 5.0])
@pytest.mark.parametrize("bits", [None, 42])
def test_library_curves_obey_the_inequalities(q, c, s, bits):
    """In Renyi units, with the library's curves: the accounted round (REC's mixture + the bits) is at
    least the exact attributed round with the bit inside the mixture, which is at least what accounting
    the bits as a second Poisson-sampled mechanism would claim (the unsound way)."""
    a = ORDERS
    y = quantile_bits_rdp(s, a)
    kw = dict(threat_model="server", relation="zero", sampling="poisson", num_clients=1000)
    rec = dprec_step_rdp(c, q, a, bits=bits, groups=6 if bits else None, **kw)
    bits_sampled = dprec_step_rdp(1.0 / s, q, a, **kw)[0]  # a Poisson-sampled Gaussian bit (c = 1 / s)
    if bits is None:  # the message's log-moments, (a - 1) times its Renyi divergence
        moments = (a * (a - 1.0) * c * c / 2.0,) * 2
    else:
        moments = rec_message_log_moments(c, a, 2 ** (42 // 6))
    for curve, m in zip(rec, moments):
        assert np.allclose(curve, _mix(q, m) / (a - 1.0), rtol=1e-12, atol=0.0)  # the library's round: f(m)
        exact_joint = _mix(q, m + (a - 1.0) * y) / (a - 1.0)  # the bit inside the mixture: f(m + (a-1) y)
        assert np.all(curve + y >= exact_joint * (1.0 - 1e-12))
        assert np.all(curve + bits_sampled <= exact_joint * (1.0 + 1e-12))
        if q < 1.0:
            assert np.any(curve + bits_sampled < exact_joint * (1.0 - 1e-6))
        else:
            assert np.allclose(curve + y, exact_joint, rtol=1e-12, atol=0.0)  # no sampling: equality


# --------------------------------------------------------------------------------------
# The exact joint divergence of one round (server, Gaussian variant)
# --------------------------------------------------------------------------------------


def _exact_joint_round(q, c, s, a):
    """Exact D_a of one attributed round: absent w.p. 1 - q; else N(c) x N(0, s^2) bit shifted by 1.

    The joint message is a Gaussian with shift norm sqrt(c^2 + 1/s^2) in noise units.
    """
    return _mix(q, a * (a - 1.0) * (c * c + 1.0 / (s * s)) / 2.0) / (a - 1.0)


@pytest.mark.parametrize("a", [2.0, 3.0, 5.0, 8.0])
@pytest.mark.parametrize("c,s", [(0.545, 1.0), (1.0, 0.5), (0.3, 3.0)])
def test_exact_joint_closed_form_by_quadrature(a, c, s):
    """The closed form: the message along phi and the bit are independent, the moment is the product."""

    def moment(shift, scale):
        def integrand(u):
            # p^a q^(1-a) for p = N(shift, scale^2), q = N(0, scale^2)
            lp = -((u - shift) ** 2) / (2 * scale * scale)
            lq = -(u * u) / (2 * scale * scale)
            return math.exp(a * lp + (1 - a) * lq) / (scale * math.sqrt(2 * math.pi))

        lo, hi = -40 * scale - abs(shift) * a, 40 * scale + abs(shift) * a
        return integrate.quad(integrand, lo, hi, points=[a * shift], limit=400, epsabs=0, epsrel=1e-11)[0]

    q = 0.1
    joint_moment = moment(c, 1.0) * moment(0.0 - 1.0, s)  # the bit: 0 (target) against 1 (zero update)
    numeric = math.log(1 - q + q * joint_moment) / (a - 1)
    assert numeric == pytest.approx(float(_exact_joint_round(q, c, s, np.array([a]))[0]), rel=1e-8)


@pytest.mark.parametrize("sampling", ["poisson", "without_replacement"])
@pytest.mark.parametrize("c,s", [(0.545, 1.0), (0.545, 10.0), (2.0, 0.3), (0.05, 0.05)])
@pytest.mark.parametrize("b", [1, 10, 73, 100])
def test_accountant_round_dominates_the_exact_joint(sampling, c, s, b):
    q = b / N
    exact = _exact_joint_round(q, c, s, ORDERS)
    kw = dict(
        clip_multiplier=c,
        bits=None,
        num_clients=N,
        clients_per_round=b,
        delta=1e-5,
        sampling=sampling,
        threat_model="server",
        quantile_noise=s,
    )
    # The accountant's composed per-round curve at every default order (one order per accountant).
    for i in range(0, ORDERS.size, 15):
        got = DPRECRoundAccountant(**dict(kw, orders=[ORDERS[i]])).step()
        assert got.order == ORDERS[i]
        assert got.forward >= exact[i] * (1 - 1e-12) and got.reverse >= exact[i] * (1 - 1e-12)
    # and at all of them through the closed form the accountant composes (checked above).
    curve = dprec_step_rdp(c, q, ORDERS, threat_model="server", relation="zero", sampling=sampling, num_clients=N)
    assert np.all(curve[0] + quantile_bits_rdp(s, ORDERS) >= exact * (1 - 1e-12))
    # The epsilon of the exact joint (the Gaussian variant at c' = sqrt(c^2 + 1/s^2)) is a lower bound.
    joint = DPRECRoundAccountant(**dict(kw, clip_multiplier=math.sqrt(c * c + 1 / (s * s)), quantile_noise=None))
    assert DPRECRoundAccountant(**kw).step(rounds=5).epsilon >= joint.step(rounds=5).epsilon * (1 - 1e-12)


def test_with_replacement_slot_dominates_the_exact_joint():
    """The server's slot (q = 1/N) with the bit, against the exact attributed joint slot. (A message
    observer learns less than this exact joint, so its curve need not dominate it.)"""
    c, s = 0.545, 1.0
    exact = _exact_joint_round(1.0 / N, c, s, ORDERS)
    for i in range(0, ORDERS.size, 15):
        acc = DPRECRoundAccountant(
            **dict(
                RUN, bits=None, sampling="with_replacement", clients_per_round=1, quantile_noise=s, orders=[ORDERS[i]]
            )
        )
        r = acc.step()
        assert r.forward >= exact[i] * (1 - 1e-12) and r.reverse >= exact[i] * (1 - 1e-12)
        # B slots of a round: B times the bit's cost.
        r_b = DPRECRoundAccountant(
            **dict(RUN, bits=None, sampling="with_replacement", quantile_noise=s, orders=[ORDERS[i]])
        ).step()
        assert r_b.forward == pytest.approx(B * r.forward, rel=1e-12)


# --------------------------------------------------------------------------------------
# The local guarantee
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", [0.5, 2.0, 30.0])
def test_local_guarantee_adds_the_bit_per_message(s):
    c = 0.545
    acc = DPRECRoundAccountant(**dict(RUN, bits=None, sampling="poisson"), quantile_noise=s)
    local = acc.step(rounds=T).local
    # a c^2 / 2 + a / (2 s^2) is the Gaussian's RDP at c' = sqrt(c^2 + 1/s^2).
    c_joint = math.sqrt(c * c + 1.0 / (s * s))
    for k, eps in [
        (1, local.per_message),
        (local.expected_participations, local.epsilon_expected),
        (local.max_participations, local.epsilon_max),
    ]:
        ref = dprec_local_epsilon(clip_multiplier=c_joint, delta=RUN["delta"], bits=None, rounds=k)
        assert eps == pytest.approx(ref.epsilon, rel=1e-12)
    # With REC's messages as sent: k times the bits' cost on top of the per-message bound.
    rec = DPRECRoundAccountant(**dict(RUN, bits=42, groups=6, sampling="poisson"), quantile_noise=s).step().local
    base = dprec_local_epsilon(clip_multiplier=c, delta=RUN["delta"], bits=42, groups=6)
    assert rec.per_message > base.epsilon


# --------------------------------------------------------------------------------------
# Pass-through, properties, bad input
# --------------------------------------------------------------------------------------


def test_codec_accountant_passes_quantile_noise():
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.5, bits=16)
    template = {"w": np.zeros(4, np.float32), "b": np.zeros(3, np.float32)}
    acc = codec.accountant(
        template, num_clients=10, clients_per_round=3, delta=1e-5, sampling="poisson", quantile_noise=2.5
    )
    assert acc.quantile_noise == 2.5 and "quantile_noise=2.5" in repr(acc)
    ref = DPRECRoundAccountant(
        clip_multiplier=0.5,
        bits=32,
        groups=2,
        num_clients=10,
        clients_per_round=3,
        delta=1e-5,
        sampling="poisson",
        quantile_noise=2.5,
    )
    assert acc.step(rounds=4) == ref.step(rounds=4)
    plain = codec.accountant(template, num_clients=10, clients_per_round=3, delta=1e-5, sampling="poisson")
    assert plain.quantile_noise is None and plain.step(rounds=4).epsilon < acc.epsilon
    with pytest.raises(ValueError, match="quantile_noise"):
        codec.accountant(template, num_clients=10, clients_per_round=3, delta=1e-5, quantile_noise=1.0, method="paper")


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("inf"), float("-inf"), float("nan")])
def test_bad_quantile_noise_value(bad):
    with pytest.raises(ValueError, match="quantile_noise"):
        DPRECRoundAccountant(**dict(RUN, bits=None), quantile_noise=bad)
    with pytest.raises(ValueError, match="quantile_noise"):
        quantile_bits_rdp(bad, ORDERS)


@pytest.mark.parametrize("bad", [True, np.bool_(False), "1.0", [1.0], np.ones(2), 1 + 2j])
def test_bad_quantile_noise_type(bad):
    with pytest.raises(TypeError, match="quantile_noise"):
        DPRECRoundAccountant(**dict(RUN, bits=None), quantile_noise=bad)
    with pytest.raises(TypeError, match="quantile_noise"):
        quantile_bits_rdp(bad, ORDERS)


def test_quantile_noise_rejected_with_the_paper_method():
    with pytest.raises(ValueError, match="quantile_noise") as info:
        DPRECRoundAccountant(**dict(RUN, bits=None), method="paper", quantile_noise=1.0)
    assert "method='sound'" in str(info.value)
    DPRECRoundAccountant(**dict(RUN, bits=None), method="paper", quantile_noise=None)  # no bits: fine


def test_quantile_bits_rdp_other_arguments():
    with pytest.raises(ValueError, match="messages_per_round"):
        quantile_bits_rdp(1.0, ORDERS, messages_per_round=0)
    with pytest.raises(TypeError, match="messages_per_round"):
        quantile_bits_rdp(1.0, ORDERS, messages_per_round=1.5)
    with pytest.raises(ValueError, match="orders"):
        quantile_bits_rdp(1.0, [1.0])
    assert np.all(np.isinf(quantile_bits_rdp(1e-200, [2.0, 3.0])))  # overflows to inf, not an error
    assert np.array_equal(quantile_bits_rdp(1e200, [2.0]), [0.0])


def test_accountant_exposes_quantile_noise():
    acc = DPRECRoundAccountant(**dict(RUN, bits=None), quantile_noise=np.float32(2.0))
    assert acc.quantile_noise == 2.0 and type(acc.quantile_noise) is float
    assert "quantile_noise=2.0" in repr(acc)
