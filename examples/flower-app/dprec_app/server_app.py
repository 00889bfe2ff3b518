"""ServerApp: FedAvg's sampling wrapped by DPRECStrategy, which decodes, averages and accounts."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import dprec
from dprec import DPRECCodec
from dprec.flower import DPRECStrategy
from dprec_app import task

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    num_rounds = int(cfg["num-server-rounds"])
    out = str(cfg["out"])
    fedavg = FedAvg(
        fraction_train=float(cfg["fraction-train"]),
        min_train_nodes=int(cfg["min-train-nodes"]),
        min_available_nodes=int(cfg["min-nodes"]),  # the accounting's N: wait for every node
        fraction_evaluate=float(cfg["fraction-evaluate"]),
        min_evaluate_nodes=1,
    )
    codec = DPRECCodec(
        sigma=float(cfg["sigma"]),
        clip_multiplier=float(cfg["clip-multiplier"]),
        bits=int(cfg["bits"]),
        max_group_size=int(cfg["max-group-size"]),
    )
    strategy = DPRECStrategy(fedavg, codec, delta=float(cfg["delta"]), keep_messages=bool(out))

    # Flower calls evaluate_fn with the global arrays before round 1 (round 0) and after each round.
    snapshots: dict[int, dict[str, np.ndarray]] = {}

    def snapshot(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        snapshots[server_round] = {k: a.numpy().copy() for k, a in arrays.items()}
        return None

    initial = ArrayRecord({k: Array(v) for k, v in task.initial_arrays().items()})
    result = strategy.start(
        grid=grid, initial_arrays=initial, num_rounds=num_rounds, evaluate_fn=snapshot if out else None
    )
    for rnd, m in sorted(result.train_metrics_clientapp.items()):
        print(
            f"round {rnd}: epsilon = {m['dprec-epsilon']:.3f} at delta = {strategy.delta:g}, "
            f"{m['dprec-wire-bytes']} bytes per client on the wire vs {m['float32-wire-bytes']} as float32"
        )
    if out:
        _write_record(Path(out), strategy, snapshots)


def _array(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _write_record(path: Path, strategy: DPRECStrategy, snapshots: dict[int, dict[str, np.ndarray]]) -> None:
    """What the server saw, for checking: per round the global arrays before and after and the messages."""
    rounds = []
    for stats in strategy.history:
        r = stats.server_round
        rounds.append(
            {
                "round": r,
                "before": {k: _array(v) for k, v in snapshots[r - 1].items()},
                "after": {k: _array(v) for k, v in snapshots[r].items()},
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
        "quantile_noise": strategy.quantile_noise,
        "rounds": rounds,
    }
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)  # the file appears complete or not at all
