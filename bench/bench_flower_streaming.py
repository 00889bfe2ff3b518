#!/usr/bin/env python
"""One Flower server round at many clients: DP-REC streamed against Flower's float32 FedAvg (time and peak memory).

Usage::

    python bench/bench_flower_streaming.py                          # 1,000 clients x 10^6 parameters
    python bench/bench_flower_streaming.py --clients 4 --params 1000  # a smoke run (a second or two per row)
    python bench/bench_flower_streaming.py --json round.json        # also save the rows

Each row is one server round, ``strategy.start(grid=..., initial_arrays=..., num_rounds=1)``, run in a
process of its own (a child of this script), so that its peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``)
is that row's alone. The rows:

* **DP-REC, streamed**: ``DPRECStrategy(FedAvg(fraction_train=1.0), codec, delta=1e-5)`` (adaptive clipping
  on, the default): its ``start`` wraps the grid so that each pulled batch is decoded into the round's
  float64 sums as it arrives; ``aggregate_train`` only settles the round.
* **DP-REC, streamed, fixed clip norm**: the same with ``adaptive_clipping=False`` (no quantile bits).
* **DP-REC, all replies at once**: the same strategy driven by Flower's plain ``Strategy.start`` (no
  streaming grid): the replies are collected first, as Flower hands them to ``aggregate_train``, which
  then decodes all of them.
* **FedAvg, float32**: Flower's ``FedAvg`` and ``start``, replies carrying a float32 ``ArrayRecord``.

The grid (:class:`LazyGrid`) is a fake: ``push_messages`` keeps the train messages and ``pull_messages``
answers at most ``--batch`` of them per call, each reply made when it is pulled (the grid holds no
reply), with the metadata a real reply has (``Message(content, reply_to=train_message)``: the node,
``reply_to_message_id``). A DP-REC reply is what ``dprec_mod`` sends: a ``ConfigRecord`` named
``"dprec"`` holding a well-formed DP-REC message for the round's layout (read from the train config,
as a client does) with a fresh random seed and random indices, plus the noisy quantile bit under
adaptive clipping, and a ``MetricRecord``; decoding it costs exactly what decoding a trained client's
message costs (encoding 1,000 real updates would take the run's time). A FedAvg reply is a float32
``ArrayRecord`` whose bytes are a fresh copy (what a reply deserialized from the wire owns) of one of
4 precomputed serialized updates, plus a ``MetricRecord``. One genuine ``DPRECCodec.encode`` is timed in
this process for reference (a client's cost, not the server's). Evaluation is off
(``fraction_evaluate=0``).

Each child first runs a warm-up round on a tiny model (imports, caches), then builds the model, the codec
and the strategy, resets its RSS high-water mark (``/proc/self/clear_refs``, Linux) and runs the round.
Columns: the round's wall time (configure + pushes + pulls + aggregate, as ``start`` runs them), of which
the fake clients' reply generation (inside the pulls, not the server's work), decoding during the pulls
(DP-REC streamed) and ``aggregate_train`` (the time from the last reply to the new model); RSS before the
round, the peak RSS and their difference; bytes per client on the wire (``DPRECRound.wire_bytes``,
the reply's serialized ``ConfigRecord``; FedAvg: :func:`dprec.flower.wire_nbytes` of its ``ArrayRecord``).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

STRATEGIES = {
    "dprec": "DP-REC, streamed (adaptive clipping)",
    "dprec-fixed": "DP-REC, streamed (fixed clip norm)",
    "dprec-at-once": "DP-REC, all replies at once",
    "fedavg": "FedAvg, float32",
}
TENSOR = "layer.weight"
DELTA = 1e-5
SIGMA, CLIP_MULTIPLIER = 0.01, 0.5  # the docs' example codec (clip norm C = 0.005)
POOL = 4  # FedAvg: distinct serialized float32 updates the replies are copied from


def shape_of(params: int) -> tuple[int, ...]:
    """One tensor of ``params`` elements: square where ``params`` is a square (10^6: 1000 x 1000)."""
    side = math.isqrt(params)
    return (side, side) if side * side == params else (params,)


# ---------------------------------------------------------------------------------------------- the fake grid


def _grid_base() -> type:
    from flwr.serverapp import Grid

    return Grid


class LazyGrid(_grid_base()):  # type: ignore[misc]
    """A Grid of ``num_nodes`` nodes whose replies are made when pulled, at most ``batch`` per pull.

    ``answer(train_message)`` makes one reply; the time spent in it is ``generate_s`` (the clients'
    side, not the server's). ``send_and_receive`` pushes and pulls as Flower's ``InMemoryGrid`` does,
    without sleeping between pulls that returned replies.
    """

    def __init__(self, num_nodes: int, answer: Callable[[Any], Any], batch: int = 50) -> None:
        from flwr.supercore.run import Run

        self._nodes = list(range(1001, 1001 + num_nodes))
        self._answer = answer
        self.batch = int(batch)
        self.pull_interval = 0.0
        self._pending: dict[str, Any] = {}
        self._run = Run.create_empty(1)
        self.pulls = 0
        self.generate_s = 0.0

    def set_run(self, run: Any) -> None:
        self._run = run

    @property
    def run(self) -> Any:
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: ANN001, ANN201
        from flwr.app import Message

        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self._nodes)

    def push_messages(self, messages: Iterable[Any]) -> Iterable[str]:
        ids = []
        for m in messages:
            mid = uuid.uuid4().hex  # as InMemoryGrid does
            m.metadata.__dict__["_message_id"] = mid
            self._pending[mid] = m
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Any]:
        self.pulls += 1
        ready = []
        for mid in message_ids:
            if mid in self._pending:
                ready.append(mid)
                if len(ready) == self.batch:
                    break
        t = time.perf_counter()
        replies = [self._answer(self._pending.pop(mid)) for mid in ready]
        self.generate_s += time.perf_counter() - t
        return replies

    def send_and_receive(self, messages: Iterable[Any], *, timeout: float | None = None) -> Iterable[Any]:
        waiting = set(self.push_messages(messages))
        del messages
        end = time.time() + (timeout if timeout is not None else 0.0)
        replies: list[Any] = []
        while waiting and (timeout is None or time.time() < end):
            batch = list(self.pull_messages(waiting))
            replies.extend(batch)
            waiting.difference_update(m.metadata.reply_to_message_id for m in batch)
            if not batch:
                time.sleep(self.pull_interval)
        return replies


def dprec_answer(rng: np.random.Generator) -> Callable[[Any], Any]:
    """What a client's ``dprec_mod`` replies: a well-formed DP-REC message of the round's layout (from the train
    config, as the client reads it) with a fresh seed and random indices, the noisy quantile bit when the config
    asks for one, and the train metrics."""
    from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

    from dprec.flower import CONFIG_QUANTILE_NOISE, MESSAGE_KEY, QUANTILE_BIT_KEY, RECORD_KEY, codec_from_config
    from dprec.flower._adaptive import noisy_bit
    from dprec.rec.codec import DPRECMessage

    layouts: dict[tuple, tuple[Any, np.ndarray, float | None]] = {}

    def answer(train: Any) -> Any:
        config = train.content.config_records["config"]
        key = tuple(sorted(config.items()))
        if key not in layouts:
            arrays = train.content.array_records["arrays"]
            # The layout needs the names and shapes only: zero-strided views, no memory.
            template = {k: np.broadcast_to(np.float32(0), tuple(a.shape)) for k, a in arrays.items()}
            layout = codec_from_config(config).layout(template)
            layouts[key] = (layout, np.array(layout.bits), config.get(CONFIG_QUANTILE_NOISE))
        layout, bits, noise = layouts[key]
        message = DPRECMessage(
            seed=int(rng.integers(0, 2**64, dtype=np.uint64)),
            bits=layout.bits,
            indices=rng.integers(0, 1 << bits).tolist(),
            layout_digest=layout.digest,
        )
        record = ConfigRecord({MESSAGE_KEY: message.to_bytes()})
        if noise is not None:
            record[QUANTILE_BIT_KEY] = float(noisy_bit(bool(rng.random() < 0.5), noise))  # as dprec_mod sends it
        metrics = MetricRecord({"num-examples": int(rng.integers(50, 150)), "train-loss": float(rng.random())})
        return Message(RecordDict({RECORD_KEY: record, "metrics": metrics}), reply_to=train)

    return answer


def float32_answer(rng: np.random.Generator, global_w: np.ndarray) -> tuple[Callable[[Any], Any], list]:
    """A FedAvg client's reply: a float32 ArrayRecord (a fresh copy of one of ``POOL`` serialized updates) and
    the train metrics. Returns the reply maker and the pool (to keep it alive before the round)."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

    pool = [
        Array((global_w + np.float32(0.01) * rng.standard_normal(global_w.shape, dtype=np.float32)))
        for _ in range(POOL)
    ]
    count = [0]

    def answer(train: Any) -> Any:
        a = pool[count[0] % POOL]
        count[0] += 1
        data = memoryview(a.data).tobytes()  # the reply owns its bytes, as one deserialized from the wire does
        arrays = ArrayRecord({TENSOR: Array(dtype=a.dtype, shape=tuple(a.shape), stype=a.stype, data=data)})
        metrics = MetricRecord({"num-examples": int(rng.integers(50, 150)), "train-loss": float(rng.random())})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=train)

    return answer, pool


# ---------------------------------------------------------------------------------------------- one row (child)


def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _rss_mib() -> float:
    kib = _status_kib("VmRSS")
    return float("nan") if kib is None else kib / 1024


def _maxrss_mib() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20  # bytes on macOS


def _reset_peak() -> bool:
    """Reset the RSS high-water mark (ru_maxrss, VmHWM) to the current RSS: Linux's clear_refs 5."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _timed(obj: Any, name: str, totals: dict[str, float]) -> None:
    """Shadow ``obj.name`` by a wrapper that adds its time to ``totals[name]``."""
    fn = getattr(obj, name)
    totals[name] = 0.0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] += time.perf_counter() - t

    setattr(obj, name, wrapper)


def _setup(kind: str, clients: int, params: int, bits: int, max_group_size: int, batch: int, seed: int):
    """(strategy, grid, initial arrays, how to start the round, what to keep alive) for one row."""
    from flwr.app import Array, ArrayRecord
    from flwr.serverapp.strategy import FedAvg, Strategy

    from dprec import DPRECCodec
    from dprec.flower import DPRECStrategy

    rng = np.random.default_rng(seed)
    global_w = np.float32(0.05) * rng.standard_normal(shape_of(params), dtype=np.float32)
    initial = ArrayRecord({TENSOR: Array(global_w)})
    fedavg = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=clients, min_train_nodes=clients)
    keep: list = []
    if kind == "fedavg":
        answer, pool = float32_answer(rng, global_w)
        keep.append(pool)
        strategy: Any = fedavg
        start = strategy.start
    else:
        answer = dprec_answer(rng)
        codec = DPRECCodec(sigma=SIGMA, clip_multiplier=CLIP_MULTIPLIER, bits=bits, max_group_size=max_group_size)
        strategy = DPRECStrategy(fedavg, codec, delta=DELTA, num_rounds=1, adaptive_clipping=kind != "dprec-fixed")
        # Flower's own loop, without DPRECStrategy.start's streaming grid: aggregate_train gets every reply.
        start = strategy.start if kind != "dprec-at-once" else (lambda **kw: Strategy.start(strategy, **kw))
    del global_w
    grid = LazyGrid(clients, answer, batch)
    return strategy, grid, initial, start, keep


def child(cfg: dict) -> dict:
    import logging

    from flwr.supercore.task_identity import TaskIdentity

    logging.getLogger("flwr").setLevel(logging.WARNING)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0  # as in a ServerApp process
    kind = cfg["strategy"]
    common = dict(bits=cfg["bits"], max_group_size=cfg["max_group_size"], batch=cfg["batch"])

    # Warm-up: a round on a tiny model, so that imports and first-call caches are not in the measured round.
    strategy, grid, initial, start, keep = _setup(kind, 2, 64, seed=cfg["seed"] + 1, **common)
    start(grid=grid, initial_arrays=initial, num_rounds=1)
    del strategy, grid, initial, start, keep

    strategy, grid, initial, start, keep = _setup(kind, cfg["clients"], cfg["params"], seed=cfg["seed"], **common)
    totals: dict[str, float] = {}
    _timed(strategy, "configure_train", totals)
    _timed(strategy, "aggregate_train", totals)
    if kind != "fedavg":
        _timed(strategy, "_receive", totals)
    gc.collect()
    reset = _reset_peak()
    before = _rss_mib()  # after the reset: the peak is at least this
    t = time.perf_counter()
    result = start(grid=grid, initial_arrays=initial, num_rounds=1)
    wall = time.perf_counter() - t
    peak = _maxrss_mib()

    new = result.arrays[TENSOR].numpy()
    assert new.shape == shape_of(cfg["params"]) and np.isfinite(new).all()
    row = {
        "strategy": kind,
        "label": STRATEGIES[kind],
        "clients": cfg["clients"],
        "params": cfg["params"],
        "wall_s": wall,
        "generate_s": grid.generate_s,
        "configure_s": totals["configure_train"],
        "aggregate_s": totals["aggregate_train"],
        "pulls": grid.pulls,
        "rss_before_mib": before,
        "peak_rss_mib": peak,
        "peak_minus_before_mib": peak - before,
        "peak_reset": reset,
    }
    if kind == "fedavg":
        from flwr.app import Array, ArrayRecord

        from dprec.flower import wire_nbytes

        row["server_s"] = wall - grid.generate_s
        row["decode_in_pulls_s"] = 0.0
        record = ArrayRecord({TENSOR: Array(np.zeros(shape_of(cfg["params"]), np.float32))})
        row["wire_bytes"] = wire_nbytes(record, "arrays")
        row["aggregated"] = cfg["clients"]
    else:
        stats = strategy.history[-1]
        assert stats.num_aggregated == cfg["clients"] and stats.num_rejected == 0, stats
        assert stats.streamed == (kind != "dprec-at-once")
        # Under Strategy.start the decoding happens inside aggregate_train (its _receive call).
        row["decode_in_pulls_s"] = totals["_receive"] if stats.streamed else 0.0
        row["decode_s"] = totals["_receive"]
        row["server_s"] = wall - grid.generate_s
        row["wire_bytes"] = int(np.mean(stats.wire_bytes))
        row["message_bytes"] = int(np.mean(stats.message_bytes))
        row["float32_wire_bytes"] = stats.float32_wire_bytes
        row["aggregated"] = stats.num_aggregated
        row["clip_norm"], row["next_clip_norm"] = stats.clip_norm, stats.next_clip_norm
    return row


# ---------------------------------------------------------------------------------------------- the table (parent)


def genuine_encode(params: int, bits: int, max_group_size: int) -> dict:
    """One client's encode of a random update (for reference: the client's cost, and the message size)."""
    from dprec import DPRECCodec

    codec = DPRECCodec(sigma=SIGMA, clip_multiplier=CLIP_MULTIPLIER, bits=bits, max_group_size=max_group_size)
    rng = np.random.default_rng(0)
    update = {TENSOR: rng.standard_normal(shape_of(params), dtype=np.float32)}
    update[TENSOR] *= np.float32(codec.clip_norm / np.linalg.norm(update[TENSOR]))
    codec.encode(update)  # warm-up
    t = time.perf_counter()
    message = codec.encode(update)
    seconds = time.perf_counter() - t
    layout = codec.layout(update)
    assert message.nbytes == layout.message_nbytes
    return {
        "encode_s": seconds,
        "message_bytes": message.nbytes,
        "groups": layout.num_groups,
        "total_bits": layout.total_bits,
    }


def run_child(cfg: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(cfg)],
        capture_output=True,
        text=True,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{cfg['strategy']} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return json.loads(lines[-1][4:])


def machine() -> dict:
    import flwr

    import dprec
    from dprec import runtime
    from dprec.bench import cpu_model

    mem = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            mem = int(f.readline().split()[1]) / 2**20  # MemTotal, GiB
    except (OSError, ValueError, IndexError):
        pass
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "memory_gib": mem,
        "isa": runtime.get_isa(),
        "threads": runtime.get_num_threads(),
        "dprec": dprec.__version__,
        "flwr": flwr.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _mib(x: float) -> str:
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def table(rows: list[dict]) -> str:
    from _timing import markdown_table  # noqa: PLC0415 - bench/ is on sys.path when the script runs

    headers = [
        "strategy",
        "round (s)",
        "of which clients (s)",
        "server (s)",
        "decode in pulls (s)",
        "aggregate_train (s)",
        "RSS before (MiB)",
        "peak RSS (MiB)",
        "peak - before (MiB)",
        "bytes/client",
    ]
    cells = []
    for r in rows:
        cells.append(
            [
                r["label"],
                f"{r['wall_s']:.2f}",
                f"{r['generate_s']:.2f}",
                f"{r['server_s']:.2f}",
                f"{r['decode_in_pulls_s']:.2f}",
                f"{r['aggregate_s']:.2f}",
                _mib(r["rss_before_mib"]),
                _mib(r["peak_rss_mib"]),
                _mib(r["peak_minus_before_mib"]),
                f"{r['wire_bytes']:,}",
            ]
        )
    return markdown_table(headers, cells)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--params", type=int, default=10**6, help="one float32 tensor (square where a square)")
    p.add_argument("--bits", type=int, default=7, help="bits per group of the DP-REC codec")
    p.add_argument("--max-group-size", type=int, default=4096)
    p.add_argument("--batch", type=int, default=50, help="replies per pull")
    p.add_argument("--strategies", nargs="+", choices=list(STRATEGIES), default=list(STRATEGIES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="also save the machine and the rows as JSON")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print("ROW " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0

    info = machine()
    enc = genuine_encode(args.params, args.bits, args.max_group_size)
    print(
        f"### Flower server round: {args.clients:,} clients x {args.params:,} parameters "
        f"(one float32 tensor {'x'.join(map(str, shape_of(args.params)))})"
    )
    print(
        f"dprec {info['dprec']}, flwr {info['flwr']}, NumPy {info['numpy']}, Python {info['python']}; "
        f"CPU: {info['cpu']} ({info['machine']}), {info['cores']} cores, "
        + (f"{info['memory_gib']:.0f} GiB RAM, " if info["memory_gib"] else "")
        + f"ISA {info['isa']}, {info['threads']} threads"
    )
    print(
        f"DP-REC codec: sigma {SIGMA}, clip multiplier {CLIP_MULTIPLIER}, {args.bits} bits per group, "
        f"max group size {args.max_group_size}: {enc['groups']} groups, {enc['message_bytes']}-byte messages; "
        f"one client's encode {enc['encode_s']:.3f} s (not in the round). Pulls of {args.batch} replies."
    )
    rows = []
    for kind in args.strategies:
        cfg = dict(
            strategy=kind,
            clients=args.clients,
            params=args.params,
            bits=args.bits,
            max_group_size=args.max_group_size,
            batch=args.batch,
            seed=args.seed,
        )
        print(f"  running {STRATEGIES[kind]} ...", file=sys.stderr, flush=True)
        rows.append(run_child(cfg))
    print()
    print(table(rows))
    print()
    by = {r["strategy"]: r for r in rows}
    if "fedavg" in by:
        f = by["fedavg"]
        for kind in ("dprec", "dprec-fixed", "dprec-at-once"):
            if kind in by:
                r = by[kind]
                memory = ""
                if f["peak_minus_before_mib"] >= 1.0:  # too small to compare in a smoke run
                    memory = f", peak - before {r['peak_minus_before_mib'] / f['peak_minus_before_mib']:.3f}x"
                print(
                    f"{STRATEGIES[kind]} vs FedAvg: server time {r['server_s'] / f['server_s']:.2f}x{memory}, "
                    f"{f['wire_bytes'] / r['wire_bytes']:,.0f}x fewer bytes per client"
                )
    if not all(r["peak_reset"] for r in rows):
        print("note: the RSS high-water mark could not be reset here: peak RSS includes each process's start-up")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "machine": info,
                    "encode": enc,
                    "args": {k: v for k, v in vars(args).items() if k != "child"},
                    "rows": rows,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
