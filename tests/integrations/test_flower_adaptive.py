"""dprec.flower's adaptive clipping (Andrew et al. 2021): the clients' noisy quantile bits, the clip norm's
geometric update, the round codec, the accounting of the bits, and bad input."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("dprec.flower is tested with flwr's Message API on Python >= 3.11", allow_module_level=True)
pytest.importorskip("flwr")
pytest.importorskip("scipy")

from flwr.app import ConfigRecord  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

from dprec import DPRECCodec  # noqa: E402
from dprec.flower import (  # noqa: E402
    CONFIG_QUANTILE_NOISE,
    CONFIG_SIGMA,
    QUANTILE_BIT_KEY,
    RECORD_KEY,
    AdaptiveClipping,
    DPRECStrategy,
    dprec_mod,
    make_dprec_mod,
)
from dprec.flower._adaptive import bit_lattice  # noqa: E402
from tests.integrations.test_flower import (  # noqa: E402
    CLIP,
    DELTA,
    SIGMA,
    StaticGrid,
    answer,
    float_arrays,
    initial_arrays,
    make_codec,
    make_context,
    push,
    server_mean,
    task_identity,  # noqa: F401 - the autouse fixture
    train_fn,
    train_message,
)


def adaptive_strategy(nodes: int = 4, **kwargs):
    clipping = kwargs.pop("clipping", AdaptiveClipping())
    strategy = DPRECStrategy(
        FedAvg(fraction_train=1.0, min_available_nodes=1, min_train_nodes=1),
        make_codec(),
        delta=DELTA,
        keep_messages=True,
        adaptive_clipping=clipping,
        **kwargs,
    )
    return strategy, StaticGrid(nodes)


def config_of(message) -> ConfigRecord:
    return next(iter(message.content.config_records.values()))


# --------------------------------------------------------------------------------------
# AdaptiveClipping itself
# --------------------------------------------------------------------------------------


def test_adaptive_clipping_update_rule_and_defaults():
    a = AdaptiveClipping()
    assert (a.initial_clip_norm, a.target_quantile, a.learning_rate, a.quantile_noise) == (None, 0.5, 0.2, None)
    assert a.noise_for(0.5) == 4.0 and AdaptiveClipping(quantile_noise=3.0).noise_for(0.5) == 3.0
    # C exp(-eta (b - gamma)): every update clipped (b = 0) grows C by exp(0.1); none clipped shrinks it.
    assert a.next_clip_norm(2.0, 0.0) == pytest.approx(2.0 * math.exp(0.1), rel=1e-15)
    assert a.next_clip_norm(2.0, 1.0) == pytest.approx(2.0 * math.exp(-0.1), rel=1e-15)
    assert a.next_clip_norm(2.0, 0.5) == 2.0
    # The fraction is clamped to [0, 1]: one round moves C by at most exp(eta max(gamma, 1 - gamma)).
    assert a.next_clip_norm(2.0, -1e300) == a.next_clip_norm(2.0, 0.0)
    assert a.next_clip_norm(2.0, 1e300) == a.next_clip_norm(2.0, 1.0)
    # A claimed bit Y is read as Y / M, kept within 10 noise deviations of [0, 1].
    m = bit_lattice(2.0)
    assert m == 2**16 and bit_lattice(1000.0) == 2**14 and bit_lattice(2.0**24) == 1
    assert AdaptiveClipping.bit_value(10**30, 2.0) == 21.0 and AdaptiveClipping.bit_value(-(10**30), 2.0) == -20.0
    assert AdaptiveClipping.bit_value(3 * m // 10, 2.0) == (3 * m // 10) / m


@pytest.mark.parametrize(
    "kwargs, exc, name",
    [
        ({"initial_clip_norm": 0.0}, ValueError, "initial_clip_norm"),
        ({"initial_clip_norm": math.inf}, ValueError, "initial_clip_norm"),
        ({"initial_clip_norm": "1"}, TypeError, "initial_clip_norm"),
        ({"target_quantile": 0.0}, ValueError, "target_quantile"),
        ({"target_quantile": 1.0}, ValueError, "target_quantile"),
        ({"target_quantile": math.nan}, ValueError, "target_quantile"),
        ({"target_quantile": True}, TypeError, "target_quantile"),
        ({"learning_rate": -0.1}, ValueError, "learning_rate"),
        ({"learning_rate": math.nan}, ValueError, "learning_rate"),
        ({"quantile_noise": 0.0}, ValueError, "quantile_noise"),
        ({"quantile_noise": 2.0**25}, ValueError, "quantile_noise"),
        ({"quantile_noise": None, "learning_rate": None}, TypeError, "learning_rate"),
    ],
)
def test_adaptive_clipping_bad_input(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        AdaptiveClipping(**kwargs)


def test_strategy_adaptive_clipping_argument():
    strategy, _ = adaptive_strategy()
    assert isinstance(strategy.adaptive_clipping, AdaptiveClipping)
    assert strategy.clip_norm == pytest.approx(SIGMA * CLIP) and strategy.quantile_noise == 2.0 / CLIP
    fixed = DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False)
    assert fixed.adaptive_clipping is None and fixed.quantile_noise is None
    assert DPRECStrategy(FedAvg(), make_codec(), delta=DELTA).adaptive_clipping == AdaptiveClipping()  # the default
    with pytest.raises(TypeError, match="adaptive_clipping"):
        DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, adaptive_clipping="yes")
    with pytest.raises(AttributeError):  # the accountant takes s when it is created: it cannot change later
        strategy.quantile_noise = 1.0
    with pytest.raises(ValueError, match="initial_clip_norm"):  # a clip norm whose sigma no float32 holds
        DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, adaptive_clipping=AdaptiveClipping(initial_clip_norm=1e300))


# --------------------------------------------------------------------------------------
# The client's bit
# --------------------------------------------------------------------------------------


def bits_of(codec: DPRECCodec, noise: float, n: int, mod=dprec_mod) -> np.ndarray:
    """The bits n clients send, in bit units (Y / M); each Y must be an integer."""
    out = []
    for i in range(n):
        msg = train_message(codec)
        msg.content["config"][CONFIG_QUANTILE_NOISE] = noise
        reply = mod(msg, make_context(1 + i % 5), train_fn)
        assert not reply.has_error(), reply.error.reason
        value = reply.content[RECORD_KEY][QUANTILE_BIT_KEY]
        assert isinstance(value, float) and value.is_integer()  # an integer on the lattice, fixed-size on the wire
        out.append(value / bit_lattice(noise))
    return np.array(out)


def test_client_bit_is_whether_the_update_fits_plus_private_noise():
    # One local step of the test model moves it by about 0.03: a clip norm of 10 holds every update (bit 1),
    # one of 1e-4 none (bit 0). The noise has standard deviation s (from the OS entropy source: checked with a
    # tolerance of 6 standard errors, and its spread with a chi-square-like bound).
    n, s = 400, 0.5
    inside = bits_of(DPRECCodec(sigma=10.0, clip_multiplier=1.0, bits=7, max_group_size=64), s, n)
    outside = bits_of(DPRECCodec(sigma=1e-4, clip_multiplier=1.0, bits=7, max_group_size=64), s, n)
    for values, mean in ((inside, 1.0), (outside, 0.0)):
        assert abs(values.mean() - mean) < 6 * s / math.sqrt(n)
        assert 0.8 * s < values.std() < 1.2 * s
    # Fresh noise every time: n draws at scale s M = 32768 repeat a value only by chance (a few birthday pairs).
    assert len(set(inside.tolist())) > 0.95 * n


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, 2.0**25, "1", True])
def test_client_refuses_a_bad_quantile_noise(value):
    msg = train_message(make_codec())
    msg.content["config"][CONFIG_QUANTILE_NOISE] = value
    reply = dprec_mod(msg, make_context(), train_fn)
    assert reply.has_error() and CONFIG_QUANTILE_NOISE in reply.error.reason


def test_capped_client_refuses_too_little_noise_before_training():
    trained = []

    def spy(msg, context):
        trained.append(1)
        return train_fn(msg, context)

    mod = make_dprec_mod(min_quantile_noise=1.0)
    msg = train_message(make_codec())
    msg.content["config"][CONFIG_QUANTILE_NOISE] = 0.5
    reply = mod(msg, make_context(), spy)
    assert reply.has_error() and "min_quantile_noise=1" in reply.error.reason and not trained
    msg.content["config"][CONFIG_QUANTILE_NOISE] = 1.0
    assert not mod(msg, make_context(), spy).has_error() and trained == [1]
    with pytest.raises(ValueError, match="min_quantile_noise"):
        make_dprec_mod(min_quantile_noise=0.0)


# --------------------------------------------------------------------------------------
# The server: the round codec, the update of the clip norm, the accounting
# --------------------------------------------------------------------------------------


def test_rounds_follow_the_clip_norm():
    clipping = AdaptiveClipping(initial_clip_norm=0.002, learning_rate=0.5, quantile_noise=0.3)
    strategy, grid = adaptive_strategy(clipping=clipping)
    arrays = initial_arrays()
    norms = []
    for r in (1, 2, 3):
        clip = strategy.clip_norm
        messages = push(list(strategy.configure_train(r, arrays, ConfigRecord(), grid)))
        config = config_of(messages[0])
        # sigma = C_t / c travels with the quantile noise; the codec's c stays fixed.
        assert config[CONFIG_SIGMA] == pytest.approx(clip / CLIP, rel=1e-15) and config[CONFIG_QUANTILE_NOISE] == 0.3
        replies = answer(messages)
        bits = [rep.content[RECORD_KEY][QUANTILE_BIT_KEY] for rep in replies]
        new, metrics = strategy.aggregate_train(r, replies)
        stats = strategy.history[r - 1]
        fraction = math.fsum(AdaptiveClipping.bit_value(b, 0.3) for b in bits) / len(bits)
        assert stats.clip_norm == pytest.approx(clip, rel=1e-15) and stats.sigma == pytest.approx(clip / CLIP)
        assert stats.unclipped_fraction == pytest.approx(fraction, rel=1e-12)
        assert (
            stats.next_clip_norm
            == strategy.clip_norm
            == pytest.approx(clip * math.exp(-0.5 * (min(max(fraction, 0.0), 1.0) - 0.5)), rel=1e-12)
        )
        assert metrics["dprec-clip-norm"] == stats.clip_norm and metrics["dprec-next-clip-norm"] == strategy.clip_norm
        assert metrics["dprec-unclipped-fraction"] == stats.unclipped_fraction
        # The mean is decoded with the round's sigma.
        round_codec = DPRECCodec(sigma=clip / CLIP, clip_multiplier=CLIP, bits=7, max_group_size=64)
        glob = float_arrays(arrays)
        mean = server_mean(round_codec, stats.messages, glob)
        for k in glob:
            np.testing.assert_array_equal(new[k].numpy(), glob[k] + mean[k])
        arrays = new
        norms.append(clip)
    # Updates of norm ~0.03 against a clip norm of 0.002: clipped, so the clip norm grows (noise 0.3 / 2 per
    # round cannot undo a drift of 0.25 three times in a row with any real probability: 5 sigma).
    assert norms[0] < norms[1] < norms[2] < strategy.clip_norm


def test_the_bits_are_accounted():
    strategy, grid = adaptive_strategy(num_rounds=3)
    arrays = initial_arrays()
    for r in (1, 2):
        messages = push(list(strategy.configure_train(r, arrays, ConfigRecord(), grid)))
        arrays, _ = strategy.aggregate_train(r, answer(messages))
    s = 2.0 / CLIP
    assert strategy.accountant.quantile_noise == s
    reference = make_codec().accountant(
        float_arrays(initial_arrays()),
        num_clients=4,
        clients_per_round=4,
        delta=DELTA,
        sampling="without_replacement",
        rounds=3,
        quantile_noise=s,
    )
    without = make_codec().accountant(
        float_arrays(initial_arrays()),
        num_clients=4,
        clients_per_round=4,
        delta=DELTA,
        sampling="without_replacement",
        rounds=3,
    )
    for r in (1, 2):
        eps, eps_without = reference.step().epsilon, without.step().epsilon
        assert strategy.history[r - 1].epsilon == pytest.approx(eps, rel=1e-12) and eps > eps_without


@pytest.mark.parametrize(
    "value, reason",
    [(None, "no 'dprec.quantile-bit'"), (0.5, "integer"), (math.nan, "integer"), ("1", "integer"), (True, "integer")],
)
def test_a_reply_without_a_usable_bit_is_dropped(value, reason):
    strategy, grid = adaptive_strategy(3)
    messages = push(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), grid)))
    replies = answer(messages)
    record = replies[1].content[RECORD_KEY]
    if value is None:
        del record[QUANTILE_BIT_KEY]
    else:
        record[QUANTILE_BIT_KEY] = value
    _, metrics = strategy.aggregate_train(1, replies)
    stats = strategy.history[0]
    assert stats.num_aggregated == 2 and stats.dropped == {"bad-message": 1}
    assert metrics["dprec-dropped.bad-message"] == 1


@pytest.mark.parametrize("claim", [10**300, -(10**300)])
def test_a_forged_bit_moves_the_clip_norm_by_a_bounded_step(claim):
    # A client claiming a huge bit either way: its value is clamped to [-10 s, 1 + 10 s] and the average to
    # [0, 1], so the clip norm moves by at most exp(0.2 * 0.5) a round, over many rounds too, and never crashes.
    clipping = AdaptiveClipping(quantile_noise=100.0)  # a large s: each clamped bit may reach 1001 or -1000
    strategy, grid = adaptive_strategy(2, clipping=clipping)
    arrays = initial_arrays()
    for r in range(1, 31):
        before = strategy.clip_norm
        messages = push(list(strategy.configure_train(r, arrays, ConfigRecord(), grid)))
        replies = answer(messages)
        replies[0].content[RECORD_KEY][QUANTILE_BIT_KEY] = claim
        arrays, _ = strategy.aggregate_train(r, replies)
        assert math.exp(-0.1) * (1 - 1e-12) <= strategy.clip_norm / before <= math.exp(0.1) * (1 + 1e-12)


def test_the_clip_norm_stays_within_sigma_range():
    # At the edge of sigma's range the round codec's sigma is clamped (not the clip norm: (C_max c) / c can round
    # above the range), and the clip norm is the codec's.
    from dprec.rec.kernels import MAX_SIGMA, MIN_SIGMA

    for c in (0.4229, 1.0, 3.7):
        codec = DPRECCodec(sigma=1.0, clip_multiplier=c, bits=7, max_group_size=64)
        for extreme in (MAX_SIGMA * c * 10.0, MIN_SIGMA * c / 10.0):
            strategy = DPRECStrategy(FedAvg(min_train_nodes=1, min_available_nodes=1), codec, delta=DELTA)
            strategy.clip_norm = extreme
            round_codec = strategy._round_codec()
            assert MIN_SIGMA <= round_codec.sigma <= MAX_SIGMA and strategy.clip_norm == round_codec.clip_norm


def test_fixed_clipping_sends_no_bits():
    strategy = DPRECStrategy(
        FedAvg(fraction_train=1.0, min_available_nodes=1, min_train_nodes=1),
        make_codec(),
        delta=DELTA,
        adaptive_clipping=False,
    )
    messages = push(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(2))))
    assert CONFIG_QUANTILE_NOISE not in config_of(messages[0])
    replies = answer(messages)
    assert QUANTILE_BIT_KEY not in replies[0].content[RECORD_KEY]
    _, metrics = strategy.aggregate_train(1, replies)
    assert strategy.accountant.quantile_noise is None and "dprec-unclipped-fraction" not in metrics
    assert strategy.clip_norm == make_codec().clip_norm


# --------------------------------------------------------------------------------------
# Misconfiguration caught at construction (issue 34's bad input)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, math.nan])
def test_poisson_rate_outside_zero_one(rate):
    with pytest.raises(ValueError, match=r"DPRECStrategy \(Flower Message API\): sampling_rate must be in \(0, 1\]"):
        DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, sampling="poisson", sampling_rate=rate)


def test_wrapped_sampling_that_cannot_be_accounted():
    api = r"DPRECStrategy \(Flower Message API\)"
    with pytest.raises(ValueError, match=api + r".*FedAvg's fraction_train=1.5 .*in \(0, 1\]"):
        DPRECStrategy(FedAvg(fraction_train=1.5), make_codec(), delta=DELTA)
    with pytest.raises(ValueError, match=api + r".*FedAvg's min_train_nodes=10 exceeds num_clients=5.*B <= N"):
        DPRECStrategy(FedAvg(min_train_nodes=10, min_available_nodes=2), make_codec(), delta=DELTA, num_clients=5)
    with pytest.raises(ValueError, match=api + r".*min_available_nodes=8 exceeds num_clients=5"):
        DPRECStrategy(FedAvg(min_available_nodes=8), make_codec(), delta=DELTA, num_clients=5)
    # With replacement B > N is allowed; without a known N nothing is refused up front.
    DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, num_clients=3, sampling="with_replacement", clients_per_round=10)
    DPRECStrategy(FedAvg(min_train_nodes=10, min_available_nodes=10), make_codec(), delta=DELTA)


def test_legacy_wrapped_sampling_that_cannot_be_accounted():
    import flwr.server.strategy as legacy

    from dprec.flower import DPRECLegacyStrategy

    api = r"DPRECLegacyStrategy \(Flower legacy API\)"
    with pytest.raises(ValueError, match=api + r".*FedAvg's fraction_fit=2.0 "):
        DPRECLegacyStrategy(legacy.FedAvg(fraction_fit=2.0), make_codec(), delta=DELTA)
    with pytest.raises(ValueError, match=api + r".*min_fit_clients=10 exceeds num_clients=5"):
        DPRECLegacyStrategy(
            legacy.FedAvg(min_fit_clients=10, min_available_clients=2), make_codec(), delta=DELTA, num_clients=5
        )


def test_the_mod_factory_given_as_a_mod():
    with pytest.raises(TypeError, match=r"mods=\[make_dprec_mod\(\.\.\.\)\].*mods=\[dprec_mod\]"):
        make_dprec_mod(train_message(make_codec()), make_context(), train_fn)


def test_a_clip_multiplier_cap_also_floors_the_bit_noise():
    mod = make_dprec_mod(max_clip_multiplier=0.5)  # min_quantile_noise defaults to 2 / 0.5 = 4
    codec = DPRECCodec(sigma=0.1, clip_multiplier=0.5, bits=7, max_group_size=64)
    for noise, refused in ((1e-300, True), (3.9, True), (4.0, False)):
        msg = train_message(codec)
        msg.content["config"][CONFIG_QUANTILE_NOISE] = noise
        reply = mod(msg, make_context(), train_fn)
        assert reply.has_error() is refused, noise
        if refused:
            assert "min_quantile_noise=4" in reply.error.reason


def test_legacy_fixed_size_sample_and_one_client():
    import flwr.server.strategy as legacy

    from dprec.flower import DPRECLegacyStrategy

    # fraction_fit=0 with min_fit_clients=k is legacy FedAvg's fixed-size sample of k clients: accepted.
    DPRECLegacyStrategy(legacy.FedAvg(fraction_fit=0.0, min_fit_clients=3), make_codec(), delta=DELTA, num_clients=5)
    with pytest.raises(ValueError, match="fraction_fit=0.0"):
        DPRECLegacyStrategy(legacy.FedAvg(fraction_fit=0.0, min_fit_clients=0), make_codec(), delta=DELTA)
    # A population of one client is not refused because of the wrapper's internal strategy.
    DPRECLegacyStrategy(
        legacy.FedAvg(min_fit_clients=1, min_available_clients=1), make_codec(), delta=DELTA, num_clients=1
    )
