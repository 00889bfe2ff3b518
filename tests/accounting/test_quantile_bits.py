"""Adaptive clipping's noisy quantile bits in DP-REC's round accountant (``quantile_noise``).

Each message carries one bit ``b = 1[||update|| <= C_t]`` sent as the integer ``b M + Z``,
``Z ~ N_Z(0, (s M)^2)`` the discrete Gaussian (a float ``b + N(0, s^2)`` leaks ``b`` through its
rounding): sensitivity ``M`` on the lattice, log-moment at most ``a (a-1) / (2 s^2)`` (exactly that at
integer orders), folded into each message's bound inside the sampling mixture of the attributed
curves. With replacement, against an observer without the attribution, zero-out uses the attributed
curve and add/remove the bit-free curve plus the bits unamplified (the bit-free routes there need a
continuous Gaussian). Never above the old bound (the bits added unamplified, ``a / (2 s^2)`` per
step), never below the bit-free curve (docs: *Which guarantee do I have?*, section 4.10).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from scipy import integrate  # noqa: E402
from scipy.special import logsumexp  # noqa: E402

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


def _step(sampling, threat_model, relation, bits, groups, s=None, c=0.545, orders=ORDERS):
    q = B / N if sampling != "with_replacement" else 1.0 / N
    return dprec_step_rdp(
        c,
        q,
        orders,
        threat_model=threat_model,
        relation=relation,
        sampling=sampling,
        num_clients=N,
        bits=bits,
        groups=groups,
        quantile_noise=s,
    )


def _both_tails(forward, rev, delta):
    return max(
        epsilon_per_order(ORDERS, forward, delta / 2, method="balle").min(),
        epsilon_per_order(ORDERS, rev, delta / 2, method="balle").min(),
    )


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
@pytest.mark.parametrize("threat_model", THREAT_MODELS)
@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("bits,groups", VARIANTS)
@pytest.mark.parametrize("s", [0.05, 0.7, 2.0, 30.0])
def test_folded_step_between_no_bits_and_unamplified(sampling, threat_model, relation, bits, groups, s):
    """Per step and order: no-bit curve <= folded curve <= no-bit curve + a / (2 s^2) (the old, unamplified
    bound). Attributed routes: strictly below the latter somewhere (the step is subsampled). With
    replacement against the message and central observers' Gaussian curves (the lattice bit cannot use
    their Gaussian geometry): exactly min(attributed folded, old) for zero-out, the old bound for add/remove."""
    plain = _step(sampling, threat_model, relation, bits, groups)
    folded = _step(sampling, threat_model, relation, bits, groups, s)
    unamplified = quantile_bits_rdp(s, ORDERS)
    if np.all(np.isinf(plain[0])):
        assert np.all(np.isinf(folded[0])) and np.all(np.isinf(folded[1]))
        return
    for p, f in zip(plain, folded):
        assert np.all(np.isfinite(f))
        assert np.all(f <= p + unamplified)  # exactly: the accountant takes the minimum with it
        # Never below the bit-free curve (up to the exact reverse quadrature's ~1e-12 relative noise).
        assert np.all(f >= p * (1.0 - 1e-9))
        assert np.any(f > p)
    # The Gaussian curves of the unattributed with-replacement observers (REC as sent against "messages" uses
    # its own attributed bound, 4.1).
    gaussian_wr = sampling == "with_replacement" and (
        threat_model == "central" or (threat_model == "messages" and bits is None)
    )
    if not gaussian_wr:
        for p, f in zip(plain, folded):
            assert np.any(f < (p + unamplified) * (1.0 - 1e-3))
        return
    q = 1.0 / N
    if relation == "add_remove":
        for p, f in zip(plain, folded):
            np.testing.assert_array_equal(f, p + unamplified)
        return
    c = 0.545
    attributed = _mix(q, ORDERS * (ORDERS - 1) * (c * c + 1 / (s * s)) / 2) / (ORDERS - 1)  # ATTRIBUTED at c_eff
    for p, f in zip(plain, folded):
        np.testing.assert_allclose(f, np.minimum(attributed, p + unamplified), rtol=1e-12, atol=0.0)
        if s <= 2.0:  # the attributed curve wins somewhere (at s = 30 the unamplified a / 1800 is smaller)
            assert np.any(f < (p + unamplified) * (1.0 - 1e-3))


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
@pytest.mark.parametrize("threat_model", THREAT_MODELS)
@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("bits,groups", [(None, None), (42, 6)])
def test_accountant_composes_the_folded_step(sampling, threat_model, relation, bits, groups):
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
    step = _step(sampling, observer, relation, bits, groups, s)
    forward = T * steps_per_round * step[0]
    rev = T * steps_per_round * step[1]
    i = int(np.flatnonzero(ORDERS == with_bits.order)[0])
    assert with_bits.forward == pytest.approx(forward[i], rel=1e-12)
    assert with_bits.reverse == pytest.approx(rev[i], rel=1e-12)
    # The whole curves: both tails of the hand-composed curves at delta / 2 give the same epsilon.
    assert with_bits.epsilon == pytest.approx(_both_tails(forward, rev, RUN["delta"]), rel=1e-12)
    assert with_bits.epsilons[relation] == with_bits.epsilon
    # Never above the old bound (the bits added unamplified: k a / (2 s^2) per round).
    plain = _step(sampling, observer, relation, bits, groups)
    extra = T * k * ORDERS / (2.0 * s * s)
    old = _both_tails(T * steps_per_round * plain[0] + extra, T * steps_per_round * plain[1] + extra, RUN["delta"])
    assert with_bits.epsilon <= old * (1.0 + 1e-12)  # equal (to rounding) where nothing is folded
    if sampling == "with_replacement" and observer != "server" and relation == "add_remove":
        assert with_bits.epsilon == pytest.approx(old, rel=1e-12)  # the lattice bit: the old bound
    elif sampling != "with_replacement" or observer == "server" or bits is not None:
        assert with_bits.epsilon < 0.9 * old  # the attributed fold: well below it at s = 2
    assert "quantile bits" in with_bits.summary() and "quantile bits" in with_bits.composition


def test_central_with_bits_total_variation_route_uses_the_folded_gaussian_curves():
    """The "central" observer with bits, when REC's total-variation cost is payable: the Gaussian curves
    with the bits folded, then the same eta as without bits (the bits are the same kernel in both runs)."""
    s = 3.0
    kw = dict(RUN, bits=60, groups=1, sampling="with_replacement", threat_model="central", delta=1e-2)
    plain = DPRECRoundAccountant(**kw).step(rounds=T)
    got = DPRECRoundAccountant(**kw, quantile_noise=s).step(rounds=T)
    assert "total-variation" in got.composition and got.overhead == plain.overhead > 0.0
    gauss = DPRECRoundAccountant(**dict(kw, bits=None), quantile_noise=s).step(rounds=T)
    i = int(np.flatnonzero(ORDERS == got.order)[0])
    step = _step("with_replacement", "central", "zero", None, None, s)
    assert got.forward == pytest.approx(T * B * step[0][i], rel=1e-12)
    assert got.epsilon == pytest.approx(gauss.epsilon, rel=1e-6)  # eta ~ 1e-15 here: nearly the Gaussian's
    assert got.epsilon >= gauss.epsilon and plain.epsilon < got.epsilon


def test_rounds_of_different_sizes_compose_the_folded_steps():
    s = 3.0
    for sampling in SAMPLING_SCHEMES:
        acc = DPRECRoundAccountant(**dict(RUN, bits=None, sampling=sampling), quantile_noise=s)
        acc.step(clients_per_round=5, rounds=3)
        got = acc.step(clients_per_round=8, rounds=2)
        i = int(np.flatnonzero(ORDERS == got.order)[0])
        wr = sampling == "with_replacement"
        steps = 3 * 5 + 2 * 8 if wr else 3 + 2  # slots, or rounds
        assert got.steps == steps
        total = sum(
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
                quantile_noise=s,
            )[0][i]
            for b, r in [(5, 3), (8, 2)]
        )
        assert got.forward == pytest.approx(total, rel=1e-12)
        # Each step: the Gaussian's ATTRIBUTED at c_eff = sqrt(c^2 + 1/s^2).
        c_eff = math.sqrt(0.545**2 + 1.0 / (s * s))
        q = 1.0 / N if wr else 5 / N
        assert dprec_step_rdp(
            0.545,
            q,
            ORDERS,
            threat_model="server",
            relation="zero",
            sampling=sampling,
            num_clients=N,
            quantile_noise=s,
        )[0] == pytest.approx(_mix(q, ORDERS * (ORDERS - 1) * c_eff**2 / 2) / (ORDERS - 1), rel=1e-12)


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
def test_attributed_step_is_the_mixture_of_the_joint_moment(q, c, s, bits):
    """The attributed step with the bit is exactly f(m + (a-1) y) / (a - 1): m the message's log-moment
    bound, (a-1) y = a (a-1) / (2 s^2) the bit's, inside the mixture. It is at most the old bound
    (the bit-free step plus y, unamplified) and at least what accounting the bits as a second
    Poisson-sampled mechanism would claim (the unsound way)."""
    a = ORDERS
    y = quantile_bits_rdp(s, a)
    kw = dict(threat_model="server", relation="zero", sampling="poisson", num_clients=1000)
    rec = dprec_step_rdp(c, q, a, bits=bits, groups=6 if bits else None, **kw)
    folded = dprec_step_rdp(c, q, a, bits=bits, groups=6 if bits else None, quantile_noise=s, **kw)
    bits_sampled = dprec_step_rdp(1.0 / s, q, a, **kw)[0]  # a Poisson-sampled Gaussian bit (c = 1 / s)
    if bits is None:  # the message's log-moments, (a - 1) times its Renyi divergence
        moments = (a * (a - 1.0) * c * c / 2.0,) * 2
    else:
        k = 2 ** (42 // 6)
        moments = rec_message_log_moments(c, a, k)
        assert np.allclose(moments[0], a * a * c * c * (1.0 + 1.0 / k) / 2.0, rtol=1e-14, atol=0.0)  # closed form
    for curve, got, m in zip(rec, folded, moments):
        assert np.allclose(curve, _mix(q, m) / (a - 1.0), rtol=1e-12, atol=0.0)  # the bit-free round: f(m)
        exact_joint = _mix(q, m + (a - 1.0) * y) / (a - 1.0)  # the bit inside the mixture: f(m + (a-1) y)
        assert np.allclose(got, exact_joint, rtol=1e-12, atol=0.0)
        assert np.all(got <= curve + y)
        assert np.all(curve + bits_sampled <= exact_joint * (1.0 + 1e-12))
        if q < 1.0:
            assert np.any(curve + bits_sampled < exact_joint * (1.0 - 1e-6))
            assert np.any(got < (curve + y) * (1.0 - 1e-6))
        else:
            assert np.allclose(curve + y, exact_joint, rtol=1e-12, atol=0.0)  # no sampling: equality


# --------------------------------------------------------------------------------------
# The exact joint divergence of one attributed step (server, Gaussian variant and REC)
# --------------------------------------------------------------------------------------


def _exact_joint_round(q, c, s, a):
    """Exact D_a of one attributed round at integer orders: absent w.p. 1 - q; else N(c) x the lattice bit.

    The bit's moments at integer orders are the continuous Gaussian's (see _bit_renyi), so the joint
    message's are those of a Gaussian with shift norm sqrt(c^2 + 1/s^2) in noise units.
    """
    return _mix(q, a * (a - 1.0) * (c * c + 1.0 / (s * s)) / 2.0) / (a - 1.0)


def _dg_log_pmf(y, mean, scale):
    """log P(Y = y) of the discrete Gaussian N_Z(mean, scale^2) at the integers y, for an integer mean.

    The normaliser sum_k exp(-k^2 / (2 scale^2)) is the same for every integer mean.
    """
    reach = int(60.0 * scale) + 10
    k = np.arange(-reach, reach + 1, dtype=np.float64)
    log_norm = logsumexp(-(k * k) / (2.0 * scale * scale))
    return -((y - mean) ** 2) / (2.0 * scale * scale) - log_norm


def _bit_renyi(lattice, s, a):
    """Both Renyi divergences of the sent bit, b M + N_Z(0, (s M)^2), between b = 1 and b = 0, by summing
    over the integers (M = lattice): D_a(N_Z(M, (sM)^2) || N_Z(0, (sM)^2)) and the reverse."""
    scale = s * lattice
    reach = int(a * lattice + 40.0 * scale) + lattice + 10  # the tilted sums' reach (centres a M and (1 - a) M)
    y = np.arange(-reach, reach + 1, dtype=np.float64)
    one, zero = _dg_log_pmf(y, lattice, scale), _dg_log_pmf(y, 0, scale)
    forward = logsumexp(a * one + (1.0 - a) * zero) / (a - 1.0)
    reverse = logsumexp(a * zero + (1.0 - a) * one) / (a - 1.0)
    return forward, reverse


@pytest.mark.parametrize("lattice", [1, 4, 16, 64])
@pytest.mark.parametrize("s", [0.3, 1.0, 3.0])
def test_discrete_bit_renyi_is_at_most_the_gaussians(lattice, s):
    """The lattice bit against a shift of one lattice step M (sensitivity M at scale s M): both Renyi
    divergences at most the continuous Gaussian's a / (2 s^2) (Canonne, Kamath and Steinke 2020), with
    equality at integer orders (then a M is on the lattice); strictly below at fractional orders on a
    coarse lattice."""
    gaussian = lambda a: a / (2.0 * s * s)  # noqa: E731
    for a in range(2, 33):
        for d in _bit_renyi(lattice, s, float(a)):
            assert d == pytest.approx(gaussian(a), rel=1e-10)
    for a in [1.5, 2.5, 7.3, 16.5, 31.9]:
        for d in _bit_renyi(lattice, s, a):
            assert d <= gaussian(a) * (1.0 + 1e-12)
    if lattice == 1 and s == 0.3:
        assert _bit_renyi(1, 0.3, 1.5)[0] < 0.9 * gaussian(1.5)


@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
@pytest.mark.parametrize("bits,groups", [(None, None), (42, 6)])
@pytest.mark.parametrize("lattice,s", [(1, 0.3), (8, 0.5), (64, 2.0)])
def test_attributed_step_with_the_exact_discrete_bit(sampling, bits, groups, lattice, s):
    """The attributed step (server; the message observers by post-processing) with the bit's exact
    log-moment, summed over the lattice, inside the mixture: at most the accountant's step, both
    directions (equal at these integer orders)."""
    a = np.arange(2.0, 33.0)
    c = 0.545
    q = B / N if sampling != "with_replacement" else 1.0 / N
    bit = np.array([_bit_renyi(lattice, s, x) for x in a])  # (forward, reverse) per order
    if bits is None:
        moments = (a * (a - 1.0) * c * c / 2.0,) * 2
    else:
        moments = rec_message_log_moments(c, a, 2 ** (bits // groups))
    got = dprec_step_rdp(
        c,
        q,
        a,
        threat_model="server",
        relation="zero",
        sampling=sampling,
        num_clients=N,
        bits=bits,
        groups=groups,
        quantile_noise=s,
    )
    for direction, (m, curve) in enumerate(zip(moments, got)):
        # The target (bit 0 or 1) against the zero update (bit 1): forward D(N_Z(0) || N_Z(M)), _bit_renyi's reverse.
        exact = _mix(q, m + (a - 1.0) * bit[:, 1 - direction]) / (a - 1.0)
        assert np.all(exact <= curve * (1.0 + 1e-10))
        np.testing.assert_allclose(exact, curve, rtol=1e-10, atol=0.0)


@pytest.mark.parametrize("a", [2.0, 3.0, 5.0, 8.0])
@pytest.mark.parametrize("c,s", [(0.545, 1.0), (1.0, 0.5), (0.3, 3.0)])
def test_exact_joint_closed_form_by_quadrature(a, c, s):
    """The closed form: the message along phi and the bit are independent, the moment is the product (the
    message's by quadrature, the lattice bit's by summation, at M = 4)."""

    def moment(shift, scale):
        def integrand(u):
            # p^a q^(1-a) for p = N(shift, scale^2), q = N(0, scale^2)
            lp = -((u - shift) ** 2) / (2 * scale * scale)
            lq = -(u * u) / (2 * scale * scale)
            return math.exp(a * lp + (1 - a) * lq) / (scale * math.sqrt(2 * math.pi))

        lo, hi = -40 * scale - abs(shift) * a, 40 * scale + abs(shift) * a
        return integrate.quad(integrand, lo, hi, points=[a * shift], limit=400, epsabs=0, epsrel=1e-11)[0]

    q = 0.1
    # The bit: 0 (target) against 1 (zero update), the reverse of _bit_renyi's forward.
    bit_moment = math.exp((a - 1.0) * _bit_renyi(4, s, a)[1])
    joint_moment = moment(c, 1.0) * bit_moment
    numeric = math.log(1 - q + q * joint_moment) / (a - 1)
    assert numeric == pytest.approx(float(_exact_joint_round(q, c, s, np.array([a]))[0]), rel=1e-8)


@pytest.mark.parametrize("sampling", ["poisson", "without_replacement"])
@pytest.mark.parametrize("c,s", [(0.545, 1.0), (0.545, 10.0), (2.0, 0.3), (0.05, 0.05)])
@pytest.mark.parametrize("b", [1, 10, 73, 100])
def test_accountant_round_equals_the_exact_joint(sampling, c, s, b):
    """Server, Gaussian variant, one Poisson / without-replacement round: the accountant's round is the
    exact joint divergence (message and bit), not just a bound on it."""
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
    # The accountant's composed per-round curve at every 15th default order (one order per accountant).
    for i in range(0, ORDERS.size, 15):
        got = DPRECRoundAccountant(**dict(kw, orders=[ORDERS[i]])).step()
        assert got.order == ORDERS[i]
        assert got.forward == pytest.approx(exact[i], rel=1e-12) and got.reverse == pytest.approx(exact[i], rel=1e-12)
    curve = dprec_step_rdp(
        c, q, ORDERS, threat_model="server", relation="zero", sampling=sampling, num_clients=N, quantile_noise=s
    )
    assert np.allclose(curve[0], exact, rtol=1e-12, atol=0.0) and np.allclose(curve[1], exact, rtol=1e-12, atol=0.0)
    # The run equals the Gaussian variant without bits at c_eff = sqrt(c^2 + 1/s^2).
    joint = DPRECRoundAccountant(**dict(kw, clip_multiplier=math.sqrt(c * c + 1 / (s * s)), quantile_noise=None))
    assert DPRECRoundAccountant(**kw).step(rounds=5).epsilon == pytest.approx(joint.step(rounds=5).epsilon, rel=1e-9)


@pytest.mark.parametrize("sampling", ["poisson", "without_replacement", "with_replacement"])
@pytest.mark.parametrize("s", [0.5, 3.0])
def test_accountant_rec_round_equals_the_mixture_of_the_message_bound_and_bit(sampling, s):
    """Server, REC as sent (6 x 7 bits): per step log(1 - q + q exp(m(a) + a (a-1) / (2 s^2))) / (a - 1),
    m the forward (closed form a^2 c^2 (1 + 1/K) / 2) and reverse message bounds."""
    c, k = 0.545, 128
    q = B / N if sampling != "with_replacement" else 1.0 / N
    bit = ORDERS * (ORDERS - 1.0) / (2.0 * s * s)
    forward = _mix(q, ORDERS * ORDERS * c * c * (1.0 + 1.0 / k) / 2.0 + bit) / (ORDERS - 1.0)
    reverse = _mix(q, rec_message_log_moments(c, ORDERS, k)[1] + bit) / (ORDERS - 1.0)
    for i in range(0, ORDERS.size, 40):
        got = DPRECRoundAccountant(
            **dict(RUN, bits=42, groups=6, sampling=sampling, orders=[ORDERS[i]]), quantile_noise=s
        ).step()
        steps = B if sampling == "with_replacement" else 1
        assert got.forward == pytest.approx(steps * forward[i], rel=1e-12)
        assert got.reverse == pytest.approx(steps * reverse[i], rel=1e-12)


def test_with_replacement_server_slot_equals_the_exact_joint():
    """The server's slot (q = 1/N) with the bit is the exact attributed joint slot; B slots per round."""
    c, s = 0.545, 1.0
    exact = _exact_joint_round(1.0 / N, c, s, ORDERS)
    for i in range(0, ORDERS.size, 15):
        acc = DPRECRoundAccountant(
            **dict(
                RUN, bits=None, sampling="with_replacement", clients_per_round=1, quantile_noise=s, orders=[ORDERS[i]]
            )
        )
        r = acc.step()
        assert r.forward == pytest.approx(exact[i], rel=1e-12) and r.reverse == pytest.approx(exact[i], rel=1e-12)
        # B slots of a round: B times the slot.
        r_b = DPRECRoundAccountant(
            **dict(RUN, bits=None, sampling="with_replacement", quantile_noise=s, orders=[ORDERS[i]])
        ).step()
        assert r_b.forward == pytest.approx(B * r.forward, rel=1e-12)


# --------------------------------------------------------------------------------------
# With replacement, message observer: the (update, lattice bit) slot, exactly
# --------------------------------------------------------------------------------------

ORDERS_2D = np.arange(2.0, 17.0)


def _slot_divergences(c, s, lattice, q, target_bit, others, relation, h=0.15):
    """Both Renyi divergences of one with-replacement slot: the update's projection on phi (a unit Gaussian
    in noise units, trapezoid quadrature) times the sent bit b M + N_Z(0, (s M)^2) (summed over the
    integers), M = lattice.

    Points are (u, b): the update's projection over sigma and the bit. The target sits at (c, target_bit),
    the zero update at (0, 1), ``others`` is the mixture of the other clients' points [((u, b), weight)].
    Zero-out: (1-q) others + q target against (1-q) others + q zero; add/remove: (1-q) others + q target
    against others. Independent of dprec.accounting (NumPy and SciPy's logsumexp only).
    """
    half = ORDERS_2D[-1] * 2.0 * c + 12.0  # the tilted integrands' reach along the update
    x = np.arange(-half, half + h / 2, h)[:, None]
    scale = s * lattice
    reach = int(ORDERS_2D[-1] * lattice + 40.0 * scale) + lattice + 10
    y = np.arange(-reach, reach + 1, dtype=np.float64)[None, :]
    bit_pmf = {b: _dg_log_pmf(y, b * lattice, scale) for b in (0, 1)}

    def log_mixture(points):
        return (
            logsumexp(np.stack([math.log(w) - 0.5 * (x - u) ** 2 + bit_pmf[b] for (u, b), w in points]), axis=0)
            - 0.5 * math.log(2.0 * math.pi)
            + math.log(h)
        )  # log of the cell's mass

    mixture = [(pt, (1.0 - q) * w) for pt, w in others]
    log_p = log_mixture(mixture + [((c, target_bit), q)])
    log_p2 = log_mixture(mixture + [((0.0, 1), q)]) if relation == "zero" else log_mixture(others)

    def renyi(la, lb):
        return np.array([max(logsumexp(a * la + (1.0 - a) * lb), 0.0) / (a - 1.0) for a in ORDERS_2D])

    return renyi(log_p, log_p2), renyi(log_p2, log_p)


def _binomial_moment_rdp(q, d2, orders):
    """E_{k ~ Bin(a, q)} exp(k (k-1) d2 / 2), as a Renyi divergence: the sampled pair at squared distance d2."""
    from scipy.stats import binom  # noqa: PLC0415

    out = []
    for a in orders:
        k = np.arange(int(a) + 1)
        out.append(math.log(np.sum(binom.pmf(k, int(a), q) * np.exp(k * (k - 1) * d2 / 2.0))) / (a - 1.0))
    return np.array(out)


def test_slot_quadrature_matches_the_binomial_moments():
    """The quadrature and lattice sum against a closed form: add/remove with every other client at the
    farthest point (opposite update, opposite bit), forward. At integer orders (1 - q + q L)^a expands
    into L's integer moments, and the lattice bit's equal the continuous Gaussian's, so the forward
    divergence is the sampled Gaussian's at the joint distance sqrt(4 c^2 + 1/s^2), exactly."""
    c, s, q = 0.545, 0.5, 0.5
    forward, _ = _slot_divergences(c, s, 2, q, 0, [((-c, 1), 1.0)], "add_remove")
    exact = _binomial_moment_rdp(q, (2.0 * c) ** 2 + 1.0 / (s * s), ORDERS_2D)
    np.testing.assert_allclose(forward, exact, rtol=1e-9, atol=0.0)


def _adversarial_mixtures(c, target_bit):
    """The other clients' points: all at the farthest point from the target (opposite update and bit), all
    at the zero update, all at the target's point, and a mixture."""
    far = (-c, 1 - target_bit)
    return [
        ("far", [(far, 1.0)]),
        ("zero", [((0.0, 1), 1.0)]),
        ("target", [((c, target_bit), 1.0)]),
        ("mixed", [(far, 0.5), ((0.0, 1), 0.3), ((0.3 * c, 0), 0.2)]),
    ]


@pytest.mark.parametrize(
    "c,s,lattice,n", [(0.545, 1.0, 4, 10), (0.545, 0.5, 2, 2), (1.5, 2.0, 2, 10), (0.545, 0.3, 1, 10)]
)
@pytest.mark.parametrize("relation", RELATIONS)
def test_message_observer_slot_dominates_the_lattice_mixture(c, s, lattice, n, relation):
    """With replacement, message observer, Gaussian variant: the per-slot curves with the lattice bit (for
    zero-out min(ATTRIBUTED at sqrt(c^2 + 1/s^2), the bit-free min(ATTRIBUTED, DOMINATED) + a / (2 s^2));
    for add/remove the bit-free sampled Gaussian at 2c + a / (2 s^2)) are at least the actual slot's
    divergences, both directions, orders 2..16, both target bits, adversarial mixtures of the other
    clients; lattices down to M = 1 (coarser than any the client uses)."""
    q = 1.0 / n
    bound_f, bound_r = dprec_step_rdp(
        c,
        q,
        ORDERS_2D,
        threat_model="messages",
        relation=relation,
        sampling="with_replacement",
        num_clients=n,
        quantile_noise=s,
    )
    for target_bit in (0, 1):
        for name, m in _adversarial_mixtures(c, target_bit):
            forward, reverse = _slot_divergences(c, s, lattice, q, target_bit, m, relation)
            assert np.all(forward <= bound_f * (1.0 + 1e-9) + 1e-12), (target_bit, name)
            assert np.all(reverse <= bound_r * (1.0 + 1e-9) + 1e-12), (target_bit, name)
    # The central observer's Gaussian curves are the message observer's.
    central = dprec_step_rdp(
        c,
        q,
        ORDERS_2D,
        threat_model="central",
        relation=relation,
        sampling="with_replacement",
        num_clients=n,
        quantile_noise=s,
    )
    assert np.array_equal(central[0], bound_f) and np.array_equal(central[1], bound_r)


def test_lattice_bit_breaks_the_continuous_joint_route():
    """Why the with-replacement add/remove route is not folded: for a continuous bit the slot is a Gaussian
    in (update, bit) and 4.3's sampled Gaussian at the joint distance d = sqrt(4 c^2 + 1/s^2), with its exact
    reverse, would bound it. The lattice bit keeps the forward (the integer moments are the Gaussian's)
    but its reverse exceeds that bound on a coarse lattice (M = 1, s = 0.3: by 16% at order 2). The
    accountant's curve (the bit-free route plus a / (2 s^2)) holds."""
    from dprec.accounting import dprec_reverse_rdp  # noqa: PLC0415
    from dprec.accounting.rdp import sampled_gaussian_rdp  # noqa: PLC0415

    c, s, q = 0.545, 0.3, 0.1
    d = math.hypot(2.0 * c, 1.0 / s)
    continuous_f = sampled_gaussian_rdp(q, 1.0 / d, ORDERS_2D)
    continuous_r = np.minimum(dprec_reverse_rdp(d, q, ORDERS_2D, reverse="exact"), continuous_f)
    forward, reverse = _slot_divergences(c, s, 1, q, 0, [((-c, 1), 1.0)], "add_remove")
    np.testing.assert_allclose(forward, continuous_f, rtol=1e-9, atol=0.0)
    assert reverse[0] > 1.1 * continuous_r[0] and np.all(reverse > continuous_r)
    bound_f, bound_r = dprec_step_rdp(
        c,
        q,
        ORDERS_2D,
        threat_model="messages",
        relation="add_remove",
        sampling="with_replacement",
        num_clients=10,
        quantile_noise=s,
    )
    assert np.all(forward <= bound_f) and np.all(reverse <= bound_r)


def test_message_observer_slot_formulas():
    """The with-replacement message observer's curves with the bits, written out: zero-out is, per order,
    the smaller of ATTRIBUTED at c_eff = sqrt(c^2 + 1/s^2) and the bit-free min(ATTRIBUTED, DOMINATED) plus
    a / (2 s^2); add/remove is the bit-free curve (sampled Gaussian at 2c, exact reverse) plus a / (2 s^2).
    At moderate s each is the smaller at some orders; at s = 30 the old bound nearly everywhere."""
    c, q = 0.545, 1.0 / N
    for s in [0.3, 2.0, 30.0, 0.009]:
        kw = dict(threat_model="messages", sampling="with_replacement", num_clients=N, quantile_noise=s)
        unamplified = ORDERS / (2 * s * s)
        zero = dprec_step_rdp(c, q, ORDERS, relation="zero", **kw)
        plain_zero = dprec_step_rdp(c, q, ORDERS, relation="zero", **dict(kw, quantile_noise=None))
        attributed = _mix(q, ORDERS * (ORDERS - 1) * (c * c + 1 / (s * s)) / 2) / (ORDERS - 1)
        np.testing.assert_allclose(zero[0], np.minimum(attributed, plain_zero[0] + unamplified), rtol=1e-12, atol=0)
        assert np.array_equal(zero[0], zero[1])
        if s in (0.3, 2.0):  # each is the smaller at some orders
            assert np.any(attributed < (plain_zero[0] + unamplified) * (1.0 - 1e-3))
            assert np.any(plain_zero[0] + unamplified < attributed * (1.0 - 1e-3))
        if s == 30.0:  # a / 1800 is cheap: the old bound (to 1e-7; the bit-free DOMINATED is far below ATTRIBUTED)
            np.testing.assert_allclose(zero[0], plain_zero[0] + unamplified, rtol=1e-6, atol=0.0)
        add = dprec_step_rdp(c, q, ORDERS, relation="add_remove", **kw)
        plain_add = dprec_step_rdp(c, q, ORDERS, relation="add_remove", **dict(kw, quantile_noise=None))
        for got, plain in zip(add, plain_add):
            np.testing.assert_array_equal(got, plain + unamplified)


@pytest.mark.parametrize("s", [1e-200, 1e-120, 1e-3])
@pytest.mark.parametrize("sampling", SAMPLING_SCHEMES)
def test_tiny_quantile_noise_gives_huge_or_infinite_epsilon(s, sampling):
    for threat_model in THREAT_MODELS:
        for bits, groups in [(None, None), (42, 6)]:
            r = DPRECRoundAccountant(
                **dict(RUN, bits=bits, groups=groups, sampling=sampling, threat_model=threat_model), quantile_noise=s
            ).step(rounds=3)
            assert r.epsilon > 1e5 or math.isinf(r.epsilon)


# --------------------------------------------------------------------------------------
# The documentation's table (docs/privacy.md, 4.10)
# --------------------------------------------------------------------------------------

# MNIST's setting: N = 100, B = 10, T = 1000, c = 0.545, delta = N^-1.1, server, zero-out.
# (variant, sampling): [epsilon at s = inf (no bits), 20, 10, 5, 2, 1], before (the bits added
# unamplified, k a / (2 s^2) per round) and after (folded into each message's mixture).
TABLE_S = [None, 20.0, 10.0, 5.0, 2.0, 1.0]
DOCS_TABLE = {
    ("gaussian", "with_replacement"): (
        [38.898, 63.898, 138.898, 438.898, 2538.898, 10038.898],
        [38.898, 39.233, 40.246, 44.370, 76.919, 266.740],
    ),
    ("gaussian", "without_replacement"): (
        [38.373, 40.873, 48.373, 78.373, 288.373, 1038.373],
        [38.373, 38.698, 39.679, 43.668, 74.654, 240.108],
    ),
    ("rec", "with_replacement"): (
        [86.012, 111.012, 186.012, 486.012, 2586.012, 10086.012],
        [86.012, 86.464, 87.826, 93.375, 137.146, 391.439],
    ),
    ("rec", "without_replacement"): (
        [83.159, 85.659, 93.159, 123.159, 333.159, 1083.159],
        [83.159, 83.580, 84.848, 90.000, 129.823, 337.020],
    ),
}


@pytest.mark.parametrize("variant,sampling", list(DOCS_TABLE))
def test_docs_table(variant, sampling):
    n, b, t, c = 100, 10, 1000, 0.545
    delta = n**-1.1
    bits, groups = (None, None) if variant == "gaussian" else (42, 6)
    before_docs, after_docs = DOCS_TABLE[(variant, sampling)]
    wr = sampling == "with_replacement"
    q, steps, k = (1.0 / n, t * b, b) if wr else (b / n, t, 1)
    plain = dprec_step_rdp(
        c,
        q,
        ORDERS,
        threat_model="server",
        relation="zero",
        sampling=sampling,
        num_clients=n,
        bits=bits,
        groups=groups,
    )
    for s, before_doc, after_doc in zip(TABLE_S, before_docs, after_docs):
        acc = DPRECRoundAccountant(
            clip_multiplier=c,
            bits=bits,
            groups=groups,
            num_clients=n,
            clients_per_round=b,
            delta=delta,
            sampling=sampling,
            quantile_noise=s,
        )
        after = acc.step(rounds=t).epsilon
        extra = 0.0 if s is None else t * k * ORDERS / (2.0 * s * s)
        before = _both_tails(steps * plain[0] + extra, steps * plain[1] + extra, delta)
        assert round(after, 3) == after_doc and round(before, 3) == before_doc
        assert after <= before
        if s is not None:
            assert after < before


# The with-replacement message observer (and "central"), Gaussian variant, same setting: before (the bits
# added unamplified) and after. Zero-out folds through the attributed curve (from s = 10 on the server's
# numbers above); add/remove cannot fold the lattice bit, so it stays at the old bound.
MESSAGES_TABLE = {
    "zero": (
        [8.900, 33.933, 108.933, 408.933, 2508.933, 10008.933],
        [8.900, 33.933, 40.246, 44.370, 76.919, 266.740],
    ),
    "add_remove": (
        [5.482, 31.653, 106.653, 406.653, 2506.653, 10006.653],
        [5.482, 31.653, 106.653, 406.653, 2506.653, 10006.653],
    ),
}


@pytest.mark.parametrize("relation", list(MESSAGES_TABLE))
def test_docs_message_observer_table(relation):
    n, b, t, c = 100, 10, 1000, 0.545
    delta = n**-1.1
    before_docs, after_docs = MESSAGES_TABLE[relation]
    kw = dict(threat_model="messages", relation=relation, sampling="with_replacement", num_clients=n)
    plain = dprec_step_rdp(c, 1.0 / n, ORDERS, **kw)
    for s, before_doc, after_doc in zip(TABLE_S, before_docs, after_docs):
        got = {}
        for observer in ("messages", "central"):
            acc = DPRECRoundAccountant(
                clip_multiplier=c,
                bits=None,
                num_clients=n,
                clients_per_round=b,
                delta=delta,
                sampling="with_replacement",
                threat_model=observer,
                relation=relation,
                quantile_noise=s,
            )
            got[observer] = acc.step(rounds=t).epsilon
        assert got["central"] == got["messages"]
        extra = 0.0 if s is None else t * b * ORDERS / (2.0 * s * s)
        before = _both_tails(t * b * plain[0] + extra, t * b * plain[1] + extra, delta)
        assert round(got["messages"], 3) == after_doc and round(before, 3) == before_doc
        assert got["messages"] <= before * (1.0 + 1e-12)


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
