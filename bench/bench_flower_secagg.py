#!/usr/bin/env python
"""Distributed DP over Flower's SecAgg+ in a real Flower simulation (Ray): error against the closed form, bytes
on the wire per client and round, and the per-round cost on the clients and the server.

Usage::

    python bench/bench_flower_secagg.py                                # 5 clients x 10^4 parameters, 10 rounds
    python bench/bench_flower_secagg.py --dim 100000 --rounds 3        # a larger model
    python bench/bench_flower_secagg.py --clients 3 --dim 256 --rounds 2 --configs ddg:16   # a smoke run

Each configuration (``mechanism:bits``) is one ``flwr.simulation.run_simulation`` of ``--clients`` NumPyClients
whose ``fit`` returns ``global + u_i`` (a fixed update per client, norms 0.3 to 1.5 at clip norm 1, so one is
clipped) through ``mods=[meter, secaggplus_mod, meter, distributed_dp_mod, meter]``, the server running
``DistributedDPStrategy(FedAvg(fraction_fit=1), ...)`` under ``DefaultWorkflow(fit_workflow=
strategy.secagg_workflow(num_shares=clients, reconstruction_threshold=clients // 2 + 1))``.

* **Error**: per round, ``||decoded mean - noiseless mean||^2`` (the strategy's ``keep_sums`` mean against
  ``pipeline.noiseless_mean`` of the clients' updates, rebuilt from the round's config), summed over rounds,
  against the closed form ``pipeline.expected_mse`` (noise plus rounding), with its noise and rounding parts.
* **Bytes**: Flower's protobuf size of each message's content (``recorddict_to_proto``), per SecAgg+ stage,
  server to client and back, averaged over clients and rounds; beside them the float32 ``FitRes`` a plain
  FedAvg client sends (the ``FitIns`` is the same for both).
* **Cost**: client side, the time inside ``distributed_dp_mod`` less the app's ``fit`` (clip, rotate, round,
  noise) and inside ``secaggplus_mod`` less the inner mods (keys, shares, masks), summed over the 4 stages;
  server side, the wall time of the SecAgg+ round (all four stages, with the simulated clients' work in it:
  one machine) and the strategy's decode.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import platform
import tempfile
import time

import numpy as np


def _update(partition: int, dim: int) -> np.ndarray:
    rng = np.random.default_rng(100 + partition)
    u = rng.normal(size=dim)
    return u / np.linalg.norm(u) * (0.3 + 0.3 * partition)


def _meter(directory: str, name: str):
    """A client mod that logs, per message, its stage, the time spent below it and the content sizes."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
    from flwr.common.serde import recorddict_to_proto

    def mod(msg, ctx, call_next):
        cfg = msg.content.config_records.get(RECORD_KEY_CONFIGS)
        # secaggplus_mod pops the stage before calling the inner mods: only the masked-vector stage reaches them.
        stage = (None if cfg is None else cfg.get("stage")) if name == "outer" else "collect_masked_vectors"
        size_in = recorddict_to_proto(msg.content).ByteSize() if name == "outer" else 0
        start = time.perf_counter()
        reply = call_next(msg, ctx)
        seconds = time.perf_counter() - start
        size_out = recorddict_to_proto(reply.content).ByteSize() if name == "outer" and not reply.has_error() else 0
        if msg.metadata.message_type != "train":
            return reply
        line = {"round": int(msg.metadata.group_id or 0), "node": int(ctx.node_id), "stage": stage, "meter": name,
                "seconds": seconds, "in": size_in, "out": size_out}
        with open(pathlib.Path(directory) / f"{ctx.node_id}.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
        return reply

    return mod


def run_config(mechanism: str, bits: int, args: argparse.Namespace) -> dict:
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.common import ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerApp, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow
    from flwr.simulation import run_simulation

    from dprec.flower import DistributedDPStrategy, distributed_dp_mod

    dim, clients = args.dim, args.clients
    directory = tempfile.mkdtemp(prefix="dprec-ddp-bench-")

    class Fixed(NumPyClient):
        def __init__(self, partition):
            self.partition = partition

        def fit(self, parameters, config):
            return [(parameters[0] + _update(self.partition, dim)).astype(np.float32)], 10, {}

    def client_fn(context):
        return Fixed(int(context.node_config["partition-id"])).to_client()

    out: dict = {"globals": {}, "round_seconds": []}

    def central(server_round, parameters, config):
        out["globals"][server_round] = np.array(parameters[0])
        return None

    app = ServerApp()

    @app.main()
    def main(grid, context):
        fedavg = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients,
                        min_available_clients=clients, evaluate_fn=central,
                        initial_parameters=ndarrays_to_parameters([np.zeros(dim, np.float32)]))
        strategy = DistributedDPStrategy(fedavg, mechanism=mechanism, bits=bits, clip_norm=1.0, delta=1e-5,
                                         noise_multiplier=args.noise_multiplier, keep_sums=True)
        workflow = strategy.secagg_workflow(clients, clients // 2 + 1)

        def timed(grid, context):
            start = time.perf_counter()
            workflow(grid, context)
            out["round_seconds"].append(time.perf_counter() - start)

        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=args.rounds), strategy=strategy)
        DefaultWorkflow(fit_workflow=timed)(grid, legacy)
        out["strategy"] = strategy

    mods = [_meter(directory, "outer"), secaggplus_mod, _meter(directory, "inner"), distributed_dp_mod,
            _meter(directory, "app")]
    run_simulation(server_app=app, client_app=ClientApp(client_fn=client_fn, mods=mods), num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": os.cpu_count() or 2}})
    strategy = out["strategy"]
    lines = [json.loads(x) for f in pathlib.Path(directory).glob("*.jsonl") for x in f.read_text().splitlines()]

    # Error against the closed form, per round.
    measured = noise = rounding = 0.0
    from dprec.secagg import DDGPipeline, SkellamPipeline

    cls = DDGPipeline if mechanism == "ddg" else SkellamPipeline
    for h in strategy.history:
        pipe = cls(dim, clip=h.clip_norm, bits=bits, num_clients=h.num_sampled, seed=h.seed,
                   noise_stddev=h.noise_stddev, granularity=h.granularity)
        base = out["globals"][h.server_round - 1]
        updates = [(base + _update(p, dim)).astype(np.float32).astype(np.float64) - base for p in range(clients)]
        measured += float(np.sum((h.mean - pipe.noiseless_mean(updates)) ** 2))
        total = pipe.expected_mse(updates)
        noise += pipe.noise_mse(h.num_aggregated)
        rounding += total - pipe.noise_mse(h.num_aggregated)

    def per_stage(meter: str, key: str) -> dict:
        sums: dict = {}
        for x in lines:
            if x["meter"] == meter and x["stage"] is not None:
                sums[x["stage"]] = sums.get(x["stage"], 0.0) + x[key]
        per = clients * args.rounds
        return {k: v / per for k, v in sums.items()}

    outer, inner, app_s = per_stage("outer", "seconds"), per_stage("inner", "seconds"), per_stage("app", "seconds")
    secagg_client = sum(outer.values()) - sum(inner.values())
    ddp_client = sum(inner.values()) - sum(app_s.values())
    import flwr.compat.common.recorddict_compat as compat
    from flwr.common import Code, FitRes, Status
    from flwr.common.serde import recorddict_to_proto

    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.zeros(dim, np.float32)]), 10, {})
    float32_bytes = recorddict_to_proto(compat.fitres_to_recorddict(fitres, keep_input=True)).ByteSize()
    return {
        "config": f"{mechanism}:{bits}", "rounds": len(strategy.history), "padded_dim": strategy.history[0].padded_dim,
        "measured_mse": measured, "expected_mse": noise + rounding, "noise_mse": noise, "rounding_mse": rounding,
        "epsilon": strategy.epsilon, "bytes_in": per_stage("outer", "in"), "bytes_out": per_stage("outer", "out"),
        "float32_fitres_bytes": float32_bytes, "client_ddp_s": ddp_client, "client_secagg_s": secagg_client,
        "client_fit_s": sum(app_s.values()),
        "server_round_s": float(np.mean(out["round_seconds"])),
        "server_decode_s": float(np.mean([h.decode_seconds for h in strategy.history])),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=5)
    p.add_argument("--dim", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--noise-multiplier", type=float, default=1.0)
    p.add_argument("--configs", default="ddg:16,ddg:20,skellam:16,ddg:10")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rows = []
    for item in args.configs.split(","):
        mechanism, bits = item.split(":")
        rows.append(run_config(mechanism, int(bits), args))
    print(f"\nDistributed DP over Flower SecAgg+: {args.clients} clients, {args.dim} parameters, {args.rounds} rounds, "
          f"noise multiplier {args.noise_multiplier}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores")
    print("\n| config | rounds | measured MSE | closed form | ratio | noise part | rounding part | epsilon |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        sd = math.sqrt(2.0 / (r["rounds"] * args.dim))
        print(f"| {r['config']} | {r['rounds']} | {r['measured_mse']:.5g} | {r['expected_mse']:.5g} | "
              f"{r['measured_mse'] / r['expected_mse']:.4f} (+-{sd:.3f}) | {r['noise_mse']:.5g} | "
              f"{r['rounding_mse']:.3g} | {r['epsilon']:.3g} |")
    print("\nBytes per client per round (Flower's protobuf size of the message content), by SecAgg+ stage:")
    print("\n| config | stage | server -> client | client -> server |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        for stage, size in r["bytes_in"].items():
            print(f"| {r['config']} | {stage} | {size:,.0f} | {r['bytes_out'].get(stage, 0):,.0f} |")
        total_in, total_out = sum(r["bytes_in"].values()), sum(r["bytes_out"].values())
        print(f"| {r['config']} | **all 4** | {total_in:,.0f} | {total_out:,.0f} "
              f"({total_out / r['float32_fitres_bytes']:.2f} x the float32 FitRes, {r['float32_fitres_bytes']:,} B) |")
    print("\nCost per round (means):")
    print("\n| config | client: distributed_dp_mod | client: secaggplus_mod | client: fit | server: SecAgg+ round "
          "(wall, simulated clients included) | server: decode |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['config']} | {1e3 * r['client_ddp_s']:.2f} ms | {1e3 * r['client_secagg_s']:.1f} ms | "
              f"{1e3 * r['client_fit_s']:.2f} ms | {r['server_round_s']:.2f} s | {1e3 * r['server_decode_s']:.2f} ms |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
