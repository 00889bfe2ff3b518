"""dprec.flower with Flower's legacy API: dprec_mod on FitIns / FitRes, DPRECLegacyStrategy, and real Flower runs.

The legacy server (``flwr.server.Server``) is driven in process with proxies that run the ClientApp directly
(what ``GridClientProxy`` does through a Grid), and through ``flwr.simulation.run_simulation`` with Ray.
"""

from __future__ import annotations

import difflib
import pathlib
import re
import sys

import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("dprec.flower is tested with flwr's Message API on Python >= 3.11", allow_module_level=True)
pytest.importorskip("flwr")
pytest.importorskip("scipy")

import flwr.compat.common.recorddict_compat as compat  # noqa: E402
from flwr.app import Context, Message, MessageType, RecordDict  # noqa: E402
from flwr.client import Client, ClientApp, NumPyClient  # noqa: E402
from flwr.common import (  # noqa: E402
    Code,
    EvaluateIns,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.constant import ErrorCode, MessageTypeLegacy  # noqa: E402
from flwr.server import Server, ServerApp, ServerAppComponents, ServerConfig  # noqa: E402
from flwr.server import strategy as legacy  # noqa: E402
from flwr.server.client_manager import SimpleClientManager  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.serverapp.strategy import FedAvg as MessageFedAvg  # noqa: E402

from dprec import DPRECCodec, DPRECMessage  # noqa: E402
from dprec.flower import (  # noqa: E402
    MESSAGE_KEY,
    STATE_KEY,
    DPRECLegacyStrategy,
    DPRECStrategy,
    codec_config,
    dprec_mod,
    make_dprec_mod,
)
from tests.integrations.test_flower import (  # noqa: E402 - the shared settings and helpers
    CLIP,
    DELTA,
    NUM_NODES,
    NUM_ROUNDS,
    make_codec,
    server_mean,
    task_identity,  # noqa: F401 - the autouse fixture
)

FIT_RES_KEYS = {"fitres.parameters", "fitres.metrics", "fitres.num_examples", "fitres.status"}
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "flower.md"


def initial_ndarrays() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [
        rng.normal(0.0, 0.1, size=(64, 10)).astype(np.float32),
        np.zeros(10, dtype=np.float32),
        np.array([0], dtype=np.int64),  # an integer buffer: never sent back
    ]


def template() -> dict[str, np.ndarray]:
    """The server's DP-REC template of the initial model: its float arrays, keyed as the legacy ArrayRecord."""
    return {str(i): a for i, a in enumerate(initial_ndarrays()) if a.dtype.kind == "f"}


def local_data(partition: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1000 + partition)
    n = 16 + 8 * (partition % 5)
    return rng.normal(size=(n, 64)).astype(np.float32), rng.normal(size=(n, 10)).astype(np.float32)


def local_step(parameters: list[np.ndarray], partition: int) -> tuple[list[np.ndarray], float]:
    w, b, steps = parameters
    x, y = local_data(partition)
    err = x @ w + b - y
    lr = np.float32(0.01)
    new = [
        (w - lr * (x.T @ err) / np.float32(len(x))).astype(np.float32),
        (b - lr * err.mean(axis=0)).astype(np.float32),
        steps + 1,
    ]
    return new, float(np.mean(err**2))


class LeastSquares(NumPyClient):
    def __init__(self, partition: int) -> None:
        self.partition = partition

    def get_parameters(self, config):
        return initial_ndarrays()

    def fit(self, parameters, config):
        new, loss = local_step(parameters, self.partition)
        # A str metric too: it travels in the FitRes (a ConfigRecord), not in the strategy's MetricRecord.
        return new, len(local_data(self.partition)[0]), {"train-loss": loss, "partition": self.partition, "note": "ok"}

    def evaluate(self, parameters, config):
        _, loss = local_step(parameters, self.partition)
        return loss, 32, {"eval-loss": loss}


def client_fn(context: Context):
    return LeastSquares(int(context.node_config.get("partition-id", context.node_id))).to_client()


def make_context(node_id: int = 1, partition: int | None = None) -> Context:
    config = {"partition-id": node_id if partition is None else partition}
    return Context(run_id=1, node_id=node_id, node_config=config, state=RecordDict(), run_config={})


def legacy_train_message(codec: DPRECCodec | None, parameters=None, node_id: int = 1, config=None) -> Message:
    """A legacy train message as the legacy server builds it: a FitIns in Message form."""
    config = {**(config or {}), **(codec_config(codec) if codec is not None else {})}
    fitins = FitIns(ndarrays_to_parameters(initial_ndarrays()) if parameters is None else parameters, config)
    return Message(compat.fitins_to_recorddict(fitins, True), dst_node_id=node_id, message_type=MessageType.TRAIN)


class LocalProxy(ClientProxy):
    """GridClientProxy without the Grid: runs the ClientApp in process and records what crosses the wire."""

    def __init__(self, node_id: int, app: ClientApp, partition: int) -> None:
        super().__init__(str(node_id))
        self.node_id = node_id
        self.app = app
        self.context = make_context(node_id, partition)
        self.sent: list[RecordDict] = []
        self.received: list[RecordDict] = []

    def _send(self, content: RecordDict, message_type: str, group_id) -> RecordDict:
        msg = Message(content, dst_node_id=self.node_id, message_type=message_type, group_id=str(group_id or ""))
        reply = self.app(msg, self.context)
        self.sent.append(content)
        if reply.has_error():  # GridClientProxy's text
            raise ValueError(f"Message contains an Error (reason: {reply.error.reason}).")
        self.received.append(reply.content)
        return reply.content

    def fit(self, ins, timeout, group_id):
        out = self._send(compat.fitins_to_recorddict(ins, keep_input=True), MessageType.TRAIN, group_id)
        return compat.recorddict_to_fitres(out, keep_input=True)  # keeps what was received, for the checks

    def evaluate(self, ins, timeout, group_id):
        out = self._send(compat.evaluateins_to_recorddict(ins, keep_input=True), MessageType.EVALUATE, group_id)
        return compat.recorddict_to_evaluateres(out)

    def get_parameters(self, ins, timeout, group_id):
        out = self._send(compat.getparametersins_to_recorddict(ins), MessageTypeLegacy.GET_PARAMETERS, group_id)
        return compat.recorddict_to_getparametersres(out, keep_input=True)

    def get_properties(self, ins, timeout, group_id):
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


def dprec_app(fn=client_fn, mods=(dprec_mod,)) -> ClientApp:
    return ClientApp(client_fn=fn, mods=list(mods))


def manager(n: int, app: ClientApp | None = None) -> tuple[SimpleClientManager, list[LocalProxy]]:
    app = dprec_app() if app is None else app
    cm = SimpleClientManager()
    proxies = [LocalProxy(101 + i, app, i) for i in range(n)]
    for p in proxies:
        cm.register(p)
    return cm, proxies


def run_legacy_server(strategy, num_nodes: int = NUM_NODES, num_rounds: int = NUM_ROUNDS, app=None):
    """Flower's legacy Server loop (what ServerApp(server_fn=...) runs) over in-process clients."""
    cm, proxies = manager(num_nodes, app)
    server = Server(client_manager=cm, strategy=strategy)
    history, _ = server.fit(num_rounds=num_rounds, timeout=None)
    return history, server.parameters, proxies


def reference_epsilons(codec, *, rounds, num_clients, clients_per_round):
    acc = codec.accountant(
        template(),
        num_clients=num_clients,
        clients_per_round=clients_per_round,
        delta=DELTA,
        sampling="without_replacement",
        rounds=rounds,
    )
    return [acc.step().epsilon for _ in range(rounds)]


def plus_mean(glob: list[np.ndarray], blobs: tuple[bytes, ...], codec: DPRECCodec) -> list[np.ndarray]:
    """``global + mean(messages)`` for the float arrays, in their dtype; other arrays unchanged (the strategy's
    mean: :func:`tests.integrations.test_flower.server_mean`)."""
    tmpl = {str(i): a for i, a in enumerate(glob) if a.dtype.kind == "f"}
    mean = server_mean(codec, blobs, tmpl)
    return [np.asarray(a + mean[str(i)], dtype=a.dtype) if str(i) in mean else a for i, a in enumerate(glob)]


def check_no_float_arrays(content: RecordDict) -> None:
    """A legacy DP-REC reply: a FitRes with no tensors, the message bytes in its metrics."""
    assert set(content.keys()) == FIT_RES_KEYS
    assert content["fitres.parameters"] == compat.parameters_to_arrayrecord(Parameters([], ""), keep_input=True)
    metrics = content["fitres.metrics"]
    assert isinstance(metrics[MESSAGE_KEY], bytes)
    assert [k for k in metrics if k.startswith("dprec.")] == [MESSAGE_KEY]
    assert set(metrics) == {"train-loss", "partition", "note", MESSAGE_KEY}


# --------------------------------------------------------------------------------------
# The client mod on legacy messages
# --------------------------------------------------------------------------------------


def test_legacy_fitins_arrays_are_the_real_numpy_arrays():
    # flwr's compat layer stores each tensor as np.save bytes with dtype "" and shape (): Array.numpy() still
    # returns the array, which is what the mod's update and checks read.
    record = legacy_train_message(make_codec()).content["fitins.parameters"]
    assert list(record.keys()) == ["0", "1", "2"]
    for key, a in zip(record.keys(), initial_ndarrays()):
        assert (record[key].dtype, tuple(record[key].shape)) == ("", ())
        got = record[key].numpy()
        assert got.dtype == a.dtype and got.shape == a.shape
        np.testing.assert_array_equal(got, a)


def test_legacy_mod_puts_the_message_in_the_fit_metrics_and_sends_no_tensors():
    codec = make_codec()
    msg = legacy_train_message(codec, config={"lr": 0.1})
    context = make_context(3)
    reply = dprec_app()(msg, context)  # the same ClientApp(client_fn=..., mods=[dprec_mod]) line
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    check_no_float_arrays(reply.content)
    blob = reply.content["fitres.metrics"][MESSAGE_KEY]

    # What the legacy server reads of it (flwr's recorddict_to_fitres): no tensors, the bytes in the metrics.
    fitres = compat.recorddict_to_fitres(reply.content, keep_input=False)
    assert fitres.status.code == Code.OK and fitres.parameters.tensors == []
    assert fitres.num_examples == len(local_data(3)[0]) and fitres.metrics[MESSAGE_KEY] == blob
    plain = LeastSquares(3).fit(initial_ndarrays(), {})
    assert {k: v for k, v in fitres.metrics.items() if k != MESSAGE_KEY} == plain[2]

    # The message is of reply - global of the float arrays: its layout, and the update's norm kept on the client.
    message = DPRECMessage.from_bytes(blob, codec.layout(template()))
    assert message.nbytes == len(blob)
    new, _ = local_step(initial_ndarrays(), 3)
    norm = np.sqrt(sum(np.sum((new[i].astype(np.float64) - initial_ndarrays()[i]) ** 2) for i in (0, 1)))
    assert context.state[STATE_KEY]["norm"] == pytest.approx(norm, rel=1e-5)
    assert context.state[STATE_KEY]["message-bytes"] == len(blob)


def test_legacy_mod_error_reply_becomes_a_failure_of_the_legacy_server():
    # A legacy train message without the DP-REC keys (the server's strategy is not wrapped): refused before
    # training, pointing at the legacy wrapper; GridClientProxy turns the error reply into an exception.
    trained = []

    class Spy(LeastSquares):
        def fit(self, parameters, config):
            trained.append(config)
            return super().fit(parameters, config)

    app = dprec_app(lambda ctx: Spy(1).to_client())
    reply = app(legacy_train_message(None), make_context())
    assert reply.has_error() and reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert "DPRECLegacyStrategy" in reply.error.reason and not trained
    proxy = LocalProxy(7, app, 1)
    with pytest.raises(ValueError, match="DPRECLegacyStrategy"):
        proxy.fit(FitIns(ndarrays_to_parameters(initial_ndarrays()), {}), None, 1)


class StatusClient(Client):
    """A legacy Client whose fit returns a status that is not OK, with a text the server must not see."""

    def fit(self, ins):
        arrays = parameters_to_ndarrays(ins.parameters)
        return FitRes(Status(Code.FIT_NOT_IMPLEMENTED, "secret text"), ndarrays_to_parameters(arrays), 1, {})


class PrefixClient(LeastSquares):
    def fit(self, parameters, config):
        new, n, metrics = super().fit(parameters, config)
        return new, n, {**metrics, "dprec.mine": 1}


class ShapeClient(LeastSquares):
    def fit(self, parameters, config):
        new, n, metrics = super().fit(parameters, config)
        return [new[0], np.zeros(11, np.float32), new[2]], n, metrics


class RaisingClient(LeastSquares):
    def fit(self, parameters, config):
        raise RuntimeError("loss diverged on patient 17")


@pytest.mark.parametrize(
    "client, code, match",
    [
        (StatusClient, ErrorCode.MOD_FAILED_PRECONDITION, f"status code {Code.FIT_NOT_IMPLEMENTED.value}, not OK"),
        (PrefixClient, ErrorCode.MOD_FAILED_PRECONDITION, "already hold keys starting with 'dprec.'"),
        (ShapeClient, ErrorCode.MOD_FAILED_PRECONDITION, "reply array '1' has shape \\(11,\\)"),
        (RaisingClient, ErrorCode.CLIENT_APP_RAISED_EXCEPTION, "not forwarded"),
    ],
)
def test_legacy_mod_error_replies(client, code, match):
    def fn(context):
        c = client() if client is StatusClient else client(1)
        return c if isinstance(c, Client) else c.to_client()

    reply = dprec_app(fn)(legacy_train_message(make_codec()), make_context())
    assert reply.has_error() and reply.error.code == code
    assert re.search(match, reply.error.reason), reply.error.reason
    assert "secret" not in reply.error.reason and "patient" not in reply.error.reason


def test_legacy_capped_mod_refuses_before_training():
    trained = []

    class Spy(LeastSquares):
        def fit(self, parameters, config):
            trained.append(1)
            return super().fit(parameters, config)

    app = dprec_app(lambda ctx: Spy(1).to_client(), mods=(make_dprec_mod(max_clip_multiplier=CLIP / 2),))
    reply = app(legacy_train_message(make_codec()), make_context())
    assert reply.has_error() and "max_clip_multiplier" in reply.error.reason and not trained


def test_legacy_mod_passes_evaluate_messages():
    evalins = compat.evaluateins_to_recorddict(EvaluateIns(ndarrays_to_parameters(initial_ndarrays()), {}), True)
    msg = Message(evalins, dst_node_id=1, message_type=MessageType.EVALUATE)
    reply = dprec_app()(msg, make_context())
    res = compat.recorddict_to_evaluateres(reply.content)
    assert res.status.code == Code.OK and res.metrics["eval-loss"] == res.loss


# --------------------------------------------------------------------------------------
# DPRECLegacyStrategy driven by hand
# --------------------------------------------------------------------------------------


def weighted_loss(pairs):
    return {"train-loss": sum(n * m["train-loss"] for n, m in pairs) / sum(n for n, _ in pairs)}


def test_legacy_strategy_round_by_hand():
    codec = make_codec()
    seen = []

    def fit_metrics(pairs):
        seen.append(pairs)
        return weighted_loss(pairs)

    inner = legacy.FedAvg(
        fraction_fit=0.5,
        min_fit_clients=1,
        min_available_clients=1,
        # A stale DP-REC key in the user's config is replaced by the codec's.
        on_fit_config_fn=lambda r: {"lr": 0.1, "dprec.sigma": 99.0},
        fit_metrics_aggregation_fn=fit_metrics,
    )
    strategy = DPRECLegacyStrategy(inner, codec, delta=DELTA, adaptive_clipping=False, num_rounds=2, keep_messages=True)
    cm, _ = manager(6)
    params = ndarrays_to_parameters(initial_ndarrays())
    instructions = strategy.configure_fit(1, params, cm)
    assert len(instructions) == 3 and len({p.node_id for p, _ in instructions}) == 3
    for _, ins in instructions:
        assert ins.parameters is params
        assert ins.config == {"lr": 0.1, **codec_config(codec)}
    stats = strategy.history[0]
    assert (stats.num_sampled, stats.num_available) == (3, 6)

    # Two clients answer; the third fails (the legacy server reports an exception, without its client).
    results = [(p, p.fit(ins, None, 1)) for p, ins in instructions[:2]]
    new, metrics = strategy.aggregate_fit(1, results, [ValueError("Message contains an Error (reason: boom).")])
    assert (stats.num_aggregated, stats.num_failed, stats.num_rejected) == (2, 1, 0)
    got = parameters_to_ndarrays(new)
    expected = plus_mean(initial_ndarrays(), stats.messages, codec)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)  # FedAvg of the one mean FitRes: bit for bit
    np.testing.assert_array_equal(got[2], [0])  # the server keeps its integer arrays

    eps = reference_epsilons(codec, rounds=2, num_clients=6, clients_per_round=3)
    assert metrics["dprec-epsilon"] == strategy.epsilon == stats.epsilon == eps[0] > 0
    assert metrics["dprec-clients"] == 2 and metrics["dprec-failed"] == 1 and metrics["dprec-dropped"] == 0
    assert strategy.guarantee is not None and strategy.accountant.rounds == 1
    # The user's metric function saw the clients' metrics without the DP-REC bytes, and only once.
    assert len(seen) == 1 and all(MESSAGE_KEY not in m and "train-loss" in m for _, m in seen[0])
    assert metrics["train-loss"] == pytest.approx(
        weighted_loss([(r.num_examples, r.metrics) for _, r in results])["train-loss"]
    )

    # Round 2 from the new global parameters: epsilon composes.
    instructions = strategy.configure_fit(2, new, cm)
    results = [(p, p.fit(ins, None, 2)) for p, ins in instructions]
    _, metrics = strategy.aggregate_fit(2, results, [])
    assert metrics["dprec-epsilon"] == eps[1] > eps[0]
    with pytest.raises(ValueError, match="not configured"):
        strategy.aggregate_fit(3, results, [])


def test_legacy_strategy_drops_what_the_core_drops():
    codec = make_codec()
    seen = []

    def metrics_fn(pairs):
        seen.append(pairs)
        return {"clients": len(pairs)}

    strategy = DPRECLegacyStrategy(
        legacy.FedAvg(
            fraction_fit=1.0, min_fit_clients=3, min_available_clients=3, fit_metrics_aggregation_fn=metrics_fn
        ),
        codec,
        delta=DELTA,
        adaptive_clipping=False,
    )
    cm, proxies = manager(3)
    params = ndarrays_to_parameters(initial_ndarrays())
    instructions = strategy.configure_fit(1, params, cm)
    results = [(p, p.fit(ins, None, 1)) for p, ins in instructions]
    # A client without the mod sends its float arrays and no message; another's FitRes fails with a status.
    plain = LeastSquares(0).fit(initial_ndarrays(), {})
    results[1] = (results[1][0], FitRes(Status(Code.OK, ""), ndarrays_to_parameters(plain[0]), plain[1], plain[2]))
    failed = (results[2][0], FitRes(Status(Code.FIT_NOT_IMPLEMENTED, ""), Parameters([], ""), 0, {}))
    new, metrics = strategy.aggregate_fit(1, results[:2], [failed])
    stats = strategy.history[0]
    assert (stats.num_aggregated, stats.num_failed, stats.dropped) == (1, 1, {"bad-message": 1})
    assert metrics["dprec-dropped.bad-message"] == 1 and metrics["dprec-clients"] == 1
    # The user's metrics cover the aggregated client only, as in the Message API.
    assert metrics["clients"] == 1 and len(seen[-1]) == 1
    np.testing.assert_array_equal(parameters_to_ndarrays(new)[2], [0])

    # A round whose every message is dropped: no parameters (the server keeps its own), but it is accounted.
    instructions = strategy.configure_fit(2, new, cm)
    results = [(p, p.fit(ins, None, 2)) for p, ins in instructions]
    replayed = [(p, FitRes(r.status, r.parameters, r.num_examples, dict(r.metrics))) for p, r in results]
    for _, r in replayed:
        r.metrics[MESSAGE_KEY] = results[0][1].metrics[MESSAGE_KEY]  # the same message thrice
    new2, metrics = strategy.aggregate_fit(2, replayed, [])
    assert new2 is None and metrics["dprec-clients"] == 0 and metrics["dprec-dropped.duplicate-seed"] == 3
    assert metrics["dprec-epsilon"] > strategy.history[0].epsilon


def test_legacy_accept_failures_false_keeps_the_model_but_accounts_the_round():
    codec = make_codec()
    inner = legacy.FedAvg(fraction_fit=1.0, min_fit_clients=2, min_available_clients=2, accept_failures=False)
    strategy = DPRECLegacyStrategy(inner, codec, delta=DELTA, adaptive_clipping=False)
    cm, _ = manager(2)
    instructions = strategy.configure_fit(1, ndarrays_to_parameters(initial_ndarrays()), cm)
    results = [(p, p.fit(ins, None, 1)) for p, ins in instructions[:1]]
    new, metrics = strategy.aggregate_fit(1, results, [ValueError("timeout")])
    assert new is None, "FedAvg(accept_failures=False) discards a round with a failure"
    assert metrics["dprec-clients"] == 1 and metrics["dprec-failed"] == 1 and metrics["dprec-epsilon"] > 0


# Each legacy strategy and its arguments (FedOpt's need the initial parameters).
LEGACY_STRATEGIES = {
    "FedAvg": lambda **kw: legacy.FedAvg(**kw),
    "FedProx": lambda **kw: legacy.FedProx(proximal_mu=0.1, **kw),
    "FedAvgM": lambda **kw: legacy.FedAvgM(server_learning_rate=1.0, server_momentum=0.9, **kw),
    "FedAdam": lambda **kw: legacy.FedAdam(eta=0.01, **kw),
    "FedYogi": lambda **kw: legacy.FedYogi(eta=0.01, **kw),
    "FedAdagrad": lambda **kw: legacy.FedAdagrad(eta=0.01, **kw),
}


def make_legacy(name: str, globals_: dict | None = None, metrics_fn=weighted_loss):
    def record(server_round, arrays, config):
        if globals_ is not None:
            globals_[server_round] = [a.copy() for a in arrays]

    return LEGACY_STRATEGIES[name](
        fraction_fit=0.6,
        min_fit_clients=3,
        min_available_clients=NUM_NODES,
        fraction_evaluate=0.4,
        min_evaluate_clients=2,
        initial_parameters=ndarrays_to_parameters(initial_ndarrays()),
        evaluate_fn=record,
        fit_metrics_aggregation_fn=metrics_fn,
    )


def check_rounds(name, codec, strategy, globals_):
    """Each round's global model is the wrapped strategy's step on ``global + mean`` (for FedAvg and FedProx,
    ``global + mean`` itself, bit for bit), in the model's dtypes; epsilon is an independent accountant's."""
    reference = make_legacy(name, metrics_fn=None)  # the same strategy, fed the DP means by hand
    eps = reference_epsilons(codec, rounds=NUM_ROUNDS, num_clients=NUM_NODES, clients_per_round=3)
    steps = []
    for r in range(1, NUM_ROUNDS + 1):
        stats = strategy.history[r - 1]
        assert (stats.server_round, stats.num_sampled, stats.num_available, stats.num_aggregated) == (r, 3, 5, 3)
        updated = plus_mean(globals_[r - 1], stats.messages, codec)
        mean = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(updated), 1, {})
        stepped = parameters_to_ndarrays(reference.aggregate_fit(r, [(None, mean)], [])[0])
        for got, want, before in zip(globals_[r], stepped, globals_[r - 1]):
            assert got.dtype == before.dtype, "the model keeps its dtypes"
            np.testing.assert_array_equal(got, want.astype(before.dtype))
        plain = all(np.array_equal(got, want) for got, want in zip(globals_[r], updated))
        assert plain or name not in ("FedAvg", "FedProx")
        steps.append(not plain)
        assert stats.epsilon == pytest.approx(eps[r - 1], rel=1e-12)
        np.testing.assert_array_equal(globals_[r][2], [0])
    # FedAvgM's first step is FedAvg's (its momentum starts at the first pseudo-gradient); later ones are its own.
    assert any(steps) is (name not in ("FedAvg", "FedProx")), f"{name}: server steps {steps}"


@pytest.mark.parametrize("name", list(LEGACY_STRATEGIES))
def test_legacy_server_in_process(name):
    codec = make_codec()
    globals_: dict = {}
    strategy = DPRECLegacyStrategy(
        make_legacy(name, globals_),
        codec,
        delta=DELTA,
        adaptive_clipping=False,
        num_rounds=NUM_ROUNDS,
        keep_messages=True,
    )
    history, _, proxies = run_legacy_server(strategy)
    assert sorted(globals_) == list(range(NUM_ROUNDS + 1))
    check_rounds(name, codec, strategy, globals_)
    fit = history.metrics_distributed_fit
    assert [e for _, e in fit["dprec-epsilon"]] == [s.epsilon for s in strategy.history]
    assert [n for _, n in fit["dprec-clients"]] == [3] * NUM_ROUNDS and "train-loss" in fit
    assert len(history.losses_distributed) == NUM_ROUNDS  # evaluation delegated unchanged
    replies = [c for p in proxies for c in p.received if "fitres.parameters" in c]
    assert len(replies) == 3 * NUM_ROUNDS
    for content in replies:
        check_no_float_arrays(content)
    for p in proxies:
        for content in p.sent:
            if "fitins.config" in content:
                assert {k: v for k, v in content["fitins.config"].items() if k.startswith("dprec.")} == codec_config(
                    codec
                )


def test_legacy_server_with_a_refusing_client():
    # One client caps c below the server's: its error reply is a failure of the legacy server, counted by DP-REC.
    codec = make_codec()
    strict = dprec_app(mods=(make_dprec_mod(max_clip_multiplier=CLIP / 2),))
    cm, proxies = manager(2)
    proxies[1].app = strict
    inner = legacy.FedAvg(fraction_fit=1.0, min_fit_clients=2, min_available_clients=2, fraction_evaluate=0.0)
    strategy = DPRECLegacyStrategy(inner, codec, delta=DELTA, adaptive_clipping=False)
    server = Server(client_manager=cm, strategy=strategy)
    history, _ = server.fit(num_rounds=1, timeout=None)
    stats = strategy.history[0]
    assert (stats.num_aggregated, stats.num_failed) == (1, 1)
    assert history.metrics_distributed_fit["dprec-failed"] == [(1, 1)]


# --------------------------------------------------------------------------------------
# Errors naming the API and the fix
# --------------------------------------------------------------------------------------


def test_the_legacy_wrapper_refuses_a_message_api_strategy():
    with pytest.raises(
        TypeError, match=r"flwr\.serverapp\.strategy\..*FedAvg.*Message API.*use dprec\.flower\.DPRECStrategy.*main\(\)"
    ):
        DPRECLegacyStrategy(MessageFedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False)
    with pytest.raises(TypeError, match="Message API"):
        DPRECLegacyStrategy(
            DPRECStrategy(MessageFedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False),
            make_codec(),
            delta=DELTA,
        )
    with pytest.raises(TypeError, match="legacy-API strategy .* got builtins.object"):
        DPRECLegacyStrategy(object(), make_codec(), delta=DELTA, adaptive_clipping=False)
    wrapped = DPRECLegacyStrategy(legacy.FedAvg(), make_codec(), delta=DELTA, adaptive_clipping=False)
    with pytest.raises(TypeError, match="already a DPRECLegacyStrategy"):
        DPRECLegacyStrategy(wrapped, make_codec(), delta=DELTA, adaptive_clipping=False)


def test_the_message_api_wrapper_points_legacy_users_at_the_legacy_wrapper():
    with pytest.raises(
        TypeError, match=r"flwr\.server\.strategy\..*legacy API.*dprec\.flower\.DPRECLegacyStrategy.*server_fn"
    ):
        DPRECStrategy(legacy.FedAvg(), make_codec(), delta=DELTA)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"delta": 1.5}, ValueError, "delta"),
        ({"delta": DELTA, "num_clients": 0}, ValueError, "num_clients"),
        ({"delta": DELTA, "threat_model": "nobody"}, ValueError, "threat_model"),
        ({"delta": DELTA, "max_weight": -1.0}, ValueError, "max_weight"),
        ({"delta": DELTA, "sampling": "poisson"}, TypeError, "sampling"),
    ],
)
def test_legacy_wrapper_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DPRECLegacyStrategy(legacy.FedAvg(), make_codec(), **kwargs)
    with pytest.raises(TypeError, match="codec"):
        DPRECLegacyStrategy(legacy.FedAvg(), "codec", delta=DELTA, adaptive_clipping=False)


def test_legacy_wrapper_refuses_a_client_chosen_twice_or_other_parameters():
    class Twice(legacy.FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            out = super().configure_fit(server_round, parameters, client_manager)
            return out + out[:1]

    class Other(legacy.FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            out = super().configure_fit(server_round, parameters, client_manager)
            return [
                (p, FitIns(ndarrays_to_parameters([a * 2 for a in initial_ndarrays()]), ins.config)) for p, ins in out
            ]

    cm, _ = manager(2)
    params = ndarrays_to_parameters(initial_ndarrays())
    for cls, match in ((Twice, "several times"), (Other, "other parameters")):
        strategy = DPRECLegacyStrategy(cls(min_available_clients=2), make_codec(), delta=DELTA, adaptive_clipping=False)
        with pytest.raises(ValueError, match=match):
            strategy.configure_fit(1, params, cm)
        assert strategy.history == []


# --------------------------------------------------------------------------------------
# The documented snippet: at most 5 lines on a plain legacy app
# --------------------------------------------------------------------------------------

#: The plain legacy app the documentation's snippet starts from (docs/flower.md, "Legacy API (NumPyClient)").
PLAIN_APP = """\
import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.common import ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.simulation import run_simulation


class LeastSquares(NumPyClient):
    def __init__(self, partition):
        rng = np.random.default_rng(partition)
        self.x, self.y = rng.normal(size=(32, 64)), rng.normal(size=(32, 10))

    def fit(self, parameters, config):
        # One gradient step of least squares on this node's data: stands in for local training.
        w = parameters[0]
        w = (w - 0.01 * self.x.T @ (self.x @ w - self.y) / len(self.x)).astype(np.float32)
        return [w], len(self.x), {}


def client_fn(context):
    return LeastSquares(context.node_config["partition-id"]).to_client()


client_app = ClientApp(client_fn=client_fn)


def evaluate(server_round, parameters, config):
    # Centralized evaluation, here the global model's norm: stands in for a test set.
    print(f"round {server_round}: |w| = {np.linalg.norm(parameters[0]):.4f}")


def server_fn(context):
    initial = ndarrays_to_parameters([np.zeros((64, 10), dtype=np.float32)])
    strategy = FedAvg(
        fraction_fit=0.25, min_fit_clients=5, min_available_clients=20, fraction_evaluate=0.0,
        initial_parameters=initial, evaluate_fn=evaluate,
    )
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=3))


server_app = ServerApp(server_fn=server_fn)
run_simulation(server_app, client_app, num_supernodes=20, backend_config={"client_resources": {"num_cpus": 1}})
# prints: round 0: |w| = 0.0000
"""


def docs_snippet() -> str:
    if not DOCS.exists():
        pytest.skip("docs/ is not next to the tests (installed package)")
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Legacy API (NumPyClient)", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def exec_app(code: str, monkeypatch) -> tuple[dict, dict]:
    """Run an app's code with run_simulation replaced by a recorder: its namespace and run_simulation's arguments."""
    import flwr.simulation

    calls: dict = {}

    def record(server_app, client_app, num_supernodes, backend_config=None, **kwargs):
        calls.update(server_app=server_app, client_app=client_app, num_supernodes=num_supernodes)

    monkeypatch.setattr(flwr.simulation, "run_simulation", record)
    namespace: dict = {"__name__": "__app__"}
    exec(compile(code, "app.py", "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace, calls


def test_the_legacy_snippet_adds_at_most_five_lines(monkeypatch, capsys):
    snippet = docs_snippet()
    plain = PLAIN_APP.splitlines()
    dprec = snippet.splitlines()
    diff = [
        line
        for line in difflib.unified_diff(plain, dprec, lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))
    ]
    added = [line[1:] for line in diff if line.startswith("+")]
    removed = [line[1:] for line in diff if line.startswith("-")]
    # The claim and its bookkeeping: every added or changed line says so, one changed line (the ClientApp's mods).
    assert len(added) <= 5, f"DP-REC adds {len(added)} lines to a plain legacy app:\n" + "\n".join(added)
    assert len(added) == 5 and removed == ["client_app = ClientApp(client_fn=client_fn)"]
    assert all(line.rstrip().split("  # ")[-1].startswith("DP-REC") for line in added), added
    assert len([line for line in dprec if "# DP-REC" in line]) == len(added)

    # Both apps run through Flower's legacy Server (here over in-process clients): the plain one sends
    # arrays and learns, the DP-REC one sends bytes and accounts.
    for code, with_dprec in ((PLAIN_APP, False), (snippet, True)):
        namespace, calls = exec_app(code, monkeypatch)
        assert isinstance(calls["server_app"], ServerApp) and calls["client_app"] is namespace["client_app"]
        components = namespace["server_fn"](make_context(0))
        assert isinstance(components, ServerAppComponents)
        assert isinstance(components.strategy, DPRECLegacyStrategy) is with_dprec
        cm = SimpleClientManager()
        proxies = [LocalProxy(101 + i, namespace["client_app"], i) for i in range(calls["num_supernodes"])]
        for p in proxies:
            cm.register(p)
        server = Server(client_manager=cm, strategy=components.strategy)
        history, _ = server.fit(num_rounds=components.config.num_rounds, timeout=None)
        printed = capsys.readouterr().out
        assert "round 0: |w| = 0.0000" in printed and "round 3: |w|" in printed
        assert parameters_to_ndarrays(server.parameters)[0].any()
        replies = [c for p in proxies for c in p.received]
        assert len(replies) == 5 * 3
        for content in replies:
            tensors = compat.recorddict_to_fitres(content, keep_input=True).parameters.tensors
            assert (tensors == []) is with_dprec
        if with_dprec:
            strategy = components.strategy
            fit = history.metrics_distributed_fit
            assert [e for _, e in fit["dprec-epsilon"]] == [s.epsilon for s in strategy.history]
            assert [s.num_sampled for s in strategy.history] == [5] * 3 and strategy.accountant.num_clients == 20
            assert 0 < strategy.epsilon < float("inf")


# --------------------------------------------------------------------------------------
# A real Flower simulation (Ray): NumPyClient app, ServerApp(server_fn=...)
# --------------------------------------------------------------------------------------


class RecordingLegacyStrategy(DPRECLegacyStrategy):
    """Records the FitRes that reach the server and the metrics it returns (ServerApp runs in this process)."""

    def aggregate_fit(self, server_round, results, failures):
        self.__dict__.setdefault("fitres", []).append([(p.node_id, r) for p, r in results])
        out = super().aggregate_fit(server_round, results, failures)
        self.__dict__.setdefault("metrics", []).append(out[1])
        return out


def run_legacy_simulation(name: str, codec: DPRECCodec) -> tuple[RecordingLegacyStrategy, dict]:
    pytest.importorskip("ray")
    from flwr.simulation import run_simulation

    out: dict = {"globals": {}}

    def server_fn(context):
        strategy = RecordingLegacyStrategy(
            make_legacy(name, out["globals"]),
            codec,
            delta=DELTA,
            num_rounds=NUM_ROUNDS,
            keep_messages=True,
            adaptive_clipping=False,
        )
        out["strategy"] = strategy
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=NUM_ROUNDS))

    run_simulation(
        server_app=ServerApp(server_fn=server_fn),
        client_app=ClientApp(client_fn=client_fn, mods=[dprec_mod]),
        num_supernodes=NUM_NODES,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
    )
    assert sorted(out["globals"]) == list(range(NUM_ROUNDS + 1))
    return out["strategy"], out["globals"]


@pytest.mark.parametrize("name", ["FedAvg", "FedAdam"])
def test_flower_legacy_simulation(name):
    codec = make_codec()
    strategy, globals_ = run_legacy_simulation(name, codec)
    check_rounds(name, codec, strategy, globals_)
    for r in range(1, NUM_ROUNDS + 1):
        stats = strategy.history[r - 1]
        # What crossed the wire: FitRes without tensors, the message bytes (and the client's own metrics) only.
        fitres = strategy.fitres[r - 1]
        assert len(fitres) == 3
        for _, res in fitres:
            assert res.parameters.tensors == [] and res.status.code == Code.OK
            assert set(res.metrics) == {"train-loss", "partition", "note", MESSAGE_KEY}
        assert sorted(res.metrics[MESSAGE_KEY] for _, res in fitres) == sorted(stats.messages)
        metrics = strategy.metrics[r - 1]
        assert metrics["dprec-epsilon"] == stats.epsilon and metrics["dprec-clients"] == 3
        assert 20 * metrics["dprec-wire-bytes"] < metrics["float32-wire-bytes"]
        assert metrics["train-loss"] == pytest.approx(
            weighted_loss([(r_.num_examples, r_.metrics) for _, r_ in fitres])["train-loss"]
        )
    assert strategy.history[0].epsilon < strategy.history[1].epsilon < strategy.history[2].epsilon
