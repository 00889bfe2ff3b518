#!/usr/bin/env python
"""QMGeo on the CPU: quantize + pack (the client) and unpack + accumulate (the server), docs/qmgeo.md.

Usage::

    python bench/bench_qmgeo.py              # n = 2^16, 2^20, 2^22 (~1 min on 2 cores)
    python bench/bench_qmgeo.py --quick      # n = 2^16 and 2^20, 3 repeats (~15 s)

**Client** (elements per second, ``n / time``): ``qmgeo.quantize`` then ``qmgeo.pack`` of a
float64 vector (Gaussian, 1% of it outside ``[-w_max, w_max]``), for several ``(R, p)``:

* **dprec**: the native backend with every core, and with one thread
  (``dprec.runtime.set_num_threads(1)``);
* **reference**: ``backend="reference"``, dprec's pure-NumPy implementation of the same
  quantizer (vectorised NumPy: Philox in uint32 arithmetic, the deterministic log in float64
  ufuncs), the anchor of the ratio columns;
* stage columns: the native quantize and pack alone (every core).

**Server** (client-elements per second, ``clients * n / time``): ``QMGeoCodec.aggregate`` of
``--clients`` messages (unpack fused with the float64 weighted sum, then one float32 rounding),
native against the reference backend.

``identical`` says whether the native and reference outputs of the timed calls (indices, packed
bytes, aggregates) are bit-identical; the script exits non-zero otherwise. Each cell is the
median of ``--repeat`` measurements of at least ``--min-time`` seconds; methods are interleaved
(round-robin), so a noisy neighbour slows all of them alike. Rates in millions per second.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from _timing import markdown_table, mrate, progress, round_robin  # bench/_timing.py
from dprec import qmgeo, runtime
from dprec.bench import cpu_model, package_version

W_MAX = 1.0
# (R, p): plain stochastic rounding, the paper's settings (p = 0.9, R = 8 and 16), more spread, the largest R.
CONFIGS = [(8, 1.0), (8, 0.9), (16, 0.9), (256, 0.5), (65536, 0.9)]


def update(n: int, seed: int = 7) -> np.ndarray:
    """A Gaussian vector scaled so that about 1% of it lies outside [-W_MAX, W_MAX] (clipped)."""
    return np.random.default_rng(seed).normal(0.0, W_MAX / 2.576, n)


def client_row(n: int, levels: int, p: float, args: argparse.Namespace, threads: int) -> tuple[list[str], bool]:
    w = update(n)
    seed_rng = 11

    def native() -> np.ndarray:
        idx = qmgeo.quantize(w, W_MAX, levels, p, rng=np.random.default_rng(seed_rng), backend="cpu")
        return qmgeo.pack(idx, levels, backend="cpu")

    def native_1t() -> np.ndarray:
        runtime.set_num_threads(1)
        try:
            return native()
        finally:
            runtime.set_num_threads(threads)

    def reference() -> np.ndarray:
        idx = qmgeo.quantize(w, W_MAX, levels, p, rng=np.random.default_rng(seed_rng), backend="reference")
        return qmgeo.pack(idx, levels, backend="reference")

    indices = qmgeo.quantize(w, W_MAX, levels, p, rng=np.random.default_rng(seed_rng), backend="cpu")

    def quantize_only() -> np.ndarray:
        return qmgeo.quantize(w, W_MAX, levels, p, rng=np.random.default_rng(seed_rng), backend="cpu")

    def pack_only() -> np.ndarray:
        return qmgeo.pack(indices, levels, backend="cpu")

    methods = [("native", native), ("native_1t", native_1t), ("reference", reference),
               ("quantize", quantize_only), ("pack", pack_only)]
    med, last = round_robin(methods, args.repeat, args.min_time)
    same = bool(np.array_equal(last["native"], last["reference"]) and np.array_equal(last["native"], last["native_1t"]))
    row = [
        f"2^{int(math.log2(n))}", str(levels), f"{p:g}", str(qmgeo.index_bits(levels)),
        mrate(n, med["native"]), mrate(n, med["native_1t"]), mrate(n, med["reference"]),
        f"{med['reference'] / med['native']:.1f}x", f"{med['reference'] / med['native_1t']:.1f}x",
        mrate(n, med["quantize"]), mrate(n, med["pack"]), "yes" if same else "NO",
    ]
    return row, same


def server_row(n: int, levels: int, p: float, args: argparse.Namespace) -> tuple[list[str], bool]:
    template = np.zeros(n, np.float32)
    cpu = qmgeo.QMGeoCodec(W_MAX, levels, p, backend="cpu")
    ref = qmgeo.QMGeoCodec(W_MAX, levels, p, backend="reference")
    rng = np.random.default_rng(5)
    msgs = [cpu.encode(update(n, seed=100 + c), rng=rng) for c in range(args.clients)]

    def native() -> np.ndarray:
        return cpu.aggregate(msgs, template)

    def reference() -> np.ndarray:
        return ref.aggregate(msgs, template)

    med, last = round_robin([("native", native), ("reference", reference)], args.repeat, args.min_time)
    same = bool(np.array_equal(last["native"], last["reference"]))
    total = args.clients * n
    row = [
        f"2^{int(math.log2(n))}", str(levels), f"{p:g}", str(args.clients),
        mrate(total, med["native"]), mrate(total, med["reference"]),
        f"{med['reference'] / med['native']:.1f}x", "yes" if same else "NO",
    ]
    return row, same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2-n", type=int, nargs="+", default=None, help="client vector sizes (default 16 20 22)")
    ap.add_argument("--server-log2-n", type=int, default=16, help="server vector size (default 16)")
    ap.add_argument("--clients", type=int, default=100, help="messages aggregated by the server table")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.1, help="seconds per measurement (default 0.1)")
    ap.add_argument("--threads", type=int, default=None, help="threads of the 'native' column (default: all)")
    ap.add_argument("--quick", action="store_true", help="n = 2^16 and 2^20, 3 repeats")
    args = ap.parse_args(argv)
    if args.log2_n is None:
        args.log2_n = [16, 20] if args.quick else [16, 20, 22]
    if args.quick:
        args.repeat = min(args.repeat, 3)
    before = runtime.get_num_threads()
    threads = args.threads or before
    runtime.set_num_threads(threads)
    t_start = time.perf_counter()
    ok = True
    try:
        print(f"dprec {package_version()} on {cpu_model()}, ISA {runtime.get_isa()}, {threads} threads")
        print()
        rows = []
        for log2_n in args.log2_n:
            for levels, p in CONFIGS if log2_n == 20 else [(8, 0.9)]:
                row, same = client_row(1 << log2_n, levels, p, args, threads)
                rows.append(row)
                ok &= same
                progress(f"client n=2^{log2_n} R={levels} p={p}", t_start)
        print("### Client: quantize + pack, M elements/s = n / time (float64 input, w_max = 1)")
        print()
        print(markdown_table(
            ["n", "R", "p", "bits", f"dprec {threads}t", "dprec 1t", "reference", f"{threads}t / ref", "1t / ref",
             "quantize only", "pack only", "identical"], rows))
        print()
        srows = []
        for levels, p in [(8, 0.9), (65536, 0.9)]:
            row, same = server_row(1 << args.server_log2_n, levels, p, args)
            srows.append(row)
            ok &= same
            progress(f"server R={levels}", t_start)
        print("### Server: QMGeoCodec.aggregate, M client-elements/s = clients * n / time")
        print()
        print(markdown_table(["n", "R", "p", "clients", f"dprec {threads}t", "reference", "dprec / ref", "identical"],
                             srows))
        print()
        print(f"native vs reference bit-identical: {'OK' if ok else 'MISMATCH'}")
    finally:
        runtime.set_num_threads(before)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
