"""ServerApp (legacy API): flwr.server.strategy.FedAvg wrapped by DPRECLegacyStrategy, in the legacy Server."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import numpy as np
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg

import dprec
from dprec import DPRECCodec
from dprec.flower import DPRECLegacyStrategy
from dprec_legacy_app import task

NAMES = ("weight", "bias")  # the order of the model's arrays in the legacy list of ndarrays


def server_fn(context: Context) -> ServerAppComponents:
    cfg = context.run_config
    num_rounds = int(cfg["num-server-rounds"])
    out = str(cfg["out"])
    codec = DPRECCodec(
        sigma=float(cfg["sigma"]),
        clip_multiplier=float(cfg["clip-multiplier"]),
        bits=int(cfg["bits"]),
        max_group_size=int(cfg["max-group-size"]),
    )
    # Flower's legacy server calls evaluate_fn with the global ndarrays before round 1 (round 0) and
    # after each round (after the strategy's aggregate_fit): it prints each round's epsilon, keeps the
    # arrays, and after the last round writes the record.
    snapshots: dict[int, list[np.ndarray]] = {}

    def evaluate_fn(server_round: int, ndarrays: list[np.ndarray], config: dict) -> None:
        snapshots[server_round] = [np.array(a, copy=True) for a in ndarrays]
        stats = next((h for h in strategy.history if h.server_round == server_round), None)
        if stats is not None:
            print(
                f"round {server_round}: epsilon = {stats.epsilon:.3f} at delta = {strategy.delta:g}, "
                f"{max(stats.wire_bytes, default=0)} bytes per client on the wire vs {stats.float32_wire_bytes} as float32"
            )
        if out and server_round == num_rounds:
            _write_record(Path(out), strategy, snapshots)
        return None  # no centralized loss: the snapshot is all it does

    fedavg = FedAvg(
        fraction_fit=float(cfg["fraction-train"]),
        min_fit_clients=int(cfg["min-train-nodes"]),
        min_available_clients=int(cfg["min-nodes"]),  # the accounting's N: wait for every node
        fraction_evaluate=float(cfg["fraction-evaluate"]),
        min_evaluate_clients=1,
        initial_parameters=ndarrays_to_parameters([task.initial_arrays()[k] for k in NAMES]),
        evaluate_fn=evaluate_fn,
    )
    strategy = DPRECLegacyStrategy(
        fedavg, codec, delta=float(cfg["delta"]), num_rounds=num_rounds, keep_messages=bool(out)
    )
    return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=num_rounds))


app = ServerApp(server_fn=server_fn)


def _array(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _write_record(path: Path, strategy: DPRECLegacyStrategy, snapshots: dict[int, list[np.ndarray]]) -> None:
    """What the server saw, for checking: per round the global arrays before and after and the messages.

    The legacy strategy's arrays are a list: DP-REC lays them out as "0", "1", ... in that order.
    """
    rounds = []
    for stats in strategy.history:
        r = stats.server_round
        rounds.append(
            {
                "round": r,
                "before": {str(i): _array(v) for i, v in enumerate(snapshots[r - 1])},
                "after": {str(i): _array(v) for i, v in enumerate(snapshots[r])},
                "messages": [base64.b64encode(b).decode("ascii") for b in stats.messages],
                "num_sampled": stats.num_sampled,
                "num_available": stats.num_available,
                "num_aggregated": stats.num_aggregated,
                "num_rejected": stats.num_rejected,
                "num_failed": stats.num_failed,
                "epsilon": stats.epsilon,
                "sigma": stats.sigma,  # adaptive clipping: sigma = C_t / c, the round's clip norm over c
                "clip_norm": stats.clip_norm,
                "next_clip_norm": stats.next_clip_norm,
                "delta": stats.delta,
            }
        )
    record = {
        "dprec_file": dprec.__file__,
        "dprec_version": dprec.__version__,
        "python": sys.executable,
        "prefix": sys.prefix,
        "codec": {
            "sigma": strategy.codec.sigma,
            "clip_multiplier": strategy.codec.clip_multiplier,
            "bits": strategy.codec.bits,
            "max_group_size": strategy.codec.max_group_size,
        },
        # The quantile bits' noise the accountant composed (the legacy wrapper has no quantile_noise of its own).
        "quantile_noise": strategy.accountant.quantile_noise,
        "rounds": rounds,
    }
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)  # the file appears complete or not at all
