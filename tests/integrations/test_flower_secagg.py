"""Distributed DP over Flower's own SecAgg+: the exact carriage of words, the client mod, the strategy, and real
Flower simulations (Ray) with SecAgg+'s masks, key shares and dropouts."""

from __future__ import annotations

import json
import math
import pathlib
import sys

import numpy as np
import pytest

if sys.version_info < (3, 11):
    pytest.skip("dprec.flower is tested with flwr's Message API on Python >= 3.11", allow_module_level=True)
pytest.importorskip("flwr")
pytest.importorskip("scipy")

import flwr.compat.common.recorddict_compat as compat  # noqa: E402
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict  # noqa: E402
from flwr.client import ClientApp, NumPyClient  # noqa: E402
from flwr.client.mod import secaggplus_mod  # noqa: E402
from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.common.secure_aggregation.ndarrays_arithmetic import (  # noqa: E402
    factor_combine,
    factor_extract,
    parameters_addition,
    parameters_mod,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE  # noqa: E402
from flwr.server import LegacyContext, ServerApp, ServerConfig  # noqa: E402
from flwr.server.strategy import FedAvg  # noqa: E402
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow  # noqa: E402

from dprec.accounting import Accountant, DDGEvent, SecAggRoundEvent, SkellamEvent  # noqa: E402
from dprec.flower import (  # noqa: E402
    MAX_SECAGG_BITS,
    AdaptiveClipping,
    DistributedDPStrategy,
    distributed_dp_mod,
    make_distributed_dp_mod,
    secagg_ranges,
)
from dprec.flower._secagg import (  # noqa: E402
    max_secagg_clients,
    modular_sum_from_secagg,
    pipeline_config,
    pipeline_from_config,
    words_to_secagg,
)
from dprec.secagg import DDGPipeline, modular_sum  # noqa: E402

DIM = 40
NODES = 5
DELTA = 1e-5


# Flower stamps instruction messages with the running app's identity: the in-process tests lend one.
from .test_flower import task_identity  # noqa: E402, F401 - an autouse fixture

# --------------------------------------------------------------------------- the exact carriage


def flower_secure_sum(words: list[np.ndarray], bits: int, extra_weights: bool = False) -> np.ndarray:
    """What SecAggPlusWorkflow hands aggregate_fit for clients that send words_to_secagg(words): Flower's own
    client arithmetic (weight, quantize, factor, masks mod M) and server arithmetic (unmask, dequantize, offset,
    divide by the total weight), the masks cancelling as they do after unmasking."""
    r = secagg_ranges(bits)
    rng = np.random.default_rng(0)
    masked = None
    for w in words:
        ratio = 1 / r["max_weight"]
        q_ratio = round(ratio * r["quantization_range"])
        params = [words_to_secagg(w, bits) * (q_ratio / r["quantization_range"])]
        vec = factor_combine(q_ratio, quantize(params, r["clipping_range"], r["quantization_range"]))
        mask = [rng.integers(0, r["modulus_range"] - 1, a.shape) for a in vec]
        vec = parameters_mod(parameters_addition(vec, mask), r["modulus_range"])
        vec = [v - m for v, m in zip(vec, mask)]  # the unmasking, done early: the sum is the same mod M
        masked = vec if masked is None else parameters_addition(masked, vec)
    total = parameters_mod(masked, r["modulus_range"])
    q_total, total = factor_extract(total)
    out = dequantize(total, r["clipping_range"], r["quantization_range"])
    for v in out:
        v += -(len(words) - 1) * r["clipping_range"]
        v *= r["quantization_range"] / q_total
    return out[0]


@pytest.mark.parametrize("bits", [8, 13, 20, MAX_SECAGG_BITS])
@pytest.mark.parametrize("clients", [2, 7, "max"])
def test_secagg_carries_words_exactly(bits, clients):
    n = min(max_secagg_clients(bits), 300) if clients == "max" else clients
    if n > max_secagg_clients(bits):
        pytest.skip(f"{n} clients exceed {bits}-bit SecAgg+")
    rng = np.random.default_rng(bits * 1000 + n)
    words = [rng.integers(0, 2**bits, 64).astype(np.uint64) for _ in range(n)]
    words[0][:4] = [0, 2**bits - 1, 2**bits - 1, 0]  # the extremes
    out = flower_secure_sum(words, bits)
    np.testing.assert_array_equal(modular_sum_from_secagg(out, bits, n).astype(np.uint64),
                                  np.sum(words, axis=0) % 2**bits)


def test_secagg_ranges_and_bad_sums():
    assert secagg_ranges(20) == {"clipping_range": (2**20 - 1) / 2, "quantization_range": 2**20 - 1,
                                 "modulus_range": 2**20, "max_weight": 1.0}
    for bits, exc in ((32, ValueError), (7, ValueError), (20.0, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="bits"):
            secagg_ranges(bits)
    words = [np.arange(8, dtype=np.uint64)] * 3
    out = flower_secure_sum(words, 10)
    np.testing.assert_array_equal(modular_sum_from_secagg(out, 10, 3), 3 * np.arange(8))
    with pytest.raises(ValueError, match="not a sum of integers"):
        modular_sum_from_secagg(out + 0.5, 10, 3)
    with pytest.raises(ValueError, match="not finite"):
        modular_sum_from_secagg(np.full(8, np.nan), 10, 3)
    with pytest.raises(ValueError, match="out of range"):
        modular_sum_from_secagg(out, 10, 2**10)


# --------------------------------------------------------------------------- accounting


def test_secagg_round_event_is_the_mixture_of_the_summed_curves():
    from dprec.accounting.rdp import participation_rdp

    orders = np.array([2.0, 4.0, 16.0, 64.0])
    a = DDGEvent(l2_sensitivity=1.0, noise_stddev=0.8, num_clients=5, dim=64, granularity=1e-3)
    b = DDGEvent(l2_sensitivity=1024.0, noise_stddev=2048.0, num_clients=5, dim=1, granularity=1.0)
    joint = SecAggRoundEvent([a, b], participation_rate=0.3)
    want = participation_rdp(0.3, a.rdp(orders) + b.rdp(orders), orders)
    np.testing.assert_allclose(joint.rdp(orders), want, rtol=1e-14)
    apart = participation_rdp(0.3, a.rdp(orders), orders) + participation_rdp(0.3, b.rdp(orders), orders)
    assert np.all(joint.rdp(orders) > apart)  # the shared participation: separate mixtures would under-count
    acc = Accountant(threat_model="server").compose(joint)
    g = acc.guarantee(DELTA)
    assert math.isfinite(g.epsilons["zero"]) and g.epsilons["add_remove"] == math.inf
    with pytest.raises(ValueError, match="unsampled"):
        SecAggRoundEvent([DDGEvent(l2_sensitivity=1.0, noise_stddev=1.0, num_clients=2, dim=4, sampling_rate=0.5)])
    with pytest.raises(TypeError, match="components"):
        SecAggRoundEvent([])


@pytest.mark.parametrize("participation", [1.0, 0.2])
@pytest.mark.parametrize("sigma, lattice, n", [(0.5, 1, 2), (0.5, 2, 3), (0.6, 1, 10), (1.0, 1, 3), (1.0, 2, 10),
                                               (3.0, 4, 3)])
def test_secagg_round_event_bounds_the_exact_divergence_of_the_count(participation, sigma, lattice, n):
    """The clipping count of n clients (each bit on a lattice M plus its discrete Gaussian share): the exact Renyi
    divergence of the server's view (participation seen, the n shares convolved exactly, in the log domain)
    between a target bit of 0 and of 1 lies below the event's curve, at orders from 1.05, down to the smallest
    per-client noise a bound is claimed for (0.5), where the discrete Gaussian's tau term dominates."""
    from scipy.special import logsumexp

    from ..accounting.test_discrete import _renyi_shift, _sum_of_discrete_gaussians_logpmf

    log_pmf = _sum_of_discrete_gaussians_logpmf(sigma, n, 120)
    event = SecAggRoundEvent([DDGEvent(l2_sensitivity=float(lattice), noise_stddev=sigma, num_clients=n, dim=1,
                                       granularity=1.0)], participation_rate=participation)
    orders = np.array([1.05, 1.5, 2.0, 3.0, 8.0, 20.0])
    bound = event.rdp(orders)
    for a, b in zip(orders, bound):
        # D_a of the participation mixture: log(1 - q + q exp((a - 1) D_a(shifted))) / (a - 1), both directions
        # alike (the sum is symmetric).
        inner = (a - 1.0) * _renyi_shift(log_pmf, lattice, a)
        log_stay = math.log1p(-participation) if participation < 1 else -math.inf
        exact = float(logsumexp([log_stay, math.log(participation) + inner])) / (a - 1.0)
        assert exact <= b * (1 + 1e-9), (a, exact, b)


# --------------------------------------------------------------------------- the client mod, in process


def fitins_message(config: dict, arrays: list[np.ndarray], node: int = 3) -> Message:
    content = compat.fitins_to_recorddict(FitIns(ndarrays_to_parameters(arrays), config), keep_input=True)
    content.config_records[RECORD_KEY_CONFIGS] = ConfigRecord({})
    return Message(content, dst_node_id=node, message_type=MessageType.TRAIN, group_id="1")


def secagg_context(bits: int, **override) -> Context:
    ctx = Context(run_id=1, node_id=3, node_config={}, state=RecordDict(), run_config={})
    r = secagg_ranges(bits)
    state = {"clipping_range": r["clipping_range"], "target_range": r["quantization_range"],
             "mod_range": r["modulus_range"], "max_weight": r["max_weight"], **override}
    ctx.state.config_records[RECORD_KEY_STATE] = ConfigRecord(state)
    return ctx


def fit_app(update: np.ndarray):
    def call_next(msg: Message, ctx: Context) -> Message:
        ins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        w = parameters_to_ndarrays(ins.parameters)
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([w[0] + update.astype(w[0].dtype), w[1]]), 7,
                     {"loss": 0.5})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    return call_next


def a_pipeline(bits=16, clients=NODES, **kw) -> DDGPipeline:
    return DDGPipeline(DIM, clip=1.0, bits=bits, num_clients=clients, seed=11, noise_stddev=0.3, **kw)


def test_mod_sends_the_pipelines_words_and_no_metrics():
    pipe = a_pipeline()
    arrays = [np.zeros(DIM, np.float32), np.array([5], np.int64)]
    update = np.linspace(-0.2, 0.3, DIM)
    cfg = pipeline_config(pipe)
    rng_seed = 5
    mod = make_distributed_dp_mod(rng=np.random.default_rng(rng_seed))
    reply = mod(fitins_message(cfg, arrays), secagg_context(16), fit_app(update))
    assert not reply.has_error()
    res = compat.recorddict_to_fitres(reply.content, keep_input=True)
    assert res.num_examples == 1 and res.metrics == {}
    (sent,) = parameters_to_ndarrays(res.parameters)
    want = pipe.encode(update.astype(np.float32).astype(np.float64), rng=np.random.default_rng(rng_seed))
    np.testing.assert_array_equal(sent, words_to_secagg(want, 16))
    # keep_metrics passes them; the plain mod draws its randomness from the OS (two replies differ).
    kept = make_distributed_dp_mod(keep_metrics=True)(fitins_message(cfg, arrays), secagg_context(16), fit_app(update))
    assert compat.recorddict_to_fitres(kept.content, keep_input=True).metrics == {"loss": 0.5}
    a = distributed_dp_mod(fitins_message(cfg, arrays), secagg_context(16), fit_app(update))
    b = distributed_dp_mod(fitins_message(cfg, arrays), secagg_context(16), fit_app(update))
    assert not np.array_equal(*(parameters_to_ndarrays(compat.recorddict_to_fitres(r.content, True).parameters)[0]
                                for r in (a, b)))


def _reason(reply: Message) -> str:
    assert reply.has_error()
    return reply.error.reason


@pytest.mark.parametrize(
    "case, match",
    [
        ("no-secagg", "secaggplus_mod"),
        ("plain-secagg", "secagg_workflow"),
        ("missing", "lacks the distributed-DP keys"),
        ("bits", "bits must be in"),
        ("mechanism", "must be one of"),
        ("dim", "not the model's"),
        ("noise", "noise_stddev"),
        ("granularity", "granularity"),
        ("sketch", "more cells"),
        ("sketch-rows", "rows, more than"),
        ("min-noise", "min_noise_multiplier"),
    ],
)
def test_mod_refuses_before_training(case, match):
    pipe = a_pipeline()
    cfg = pipeline_config(pipe)
    arrays = [np.zeros(DIM, np.float32), np.array([5], np.int64)]
    ctx = secagg_context(16)
    mod = distributed_dp_mod
    if case == "no-secagg":
        ctx = Context(run_id=1, node_id=3, node_config={}, state=RecordDict(), run_config={})
    elif case == "plain-secagg":
        ctx = secagg_context(16, clipping_range=8.0, target_range=4194304, mod_range=2**32, max_weight=1000.0)
    elif case == "missing":
        del cfg["dprec.ddp.seed"]
    elif case == "bits":
        cfg["dprec.ddp.bits"] = 32
    elif case == "mechanism":
        cfg["dprec.ddp.mechanism"] = "gaussian"
    elif case == "dim":
        cfg["dprec.ddp.dim"] = DIM + 1
    elif case == "noise":
        cfg["dprec.ddp.noise-stddev"] = -1.0
    elif case == "granularity":
        cfg["dprec.ddp.granularity"] = 0.0
    elif case == "sketch":
        cfg.update({"dprec.ddp.sketch-rows": 10, "dprec.ddp.sketch-cols": 1000})
    elif case == "sketch-rows":  # few cells, but an encode of dim x 1000 work
        cfg.update({"dprec.ddp.sketch-rows": 1000, "dprec.ddp.sketch-cols": 1})
    elif case == "min-noise":
        mod = make_distributed_dp_mod(min_noise_multiplier=5.0)
    trained = []

    def app(msg, ctx):
        trained.append(1)
        return fit_app(np.zeros(DIM))(msg, ctx)

    assert match in _reason(mod(fitins_message(cfg, arrays), ctx, app))
    assert not trained  # refused before the client trained


@pytest.mark.parametrize("failure", ["nan", "raises", "error-reply", "wrong-shape"])
def test_mod_failure_after_training_sends_a_zero_update(failure):
    """A failure once training has started (which can depend on the client's data) must not show: the client
    sends the words of a zero update with its noise share, exactly as for a zero update, and records it locally."""
    pipe = a_pipeline()
    cfg = pipeline_config(pipe)
    arrays = [np.zeros(DIM, np.float32), np.array([5], np.int64)]

    def app(msg, ctx):
        if failure == "nan":
            return fit_app(np.full(DIM, np.nan))(msg, ctx)
        if failure == "raises":
            raise RuntimeError("the client's data say ...")
        if failure == "error-reply":
            from flwr.app import Error

            return Message(Error(code=0, reason="failed"), reply_to=msg)
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.zeros(3, np.float32)]), 1, {})  # wrong shape
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    ctx = secagg_context(16)
    reply = make_distributed_dp_mod(rng=np.random.default_rng(3))(fitins_message(cfg, arrays), ctx, app)
    assert not reply.has_error()
    (sent,) = parameters_to_ndarrays(compat.recorddict_to_fitres(reply.content, keep_input=True).parameters)
    np.testing.assert_array_equal(sent, words_to_secagg(pipe.encode(np.zeros(DIM), rng=np.random.default_rng(3)), 16))
    assert ctx.state.metric_records["dprec-ddp"]["failed-rounds"] == 1


def test_mod_passes_other_messages_and_checks_its_use():
    msg = Message(RecordDict(), dst_node_id=3, message_type=MessageType.EVALUATE, group_id="1")
    seen = []
    distributed_dp_mod(msg, secagg_context(16), lambda m, c: seen.append(m) or m)
    assert seen == [msg]
    with pytest.raises(TypeError, match="returns the mod"):
        make_distributed_dp_mod(msg, secagg_context(16), lambda m, c: m)  # the factory given as the mod
    for bad, exc in (({"min_noise_multiplier": -1.0}, ValueError), ({"keep_metrics": 1}, TypeError),
                     ({"rng": 3}, TypeError)):
        with pytest.raises(exc, match=next(iter(bad))):
            make_distributed_dp_mod(**bad)


def test_pipeline_config_round_trips():
    for kw in ({}, {"sketch": (2, 16), "beta": 0.0}):
        pipe = a_pipeline(**kw)
        twin = pipeline_from_config(pipeline_config(pipe))
        assert (twin.granularity, twin.noise_stddev, twin.padded_dim, twin.seed, twin.beta) == (
            pipe.granularity, pipe.noise_stddev, pipe.padded_dim, pipe.seed, pipe.beta)
        x = np.linspace(-1, 1, DIM)
        np.testing.assert_array_equal(twin.encode(x, rng=np.random.default_rng(1)),
                                      pipe.encode(x, rng=np.random.default_rng(1)))


# --------------------------------------------------------------------------- the strategy's arguments


def test_strategy_arguments():
    ok = {"clip_norm": 1.0, "delta": DELTA, "noise_multiplier": 1.0}
    DistributedDPStrategy(FedAvg(), **ok)
    bad = [
        ({"mechanism": "laplace"}, ValueError, "mechanism"),
        ({"bits": 32}, ValueError, "bits"),
        ({"clip_norm": 0.0}, ValueError, "clip_norm"),
        ({"delta": 1.0}, ValueError, "delta"),
        ({"target_epsilon": 1.0}, ValueError, "exactly one"),
        ({"noise_multiplier": None, "target_epsilon": 1.0}, ValueError, "num_rounds"),
        ({"beta": 1.0}, ValueError, "beta"),
        ({"wrap_probability": 2.0}, ValueError, "wrap_probability"),
        ({"sketch": (0, 16)}, ValueError, "rows"),
        ({"sketch": "2x16"}, TypeError, "sketch"),
        ({"adaptive_clipping": "yes"}, TypeError, "adaptive_clipping"),
        ({"keep_sums": 1}, TypeError, "keep_sums"),
        ({"num_clients": 3, "strategy": FedAvg(min_fit_clients=5)}, ValueError, "min_fit_clients"),
    ]
    for change, exc, match in bad:
        kw = {**ok, **change}
        strategy = kw.pop("strategy", FedAvg())
        with pytest.raises(exc, match=match):
            DistributedDPStrategy(strategy, **kw)
    from flwr.serverapp.strategy import FedAvg as MessageFedAvg

    with pytest.raises(TypeError, match="Message API"):
        DistributedDPStrategy(MessageFedAvg(), **ok)
    s = DistributedDPStrategy(FedAvg(), **ok)
    with pytest.raises(RuntimeError, match="secagg_workflow"):
        s.configure_fit(1, ndarrays_to_parameters([np.zeros(4, np.float32)]), None)
    with pytest.raises(TypeError, match="DistributedDPStrategy"):
        s.secagg_workflow(3, 2)(None, LegacyContext(Context(1, 1, {}, RecordDict(), {}), strategy=FedAvg()))
    assert isinstance(s.secagg_workflow(3, 2), SecAggPlusWorkflow)


# --------------------------------------------------------------------------- real Flower simulations


def client_update(partition: int, dim: int = DIM) -> np.ndarray:
    """A fixed update per client; partition 4's norm 1.5 is clipped at clip norm 1."""
    rng = np.random.default_rng(100 + partition)
    u = rng.normal(size=dim)
    return u / np.linalg.norm(u) * (0.3 + 0.3 * partition)


class FixedUpdate(NumPyClient):
    def __init__(self, partition: int) -> None:
        self.partition = partition

    def fit(self, parameters, config):
        w = parameters[0]
        return [(w + client_update(self.partition, w.size)).astype(np.float32), parameters[1]], 10, {"loss": 1.0}

    def evaluate(self, parameters, config):
        return 0.0, 1, {}


def client_fn(context):
    return FixedUpdate(int(context.node_config["partition-id"])).to_client()


def recorder(directory: str):
    """Between secaggplus_mod and distributed_dp_mod: saves each client's words and the round's config (what the
    client hands SecAgg+), so that a test can sum and decode them itself."""

    def mod(msg, ctx, call_next):
        reply = call_next(msg, ctx)
        if msg.metadata.message_type == MessageType.TRAIN and not reply.has_error():
            ins = compat.recorddict_to_fitins(msg.content, keep_input=True)
            res = compat.recorddict_to_fitres(reply.content, keep_input=True)
            arrays = parameters_to_ndarrays(res.parameters)
            path = pathlib.Path(directory) / f"{msg.metadata.group_id}-{ctx.node_id}.npz"
            np.savez(path, *arrays, config=json.dumps(dict(ins.config)))
        return reply

    return mod


def dropper(drops: dict):
    """Outermost: raise (a dropout) at ``drops[(round, partition)]``, a SecAgg+ stage."""

    def mod(msg, ctx, call_next):
        cfg = msg.content.config_records.get(RECORD_KEY_CONFIGS)
        stage = None if cfg is None else cfg.get("stage")
        if drops.get((int(msg.metadata.group_id), int(ctx.node_config["partition-id"]))) == stage:
            raise RuntimeError(f"dropped at {stage}")
        return call_next(msg, ctx)

    return mod


def simulate(tmp_path, *, rounds=3, drops=None, num_shares=NODES, threshold=3, dim=DIM, **kwargs):
    pytest.importorskip("ray")
    from flwr.simulation import run_simulation

    out: dict = {"globals": {}}

    def central(server_round, parameters, config):
        out["globals"][server_round] = [np.array(p) for p in parameters]
        return None

    app = ServerApp()

    @app.main()
    def main(grid, context):
        fedavg = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=NODES, min_available_clients=NODES,
                        evaluate_fn=central,
                        initial_parameters=ndarrays_to_parameters([np.zeros(dim, np.float32), np.array([7])]))
        strategy = DistributedDPStrategy(fedavg, delta=DELTA, keep_sums=True, **kwargs)
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
        DefaultWorkflow(fit_workflow=strategy.secagg_workflow(num_shares, threshold))(grid, legacy)
        out["strategy"] = strategy

    mods = [dropper(drops or {}), secaggplus_mod, recorder(str(tmp_path)), distributed_dp_mod]
    run_simulation(server_app=app, client_app=ClientApp(client_fn=client_fn, mods=mods), num_supernodes=NODES,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}})
    return out["strategy"], out["globals"]


def recorded(tmp_path, server_round):
    """The words and config each client handed SecAgg+ in a round."""
    files = sorted(pathlib.Path(tmp_path).glob(f"{server_round}-*.npz"))
    loaded = [np.load(f) for f in files]
    words = [[np.rint(d[k] + ((1 << json.loads(str(d["config"]))["dprec.ddp.bits"]) - 1) / 2).astype(np.uint64)
              for k in ("arr_0", "arr_1") if k in d] for d in loaded]
    configs = [json.loads(str(d["config"])) for d in loaded]
    return words, configs


def independent_epsilon(strategy, up_to, tmp_path):
    """Epsilon recomputed from the pipelines the clients were sent and the shares each sum held."""
    acc = Accountant(threat_model="server")
    for h in strategy.history[:up_to]:
        if h.status in ("aggregated", "failed"):
            pipe = pipeline_from_config(recorded(tmp_path, h.server_round)[1][0])
            cls = DDGEvent if pipe.mechanism == "ddg" else SkellamEvent
            parts = [cls(l2_sensitivity=pipe.l2_sensitivity, noise_stddev=pipe.noise_stddev,
                         num_clients=h.num_aggregated, dim=pipe.padded_dim, granularity=pipe.granularity)]
            acc.compose(SecAggRoundEvent(parts, participation_rate=h.num_sampled / NODES))
    return acc.get_epsilon(DELTA)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mechanism": "ddg", "bits": 20, "noise_multiplier": 1.0},
        # 8-bit words: each client's vector and the sum wrap around 2**8; Skellam with a count-sketch
        {"mechanism": "skellam", "bits": 8, "noise_multiplier": 0.5, "sketch": (2, 16)},
    ],
    ids=["ddg-20bit", "skellam-8bit-sketch"],
)
def test_simulation_decodes_the_secure_sum_bit_for_bit(tmp_path, kwargs):
    strategy, globals_ = simulate(tmp_path, clip_norm=1.0, **kwargs)
    bits = kwargs["bits"]
    wrapped = False
    for r in (1, 2, 3):
        h = strategy.history[r - 1]
        assert (h.server_round, h.status, h.num_sampled, h.num_aggregated) == (r, "aggregated", NODES, NODES)
        words, configs = recorded(tmp_path, r)
        assert len(words) == NODES and all(c == configs[0] for c in configs)
        vectors = [w[0] for w in words]
        pipe = pipeline_from_config(configs[0])
        # SecAgg+ revealed exactly the modular sum of what the clients sent; the server's decode is the pipeline's.
        total = modular_sum(np.stack(vectors).astype(pipe.message_dtype), bits)
        np.testing.assert_array_equal(h.modular_sum, total)
        np.testing.assert_array_equal(h.mean, pipe.decode(total, num_clients=NODES))
        np.testing.assert_array_equal(globals_[r][0], (globals_[r - 1][0].astype(np.float64) + h.mean).astype(np.float32))
        np.testing.assert_array_equal(globals_[r][1], [7])  # an integer array keeps its global value
        wrapped |= bool(np.any(np.sum(np.stack(vectors).astype(np.uint64), axis=0) >= 2**bits))
        assert h.epsilon == pytest.approx(independent_epsilon(strategy, r, tmp_path), rel=1e-12)
    assert wrapped or bits > 16  # the 8-bit run's sums do wrap around the modulus
    assert strategy.history[0].epsilon < strategy.history[1].epsilon < strategy.history[2].epsilon


def test_simulation_with_dropouts(tmp_path):
    # Round 1: partition 0 drops before sending its masked vector (4 noise shares in the sum); round 2: partition 1
    # drops after sending it, before the unmasking (SecAgg+ recovers its mask: 5 shares).
    strategy, globals_ = simulate(tmp_path, rounds=2, clip_norm=1.0, noise_multiplier=1.0, bits=16,
                                  drops={(1, 0): "collect_masked_vectors", (2, 1): "unmask"})
    h1, h2 = strategy.history
    assert (h1.status, h1.num_aggregated, h2.status, h2.num_aggregated) == ("aggregated", 4, "aggregated", 5)
    for r, h in ((1, h1), (2, h2)):
        words, configs = recorded(tmp_path, r)
        pipe = pipeline_from_config(configs[0])
        assert len(words) == (4 if r == 1 else 5)
        total = modular_sum(np.stack([w[0] for w in words]).astype(pipe.message_dtype), 16)
        np.testing.assert_array_equal(h.modular_sum, total)
        np.testing.assert_array_equal(h.mean, pipe.decode(total, num_clients=h.num_aggregated))
    assert h2.epsilon == pytest.approx(independent_epsilon(strategy, 2, tmp_path), rel=1e-12)  # 4 shares, then 5


def test_simulation_more_dropouts_than_secagg_tolerates(tmp_path):
    # Threshold 4 of 5 shares: two clients lost before their masked vectors leave 3 and SecAgg+ halts round 1.
    strategy, globals_ = simulate(tmp_path, rounds=2, clip_norm=1.0, noise_multiplier=1.0, bits=16, threshold=4,
                                  drops={(1, 0): "collect_masked_vectors", (1, 1): "collect_masked_vectors"})
    h1, h2 = strategy.history
    assert (h1.status, h1.num_aggregated, h1.epsilon) == ("halted", 0, 0.0)
    np.testing.assert_array_equal(globals_[1][0], globals_[0][0])  # nothing applied
    assert (h2.status, h2.num_aggregated) == ("aggregated", NODES)
    assert h2.epsilon == pytest.approx(independent_epsilon(strategy, 2, tmp_path), rel=1e-12)  # round 1 costs nothing


def test_simulation_adaptive_clipping_and_target_epsilon(tmp_path):
    clipping = AdaptiveClipping(target_quantile=0.5, learning_rate=0.2)
    strategy, _ = simulate(tmp_path, rounds=3, clip_norm=1.0, target_epsilon=8.0, num_rounds=3, bits=20,
                           adaptive_clipping=clipping)
    for r, h in enumerate(strategy.history, start=1):
        words, configs = recorded(tmp_path, r)
        lattice = configs[0]["dprec.ddp.count-lattice"]
        # The noisy count reveals only its sum; the clip norm moves by exp(-0.2 (fraction - 0.5)).
        count = int(np.sum([w[1][0] for w in words])) % 2**20
        count = count - 2**20 if count >= 2**19 else count
        assert h.unclipped_fraction == pytest.approx(min(max(count / lattice / NODES, 0.0), 1.0), abs=1e-12)
        assert h.next_clip_norm == pytest.approx(h.clip_norm * math.exp(-0.2 * (h.unclipped_fraction - 0.5)))
        if r > 1:
            assert h.clip_norm == strategy.history[r - 2].next_clip_norm
        assert h.noise_stddev == pytest.approx(strategy.client_noise_multiplier * h.clip_norm, rel=1e-12)
    # The calibration: 3 rounds reach target_epsilon (within its tolerance), not more.
    assert 7.9 < strategy.epsilon <= 8.0 * (1 + 1e-5)


def test_simulation_mean_squared_error_matches_the_closed_form(tmp_path):
    """Over 12 Flower rounds of 5 clients (512 parameters), the squared error of the server's decoded mean against
    the mean of the clipped updates matches the pipeline's closed form (noise plus rounding), within 5 standard
    deviations of its estimate (about 9%); 8-bit words make the rounding term a tenth of the total."""
    rounds, dim = 12, 512
    strategy, globals_ = simulate(tmp_path, rounds=rounds, dim=dim, clip_norm=1.0, noise_multiplier=0.3, bits=8)
    measured = expected = 0.0
    for r in range(1, rounds + 1):
        h = strategy.history[r - 1]
        pipe = pipeline_from_config(recorded(tmp_path, r)[1][0])
        # The clients' updates against the global model they trained from (float32 arithmetic, as they did it).
        base = globals_[r - 1][0]
        updates = [(base + client_update(p, dim)).astype(np.float32).astype(np.float64) - base for p in range(NODES)]
        measured += float(np.sum((h.mean - pipe.noiseless_mean(updates)) ** 2))
        expected += pipe.expected_mse(updates)
        assert pipe.noise_mse(NODES) < pipe.expected_mse(updates)
    ratio = measured / expected
    assert abs(ratio - 1.0) < 5 * math.sqrt(2.0 / (rounds * dim)), ratio


# --------------------------------------------------------------------------- configure_fit, in process


def configure(strategy, connected: int, *, threshold=2, dim=DIM, server_round=1):
    """One configure_fit of ``strategy`` with ``connected`` clients registered, under its own workflow."""
    from flwr.server.client_manager import SimpleClientManager

    from dprec.flower._inprocess import _Proxy

    manager = SimpleClientManager()
    for node in range(1, connected + 1):
        manager.register(_Proxy(node))
    strategy._workflow = strategy.secagg_workflow(1.0, threshold)  # every client shares with all
    try:
        return strategy.configure_fit(server_round, ndarrays_to_parameters([np.zeros(dim, np.float32)]), manager)
    finally:
        strategy._workflow = None


def test_configure_fit_accounts_the_rate_among_the_connected_clients():
    strategy = DistributedDPStrategy(FedAvg(fraction_fit=1.0, min_fit_clients=2, min_available_clients=2),
                                     clip_norm=1.0, delta=DELTA, noise_multiplier=1.0, num_clients=10)
    out = configure(strategy, 5)
    assert len(out) == 5 and strategy._rounds[1].num_clients == 5  # sampled at 5/5, not 5/10
    config = out[0][1].config
    assert pipeline_from_config(config).num_clients == 5 and config["dprec.ddp.bits"] == 20


@pytest.mark.parametrize(
    "kwargs, connected, threshold, match",
    [
        # 60 clients' rounding alone would wrap at 37 standard deviations of head-room in 8 bits
        ({"bits": 8, "wrap_probability": 1e-300}, 60, 2, "too few for num_clients"),
        ({"bits": 8, "noise_multiplier": 1e-4}, 5, 2, "integer noise"),  # below the floor of the DDG bound
        ({"bits": 10, "adaptive_clipping": AdaptiveClipping(quantile_noise=100.0)}, 5, 2, "clipping count"),
        ({}, 5, 6, "reconstruction_threshold=6"),
        ({}, 1, 2, "at least 2 clients"),
    ],
)
def test_configure_fit_refuses_before_sending(kwargs, connected, threshold, match):
    fedavg = FedAvg(fraction_fit=1.0, min_fit_clients=1, min_available_clients=1)
    strategy = DistributedDPStrategy(fedavg, **{"clip_norm": 1.0, "delta": DELTA, "noise_multiplier": 1.0, **kwargs})
    with pytest.raises(ValueError, match=match):
        configure(strategy, connected, threshold=threshold)
    assert not strategy._rounds


def test_configure_fit_calibrates_above_the_noise_floor():
    # At 8 bits a loose target needs little noise: the solver must treat the region below the DDG floor as
    # epsilon = inf (no bound), not fail, and leave the strategy's noise unset until it succeeds.
    fedavg = FedAvg(fraction_fit=1.0, min_fit_clients=2, min_available_clients=2)
    strategy = DistributedDPStrategy(fedavg, clip_norm=1.0, delta=DELTA, target_epsilon=500.0, num_rounds=1, bits=8)
    out = configure(strategy, 5)
    pipe = pipeline_from_config(out[0][1].config)
    assert pipe.integer_noise_stddev >= 0.5
    acc = Accountant(threat_model="server").compose(strategy._event(pipe, 5, 1.0, 0))
    assert 490.0 < acc.get_epsilon(DELTA) <= 500.0 * (1 + 1e-5)


def run_round(strategy, server_round, words, *, corrupt=0.0, failures=()):
    """aggregate_fit of a configured round, with the float aggregate SecAgg+ computes from ``words``."""
    from dprec.flower._inprocess import _Proxy

    plan = strategy._rounds[server_round]
    aggregate = flower_secure_sum(words, plan.pipeline.bits) + corrupt
    fit = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([aggregate]), 1, {})
    return strategy.aggregate_fit(server_round, [(_Proxy(node), fit) for node in plan.nodes[:len(words)]],
                                  list(failures))


def test_aggregate_fit_applies_fails_and_discards():
    fedavg = FedAvg(fraction_fit=1.0, min_fit_clients=2, min_available_clients=2, accept_failures=False)
    strategy = DistributedDPStrategy(fedavg, clip_norm=1.0, delta=DELTA, noise_multiplier=1.0, keep_sums=True)
    updates = [client_update(p) for p in range(3)]
    history = []
    for r, corrupt, failures in ((1, 0.0, ()), (2, 0.5, ()), (3, 0.0, (RuntimeError("a dropout"),))):
        out = configure(strategy, 3, server_round=r)
        pipe = pipeline_from_config(out[0][1].config)
        words = [pipe.encode(u) for u in updates[: 2 if failures else 3]]
        params, metrics = run_round(strategy, r, words, corrupt=corrupt, failures=failures)
        h = strategy.history[-1]
        history.append((h.status, params is None, metrics["dprec-clients"]))
        assert h.epsilon == metrics["dprec-epsilon"] > 0
        for observer in ("server", "messages", "central"):  # one bound for all: each sees at most the server's view
            assert metrics[f"dprec-epsilon.{observer}.zero"] == h.epsilon
            assert metrics[f"dprec-epsilon.{observer}.add_remove"] == math.inf
        if r == 1:
            np.testing.assert_array_equal(h.mean, pipe.decode(modular_sum(np.stack(words), pipe.bits), num_clients=3))
            np.testing.assert_array_equal(parameters_to_ndarrays(params)[0], h.mean.astype(np.float32))
    # Round 2's aggregate is not a sum of words: nothing applied, but accounted (the sum was revealed). Round 3:
    # FedAvg(accept_failures=False) discards the round after a dropout: nothing applied, accounted, recorded so.
    assert history == [("aggregated", False, 3), ("failed", True, 3), ("discarded", True, 2)]
    assert strategy.history[0].epsilon < strategy.history[1].epsilon < strategy.history[2].epsilon
    assert "not a sum of integers" in strategy.history[1].reason
    assert "returned no parameters" in strategy.history[2].reason
