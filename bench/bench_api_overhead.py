"""Per-call cost of the public API on small inputs, where validation and dispatch dominate.

Each row times one public call on a small host input (median of ``--repeat`` batches) and
divides it by an anchor measured in the same run: one ``numpy.dot`` of two 256-element
float64 vectors, a call that does almost nothing but cross the Python/C boundary. The
ratios, not the microseconds, are what to compare between runs or machines.

    python bench/bench_api_overhead.py [--repeat 15] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import dprec
from dprec import philox, rec
from dprec.transforms import hadamard, sketch


def _per_call_us(fn: Callable[[], object], calls: int, repeat: int) -> float:
    fn()  # warm up (imports, caches)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times) * 1e6


def cases() -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    phi = rng.standard_normal(256).astype(np.float32)
    lg = rec.logits(phi, 1, 0, 4, sigma=1.0)
    acc = np.zeros(256, dtype=np.float32)
    seeds, idx = np.arange(4, dtype=np.uint64), np.arange(4, dtype=np.uint32)
    x256 = rng.standard_normal(256)
    rh = hadamard.RandomizedHadamard(200, seed=3)
    x200 = rng.standard_normal(200)
    cs = sketch.CountSketch(256, 5, 32, seed=4)
    table = cs.encode(x256)
    update = {"a": rng.standard_normal((16, 8)).astype(np.float32), "b": rng.standard_normal(32).astype(np.float32)}
    codec = dprec.DPRECCodec(sigma=0.1, bits=4)
    msg = codec.encode(update, seed=5, rng=np.random.default_rng(1))
    msgs = [codec.encode(update, seed=s, rng=np.random.default_rng(s)) for s in range(4)]
    gen = np.random.default_rng(2)
    return {
        "philox.normals(256)": lambda: philox.normals(7, 256),
        "rec.candidate(256)": lambda: rec.candidate(1, 0, 3, 256, sigma=0.5),
        "rec.logits(256, bits=4)": lambda: rec.logits(phi, 1, 0, 4, sigma=1.0),
        "rec.sample_index(16)": lambda: rec.sample_index(lg, rng=gen),
        "rec.accumulate(256, 4 clients)": lambda: rec.accumulate(acc, 0, seeds, idx, sigma=0.1),
        "hadamard.fwht(256)": lambda: hadamard.fwht(x256),
        "RandomizedHadamard.forward(200)": lambda: rh.forward(x200),
        "CountSketch.encode(256)": lambda: cs.encode(x256),
        "CountSketch.decode(256)": lambda: cs.decode(table),
        "DPRECCodec.encode(2 tensors, 160)": lambda: codec.encode(update, rng=gen),
        "DPRECCodec.decode(2 tensors)": lambda: codec.decode(msg, update),
        "DPRECCodec.aggregate(4 msgs)": lambda: codec.aggregate(msgs, update),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    a, b = np.ones(256), np.ones(256)
    anchor = _per_call_us(lambda: np.dot(a, b), args.calls, args.repeat)
    print(f"anchor numpy.dot(256): {anchor:.3f} us per call")
    print(f"{'call':36s} {'us/call':>9s} {'x anchor':>9s}")
    for name, fn in cases().items():
        us = _per_call_us(fn, max(args.calls // 10, 50), args.repeat)
        print(f"{name:36s} {us:9.2f} {us / anchor:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
