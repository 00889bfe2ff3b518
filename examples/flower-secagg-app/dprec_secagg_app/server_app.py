"""ServerApp: flwr.server.strategy.FedAvg wrapped by DistributedDPStrategy, run by Flower's DefaultWorkflow with
the strategy's SecAgg+ workflow."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import numpy as np
from flwr.common import Context, ndarrays_to_parameters
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow

import dprec
from dprec.flower import DistributedDPStrategy
from dprec_secagg_app import task

NAMES = ("weight", "bias")

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    num_rounds = int(cfg["num-server-rounds"])
    out = str(cfg["out"])
    snapshots: dict[int, list[np.ndarray]] = {}

    def evaluate_fn(server_round: int, ndarrays: list[np.ndarray], config: dict) -> None:
        # Called by the legacy workflow before round 1 (round 0) and after each round: keep the global arrays and
        # print the round's epsilon.
        snapshots[server_round] = [np.array(a, copy=True) for a in ndarrays]
        stats = next((h for h in strategy.history if h.server_round == server_round), None)
        if stats is not None:
            print(f"round {server_round}: {stats.status}, {stats.num_aggregated} clients summed, "
                  f"epsilon = {stats.epsilon:.3f} at delta = {strategy.delta:g} against the server")
        return None

    fedavg = FedAvg(
        fraction_fit=float(cfg["fraction-train"]),
        min_fit_clients=int(cfg["min-train-nodes"]),
        min_available_clients=int(cfg["min-nodes"]),  # the accounting's N: wait for every node
        fraction_evaluate=float(cfg["fraction-evaluate"]),
        initial_parameters=ndarrays_to_parameters([task.initial_arrays()[k] for k in NAMES]),
        evaluate_fn=evaluate_fn,
    )
    strategy = DistributedDPStrategy(
        fedavg,
        mechanism=str(cfg["mechanism"]),
        bits=int(cfg["bits"]),
        clip_norm=float(cfg["clip-norm"]),
        noise_multiplier=float(cfg["noise-multiplier"]),
        delta=float(cfg["delta"]),
        num_clients=int(cfg["min-nodes"]),
        keep_sums=bool(out),
    )
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=num_rounds), strategy=strategy)
    workflow = strategy.secagg_workflow(int(cfg["num-shares"]), int(cfg["reconstruction-threshold"]))
    DefaultWorkflow(fit_workflow=workflow)(grid, legacy)
    if out:
        _write_record(Path(out), strategy, snapshots)


def _array(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _write_record(path: Path, strategy: DistributedDPStrategy, snapshots: dict[int, list[np.ndarray]]) -> None:
    """What the server saw, for checking: per round the global arrays before and after, the modular sum SecAgg+
    revealed, the decoded mean and the round's public parameters."""
    rounds = []
    for h in strategy.history:
        r = h.server_round
        rounds.append({
            "round": r, "status": h.status, "num_sampled": h.num_sampled, "num_aggregated": h.num_aggregated,
            "clip_norm": h.clip_norm, "noise_stddev": h.noise_stddev, "granularity": h.granularity, "bits": h.bits,
            "seed": h.seed, "epsilon": h.epsilon,
            "before": [_array(v) for v in snapshots[r - 1]], "after": [_array(v) for v in snapshots[r]],
            "modular_sum": _array(h.modular_sum), "mean": _array(h.mean),
        })
    record = {"dprec_file": dprec.__file__, "prefix": sys.prefix, "mechanism": strategy.mechanism,
              "delta": strategy.delta, "rounds": rounds}
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)  # the file appears complete or not at all
