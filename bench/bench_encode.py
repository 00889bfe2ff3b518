#!/usr/bin/env python
"""DP-REC encode benchmark (SPEC §8): the ``dprec bench`` table, plus optional sweeps.

Usage::

    python bench/bench_encode.py                    # the same table as `dprec bench`
    python bench/bench_encode.py --threads 1        # single thread (dprec and torch)
    python bench/bench_encode.py --quick            # tiny sizes, a smoke run
    python bench/bench_encode.py --per-isa          # + native encode/generate/decode per SIMD ISA
    python bench/bench_encode.py --thread-sweep     # + native encode at 1..ncores threads
    python bench/bench_encode.py --only-sweeps --per-isa --thread-sweep

Every option of ``dprec bench`` is accepted (``--sizes``, ``--repeat``, ``--extra``, ``--json``...).
The sweeps run at d = 2**``--sweep-d`` (default 20) and K = 2**7 and also check that every
ISA decodes bit-identical candidates.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from dprec import _native, bench, rec, runtime


def _time(fn, repeat: int) -> float:
    return bench.median_time(fn, repeat, warm_up=True)


def _encode_gen_decode(d: int, bits: int, repeat: int) -> tuple[float, float, float]:
    core = _native.native()
    k = 1 << bits
    phi = (np.random.default_rng(1).standard_normal(d) * 1e-5).astype(np.float32)
    buf = np.empty(min(d, 1 << 20), dtype=np.float32)

    def encode() -> None:
        rec.sample_index(rec.logits(phi, 99, 0, bits, sigma=0.01, backend="cpu"), backend="cpu")

    def gen() -> None:
        for s in range(k):
            for i0 in range(0, d, buf.size):
                n = min(buf.size, d - i0)
                core.stream_normals(99, s, 0, 0, i0, 1.0, buf[:n])

    def decode() -> None:
        rec.candidate(99, 0, k - 1, d, sigma=0.01, backend="cpu")

    return _time(encode, repeat), _time(gen, repeat), _time(decode, 2 * repeat + 1)


def per_isa(d_log2: int, bits: int, repeat: int) -> None:
    d, k = 1 << d_log2, 1 << bits
    before = runtime.get_isa()
    print(f"\nPer-ISA native kernels at d=2^{d_log2}, K=2^{bits}, threads={runtime.get_num_threads()}")
    print(f"{'ISA':>10} | {'encode M/s':>10} {'gen M/s':>10} {'LLR/gen':>8} | {'decode ms':>9} | bit-identical to reference")
    ref = rec.candidate(7, 1, 5, min(d, 1 << 16), sigma=0.5, backend="reference").view(np.uint32)
    try:
        for isa in runtime.available_isas():
            runtime.set_isa(isa)
            enc, gen, dec = _encode_gen_decode(d, bits, repeat)
            same = np.array_equal(rec.candidate(7, 1, 5, ref.size, sigma=0.5, backend="cpu").view(np.uint32), ref)
            print(
                f"{isa:>10} | {k * d / enc / 1e6:>10.1f} {k * d / gen / 1e6:>10.1f} {enc / gen:>7.2f}x |"
                f" {dec * 1e3:>9.3f} | {'yes' if same else 'NO'}"
            )
    finally:
        runtime.set_isa(before)


def thread_sweep(d_log2: int, bits: int, repeat: int) -> None:
    d, k = 1 << d_log2, 1 << bits
    before = runtime.get_num_threads()
    ncores = os.cpu_count() or 1
    print(f"\nThread scaling of native encode at d=2^{d_log2}, K=2^{bits}, ISA={runtime.get_isa()}")
    print(f"{'threads':>7} | {'encode M/s':>10} {'speed-up':>8}")
    base = None
    try:
        for t in sorted({1, 2, max(1, ncores // 2), ncores}):
            runtime.set_num_threads(t)
            enc, _, _ = _encode_gen_decode(d, bits, repeat)
            rate = k * d / enc
            base = base or rate
            print(f"{t:>7} | {rate / 1e6:>10.1f} {rate / base:>7.2f}x")
    finally:
        runtime.set_num_threads(before)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.add_arguments(p)
    p.add_argument("--per-isa", action="store_true", help="compare native kernels on every available ISA")
    p.add_argument("--thread-sweep", action="store_true", help="native encode at 1..ncores threads")
    p.add_argument("--only-sweeps", action="store_true", help="skip the main table")
    p.add_argument("--sweep-d", type=int, default=20, help="log2(d) of the sweeps (default 20)")
    args = p.parse_args(argv)
    if not args.only_sweeps:
        bench.run_from_args(args)
    sweep_repeat = args.repeat or (1 if args.quick else 3)
    sweep_d = 14 if args.quick and args.sweep_d == 20 else args.sweep_d
    if args.threads is not None and (args.per_isa or args.thread_sweep):
        runtime.set_num_threads(args.threads)
    if args.per_isa:
        per_isa(sweep_d, 7, sweep_repeat)
    if args.thread_sweep:
        thread_sweep(sweep_d, 7, sweep_repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
