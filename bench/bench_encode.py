#!/usr/bin/env python
"""DP-REC encode benchmark (docs/benchmarks.md): the ``dprec bench`` table, plus optional sweeps.

Usage::

    python bench/bench_encode.py                    # the same table as `dprec bench`
    python bench/bench_encode.py --threads 1        # single thread (dprec and torch)
    python bench/bench_encode.py --quick            # tiny sizes, a smoke run
    python bench/bench_encode.py --per-isa          # + native encode/generate/decode per SIMD ISA
    python bench/bench_encode.py --thread-sweep     # + native encode at 1..ncores threads
    python bench/bench_encode.py --small-update     # + a small update's encode (the targets' last row)
    python bench/bench_encode.py --only-sweeps --per-isa --thread-sweep --small-update

Every option of ``dprec bench`` is accepted (``--sizes``, ``--repeat``, ``--extra``, ``--json``...).
The sweeps run at d = 2**``--sweep-d`` (default 20) and K = 2**7 and also check that every
ISA decodes bit-identical candidates.

``--small-update`` times ``DPRECCodec(bits=7).encode`` of the 64-32-10 MLP of ``dprec demo``
(2,410 parameters in 4 tensors: fc1.weight (32, 64), fc1.bias (32,), fc2.weight (10, 32),
fc2.bias (10,)) on 1 and 2 threads, interleaved with the large-d anchor (``rec.logits`` at
d = 2**20, K = 2**7) on the same thread count, and prints the encode time over the time of its
K*d = 128 x 2,410 candidate-elements at the anchor's rate (target <= 1.3x); then encode of one
tensor of d = 2**8 .. 2**20 elements on 2 threads over 1 thread (target: never above 1; flagged
above 1.03, the noise between equal runs).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

from dprec import DPRECCodec, bench, rec, runtime
from dprec._runtime import native as _native


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
    before = runtime.get_isa_setting()
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


# the targets' last row: a small update's encode over its K*d candidate-elements at the large-d rate.
SMALL_UPDATE_TARGET = 1.3
# 2 threads over 1 above which a size counts as slower on 2 threads: sizes that the kernel runs on
# one thread whatever the setting measure 0.98x-1.02x from noise alone.
_NOISE_BAND = 1.03
_MLP_SHAPES = {"fc1.weight": (32, 64), "fc1.bias": (32,), "fc2.weight": (10, 32), "fc2.bias": (10,)}


def _per_call(fn, min_time: float) -> tuple[int, float]:
    """(calls per measurement of about ``min_time`` seconds, the first call's seconds)."""
    fn()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, int(min_time / max(dt, 1e-9))), dt


def _interleaved(cases: dict, repeat: int, min_time: float) -> dict:
    """Median seconds per call of each ``name -> (threads, fn)``, the cases taking turns (the
    thread count set before each turn), so that load from elsewhere hits all of them alike."""
    calls = {}
    for name, (threads, fn) in cases.items():
        runtime.set_num_threads(threads)
        calls[name] = _per_call(fn, min_time)[0]
    times: dict = {name: [] for name in cases}
    for _ in range(repeat):
        for name, (threads, fn) in cases.items():
            runtime.set_num_threads(threads)
            n = calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(v) for name, v in times.items()}


def small_update(repeat: int, quick: bool) -> bool:
    """The small-update section; returns whether every target held."""
    before = runtime.get_num_threads()
    rng = np.random.default_rng(7)
    update = {name: (rng.standard_normal(shape) * 1e-3).astype(np.float32) for name, shape in _MLP_SHAPES.items()}
    d = sum(int(np.prod(shape)) for shape in _MLP_SHAPES.values())
    bits, k = 7, 1 << 7
    codec = DPRECCodec(sigma=0.01, bits=bits, backend="cpu")
    gen = np.random.default_rng(1)
    big_log2 = 16 if quick else 20
    big = (rng.standard_normal(1 << big_log2) * 1e-5).astype(np.float32)
    min_time = 0.02 if quick else 0.1
    ok = True
    print(f"\nSmall update: DPRECCodec(bits={bits}).encode of a 64-32-10 MLP (d = {d:,} in 4 tensors, "
          f"K*d = {k * d:,}), CPU: {platform.processor() or platform.machine()}, ISA={runtime.get_isa()}")
    print(f"anchor: rec.logits at d = 2^{big_log2}, K = 2^{bits}, same thread count, interleaved")
    print(f"{'threads':>7} | {'encode ms':>9} | {'anchor G/s':>10} | {'K*d at anchor ms':>16} | {'ratio':>6} | target")
    try:
        cases = {}
        for t in (1, 2):
            cases[f"encode{t}"] = (t, lambda: codec.encode(update, rng=gen))
            cases[f"anchor{t}"] = (t, lambda: rec.logits(big, 99, 0, bits, sigma=0.01, backend="cpu"))
        times = _interleaved(cases, max(repeat, 5), min_time)
        for t in (1, 2):
            rate = k * big.size / times[f"anchor{t}"]
            ideal = k * d / rate
            ratio = times[f"encode{t}"] / ideal
            ok = ok and ratio <= SMALL_UPDATE_TARGET
            print(f"{t:>7} | {times[f'encode{t}'] * 1e3:>9.3f} | {rate / 1e9:>10.3f} | {ideal * 1e3:>16.3f} | "
                  f"{ratio:>5.2f}x | {'ok' if ratio <= SMALL_UPDATE_TARGET else 'MISSED'} (<= {SMALL_UPDATE_TARGET}x)")
        scaling = times["anchor1"] / times["anchor2"]
        print(f"anchor speed-up on 2 threads: {scaling:.2f}x"
              f"{'' if scaling >= 1.7 else ' (the second core was busy elsewhere: 2-thread rows are not meaningful)'}")
        print(f"\nOne tensor of d elements, K = 2^{bits}: DPRECCodec.encode on 2 threads over 1 thread "
              f"(target <= 1; flagged above {_NOISE_BAND}, the noise of equal runs)")
        print(f"{'d':>6} | {'1 thread ms':>11} | {'2 threads ms':>12} | {'2t / 1t':>7}")
        for log2 in range(8, (15 if quick else 21), 2 if quick else 1):
            x = (rng.standard_normal(1 << log2) * 1e-3).astype(np.float32)

            def fn(x: np.ndarray = x) -> None:
                codec.encode(x, rng=gen)

            sweep = _interleaved({"1": (1, fn), "2": (2, fn)}, max(repeat, 5), min_time)
            r = sweep["2"] / sweep["1"]
            ok = ok and r <= _NOISE_BAND
            print(f"{'2^' + str(log2):>6} | {sweep['1'] * 1e3:>11.3f} | {sweep['2'] * 1e3:>12.3f} | {r:>6.2f}x"
                  f"{'' if r <= _NOISE_BAND else '  slower on 2 threads'}")
    finally:
        runtime.set_num_threads(before)
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.add_arguments(p)
    p.add_argument("--per-isa", action="store_true", help="compare native kernels on every available ISA")
    p.add_argument("--thread-sweep", action="store_true", help="native encode at 1..ncores threads")
    p.add_argument("--small-update", action="store_true", help="a small update's encode against the large-d rate")
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
    if args.small_update:
        small_update(args.repeat or 7, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
