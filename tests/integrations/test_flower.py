"""dprec.flower: the client mod, the strategy wrapper, and a real Flower simulation (Ray)."""

from __future__ import annotations

import json
import math
import re
import sys
import uuid

import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("dprec.flower is tested with flwr's Message API on Python >= 3.11", allow_module_level=True)
pytest.importorskip("flwr")
pytest.importorskip("scipy")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.common.constant import ErrorCode  # noqa: E402
from flwr.serverapp import ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg, FedProx  # noqa: E402

from dprec import DPRECCodec, DPRECMessage  # noqa: E402
from dprec.accounting import DPRECRoundAccountant  # noqa: E402
from dprec.flower import (  # noqa: E402
    CONFIG_BITS,
    CONFIG_CLIP_MULTIPLIER,
    CONFIG_MAX_GROUP_SIZE,
    CONFIG_SIGMA,
    CONFIG_SLOT,
    DEFAULT_MIN_BITS,
    MESSAGE_KEY,
    RECORD_KEY,
    STATE_KEY,
    DPRECStrategy,
    codec_config,
    codec_from_config,
    dprec_mod,
    make_dprec_mod,
    wire_nbytes,
)

SIGMA = 0.05
CLIP = 1.0
BITS = 7
GROUP = 64
DELTA = 1e-3
NUM_NODES = 5
NUM_ROUNDS = 3


@pytest.fixture(autouse=True)
def task_identity():
    """Flower stamps instruction messages with the identity of the running app; give the tests one."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = {k: TaskIdentity.__dict__[k] for k in ("_task_id", "_run_id", "_node_id")}
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    for k, v in saved.items():
        setattr(TaskIdentity, k, v)


def make_codec() -> DPRECCodec:
    return DPRECCodec(sigma=SIGMA, clip_multiplier=CLIP, bits=BITS, max_group_size=GROUP)


# --------------------------------------------------------------------------------------
# A tiny NumPy model: linear least squares, one deterministic gradient step per round.
# --------------------------------------------------------------------------------------


def initial_arrays() -> ArrayRecord:
    rng = np.random.default_rng(7)
    return ArrayRecord(
        {
            "fc.weight": Array(rng.normal(0.0, 0.1, size=(64, 10)).astype(np.float32)),
            "fc.bias": Array(np.zeros(10, dtype=np.float32)),
            "steps": Array(np.array([0], dtype=np.int64)),  # an integer buffer: never sent back
        }
    )


def local_data(partition: int) -> tuple[np.ndarray, np.ndarray]:
    # Data sizes differ between nodes, so a mean weighted by num-examples would differ from the uniform one.
    rng = np.random.default_rng(1000 + partition)
    n = 16 + 8 * (partition % 5)
    x = rng.normal(size=(n, 64)).astype(np.float32)
    y = rng.normal(size=(n, 10)).astype(np.float32)
    return x, y


def local_step(arrays: ArrayRecord, partition: int) -> tuple[dict[str, np.ndarray], float]:
    w, b = arrays["fc.weight"].numpy(), arrays["fc.bias"].numpy()
    x, y = local_data(partition)
    err = x @ w + b - y
    loss = float(np.mean(err**2))
    lr = np.float32(0.01)
    new = {
        "fc.weight": (w - lr * (x.T @ err) / np.float32(len(x))).astype(np.float32),
        "fc.bias": (b - lr * err.mean(axis=0)).astype(np.float32),
        "steps": arrays["steps"].numpy() + 1,
    }
    return new, loss


def train_fn(msg: Message, context: Context) -> Message:
    partition = int(context.node_config.get("partition-id", context.node_id))
    new, loss = local_step(msg.content["arrays"], partition)
    content = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(v) for k, v in new.items()}),
            "metrics": MetricRecord({"num-examples": len(local_data(partition)[0]), "train-loss": loss}),
        }
    )
    return Message(content, reply_to=msg)


def evaluate_fn(msg: Message, context: Context) -> Message:
    _, loss = local_step(msg.content["arrays"], int(context.node_config.get("partition-id", context.node_id)))
    return Message(RecordDict({"metrics": MetricRecord({"num-examples": 32, "eval-loss": loss})}), reply_to=msg)


def make_context(node_id: int = 1) -> Context:
    return Context(run_id=1, node_id=node_id, node_config={"partition-id": node_id}, state=RecordDict(), run_config={})


def train_message(codec: DPRECCodec | None, arrays: ArrayRecord | None = None, node_id: int = 1) -> Message:
    config = ConfigRecord({"server-round": 1, **(codec_config(codec) if codec is not None else {})})
    content = RecordDict({"arrays": initial_arrays() if arrays is None else arrays, "config": config})
    return Message(content, dst_node_id=node_id, message_type=MessageType.TRAIN)


def server_mean(codec, messages, template, weights=None) -> dict[str, np.ndarray]:
    """The strategy's mean, recomputed: float64 sums of the decoded updates in aggregation order
    (``codec.accumulate``, weights over the power of two below the largest) over the sum of the weights, as
    float32; and, to float64 rounding, ``codec.aggregate``."""
    msgs = [m if isinstance(m, DPRECMessage) else DPRECMessage.from_bytes(m) for m in messages]
    w = np.ones(len(msgs)) if weights is None else np.asarray(weights, dtype=np.float64)
    w = np.ldexp(w, -(math.frexp(w.max())[1] - 1))  # the claimed weights over the power of two below the largest
    sums = codec.accumulate(msgs, {k: np.zeros(v.shape) for k, v in template.items()}, weights=w)
    mean = {k: (s / math.fsum(w.tolist())).astype(np.float32) for k, s in sums.items()}
    reference = codec.aggregate(msgs, template, weights=w / math.fsum(w.tolist()))
    for k in mean:
        np.testing.assert_allclose(mean[k], reference[k], rtol=1e-6, atol=1e-7 * codec.sigma)
    return mean


def float_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: a.numpy() for k, a in record.items() if a.numpy().dtype.kind == "f"}


# --------------------------------------------------------------------------------------
# Config keys
# --------------------------------------------------------------------------------------


def test_codec_config_round_trips():
    codec = make_codec()
    cfg = codec_config(codec)
    assert cfg == {CONFIG_SIGMA: SIGMA, CONFIG_CLIP_MULTIPLIER: CLIP, CONFIG_BITS: BITS, CONFIG_MAX_GROUP_SIZE: GROUP}
    back = codec_from_config(ConfigRecord(cfg))  # through Flower's record type
    assert (back.sigma, back.clip_multiplier, back.bits, back.max_group_size) == (SIGMA, CLIP, BITS, GROUP)

    per_tensor = DPRECCodec(sigma=0.1, clip_multiplier=0.5, bits={"fc.bias": 3, "fc.weight": 9})
    cfg = codec_config(per_tensor)
    assert CONFIG_MAX_GROUP_SIZE not in cfg and isinstance(cfg[CONFIG_BITS], str)
    back = codec_from_config(ConfigRecord(cfg))
    assert back.bits == {"fc.bias": 3, "fc.weight": 9} and back.max_group_size is None

    with pytest.raises(KeyError, match="dprec.sigma"):
        codec_from_config({CONFIG_BITS: 7, CONFIG_CLIP_MULTIPLIER: 1.0})
    with pytest.raises(ValueError, match="dprec.bits"):
        codec_from_config({CONFIG_SIGMA: 0.1, CONFIG_CLIP_MULTIPLIER: 1.0, CONFIG_BITS: "[1, 2]"})
    with pytest.raises(TypeError, match="codec"):
        codec_config("codec")


# --------------------------------------------------------------------------------------
# Client mod
# --------------------------------------------------------------------------------------


def test_mod_replaces_the_arrays_by_the_message_bytes():
    codec = make_codec()
    msg = train_message(codec)
    context = make_context(3)
    reply = dprec_mod(msg, context, train_fn)
    assert not reply.has_error()
    content = reply.content
    assert len(content.array_records) == 0, "no arrays travel back"
    assert set(content.keys()) == {"metrics", RECORD_KEY}
    record = content[RECORD_KEY]
    assert isinstance(record, ConfigRecord) and list(record.keys()) == [MESSAGE_KEY]
    blob = record[MESSAGE_KEY]
    assert isinstance(blob, bytes)
    # The user's metrics pass unchanged; nothing about the update's norm is sent.
    assert dict(content["metrics"]) == dict(train_fn(msg, context).content["metrics"])

    # The message decodes against the server's template (floating arrays only).
    glob = float_arrays(initial_arrays())
    assert set(glob) == {"fc.weight", "fc.bias"}
    message = DPRECMessage.from_bytes(blob)
    assert message.nbytes == len(blob) == codec.layout(glob).message_nbytes
    decoded = codec.decode(message, glob)
    assert {k: v.shape for k, v in decoded.items()} == {k: v.shape for k, v in glob.items()}

    # Diagnostics stay in the local state.
    new, _ = local_step(initial_arrays(), 3)
    norm = np.sqrt(sum(np.sum((new[k].astype(np.float64) - glob[k]) ** 2) for k in glob))
    state = context.state[STATE_KEY]
    assert isinstance(state, MetricRecord)
    assert state["norm"] == pytest.approx(norm, rel=1e-5)
    assert state["clip-norm"] == pytest.approx(SIGMA * CLIP)
    assert state["clipped"] == int(norm > SIGMA * CLIP) == 1
    assert state["message-bytes"] == len(blob)
    assert state["rounds"] == 1 and state["clipped-rounds"] == 1
    dprec_mod(train_message(codec), context, train_fn)
    assert context.state[STATE_KEY]["rounds"] == 2 and context.state[STATE_KEY]["clipped-rounds"] == 2


def test_mod_messages_are_fresh_and_within_the_clip():
    # Two encodes of the same update use different OS seeds; a tiny update is not clipped.
    codec = DPRECCodec(sigma=10.0, clip_multiplier=CLIP, bits=BITS, max_group_size=GROUP)
    context = make_context(2)
    blobs = [dprec_mod(train_message(codec), context, train_fn).content[RECORD_KEY][MESSAGE_KEY] for _ in range(2)]
    assert DPRECMessage.from_bytes(blobs[0]).seed != DPRECMessage.from_bytes(blobs[1]).seed
    assert context.state[STATE_KEY]["clipped"] == 0 and context.state[STATE_KEY]["clipped-rounds"] == 0


def test_mod_passes_non_train_messages_and_error_replies():
    codec = make_codec()
    msg = Message(RecordDict({"arrays": initial_arrays()}), dst_node_id=1, message_type=MessageType.EVALUATE)
    expected = []

    def call_next(m, c):
        out = evaluate_fn(m, c)
        expected.append(out)
        return out

    assert dprec_mod(msg, make_context(), call_next) is expected[0]

    def failing(m, c):
        return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="boom"), reply_to=m)

    reply = dprec_mod(train_message(codec), make_context(), failing)
    assert reply.has_error() and reply.error.reason == "boom"


def _arrays_reply(arrays: dict[str, np.ndarray]):
    def call_next(m, c):
        record = ArrayRecord({k: Array(v) for k, v in arrays.items()})
        return Message(RecordDict({"arrays": record, "metrics": MetricRecord({"num-examples": 1})}), reply_to=m)

    return call_next


@pytest.mark.parametrize(
    "case, match",
    [
        ("no-dprec-config", "DPRECStrategy"),
        ("missing-key", "extra: \\[\\], missing: \\['fc.bias'\\]"),
        ("extra-key", "extra: \\['other'\\]"),
        ("shape", "'fc.bias' has shape"),
        ("dtype", "'fc.bias' has dtype"),
        ("no-arrays", "exactly one ArrayRecord in the train reply, found 0"),
    ],
)
def test_mod_error_replies(case, match):
    codec = make_codec()
    glob = {k: a.numpy() for k, a in initial_arrays().items()}
    good = dict(glob)
    call_next = _arrays_reply(good)
    msg = train_message(codec)
    if case == "no-dprec-config":
        msg = train_message(None)
        call_next = train_fn
    elif case == "missing-key":
        call_next = _arrays_reply({k: v for k, v in good.items() if k != "fc.bias"})
    elif case == "extra-key":
        call_next = _arrays_reply({**good, "other": np.zeros(2, np.float32)})
    elif case == "shape":
        call_next = _arrays_reply({**good, "fc.bias": np.zeros(11, np.float32)})
    elif case == "dtype":
        call_next = _arrays_reply({**good, "fc.bias": np.zeros(10, np.int32)})
    elif case == "no-arrays":

        def call_next(m, c):
            return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1})}), reply_to=m)

    reply = dprec_mod(msg, make_context(), call_next)
    assert reply.has_error()
    assert reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert reply.error.reason.startswith("dprec_mod: ")
    assert re.search(match, reply.error.reason), reply.error.reason


def test_capped_mod_refuses_a_larger_clip_multiplier_before_training():
    trained = []

    def call_next(m, c):
        trained.append(m)
        return train_fn(m, c)

    strict = make_dprec_mod(max_clip_multiplier=CLIP / 2)
    reply = strict(train_message(make_codec()), make_context(), call_next)
    assert reply.has_error() and reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert "max_clip_multiplier" in reply.error.reason and f"clip_multiplier={CLIP:g}" in reply.error.reason
    assert not trained, "the client must not train when it refuses the server's c"
    # At or below the cap the capped mod is dprec_mod.
    loose = make_dprec_mod(max_clip_multiplier=CLIP)
    reply = loose(train_message(make_codec()), make_context(), call_next)
    assert not reply.has_error() and len(trained) == 1 and RECORD_KEY in reply.content
    with pytest.raises(ValueError, match="max_clip_multiplier"):
        make_dprec_mod(max_clip_multiplier=0.0)
    with pytest.raises(TypeError, match="max_clip_multiplier"):
        make_dprec_mod(max_clip_multiplier="1")


def test_mod_float64_and_float16_updates():
    codec = DPRECCodec(sigma=1.0, bits=5)
    arrays = ArrayRecord(
        {"a": Array(np.ones((3, 2), np.float64)), "h": Array(np.ones(4, np.float16)), "n": Array(np.arange(3))}
    )
    new = {"a": np.full((3, 2), 1.25), "h": np.full(4, 0.5, np.float16), "n": np.arange(3) + 5}
    context = make_context()
    reply = dprec_mod(train_message(codec, arrays), context, _arrays_reply(new))
    assert not reply.has_error()
    norm = np.sqrt(6 * 0.25**2 + 4 * 0.5**2)
    assert context.state[STATE_KEY]["norm"] == pytest.approx(norm)
    message = DPRECMessage.from_bytes(reply.content[RECORD_KEY][MESSAGE_KEY])
    assert message.num_groups == 2  # the integer array is left out


# --------------------------------------------------------------------------------------
# Strategy wrapper, driven by hand (the simulation below drives it through Flower)
# --------------------------------------------------------------------------------------


class StaticGrid:
    """The one Grid method FedAvg's node sampling calls; messages are answered by hand below."""

    def __init__(self, n: int) -> None:
        self.nodes = list(range(101, 101 + n))

    def get_node_ids(self):
        return list(self.nodes)


def answer(messages, *, mod=dprec_mod):
    return [mod(m, make_context(m.metadata.dst_node_id), train_fn) for m in messages]


def reference_epsilons(codec, template, *, rounds, num_clients, clients_per_round):
    acc = codec.accountant(
        template,
        num_clients=num_clients,
        clients_per_round=clients_per_round,
        delta=DELTA,
        sampling="without_replacement",
        rounds=rounds,
    )
    return [acc.step().epsilon for _ in range(rounds)]


def test_strategy_round_by_hand():
    codec = make_codec()
    strategy = DPRECStrategy(
        FedAvg(fraction_train=0.5, min_available_nodes=1, min_train_nodes=1), codec, delta=DELTA, adaptive_clipping=False, num_rounds=2,
        keep_messages=True,
    )
    grid = StaticGrid(6)
    arrays = initial_arrays()
    user_config = ConfigRecord({"lr": 0.1})
    messages = list(strategy.configure_train(1, arrays, user_config, grid))
    assert len(messages) == 3 and len({m.metadata.dst_node_id for m in messages}) == 3
    assert dict(user_config) == {"lr": 0.1}, "the caller's config is not modified"
    cfg = messages[0].content["config"]
    assert {k: cfg[k] for k in codec_config(codec)} == codec_config(codec) and cfg["lr"] == 0.1
    assert strategy.current_arrays is arrays
    assert (strategy.history[0].num_sampled, strategy.history[0].num_available) == (3, 6)

    replies = answer(messages)
    replies.append(Message(Error(code=0, reason="node crashed"), reply_to=messages[0]))
    new, metrics = strategy.aggregate_train(1, replies)
    stats = strategy.history[0]
    assert (stats.num_aggregated, stats.num_failed, stats.num_rejected) == (3, 1, 0)

    glob = float_arrays(arrays)
    mean = server_mean(codec, stats.messages, glob)
    assert set(new.keys()) == {"fc.weight", "fc.bias", "steps"}
    for k in glob:
        np.testing.assert_array_equal(new[k].numpy(), glob[k] + mean[k])
        assert new[k].numpy().dtype == np.float32
    np.testing.assert_array_equal(new["steps"].numpy(), [0])  # the server keeps its integer arrays

    eps = reference_epsilons(codec, glob, rounds=2, num_clients=6, clients_per_round=3)
    assert metrics["dprec-epsilon"] == strategy.epsilon == stats.epsilon == eps[0] > 0
    assert metrics["dprec-delta"] == DELTA
    assert metrics["dprec-clients"] == 3
    assert metrics["dprec-message-bytes"] == codec.layout(glob).message_nbytes
    assert metrics["dprec-wire-bytes"] == wire_nbytes(replies[0].content[RECORD_KEY], RECORD_KEY)
    assert metrics["float32-wire-bytes"] == wire_nbytes(ArrayRecord({k: Array(v) for k, v in glob.items()}), "arrays")
    assert 20 * metrics["dprec-wire-bytes"] < metrics["float32-wire-bytes"]
    # FedAvg's metric aggregation (weighted by num-examples) still runs.
    m = [r.content["metrics"] for r in replies[:3]]
    expected_loss = sum(x["train-loss"] * x["num-examples"] for x in m) / sum(x["num-examples"] for x in m)
    assert metrics["train-loss"] == pytest.approx(expected_loss)

    # Round 2 from the new global arrays: epsilon composes.
    messages = list(strategy.configure_train(2, new, ConfigRecord(), grid))
    _, metrics = strategy.aggregate_train(2, answer(messages))
    assert metrics["dprec-epsilon"] == eps[1] > eps[0]


def test_strategy_skips_bad_replies_and_returns_none_without_messages():
    codec = make_codec()
    strategy = DPRECStrategy(FedAvg(min_available_nodes=1, min_train_nodes=1), codec, delta=DELTA, adaptive_clipping=False, num_rounds=3)
    grid = StaticGrid(3)
    messages = list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), grid))
    good = answer(messages[:1])
    # A client without the mod (arrays travel), and one whose message is for another model.
    plain = [train_fn(messages[1], make_context(1))]
    other_codec = DPRECCodec(sigma=2 * SIGMA, clip_multiplier=CLIP, bits=BITS, max_group_size=GROUP)
    msg = messages[2]
    msg.content["config"] = ConfigRecord({**dict(msg.content["config"]), **codec_config(other_codec)})
    wrong = answer([msg])
    new, metrics = strategy.aggregate_train(1, good + plain + wrong)
    stats = strategy.history[0]
    assert (stats.num_aggregated, stats.num_rejected) == (1, 2)
    assert metrics["dprec-clients"] == 1 and new is not None
    assert strategy.accountant.rounds == 1

    messages = list(strategy.configure_train(2, new, ConfigRecord(), grid))
    errors = [Message(Error(code=0, reason="x"), reply_to=m) for m in messages]
    new, metrics = strategy.aggregate_train(2, errors)
    assert new is None and dict(metrics) == {"dprec-failed": 3, "dprec-dropped": 0}  # the failures, reported
    assert strategy.accountant.rounds == 1, "nothing was released, nothing is accounted"
    with pytest.raises(ValueError, match="not configured"):
        strategy.aggregate_train(7, [])


def test_strategy_weighted_by_key():
    codec = make_codec()
    strategy = DPRECStrategy(
        FedAvg(min_available_nodes=1, min_train_nodes=1), codec, delta=DELTA, adaptive_clipping=False, weighted_by_key="w", keep_messages=True
    )
    grid = StaticGrid(2)
    arrays = initial_arrays()
    messages = list(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    replies = answer(messages)
    for i, r in enumerate(replies):
        r.content["metrics"]["w"] = float(i + 1)
    new, _ = strategy.aggregate_train(1, replies)
    glob = float_arrays(arrays)
    msgs = [DPRECMessage.from_bytes(b) for b in strategy.history[0].messages]
    mean = server_mean(codec, msgs, glob, weights=[1.0, 2.0])
    for k in glob:
        np.testing.assert_array_equal(new[k].numpy(), glob[k] + mean[k])


def test_strategy_refuses_a_sample_larger_than_n_before_sending():
    # N is frozen at the 4 nodes of round 1; 20 nodes connect before round 2, where FedAvg samples 10 of them.
    # The accountant would refuse B = 10 > N = 4 only in aggregate_train, after the clients trained: configure_train
    # refuses it before returning any message.
    codec = make_codec()
    strategy = DPRECStrategy(
        FedAvg(fraction_train=0.5, min_available_nodes=1, min_train_nodes=1), codec, delta=DELTA, adaptive_clipping=False, num_rounds=3
    )
    grid = StaticGrid(4)
    messages = list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), grid))
    assert len(messages) == 2 and strategy.accountant.num_clients == 4
    new, _ = strategy.aggregate_train(1, answer(messages))
    grid.nodes = list(range(101, 121))
    with pytest.raises(ValueError, match="num_clients") as info:
        strategy.configure_train(2, new, ConfigRecord(), grid)
    text = str(info.value)
    assert "B = 10" in text and "N = 4" in text and "first round" in text
    assert "min_available_nodes" in text and "nothing was sent" in text
    assert len(strategy.history) == 1 and 2 not in strategy._pending and strategy.accountant.rounds == 1
    # A sample within N is still accepted with the larger population (N undercounted only overstates epsilon).
    strategy.strategy.fraction_train = 0.2
    messages = list(strategy.configure_train(2, new, ConfigRecord(), grid))
    assert len(messages) == 4
    strategy.aggregate_train(2, answer(messages))
    assert strategy.accountant.rounds == 2

    # With num_clients given, a first round sampling more than it is refused the same way.
    strategy = DPRECStrategy(
        FedAvg(fraction_train=0.5, min_available_nodes=1, min_train_nodes=1), codec, delta=DELTA, adaptive_clipping=False, num_clients=4
    )
    with pytest.raises(ValueError, match="given as num_clients") as info:
        strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(20))
    assert "nothing was sent" in str(info.value) and strategy.history == [] and strategy.accountant is None


def test_strategy_arguments():
    codec = make_codec()
    with pytest.raises(TypeError, match="strategy"):
        DPRECStrategy(object(), codec, delta=DELTA, adaptive_clipping=False)
    with pytest.raises(TypeError, match="codec"):
        DPRECStrategy(FedAvg(), "codec", delta=DELTA, adaptive_clipping=False)
    with pytest.raises(ValueError, match="delta"):
        DPRECStrategy(FedAvg(), codec, delta=1.5, adaptive_clipping=False)
    with pytest.raises(ValueError, match="num_rounds"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, num_rounds=0)
    with pytest.raises(ValueError, match="reverse"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, reverse="loose")
    # A bad reverse is refused by the constructor, not at round 1; "exact" is accepted in both modes.
    with pytest.raises(ValueError, match="reverse"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, reverse="both")
    assert DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, reverse="exact")
    assert DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, reverse="exact", sampling="poisson", sampling_rate=0.5)
    # Against a central observer, bits too few to pay REC's total-variation cost fall back on the message
    # observer's bound (it holds centrally by post-processing); the server's (default) bound holds for any bits.
    few_bits = DPRECCodec(sigma=SIGMA, clip_multiplier=CLIP, bits=2)
    strategy = DPRECStrategy(FedAvg(min_available_nodes=1, min_train_nodes=1), few_bits, delta=1e-6, adaptive_clipping=False, num_rounds=50,
                             threat_model="central")
    assert len(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(3)))) == 3
    assert strategy.accountant.threat_model == "central"
    strategy = DPRECStrategy(FedAvg(min_available_nodes=1, min_train_nodes=1), few_bits, delta=1e-6, adaptive_clipping=False, num_rounds=50)
    assert len(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(3)))) == 3
    assert strategy.accountant.threat_model == "server" and strategy.accountant.overhead == 0.0


class FlowerLog:
    """Collects what dprec.flower logs through Flower's logger (which may not propagate to the root)."""

    def __init__(self):
        import logging

        self.lines: list[str] = []
        self.logger = logging.getLogger("flwr")
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.lines.append(record.getMessage())

    def __enter__(self):
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)

    def matching(self, text):
        return [line for line in self.lines if text in line]


def one_round(strategy, nodes=6):
    grid = StaticGrid(nodes)
    messages = list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), grid))
    return strategy.aggregate_train(1, answer(messages))


def test_strategy_logs_and_reports_the_threat_model():
    # Defaults: the sound DP-REC accounting against the server (it knows which node sent each message),
    # zero-out relation; both relations in the stats and the metrics, the threat model in the log line.
    codec = make_codec()
    strategy = DPRECStrategy(FedAvg(fraction_train=0.5, min_available_nodes=1, min_train_nodes=1), codec, delta=DELTA, adaptive_clipping=False)
    assert (strategy.threat_model, strategy.relation, strategy.method) == ("server", "zero", "sound")
    assert strategy.guarantee is None
    with FlowerLog() as flog:
        _, metrics = one_round(strategy)
    stats = strategy.history[0]
    assert (stats.threat_model, stats.relation) == ("server", "zero")
    assert stats.epsilons["zero"] == stats.epsilon == metrics["dprec-epsilon"] > 0
    assert stats.epsilons["add_remove"] == float("inf") and "whether the target client takes part" in stats.reasons[
        "add_remove"]
    assert stats.conversion.startswith("rdp-balle") and "both tails" in stats.conversion
    assert metrics["dprec-epsilon.server.zero"] == stats.epsilon
    assert metrics["dprec-epsilon.server.add_remove"] == float("inf")
    g = strategy.guarantee
    assert (g.threat_model, g.relation, g.epsilon) == ("server", "zero", stats.epsilon)
    acc = strategy.accountant
    assert (acc.threat_model, acc.relation, acc.method) == ("server", "zero", "sound")
    lines = flog.matching("DP-REC round 1:")
    assert len(lines) == 1, flog.lines
    assert f"epsilon = {stats.epsilon:.4f}" in lines[0]
    assert "threat model 'server', relation 'zero', sampling without replacement, rdp-balle, both tails" in lines[0]
    # The same epsilon as the codec's accountant with the same threat model, relation and sampling.
    ref = codec.accountant(float_arrays(initial_arrays()), num_clients=6, clients_per_round=3, delta=DELTA,
                           sampling="without_replacement", threat_model="server", relation="zero")
    assert ref.step().epsilon == stats.epsilon


@pytest.mark.parametrize("sampling", ["without_replacement", "poisson"])
def test_strategy_without_a_guarantee_logs_inf_with_the_reason(sampling):
    kwargs = dict(sampling="poisson", sampling_rate=0.5, rng=np.random.default_rng(1)) if sampling == "poisson" else {}
    strategy = DPRECStrategy(
        FedAvg(fraction_train=0.5, min_available_nodes=1, min_train_nodes=1), make_codec(), delta=DELTA, adaptive_clipping=False,
        relation="add_remove", **kwargs,
    )
    with FlowerLog() as flog:
        _, metrics = one_round(strategy)
    stats = strategy.history[0]
    assert stats.epsilon == metrics["dprec-epsilon"] == strategy.epsilon == float("inf")
    assert stats.relation == "add_remove" and stats.reasons["add_remove"]
    assert metrics["dprec-epsilon.server.zero"] == stats.epsilons["zero"] < float("inf")
    line = flog.matching("DP-REC round 1:")[0]
    assert "epsilon = inf" in line and "relation 'add_remove'" in line and "no guarantee" in line
    assert stats.reasons["add_remove"] in line


@pytest.mark.parametrize("threat_model", ["central", "messages"])
def test_strategy_passes_the_threat_model_down(threat_model):
    # A central observer pays REC's total-variation cost 3 x 2 x 12 e^0.04 / 2^18 = 2.9e-4 < delta / 2:
    # 18 bits per group over two groups; make_codec's 11 groups x 7 bits could not pay it.
    codec = DPRECCodec(sigma=SIGMA, clip_multiplier=0.2, bits=18) if threat_model == "central" else make_codec()
    strategy = DPRECStrategy(
        FedAvg(fraction_train=0.5, min_available_nodes=1, min_train_nodes=1), codec, delta=DELTA, adaptive_clipping=False,
        threat_model=threat_model,
    )
    _, metrics = one_round(strategy)
    assert strategy.accountant.threat_model == threat_model and strategy.history[0].threat_model == threat_model
    assert f"dprec-epsilon.{threat_model}.zero" in metrics
    assert metrics[f"dprec-epsilon.{threat_model}.zero"] == metrics["dprec-epsilon"] < float("inf")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(threat_model="curious"), r"threat_model must be one of \('central', 'messages', 'server'\)"),
        (dict(relation="replace"), r"relation must be one of \('add_remove', 'zero'\)"),
        (dict(method="exact"), r"method must be one of"),
        # Algorithm 7 is for clients sampled with replacement, which no Flower strategy does.
        (dict(method="paper"), r"method='paper'.*with_replacement"),
        (dict(method="paper", sampling="poisson", sampling_rate=0.5), r"method='paper'.*with_replacement"),
        (dict(method="paper", threat_model="server"), r"method='paper'"),
    ],
)
def test_strategy_refuses_bad_privacy_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False, **kwargs)


# --------------------------------------------------------------------------------------
# Poisson sampling by the wrapper
# --------------------------------------------------------------------------------------


def poisson_strategy(rate=0.3, seed=0, strategy=None, **kwargs) -> DPRECStrategy:
    inner = FedAvg(min_available_nodes=1, min_train_nodes=1) if strategy is None else strategy
    return DPRECStrategy(
        inner, make_codec(), delta=DELTA, adaptive_clipping=False, sampling="poisson", sampling_rate=rate, rng=np.random.default_rng(seed),
        **kwargs,
    )


def test_poisson_selection_frequency():
    # Each node is selected independently with probability q: over many rounds, every node's frequency and
    # the per-round count's mean and variance match Binomial(N, q).
    rate, n_nodes, rounds = 0.3, 25, 400
    strategy = poisson_strategy(rate, seed=123)
    grid = StaticGrid(n_nodes)
    arrays = initial_arrays()
    hits = dict.fromkeys(grid.nodes, 0)
    counts = []
    for r in range(1, rounds + 1):
        messages = list(strategy.configure_train(r, arrays, ConfigRecord(), grid))
        for m in messages:
            hits[m.metadata.dst_node_id] += 1
        counts.append(len(messages))
        assert strategy.history[-1].num_sampled == len(messages)
        assert strategy.history[-1].num_available == n_nodes
    per_node = np.array(list(hits.values()))
    tol_node = 5 * np.sqrt(rounds * rate * (1 - rate))
    assert np.all(np.abs(per_node - rounds * rate) < tol_node), per_node
    tol_total = 5 * np.sqrt(rounds * n_nodes * rate * (1 - rate))
    assert abs(per_node.sum() - rounds * n_nodes * rate) < tol_total
    counts = np.array(counts)
    assert abs(counts.var() - n_nodes * rate * (1 - rate)) < 0.2 * n_nodes * rate * (1 - rate)
    assert counts.min() < counts.max(), "the number of clients varies from round to round"
    # Selection reads only the generator: the same seed selects the same nodes, a fresh (OS-seeded) one does not.
    a, b = poisson_strategy(rate, seed=5), poisson_strategy(rate, seed=5)
    assert [a.select_nodes(grid.nodes) for _ in range(20)] == [b.select_nodes(grid.nodes[::-1]) for _ in range(20)]
    fresh = [DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False, sampling="poisson", sampling_rate=0.5) for _ in "ab"]
    assert fresh[0]._rng.bit_generator.seed_seq.entropy != fresh[1]._rng.bit_generator.seed_seq.entropy
    assert poisson_strategy(1.0).select_nodes([3, 1, 2, 3]) == [1, 2, 3]


def test_poisson_rounds_by_hand():
    # Seed 4 selects 0, 1, 1 and 0 of 3 nodes at q = 0.3 (draws in node-id order): two empty rounds.
    rate, seed, expected_counts = 0.3, 4, [0, 1, 1, 0]
    codec = make_codec()
    inner = FedProx(proximal_mu=0.5, fraction_train=0.1, min_train_nodes=2, min_available_nodes=1)
    strategy = poisson_strategy(rate, seed, strategy=inner, num_rounds=4, keep_messages=True)
    grid = StaticGrid(3)
    shadow = np.random.default_rng(seed)  # the same draws, to know which nodes must be selected
    arrays = initial_arrays()
    template = float_arrays(arrays)
    reference = DPRECRoundAccountant(
        clip_multiplier=CLIP, bits=codec.layout(template).total_bits, groups=codec.layout(template).num_groups,
        num_clients=3, delta=DELTA, sampling="poisson", sampling_rate=rate,
    )
    for r, count in enumerate(expected_counts, start=1):
        messages = list(strategy.configure_train(r, arrays, ConfigRecord({"lr": 0.1}), grid))
        chosen = [n for n, u in zip(grid.nodes, shadow.random(3)) if u < rate]
        assert len(chosen) == count
        assert sorted(m.metadata.dst_node_id for m in messages) == chosen
        # The wrapped strategy's settings are restored after it built the messages for the chosen nodes.
        assert (inner.fraction_train, inner.min_train_nodes, inner.min_available_nodes) == (0.1, 2, 1)
        for m in messages:
            # Built by the wrapped strategy (FedProx adds its proximal-mu), with the codec's parameters.
            assert m.metadata.message_type == MessageType.TRAIN
            cfg = m.content["config"]
            assert {k: cfg[k] for k in codec_config(codec)} == codec_config(codec)
            assert (cfg["server-round"], cfg["proximal-mu"], cfg["lr"]) == (r, 0.5, 0.1)
            assert m.content["arrays"] is arrays
        assert strategy.accountant is not None and strategy.accountant.sampling == "poisson"
        new, metrics = strategy.aggregate_train(r, answer(messages))
        stats = strategy.history[r - 1]
        assert (stats.num_sampled, stats.num_aggregated) == (count, count)
        expected_eps = reference.step().epsilon
        assert metrics["dprec-epsilon"] == stats.epsilon == strategy.epsilon == expected_eps > 0
        assert metrics["dprec-clients"] == count and metrics["dprec-delta"] == DELTA
        if count:
            mean = server_mean(codec, stats.messages, template)
            for k in template:
                np.testing.assert_array_equal(new[k].numpy(), template[k] + mean[k])
        else:
            assert new is arrays, "an empty round keeps the global arrays"
        arrays, template = new, float_arrays(new)
    assert strategy.accountant.rounds == 4
    # A round whose selected nodes all fail is accounted too (the round's sampling happened).
    strategy = poisson_strategy(1.0, 0)
    messages = list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), grid))
    assert len(messages) == 3
    errors = [Message(Error(code=0, reason="x"), reply_to=m) for m in messages]
    arrays_back, metrics = strategy.aggregate_train(1, errors)
    assert arrays_back is strategy.current_arrays and metrics["dprec-clients"] == 0
    assert strategy.accountant.rounds == 1 and strategy.epsilon > 0


def test_poisson_strategy_that_ignores_the_selection():
    class FirstOnly(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            return list(super().configure_train(server_round, arrays, config, grid))[:1]

    strategy = poisson_strategy(1.0, 0, strategy=FirstOnly(min_available_nodes=1))
    with pytest.raises(ValueError, match="not to exactly the 3 selected"):
        strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(3))


def test_poisson_arguments():
    codec = make_codec()
    with pytest.raises(ValueError, match="sampling"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="with_replacement")
    with pytest.raises(ValueError, match="sampling_rate"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="poisson")
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="sampling_rate"):
            DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="poisson", sampling_rate=bad)
    for bad in ("0.1", True):
        with pytest.raises(TypeError, match="sampling_rate"):
            DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="poisson", sampling_rate=bad)
    with pytest.raises(TypeError, match="rng"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="poisson", sampling_rate=0.1, rng=7)
    with pytest.raises(ValueError, match="sampling_rate"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling_rate=0.1)
    with pytest.raises(ValueError, match="rng"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="select_nodes"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False).select_nodes([1, 2])
    # A central observer with too few bits for REC's total-variation cost: the message observer's bound (post-
    # processing) is accounted, no error; the server's (default) bound needs no check either.
    few_bits = DPRECCodec(sigma=SIGMA, clip_multiplier=CLIP, bits=2)
    strategy = DPRECStrategy(
        FedAvg(min_available_nodes=1), few_bits, delta=1e-6, adaptive_clipping=False, num_rounds=50, sampling="poisson", sampling_rate=0.5,
        threat_model="central", rng=np.random.default_rng(0),  # a seeded draw: the round has participants
    )
    assert list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(3)))
    assert strategy.accountant.threat_model == "central"
    strategy = DPRECStrategy(
        FedAvg(min_available_nodes=1), few_bits, delta=1e-6, adaptive_clipping=False, num_rounds=50, sampling="poisson", sampling_rate=0.5,
        rng=np.random.default_rng(0),
    )
    strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(3))
    assert strategy.accountant.threat_model == "server" and strategy.accountant.sampling == "poisson"
    assert "sampling='poisson'" in repr(poisson_strategy())


# --------------------------------------------------------------------------------------
# Untrusted bytes and configurations (issue 33): the server drops what fails, the client
# checks what the server asks for before training and never raises
# --------------------------------------------------------------------------------------


def push(messages):
    """Give the train messages ids, as a Grid does when it pushes them (InMemoryGrid: a uuid4)."""
    for m in messages:
        m.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return messages


def forged(reply, *, src=None, reply_to=None):
    """A reply whose sender or answered message id is rewritten (what a peer controls in its bytes)."""
    if src is not None:
        reply.metadata.__dict__["_src_node_id"] = src
    if reply_to is not None:
        reply.metadata.__dict__["_reply_to_message_id"] = reply_to
    return reply


def blob_of(reply) -> bytes:
    return reply.content[RECORD_KEY][MESSAGE_KEY]


def with_blob(reply, blob):
    reply.content[RECORD_KEY] = ConfigRecord({MESSAGE_KEY: blob})
    return reply


def uniform_round(nodes=3, **kwargs):
    """A strategy that samples every one of ``nodes`` nodes, its round-1 messages (pushed) and honest replies."""
    strategy = DPRECStrategy(
        FedAvg(fraction_train=1.0, min_available_nodes=1, min_train_nodes=1), make_codec(), delta=DELTA, adaptive_clipping=False,
        keep_messages=True, **kwargs,
    )
    messages = push(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(nodes))))
    return strategy, messages, answer(messages)


def assert_mean_of(strategy, new, blobs, r=1, weights=None):
    """The new global arrays are the stashed ones plus the mean of exactly these messages."""
    stats = strategy.history[r - 1]
    assert list(stats.messages) == list(blobs)
    glob = float_arrays(strategy.current_arrays)
    mean = server_mean(make_codec(), blobs, glob, weights=weights)
    for k in glob:
        np.testing.assert_array_equal(new[k].numpy(), glob[k] + mean[k])


def _parse_raises(monkeypatch, victim, exc):
    real = DPRECMessage.from_bytes

    def from_bytes(data, layout=None):
        if data == victim:
            raise exc
        return real(data, layout)

    monkeypatch.setattr(DPRECMessage, "from_bytes", staticmethod(from_bytes))


@pytest.mark.parametrize(
    "case, reason",
    [
        ("memory-error", "bad-message"),  # issue 33: a MemoryError from one reply failed the whole round
        ("recursion-error", "bad-message"),
        ("truncated", "bad-message"),
        ("not-bytes", "bad-message"),
        ("other-layout", "bad-message"),
        ("no-record", "bad-message"),
        ("nan-weight", "bad-weight"),
        ("no-weight", "bad-weight"),
    ],
)
def test_strategy_drops_a_failing_reply_and_keeps_the_others(monkeypatch, case, reason):
    weighted = case.endswith("weight")
    strategy, messages, replies = uniform_round(weighted_by_key="num-examples" if weighted else None)
    bad = replies[1]
    if case == "memory-error":
        _parse_raises(monkeypatch, blob_of(bad), MemoryError("Unable to allocate 81.2 GiB"))
    elif case == "recursion-error":
        _parse_raises(monkeypatch, blob_of(bad), RecursionError("maximum recursion depth exceeded"))
    elif case == "truncated":
        with_blob(bad, blob_of(bad)[:-1])
    elif case == "not-bytes":
        with_blob(bad, "not bytes")
    elif case == "other-layout":
        other = DPRECCodec(sigma=SIGMA, clip_multiplier=CLIP, bits=BITS + 1, max_group_size=GROUP)
        with_blob(bad, other.encode(float_arrays(initial_arrays())).to_bytes())
    elif case == "no-record":
        del bad.content[RECORD_KEY]
    elif case == "nan-weight":
        bad.content["metrics"]["num-examples"] = float("nan")
    elif case == "no-weight":
        del bad.content["metrics"]["num-examples"]
    with FlowerLog() as flog:
        new, metrics = strategy.aggregate_train(1, replies)
    stats = strategy.history[0]
    assert (stats.num_aggregated, stats.num_rejected, stats.dropped) == (2, 1, {reason: 1})
    assert metrics["dprec-clients"] == 2 and metrics["dprec-failed"] == 0
    assert metrics["dprec-dropped"] == 1 and metrics[f"dprec-dropped.{reason}"] == 1
    honest = [blob_of(replies[0]), blob_of(replies[2])]
    w = None
    if weighted:
        n = np.array([replies[0].content["metrics"]["num-examples"], replies[2].content["metrics"]["num-examples"]])
        w = n
    assert_mean_of(strategy, new, honest, weights=w)
    lines = flog.matching("dropped the reply of node")
    assert len(lines) == 1 and f"node {messages[1].metadata.dst_node_id} ({reason})" in lines[0], flog.lines


def test_strategy_takes_one_message_per_sampled_node_in_reply_to_this_round():
    # Issue 33: a node sending another node's exact bytes, a round-1 message replayed twice in round 2
    # (5 aggregated for 4 sampled), and a reply to a message never sent were all aggregated.
    # 1. Node 2 sends node 1's bytes: both copies are dropped (which one is the original cannot be told).
    strategy, messages, replies = uniform_round(3)
    with_blob(replies[1], blob_of(replies[0]))
    new, metrics = strategy.aggregate_train(1, replies)
    assert metrics["dprec-clients"] == 1 and metrics["dprec-dropped.duplicate-seed"] == 2
    assert_mean_of(strategy, new, [blob_of(replies[2])])

    # 2. Round 2: node 1's round-1 message replayed twice for node 1 (its honest reply not sent), and once by
    # node 2 in place of its own; node 3 and 4 honest.
    strategy, messages, round1 = uniform_round(4)
    new, _ = strategy.aggregate_train(1, round1)
    messages = push(list(strategy.configure_train(2, new, ConfigRecord(), StaticGrid(4))))
    round2 = answer(messages)
    replays = [with_blob(Message(RecordDict({"metrics": MetricRecord({"num-examples": 1})}), reply_to=messages[0]),
                         blob_of(round1[0])) for _ in range(2)]
    with_blob(round2[1], blob_of(round1[1]))
    with FlowerLog() as flog:
        new2, metrics = strategy.aggregate_train(2, replays + round2[1:])
    stats = strategy.history[1]
    assert (stats.num_sampled, stats.num_aggregated) == (4, 2)
    assert stats.dropped == {"duplicate-reply": 2, "replayed-seed": 1}
    assert metrics["dprec-clients"] == 2 and metrics["dprec-dropped"] == 3
    assert_mean_of(strategy, new2, [blob_of(round2[2]), blob_of(round2[3])], r=2)
    assert len(flog.matching("(duplicate-reply)")) == 2 and len(flog.matching("(replayed-seed)")) == 1

    # 3. Replies to messages this round never sent: to a node that was not sampled, to another node's
    # message, to an earlier round's message, and a reply with no id at all.
    strategy, messages, replies = uniform_round(2)
    stray = dprec_mod(train_message(make_codec(), node_id=999), make_context(999), train_fn)
    other = forged(answer([messages[0]])[0], src=messages[1].metadata.dst_node_id)  # node 2 answers node 1's
    old = forged(answer([messages[0]])[0], reply_to="an-id-of-round-0")
    none = forged(answer([messages[0]])[0], reply_to="")
    new, metrics = strategy.aggregate_train(1, replies + [stray, other, old, none])
    stats = strategy.history[0]
    assert stats.num_aggregated == 2 and stats.dropped == {"unsolicited": 4}
    assert metrics["dprec-clients"] == 2 <= stats.num_sampled
    assert_mean_of(strategy, new, [blob_of(r) for r in replies])
    # An error reply from a node that was not sampled is dropped too, not counted as a failure.
    strategy, messages, replies = uniform_round(2)
    error = forged(Message(Error(code=0, reason="x" * 10_000), reply_to=messages[0]), src=12345)
    _, metrics = strategy.aggregate_train(1, replies + [error])
    assert metrics["dprec-failed"] == 0 and metrics["dprec-dropped.unsolicited"] == 1


def test_strategy_accounts_a_round_whose_messages_were_all_dropped():
    # The server saw the messages: the round is accounted and reported even though none is aggregated.
    strategy, messages, replies = uniform_round(2)
    with_blob(replies[1], blob_of(replies[0]))
    new, metrics = strategy.aggregate_train(1, replies)
    assert new is None and strategy.accountant.rounds == 1 and strategy.history[0].accounted
    assert metrics["dprec-epsilon"] == strategy.epsilon > 0 and metrics["dprec-clients"] == 0
    assert metrics["dprec-dropped.duplicate-seed"] == 2


def test_weighted_aggregation_does_not_overflow():
    # Issue 33: two clients reporting num-examples=1e308 made every weight 0 (the sum overflowed): the round
    # reported success and spent epsilon, and the model did not move.
    strategy, messages, replies = uniform_round(2, weighted_by_key="num-examples", max_weight=1.5e308)
    for r in replies:
        r.content["metrics"]["num-examples"] = 1e308
    new, metrics = strategy.aggregate_train(1, replies)
    assert metrics["dprec-clients"] == 2
    assert "train-loss" not in metrics, "FedAvg's metric weights would overflow too: no train-loss of 0.0"
    assert_mean_of(strategy, new, [blob_of(r) for r in replies], weights=np.array([1e308, 1e308]))
    glob = float_arrays(initial_arrays())
    assert any(np.any(new[k].numpy() != glob[k]) for k in glob), "the model moves"
    # Tiny and huge weights in one round: the ratios are kept (divided by the largest first).
    strategy, messages, replies = uniform_round(3, weighted_by_key="w", max_weight=1e300)
    for r, w in zip(replies, (1e300, 2e299, 1e-300)):
        r.content["metrics"]["w"] = w
    new, _ = strategy.aggregate_train(1, replies)
    # 1e-300 / 2^996 is 0.
    assert_mean_of(strategy, new, [blob_of(r) for r in replies], weights=np.array([1e300, 2e299, 1e-300]))


def test_weights_above_max_weight_are_dropped():
    # Issue 33: one client reporting 1e300 took almost all the weight. Above max_weight (no cap by default) a
    # reply is dropped and counted; the others keep their relative weights.
    assert uniform_round(1)[0].max_weight is None
    strategy, messages, replies = uniform_round(3, weighted_by_key="num-examples", max_weight=1e6)
    for r, n in zip(replies, (1e300, 20, 30)):
        r.content["metrics"]["num-examples"] = n
    new, metrics = strategy.aggregate_train(1, replies)
    assert metrics["dprec-clients"] == 2 and metrics["dprec-dropped.above-max-weight"] == 1
    assert_mean_of(strategy, new, [blob_of(replies[1]), blob_of(replies[2])], weights=np.array([20.0, 30.0]))
    # Two at 1e308 under a cap: both dropped, the round accounted and reported.
    strategy, messages, replies = uniform_round(2, weighted_by_key="num-examples", max_weight=1e6)
    for r in replies:
        r.content["metrics"]["num-examples"] = 1e308
    new, metrics = strategy.aggregate_train(1, replies)
    assert new is None and metrics["dprec-dropped.above-max-weight"] == 2 and metrics["dprec-clients"] == 0
    for bad, exc in ((0.0, ValueError), (float("inf"), ValueError), ("1e6", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="max_weight"):
            DPRECStrategy(FedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False, max_weight=bad)


def test_one_reply_without_num_examples_drops_only_its_metrics():
    # Issue 33: one reply without "num-examples" dropped every client's train metrics for the round. Now only
    # that reply's metrics are left out (its update, uniformly weighted, is still aggregated), and counted.
    strategy, messages, replies = uniform_round(4)
    del replies[0].content["metrics"]["num-examples"]
    replies[1].content["metrics"]["train-loss"] = float("nan")
    replies[2].content["metrics"]["num-examples"] = 1e308  # above float max / 4: would overflow FedAvg's sum
    with FlowerLog() as flog:
        new, metrics = strategy.aggregate_train(1, replies)
    assert metrics["dprec-clients"] == 4 and metrics["dprec-metrics-dropped"] == 3
    assert strategy.history[0].num_metrics_dropped == 3
    assert metrics["train-loss"] == pytest.approx(replies[3].content["metrics"]["train-loss"])
    assert_mean_of(strategy, new, [blob_of(r) for r in replies])
    assert len(flog.matching("left out of the metric aggregation")) == 3
    # A reply without any MetricRecord, and a metric aggregation that raises, cost only the metrics.
    strategy, messages, replies = uniform_round(2)
    del replies[0].content["metrics"]
    _, metrics = strategy.aggregate_train(1, replies)
    assert metrics["dprec-metrics-dropped"] == 1 and "train-loss" in metrics
    strategy, messages, replies = uniform_round(2)
    strategy.strategy.train_metrics_aggr_fn = lambda records, key: 1 / 0
    _, metrics = strategy.aggregate_train(1, replies)
    assert metrics["dprec-clients"] == 2 and "train-loss" not in metrics


# -- the client ---------------------------------------------------------------------------


class Trainer:
    """A train function that records whether it ran."""

    def __init__(self, fn=train_fn):
        self.fn, self.calls = fn, 0

    def __call__(self, m, c):
        self.calls += 1
        return self.fn(m, c)


def run_mod(mod, config_changes=(), fn=train_fn, arrays=None, codec=None):
    msg = train_message(make_codec() if codec is None else codec, arrays)
    cfg = msg.content["config"]
    for k, v in dict(config_changes).items():
        if v is None:
            del cfg[k]
        else:
            cfg[k] = v
    trainer = Trainer(fn)
    reply = mod(msg, make_context(), trainer)  # never raises
    return reply, trainer.calls


def test_capped_mod_refuses_too_few_bits_before_training():
    # Issue 33: make_dprec_mod(max_clip_multiplier=1.0) trained and sent when the server asked for bits=1.
    capped = make_dprec_mod(max_clip_multiplier=1.0)
    one_bit = DPRECCodec(sigma=SIGMA, clip_multiplier=1.0, bits=1, max_group_size=GROUP)
    reply, trained = run_mod(capped, codec=one_bit)
    assert reply.has_error() and reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION and trained == 0
    assert "bits=1" in reply.error.reason and f"min_bits={DEFAULT_MIN_BITS}" in reply.error.reason
    # The smallest group counts (a per-tensor mapping), and DEFAULT_MIN_BITS itself is accepted.
    mixed = DPRECCodec(sigma=SIGMA, clip_multiplier=1.0, bits={"fc.weight": 9, "fc.bias": DEFAULT_MIN_BITS - 1})
    reply, trained = run_mod(capped, codec=mixed)
    assert reply.has_error() and "'fc.bias'" in reply.error.reason and trained == 0
    reply, trained = run_mod(capped, codec=DPRECCodec(sigma=SIGMA, clip_multiplier=1.0, bits=DEFAULT_MIN_BITS))
    assert not reply.has_error() and trained == 1
    # A client may accept fewer bits; the uncapped dprec_mod takes any bits in 1..24.
    reply, trained = run_mod(make_dprec_mod(max_clip_multiplier=1.0, min_bits=1), codec=one_bit)
    assert not reply.has_error() and trained == 1
    assert not run_mod(dprec_mod, codec=one_bit)[0].has_error()
    for bad, exc in ((0, ValueError), (25, ValueError), (7.0, TypeError), ("7", TypeError)):
        with pytest.raises(exc, match="min_bits"):
            make_dprec_mod(max_clip_multiplier=1.0, min_bits=bad)
    for name in ("max_candidates", "max_candidate_elements"):
        with pytest.raises(ValueError, match=name):
            make_dprec_mod(**{name: 1})
        with pytest.raises(TypeError, match=name):
            make_dprec_mod(**{name: 2.0**40})


@pytest.mark.parametrize(
    "changes, match",
    [
        # Issue 33: these raised out of the mod (the first two after training).
        ({CONFIG_BITS: json.dumps({"nope": 7})}, r"bits name tensors .*\['nope'\]"),
        ({CONFIG_BITS: json.dumps({"steps": 7})}, r"not floating-point arrays .*\['steps'\]"),
        ({CONFIG_BITS: "[" * 100_000 + "]" * 100_000}, "nested too deeply"),
        ({CONFIG_MAX_GROUP_SIZE: 1, CONFIG_BITS: 24}, r"10905190400 candidates .* max_candidates=67108864"),
        ({CONFIG_BITS: 24}, "max_candidates"),  # 30 s of encoding for 650 parameters
        ({CONFIG_BITS: 25}, r"bits must be in \[1, 24\]"),
        ({CONFIG_BITS: json.dumps({"fc.bias": 0})}, r"bits\['fc.bias'\] must be in"),
        ({CONFIG_BITS: "7"}, "must be an int or a JSON object"),
        ({CONFIG_BITS: True}, "bits must be an integer"),
        ({CONFIG_SIGMA: "0.1"}, "sigma"),
        ({CONFIG_SIGMA: float("nan")}, "sigma"),
        ({CONFIG_CLIP_MULTIPLIER: -1.0}, "clip_multiplier"),
        ({CONFIG_MAX_GROUP_SIZE: 0}, "max_group_size"),
        ({CONFIG_MAX_GROUP_SIZE: [1, 2]}, "max_group_size"),
        ({CONFIG_BITS: None}, "lacks the DP-REC keys"),
        ({"dprec.bits": "x" * 100_000}, "is not a JSON object"),
    ],
)
def test_mod_checks_the_server_parameters_before_training(changes, match):
    reply, trained = run_mod(dprec_mod, changes)
    assert trained == 0, "nothing is trained on parameters the client refuses"
    assert reply.has_error() and reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert re.search(match, reply.error.reason), reply.error.reason
    assert len(reply.error.reason) <= 520, "a server's value is not echoed in full"


def test_mod_limits_the_encode_cost():
    # By default: 13 bits on one group of 2^20 parameters is 2^33 candidate-elements (about 15 s of encoding),
    # above both 2^32 and 2^12 per parameter.
    big = ArrayRecord({"w": Array(np.zeros(2**20, np.float32))})
    reply, trained = run_mod(dprec_mod, arrays=big, codec=DPRECCodec(sigma=SIGMA, bits=13))
    assert reply.has_error() and trained == 0
    assert "8589934592 candidate-elements" in reply.error.reason
    assert "max_candidate_elements=4294967296" in reply.error.reason
    # The caps are the client's: 7 bits on 650 parameters is 83,200 candidate-elements and 1,408 candidates.
    reply, trained = run_mod(make_dprec_mod(max_candidate_elements=83_199))
    assert reply.has_error() and "83200 candidate-elements" in reply.error.reason and trained == 0
    reply, trained = run_mod(make_dprec_mod(max_candidate_elements=83_200, max_candidates=1408))
    assert not reply.has_error() and trained == 1
    reply, trained = run_mod(make_dprec_mod(max_candidates=1407))
    assert reply.has_error() and "1408 candidates" in reply.error.reason and trained == 0
    # A global model with NaN is refused before training (every update would be NaN).
    arrays = initial_arrays()
    w = arrays["fc.weight"].numpy().copy()
    w[3, 3] = np.inf
    arrays["fc.weight"] = Array(w)
    reply, trained = run_mod(dprec_mod, arrays=arrays)
    assert reply.has_error() and "'fc.weight' holds NaN or infinity" in reply.error.reason and trained == 0


def _nan_update(m, c):
    reply = train_fn(m, c)
    w = reply.content["arrays"]["fc.weight"].numpy().copy()
    w[0, 0] = np.nan
    reply.content["arrays"]["fc.weight"] = Array(w)
    return reply


def _diverged(m, c):
    raise FloatingPointError("training diverged: loss = nan at step 17 (norm 3.2e9)")


@pytest.mark.parametrize("case", ["nan-update", "memory-error", "train-raises"])
def test_mod_failures_after_training_reveal_nothing(monkeypatch, case):
    # Issue 33: an update with NaN raised "update['fc.weight'] contains NaN values", which Flower sent to the
    # server: it revealed that training diverged. After training, any failure is a generic error reply.
    fn = {"nan-update": _nan_update, "memory-error": train_fn, "train-raises": _diverged}[case]
    if case == "memory-error":
        def encode(self, update, *args, **kwargs):
            raise MemoryError(f"Unable to allocate 81.2 GiB; norm {np.linalg.norm(update['fc.weight'])}")

        monkeypatch.setattr(DPRECCodec, "encode", encode)
    context = make_context()
    with FlowerLog() as flog:
        reply = dprec_mod(train_message(make_codec()), context, Trainer(fn))  # does not raise
    assert reply.has_error()
    if case == "train-raises":
        assert reply.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
        assert reply.error.reason.startswith("dprec_mod: the ClientApp's train function raised an exception")
    else:
        assert reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
        assert reply.error.reason == "dprec_mod: the client could not encode its update"
    for text in [reply.error.reason, *flog.lines]:
        assert not re.search(r"nan|NaN|diverged|norm|GiB|17", text), text
    assert STATE_KEY not in context.state.metric_records, "no diagnostics of a failed encode"


def test_mod_logs_no_norm():
    import logging

    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    context = make_context()
    try:
        with FlowerLog() as flog:
            reply = dprec_mod(train_message(make_codec()), context, train_fn)
    finally:
        logger.setLevel(level)
    assert not reply.has_error() and flog.matching("dprec_mod:"), flog.lines
    norm = context.state[STATE_KEY]["norm"]
    assert not [line for line in flog.lines if "norm" in line or f"{norm:.4g}" in line or "clipped" in line]


# --------------------------------------------------------------------------------------
# A real Flower simulation (Ray backend)
# --------------------------------------------------------------------------------------


class RecordingStrategy(DPRECStrategy):
    """Records what arrives at the server (in the test process: ServerApp runs in a thread here)."""

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.__dict__.setdefault("replies", []).append([r.content for r in replies])
        # The ids the Grid gave the train messages when it pushed them, and the ids the replies answer.
        sent = {m.message_id for m in self._sent[server_round]}
        self.__dict__.setdefault("ids", []).append((sent, [r.metadata.reply_to_message_id for r in replies]))
        return super().aggregate_train(server_round, replies)


def run_dprec_simulation(make_strategy, mods=(dprec_mod,)) -> tuple:
    """Run NUM_ROUNDS of a real Flower simulation; returns (Result, strategy, global arrays by round)."""
    pytest.importorskip("ray")
    from flwr.simulation import run_simulation

    out: dict = {}
    client_app = ClientApp(mods=list(mods))
    client_app.train()(train_fn)
    client_app.evaluate()(evaluate_fn)
    server_app = ServerApp()

    @server_app.main()
    def main(grid, context):
        strategy = make_strategy()
        globals_ = {}

        def central_eval(server_round, arrays):
            globals_[server_round] = {k: a.numpy() for k, a in arrays.items()}
            return MetricRecord({"round": server_round})

        out["result"] = strategy.start(
            grid=grid, initial_arrays=initial_arrays(), num_rounds=NUM_ROUNDS, evaluate_fn=central_eval
        )
        out["strategy"], out["globals"] = strategy, globals_

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=NUM_NODES,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
    )
    result, strategy, globals_ = out["result"], out["strategy"], out["globals"]
    assert sorted(globals_) == list(range(NUM_ROUNDS + 1))
    assert strategy.num_rounds == NUM_ROUNDS  # taken from start()
    return result, strategy, globals_


def check_wire(strategy, r):
    """What crossed the wire in round r: bytes in a ConfigRecord, the user's metrics, no arrays, no norms."""
    for content in strategy.replies[r - 1]:
        assert len(content.array_records) == 0
        assert set(content.keys()) == {"metrics", RECORD_KEY}
        assert list(content[RECORD_KEY].keys()) == [MESSAGE_KEY]
        assert isinstance(content[RECORD_KEY][MESSAGE_KEY], bytes)
        assert set(content["metrics"].keys()) == {"num-examples", "train-loss"}


def test_flower_simulation():
    codec = make_codec()
    result, strategy, globals_ = run_dprec_simulation(
        lambda: RecordingStrategy(
            # min_train_nodes: FedAvg sizes its sample from the nodes connected so far, before it waits for
            # min_available_nodes; this makes B = 3 even if a node connects late.
            FedAvg(fraction_train=0.6, fraction_evaluate=0.4, min_train_nodes=3, min_available_nodes=NUM_NODES),
            codec,
            delta=DELTA, adaptive_clipping=False,
            keep_messages=True,
        )
    )
    template = float_arrays(initial_arrays())
    eps = reference_epsilons(codec, template, rounds=NUM_ROUNDS, num_clients=NUM_NODES, clients_per_round=3)
    for r in range(1, NUM_ROUNDS + 1):
        stats = strategy.history[r - 1]
        assert (stats.server_round, stats.num_sampled, stats.num_available, stats.num_aggregated) == (r, 3, 5, 3)
        # The new global model is exactly the stashed one plus the one-pass mean of the messages.
        mean = server_mean(codec, stats.messages, template)
        for k in template:
            np.testing.assert_array_equal(globals_[r][k], globals_[r - 1][k] + mean[k])
        np.testing.assert_array_equal(globals_[r]["steps"], [0])
        # Epsilon: the accountant stepped once per round, sampling without replacement.
        metrics = result.train_metrics_clientapp[r]
        assert metrics["dprec-epsilon"] == pytest.approx(eps[r - 1], rel=1e-12)
        assert metrics["dprec-clients"] == 3 and metrics["dprec-dropped"] == metrics["dprec-failed"] == 0
        # Replies were matched by message id: the Grid set one on every train message, each reply names one.
        sent, answered = strategy.ids[r - 1]
        assert "" not in sent and len(sent) == 3 and sorted(answered) == sorted(sent)
        assert 20 * metrics["dprec-wire-bytes"] < metrics["float32-wire-bytes"]
        assert metrics["dprec-wire-bytes"] < metrics["dprec-message-bytes"] + 40
        assert "train-loss" in metrics
        assert "eval-loss" in result.evaluate_metrics_clientapp[r]  # evaluation delegated unchanged
        check_wire(strategy, r)
    assert eps[0] < eps[1] < eps[2]
    np.testing.assert_array_equal(result.arrays["fc.weight"].numpy(), globals_[NUM_ROUNDS]["fc.weight"])


# Poisson sampling in the simulation: this seed selects 3, 0 and 2 of the 5 nodes (draws in node-id order).
POISSON_SEED, POISSON_RATE, POISSON_COUNTS = 0, 0.4, (3, 0, 2)


def test_flower_simulation_poisson():
    codec = make_codec()
    result, strategy, globals_ = run_dprec_simulation(
        lambda: RecordingStrategy(
            # fraction_train and min_train_nodes are not used under Poisson sampling; min_available_nodes is.
            FedAvg(fraction_train=0.2, fraction_evaluate=0.4, min_available_nodes=NUM_NODES),
            codec,
            delta=DELTA, adaptive_clipping=False,
            keep_messages=True,
            sampling="poisson",
            sampling_rate=POISSON_RATE,
            rng=np.random.default_rng(POISSON_SEED),
        )
    )
    template = float_arrays(initial_arrays())
    # Rate q = 2/5: the accountant of the existing API at clients_per_round=2, sampling="poisson".
    q_clients = round(POISSON_RATE * NUM_NODES)
    for r, count in zip(range(1, NUM_ROUNDS + 1), POISSON_COUNTS):
        stats = strategy.history[r - 1]
        assert (stats.server_round, stats.num_sampled, stats.num_available) == (r, count, 5)
        assert stats.num_aggregated == count
        assert len(strategy.replies[r - 1]) == count
        metrics = result.train_metrics_clientapp[r]
        if count:
            # The mean's denominator is the realised number of messages.
            mean = server_mean(codec, stats.messages, template)
            for k in template:
                np.testing.assert_array_equal(globals_[r][k], globals_[r - 1][k] + mean[k])
            assert "train-loss" in metrics and 20 * metrics["dprec-wire-bytes"] < metrics["float32-wire-bytes"]
            check_wire(strategy, r)
        else:
            # An empty round: Flower's loop carries on; no message was sent and the global model is unchanged.
            for k in globals_[r]:
                np.testing.assert_array_equal(globals_[r][k], globals_[r - 1][k])
            assert set(metrics.keys()) == {
                "dprec-epsilon", "dprec-epsilon.server.zero", "dprec-epsilon.server.add_remove", "dprec-delta",
                "dprec-clients",
            }
            assert metrics["dprec-epsilon.server.zero"] == metrics["dprec-epsilon"]
            assert metrics["dprec-epsilon.server.add_remove"] == float("inf")
        np.testing.assert_array_equal(globals_[r]["steps"], [0])
        assert metrics["dprec-clients"] == count
        # Every round is composed at rate q, the empty one too.
        expected = codec.epsilon(
            template, rounds=r, clients_per_round=q_clients, num_clients=NUM_NODES, delta=DELTA, sampling="poisson"
        ).epsilon
        assert metrics["dprec-epsilon"] == pytest.approx(expected, rel=1e-12)
        assert "eval-loss" in result.evaluate_metrics_clientapp[r]
    layout = codec.layout(template)
    reference = DPRECRoundAccountant(
        clip_multiplier=CLIP, bits=layout.total_bits, groups=layout.num_groups, num_clients=NUM_NODES, delta=DELTA,
        sampling="poisson", sampling_rate=POISSON_RATE,
    )
    assert strategy.epsilon == pytest.approx(reference.step(rounds=NUM_ROUNDS).epsilon, rel=1e-12)
    assert strategy.accountant.sampling == "poisson" and strategy.accountant.rounds == NUM_ROUNDS
    np.testing.assert_array_equal(result.arrays["fc.weight"].numpy(), globals_[NUM_ROUNDS]["fc.weight"])


def replay_mod(msg, context, call_next):
    """A dishonest client (partition 0): from round 2 on it sends its round-1 DP-REC message again."""
    reply = call_next(msg, context)
    if context.node_config.get("partition-id") != 0 or reply.has_error():
        return reply
    kept = context.state.config_records.get("replay")
    if kept is None:
        context.state["replay"] = ConfigRecord({"blob": reply.content[RECORD_KEY][MESSAGE_KEY]})
    else:
        reply.content[RECORD_KEY] = ConfigRecord({MESSAGE_KEY: kept["blob"]})
    return reply


def test_flower_simulation_drops_a_replayed_message():
    # Through Flower's own grid: every node trains every round; node 0 replays its round-1 message in rounds
    # 2 and 3. Its reply is dropped there and counted, and the round goes on with the 4 honest ones.
    result, strategy, globals_ = run_dprec_simulation(
        lambda: RecordingStrategy(
            FedAvg(fraction_train=1.0, fraction_evaluate=0.4, min_train_nodes=NUM_NODES, min_available_nodes=NUM_NODES),
            make_codec(),
            delta=DELTA, adaptive_clipping=False,
            keep_messages=True,
        ),
        mods=(replay_mod, dprec_mod),
    )
    template = float_arrays(initial_arrays())
    for r in range(1, NUM_ROUNDS + 1):
        stats, metrics = strategy.history[r - 1], result.train_metrics_clientapp[r]
        replayed = int(r > 1)
        assert (stats.num_sampled, stats.num_aggregated) == (NUM_NODES, NUM_NODES - replayed)
        assert stats.dropped == ({"replayed-seed": 1} if replayed else {})
        assert metrics["dprec-dropped"] == replayed and metrics["dprec-clients"] == NUM_NODES - replayed
        mean = server_mean(make_codec(), stats.messages, template)
        for k in template:
            np.testing.assert_array_equal(globals_[r][k], globals_[r - 1][k] + mean[k])


@pytest.mark.parametrize("case", ["copy", "bad-crc", "wrong-id"])
def test_a_dropped_reply_of_a_sampled_node_is_still_accounted(case):
    # Review of issue 33: a sampled node's reply that is dropped before its message is parsed (a second copy,
    # bytes that do not parse, an id that answers no message of this round) still reached the server with
    # the node's data: the round must be accounted and its drops reported.
    strategy, messages, replies = uniform_round(1)
    if case == "copy":
        replies = [replies[0], answer(messages)[0]]
    elif case == "bad-crc":
        record = replies[0].content["dprec"]
        blob = bytearray(record["dprec.message"])
        blob[-1] ^= 1
        record["dprec.message"] = bytes(blob)
    else:
        replies = [forged(replies[0], reply_to=uuid.uuid4().hex)]
    new, metrics = strategy.aggregate_train(1, replies)
    assert new is None and strategy.history[0].accounted and strategy.accountant.rounds == 1
    assert metrics["dprec-dropped"] >= 1 and metrics["dprec-epsilon"] < float("inf")


def test_a_round_with_only_error_replies_is_not_accounted_but_reports_its_failures():
    strategy, messages, replies = uniform_round(2)
    replies = [Message(Error(code=0, reason="refused"), reply_to=m) for m in messages]
    new, metrics = strategy.aggregate_train(1, replies)
    assert new is None and not strategy.history[0].accounted and strategy.accountant.rounds == 0
    assert metrics["dprec-failed"] == 2


def test_default_encode_caps_grow_with_the_model():
    # Review of issue 33: a fixed 2^26-candidate cap refused the documented setup (max_group_size=64, 7 bits)
    # on models above 33.5 million parameters. The caps now grow with the model: 2 candidates per parameter
    # there, within 4 per parameter.
    from dprec.flower._mod import _DEFAULT_LIMITS, _check_codec

    codec = DPRECCodec(sigma=SIGMA, bits=7, max_group_size=64)
    template = {"w": np.empty(40_000_000, np.float32)}
    _check_codec(codec, template, _DEFAULT_LIMITS)  # does not raise
    with pytest.raises(Exception, match="max_candidates"):
        _check_codec(DPRECCodec(sigma=SIGMA, bits=7, max_group_size=16), template, _DEFAULT_LIMITS)


# --------------------------------------------------------------------------------------
# The paper's sampling (issue 34): B slots drawn with replacement by the wrapper
# --------------------------------------------------------------------------------------


def wr_strategy(b, **kwargs) -> DPRECStrategy:
    return DPRECStrategy(
        FedAvg(min_available_nodes=1, min_train_nodes=1), make_codec(), delta=DELTA, adaptive_clipping=False, sampling="with_replacement",
        clients_per_round=b, keep_messages=True, **kwargs,
    )


def wr_reference(template, *, num_clients, clients_per_round, threat_model=None, rounds=None):
    return make_codec().accountant(
        template, num_clients=num_clients, clients_per_round=clients_per_round, delta=DELTA,
        sampling="with_replacement", threat_model=threat_model, rounds=rounds,
    )


def test_with_replacement_rounds_by_hand():
    # B = 5 slots over N = 2 nodes: some node is drawn at least 3 times; every slot gets its own message
    # and every reply is aggregated. The accountant composes 5 slots a round, as codec.accountant does.
    codec = make_codec()
    strategy = wr_strategy(5, num_rounds=3)
    grid = StaticGrid(2)
    arrays = initial_arrays()
    template = float_arrays(arrays)
    reference = wr_reference(template, num_clients=2, clients_per_round=5, rounds=3)
    for r in range(1, 4):
        with FlowerLog() as flog:
            messages = push(list(strategy.configure_train(r, arrays, ConfigRecord({"lr": 0.1}), grid)))
        assert len(messages) == 5 and len({m.metadata.message_id for m in messages}) == 5
        dst = [m.metadata.dst_node_id for m in messages]
        assert set(dst) <= set(grid.nodes) and max(dst.count(n) for n in set(dst)) >= 3
        for slot, m in enumerate(messages):
            cfg = m.content["config"]
            assert m.metadata.message_type == MessageType.TRAIN and m.content["arrays"] is arrays
            assert {k: cfg[k] for k in codec_config(codec)} == codec_config(codec)
            assert (cfg[CONFIG_SLOT], cfg["lr"], cfg["server-round"]) == (slot, 0.1, r)
        assert f"({len(set(dst))} distinct)" in flog.matching(f"round {r} samples 5 of 2 nodes")[0]
        replies = answer(messages)
        assert len({DPRECMessage.from_bytes(blob_of(x)).seed for x in replies}) == 5, "a fresh seed per encode"
        with FlowerLog() as flog:
            new, metrics = strategy.aggregate_train(r, replies)
        stats = strategy.history[r - 1]
        assert (stats.num_sampled, stats.num_available, stats.num_aggregated, stats.num_rejected) == (5, 2, 5, 0)
        assert_mean_of(strategy, new, [blob_of(x) for x in replies], r=r)
        expected = reference.step()
        assert metrics["dprec-epsilon"] == stats.epsilon == strategy.epsilon == expected.epsilon > 0
        assert metrics["dprec-epsilon.server.zero"] == expected.epsilons["zero"]
        assert metrics["dprec-clients"] == 5 and metrics["dprec-dropped"] == 0
        assert stats.local == expected.local and stats.local.per_message > 0
        line = flog.matching(f"DP-REC round {r}:")[0]
        assert f"epsilon = {expected.epsilon:.4f}" in line
        assert "threat model 'server', relation 'zero', sampling with replacement, 5 slots per round" in line
        assert f"= {expected.local.per_message:.4f} per message at delta" in line
        assert f"{expected.local.epsilon_max:.4f} at delta {expected.local.delta_max:g}" in line
        arrays, template = new, float_arrays(new)
    acc = strategy.accountant
    assert (acc.sampling, acc.num_clients, acc.clients_per_round, acc.rounds, acc.messages) == (
        "with_replacement", 2, 5, 3, 15)


@pytest.mark.parametrize("threat_model", ["server", "messages", "central"])
def test_with_replacement_accounts_each_threat_model(threat_model):
    strategy = wr_strategy(3, threat_model=threat_model, num_clients=4)
    grid = StaticGrid(4)
    template = float_arrays(initial_arrays())
    reference = wr_reference(template, num_clients=4, clients_per_round=3, threat_model=threat_model)
    arrays = initial_arrays()
    for r in (1, 2):
        messages = push(list(strategy.configure_train(r, arrays, ConfigRecord(), grid)))
        arrays, metrics = strategy.aggregate_train(r, answer(messages))
        expected = reference.step()
        assert metrics["dprec-epsilon"] == expected.epsilon < float("inf")
        assert metrics[f"dprec-epsilon.{threat_model}.zero"] == expected.epsilons["zero"]
        assert metrics[f"dprec-epsilon.{threat_model}.add_remove"] == expected.epsilons["add_remove"]
    assert strategy.accountant.threat_model == threat_model


def test_with_replacement_one_reply_per_message():
    # Node drawn 3 times (B = 3, N = 1): its 3 replies are aggregated; a fourth reply to one of its messages
    # drops both replies to that message; a reply to no message of the round is unsolicited.
    strategy = wr_strategy(3)
    messages = push(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(1))))
    assert [m.metadata.dst_node_id for m in messages] == [101] * 3
    replies = answer(messages)
    extra = answer([messages[1]])[0]
    stray = forged(answer([messages[0]])[0], reply_to="an-id-of-round-0")
    with FlowerLog() as flog:
        new, metrics = strategy.aggregate_train(1, replies + [extra, stray])
    stats = strategy.history[0]
    assert stats.num_aggregated == 2 and stats.dropped == {"duplicate-reply": 2, "unsolicited": 1}
    assert metrics["dprec-clients"] == 2 and metrics["dprec-dropped"] == 3
    assert_mean_of(strategy, new, [blob_of(replies[0]), blob_of(replies[2])])
    assert len(flog.matching("answered its train message")) == 2
    assert stats.accounted and strategy.accountant.rounds == 1

    # Without message ids (driven by hand): a node may reply as many times as it was sent messages, no more.
    strategy = wr_strategy(3)
    messages = list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(1)))
    new, metrics = strategy.aggregate_train(1, answer(messages))
    assert metrics["dprec-clients"] == 3
    strategy = wr_strategy(3)
    messages = list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(1)))
    new, metrics = strategy.aggregate_train(1, answer(messages + messages[:1]))
    assert new is None and metrics["dprec-dropped.duplicate-reply"] == 4 and metrics["dprec-clients"] == 0
    # A replayed copy of one slot's reply as another slot's: the duplicated seed drops both.
    strategy = wr_strategy(2)
    messages = push(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(1))))
    replies = answer(messages)
    with_blob(replies[1], blob_of(replies[0]))
    new, metrics = strategy.aggregate_train(1, replies)
    assert new is None and metrics["dprec-dropped.duplicate-seed"] == 2


def test_with_replacement_draws_from_os_entropy():
    strategy = wr_strategy(4000)
    assert isinstance(strategy._slot_rng, __import__("secrets").SystemRandom)
    slots = strategy.select_nodes([3, 1, 2, 3])
    assert len(slots) == 4000 and set(slots) == {1, 2, 3}
    counts = np.bincount(slots)[1:]
    assert np.all(np.abs(counts - 4000 / 3) < 5 * np.sqrt(4000 * (1 / 3) * (2 / 3)))
    assert "clients_per_round=4000" in repr(strategy) and "sampling='with_replacement'" in repr(strategy)


def test_with_replacement_arguments():
    codec = make_codec()
    with pytest.raises(ValueError, match="clients_per_round is required for sampling='with_replacement'"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="with_replacement")
    for bad in (0, -3, 2**53 + 1):
        with pytest.raises(ValueError, match="clients_per_round"):
            DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="with_replacement", clients_per_round=bad)
    for bad in (2.0, "3", True):
        with pytest.raises(TypeError, match="clients_per_round"):
            DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="with_replacement", clients_per_round=bad)
    for kwargs in (dict(), dict(sampling="poisson", sampling_rate=0.5)):
        with pytest.raises(ValueError, match="clients_per_round is only used with sampling='with_replacement'"):
            DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, clients_per_round=3, **kwargs)
    with pytest.raises(ValueError, match="sampling_rate"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="with_replacement", clients_per_round=3,
                      sampling_rate=0.5)
    with pytest.raises(ValueError, match="rng"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="with_replacement", clients_per_round=3,
                      rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="method='paper'"):
        DPRECStrategy(FedAvg(), codec, delta=DELTA, adaptive_clipping=False, sampling="with_replacement", clients_per_round=3,
                      method="paper")
    # B may exceed N with replacement (no refusal, unlike sampling without replacement).
    strategy = wr_strategy(7)
    assert len(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(3)))) == 7


def test_flower_simulation_with_replacement():
    # B = 7 slots over the 5 nodes: some node is drawn twice and trains and encodes twice, fresh seeds.
    codec = make_codec()
    result, strategy, globals_ = run_dprec_simulation(
        lambda: RecordingStrategy(
            FedAvg(fraction_evaluate=0.4, min_available_nodes=NUM_NODES), codec, delta=DELTA, adaptive_clipping=False, keep_messages=True,
            sampling="with_replacement", clients_per_round=7,
        )
    )
    template = float_arrays(initial_arrays())
    reference = wr_reference(template, num_clients=NUM_NODES, clients_per_round=7)
    for r in range(1, NUM_ROUNDS + 1):
        stats = strategy.history[r - 1]
        assert (stats.num_sampled, stats.num_available, stats.num_aggregated, stats.num_rejected) == (7, 5, 7, 0)
        assert len({DPRECMessage.from_bytes(b).seed for b in stats.messages}) == 7
        mean = server_mean(codec, stats.messages, template)
        for k in template:
            np.testing.assert_array_equal(globals_[r][k], globals_[r - 1][k] + mean[k])
        metrics = result.train_metrics_clientapp[r]
        assert metrics["dprec-epsilon"] == pytest.approx(reference.step().epsilon, rel=1e-12)
        assert metrics["dprec-clients"] == 7
        sent, answered = strategy.ids[r - 1]
        assert "" not in sent and len(sent) == 7 and sorted(answered) == sorted(sent)
        check_wire(strategy, r)


def test_a_legacy_api_strategy_is_refused_naming_its_api_and_the_fix():
    # Issue 34: "TypeError: strategy must be a flwr.serverapp.strategy.Strategy, got FedAvg" was ambiguous
    # (both of Flower's APIs have a FedAvg).
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    with pytest.raises(TypeError, match=r"flwr\.server\.strategy\..*legacy API.*use flwr\.serverapp\.strategy\.FedAvg"):
        DPRECStrategy(LegacyFedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False)
    with pytest.raises(TypeError, match="Message-API strategy .* got builtins.object"):
        DPRECStrategy(object(), make_codec(), delta=DELTA, adaptive_clipping=False)


class ShrinkingGrid(StaticGrid):
    """A grid on which nodes drop out: ``get_node_ids`` lists fewer nodes for the first ``short`` calls."""

    def __init__(self, n: int, fewer: int, short: int) -> None:
        super().__init__(n)
        self.fewer, self.short, self.calls = fewer, short, 0

    def get_node_ids(self):
        self.calls += 1
        return list(self.nodes[: self.fewer]) if self.calls <= self.short else list(self.nodes)


@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
def test_a_round_waits_for_the_accounting_population(sampling, monkeypatch):
    # Review of issue 34: slots drawn from fewer connected nodes than the accounting's N sample each node at a
    # rate above the accounted one (every epsilon too small). A later round now waits until N are connected.
    monkeypatch.setattr("dprec.flower._strategy.time.sleep", lambda s: None)
    if sampling == "with_replacement":
        strategy = wr_strategy(3, num_clients=4)
    else:
        strategy = DPRECStrategy(FedAvg(min_available_nodes=1, min_train_nodes=2, fraction_train=0.5), make_codec(),
                                 delta=DELTA, adaptive_clipping=False, num_clients=4)
    first = push(list(strategy.configure_train(1, initial_arrays(), ConfigRecord(), StaticGrid(4))))
    new, _ = strategy.aggregate_train(1, answer(first))
    grid = ShrinkingGrid(4, fewer=2, short=3)
    with FlowerLog() as flog:
        messages = list(strategy.configure_train(2, new, ConfigRecord(), grid))
    assert flog.matching("Waiting for nodes to connect: 2 connected (minimum required: 4)")
    assert strategy.history[1].num_available == 4 and len(messages) == (3 if sampling == "with_replacement" else 2)


def test_add_remove_with_replacement_needs_two_clients():
    # Review of issue 34: with N = 1 the central add/remove bound was finite although a run without the target
    # releases nothing.
    from dprec.accounting import dprec_epsilon

    kw = dict(clip_multiplier=0.1, bits=24, groups=1, rounds=1, clients_per_round=3, delta=1e-3,
              sampling="with_replacement", threat_model="central", relation="add_remove")
    assert dprec_epsilon(num_clients=1, **kw).epsilon == float("inf")
    assert dprec_epsilon(num_clients=2, **kw).epsilon < float("inf")
    gauss = dict(kw, bits=None, groups=None)
    assert dprec_epsilon(num_clients=1, **gauss).epsilon == float("inf")


# --------------------------------------------------------------------------------------
# Streaming: replies decoded and accumulated as they arrive (start's grid push/pull)
# --------------------------------------------------------------------------------------


class PullGrid(StaticGrid):
    """A grid whose nodes answer (through dprec_mod) when pushed and whose pulls return at most ``per_pull``
    replies at a time, in a shuffled order; ``extra`` adds replies of its own (forged copies) to the stream."""

    def __init__(self, n: int, per_pull: int = 1, extra=None, seed: int = 0) -> None:
        super().__init__(n)
        self.per_pull, self.extra, self.rng = per_pull, extra, np.random.default_rng(seed)
        self.queue: list = []
        self.pulls = 0
        self.other_calls = 0

    def push_messages(self, messages):
        messages = push(list(messages))
        replies = answer(messages)
        if self.extra is not None:
            replies = replies + self.extra(replies)
        self.queue = [replies[i] for i in self.rng.permutation(len(replies))]
        return [m.metadata.message_id for m in messages]

    def pull_messages(self, message_ids):
        self.pulls += 1
        batch, self.queue = self.queue[: self.per_pull], self.queue[self.per_pull :]
        return batch

    def send_and_receive(self, messages, *, timeout=None):
        self.other_calls += 1
        return []


def streamed_round(grid, **kwargs):
    """Round 1 through the grid start() hands to Flower's loop; returns (strategy, new arrays, metrics)."""
    from dprec.flower._strategy import _StreamingGrid

    strategy = DPRECStrategy(
        FedAvg(fraction_train=1.0, min_available_nodes=1, min_train_nodes=1), make_codec(), delta=DELTA, adaptive_clipping=False,
        keep_messages=True, **kwargs,
    )
    proxy = _StreamingGrid(grid, strategy)
    replies = proxy.send_and_receive(strategy.configure_train(1, initial_arrays(), ConfigRecord(), proxy), timeout=60)
    new, metrics = strategy.aggregate_train(1, replies)
    return strategy, new, metrics


def test_streaming_accumulates_each_pull_as_it_arrives(monkeypatch):
    calls = []
    accumulate = DPRECCodec.accumulate
    monkeypatch.setattr(
        DPRECCodec, "accumulate", lambda self, msgs, out, weights=None: calls.append(len(msgs)) or accumulate(
            self, msgs, out, weights=weights)
    )
    grid = PullGrid(6, per_pull=2)
    strategy, new, metrics = streamed_round(grid)
    stats = strategy.history[0]
    assert stats.streamed and stats.num_aggregated == 6 and metrics["dprec-clients"] == 6
    # One decode pass per pull of 2 replies, none left for aggregate_train: at most one batch of decoded
    # updates exists at a time, beside the float64 sums.
    assert calls == [2, 2, 2] and grid.pulls == 3
    assert_mean_of(strategy, new, list(stats.messages))
    # The non-train traffic goes to the grid itself.
    from dprec.flower._strategy import _StreamingGrid

    assert list(_StreamingGrid(grid, strategy).send_and_receive([], timeout=1)) == [] and grid.other_calls == 1


@pytest.mark.parametrize("seed", range(6))
def test_streaming_keeps_the_same_replies_whatever_the_order(seed):
    # One train message answered twice (all its replies dropped) and a reply carrying another's message (a
    # duplicated seed: both dropped): whichever arrives first, the same replies are kept, and the sums are
    # exactly those of the kept messages in arrival order (rebuilt when an accumulated one is dropped).
    grid = PullGrid(6, per_pull=1, seed=seed)
    original_push = grid.push_messages

    def push_with_forgeries(messages):
        messages = list(messages)
        ids = original_push(messages)
        by_node = {r.metadata.src_node_id: r for r in grid.queue}
        nodes = sorted(by_node)
        with_blob(by_node[nodes[2]], blob_of(by_node[nodes[1]]))
        second = answer([m for m in messages if m.metadata.dst_node_id == nodes[4]])[0]
        grid.queue.insert(int(grid.rng.integers(len(grid.queue) + 1)), second)
        return ids

    grid.push_messages = push_with_forgeries
    strategy, new, metrics = streamed_round(grid)
    stats = strategy.history[0]
    if grid.queue:  # the second answer came after every train message was answered: never pulled (as in Flower)
        assert stats.num_aggregated == 4 and stats.dropped == {"duplicate-seed": 2}
    else:
        assert stats.num_aggregated == 3 and stats.dropped == {"duplicate-seed": 2, "duplicate-reply": 2}
    assert stats.streamed
    assert_mean_of(strategy, new, list(stats.messages))


def test_streaming_in_a_simulation_decodes_as_replies_arrive():
    _, strategy, _ = run_dprec_simulation(
        lambda: DPRECStrategy(
            FedAvg(fraction_train=1.0, fraction_evaluate=0.4, min_train_nodes=NUM_NODES, min_available_nodes=NUM_NODES),
            make_codec(), delta=DELTA, adaptive_clipping=False, keep_messages=True,
        )
    )
    assert all(stats.streamed and stats.num_aggregated == NUM_NODES for stats in strategy.history)
