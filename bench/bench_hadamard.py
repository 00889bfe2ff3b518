#!/usr/bin/env python
"""FWHT float32 on the CPU: dprec against FFHT (docs/benchmarks.md).

Usage::

    python bench/bench_hadamard.py                      # n = 2**10 .. 2**24
    python bench/bench_hadamard.py --log2-n 16 20 24 --repeat 7

Compares, in one run and on the same data:

* **FFHT**: ``ffht.fht_(buf)`` from PyPI ``ffht-unofficial`` (in place, unnormalised).
  On a 1-D vector it is single-threaded (its ``nthreads`` only splits the rows of a 2-D
  batch), so it is the anchor of both targets.
* **dprec 1T / dprec NT**: the native kernel ``dprec._core.fwht(buf, n, False)`` (in place,
  unnormalised) with ``dprec.runtime.set_num_threads(1)`` and ``(N)``, N = ``--threads``
  (default: every core).
* **norm NT** and **public NT** (``--no-public`` drops them): the native kernel with
  ``normalize=True``, and the public ``dprec.transforms.hadamard.fwht(buf, inplace=True,
  normalize=True)`` (which also checks dtype, layout and finiteness); ``API ovh`` is public
  over native at the same settings. Normalised, because the public function rejects the
  infinities that repeated unnormalised transforms produce.

Speed-ups are FFHT time / dprec time (higher is better). Targets: >= 1.0x single thread at
every n, and >= 1.6x with N threads (against FFHT's single thread) at n >= 2**18.

Method: first, for every n, dprec's unnormalised result is checked against FFHT's (relative
L2 error < 1e-5) and the public function against the native kernel. Then each cell is the
median of ``--repeat`` measurements; a measurement restores the 64-byte-aligned buffer
from a pristine copy (untimed) and times ``k`` back-to-back in-place calls, ``k`` chosen
so that a measurement lasts >= ``--min-time`` (20 ms). The methods of a row are timed
round-robin, so that load from elsewhere hits all of them alike. Repeated unnormalised
transforms overflow to inf/NaN for small n; this does not change the speed of either
library (SIMD add/sub on inf/NaN runs at full rate; no denormals can arise).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

from dprec import _core, runtime
from dprec.bench import cpu_model, package_version
from dprec.transforms.hadamard import fwht

SINGLE_TARGET = 1.0
MULTI_TARGET = 1.6
MULTI_FROM_LOG2 = 18
AGREE_TOL = 1e-5


def aligned_empty(n: int, dtype: type = np.float32, align: int = 64) -> np.ndarray:
    """An uninitialised 1-D array of ``n`` elements whose data is ``align``-byte aligned."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + n * itemsize].view(dtype)


def calls_per_measurement(fn: Callable[[], object], min_time: float) -> int:
    """Back-to-back calls needed for a measurement of at least ``min_time`` seconds."""
    fn()
    k = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return k
        k = max(k + 1, int(math.ceil(k * 1.2 * min_time / max(dt, 1e-9))))


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-300))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-n", type=int, nargs="*", default=list(range(10, 25)))
    parser.add_argument("--threads", type=int, default=0, help="threads of the multi-thread columns (0: every core)")
    parser.add_argument("--repeat", type=int, default=5, help="measurements per cell, median reported")
    parser.add_argument("--min-time", type=float, default=0.02, help="seconds per measurement (at least one call)")
    parser.add_argument("--no-public", action="store_true", help="skip the normalised native and public-API columns")
    args = parser.parse_args()

    try:
        import ffht  # noqa: PLC0415
    except ImportError as exc:
        print(
            f"FFHT is not importable ({exc}); install it with "
            "`pip install ffht-unofficial --no-build-isolation`.",
            file=sys.stderr,
        )
        return 1

    nt = args.threads or os.cpu_count() or 1
    runtime.set_num_threads(nt)
    nt = runtime.get_num_threads()
    sizes = sorted(set(args.log2_n))
    t_start = time.perf_counter()

    print(f"dprec {package_version()} FWHT float32 benchmark (CPU) against FFHT (ffht-unofficial, 1-D: single thread)")
    print(
        f"CPU: {cpu_model()} | ISA: {runtime.get_isa()} (FWHT kernels: {runtime.fwht_isa()}) | cores: {os.cpu_count()} | N = {nt} threads | "
        f"numpy {np.__version__}"
    )
    print(f"caches: {runtime.cache_summary()} (blocking derives from these)")
    print(f"median of {args.repeat} measurements of >= {args.min_time * 1e3:g} ms each, methods round-robin per row")
    print()

    # ---- agreement first
    worst = 0.0
    worst_pub = 0.0
    rng = np.random.default_rng(0)
    for lg in sizes:
        n = 1 << lg
        x = rng.standard_normal(n).astype(np.float32)
        a = aligned_empty(n)
        a[...] = x
        ffht.fht_(a)
        b = aligned_empty(n)
        b[...] = x
        _core.fwht(b, n, False)
        worst = max(worst, rel_l2(b, a))
        c = x.copy()
        fwht(c, inplace=True, normalize=False)
        worst_pub = max(worst_pub, float(np.max(np.abs(c - b))) / float(np.max(np.abs(b))))
    agree_ok = worst < AGREE_TOL and worst_pub < AGREE_TOL
    print(
        f"agreement: dprec unnormalised vs FFHT, worst relative L2 over n = 2^{sizes[0]}..2^{sizes[-1]}: "
        f"{worst:.2e} (tolerance {AGREE_TOL:g}); public fwht vs native max rel diff {worst_pub:.1e} -> "
        f"{'OK' if agree_ok else 'FAIL'}"
    )
    print()

    cols = ["FFHT 1T", "dprec 1T", f"dprec {nt}T"]
    if not args.no_public:
        cols += [f"norm {nt}T", f"public {nt}T"]
    header = (
        f"{'n':>5} | " + " ".join(f"{c:>10}" for c in cols) + f" | {'1T/FFHT':>8} {f'{nt}T/FFHT':>8}"
        + (f" {'API ovh':>8}" if not args.no_public else "") + f" | {'FFHT GB/s':>9} {f'{nt}T GB/s':>8}"
    )
    print("time per transform in microseconds; speed-ups = FFHT time / dprec time (higher is better)")
    print(header)
    print("-" * len(header))

    results: list[tuple[int, float, float]] = []
    for lg in sizes:
        n = 1 << lg
        pristine = np.random.default_rng(lg).standard_normal(n).astype(np.float32)
        buf = aligned_empty(n)
        buf[...] = pristine

        def f_ffht() -> None:
            ffht.fht_(buf)

        def f_native() -> None:
            _core.fwht(buf, n, False)

        def f_norm() -> None:
            _core.fwht(buf, n, True)

        def f_public() -> None:
            fwht(buf, inplace=True, normalize=True)

        # (name, threads, fn)
        methods: list[tuple[str, int, Callable[[], None]]] = [
            ("ffht", 1, f_ffht),
            ("d1", 1, f_native),
            ("dN", nt, f_native),
        ]
        if not args.no_public:
            methods += [("norm", nt, f_norm), ("public", nt, f_public)]

        ks = {}
        for name, th, fn in methods:
            runtime.set_num_threads(th)
            buf[...] = pristine
            ks[name] = calls_per_measurement(fn, args.min_time)
        times: dict[str, list[float]] = {name: [] for name, _, _ in methods}
        for _ in range(args.repeat):
            for name, th, fn in methods:
                runtime.set_num_threads(th)
                np.copyto(buf, pristine)
                fn()  # also re-warms the thread pool after a switch; the buffer is restored next
                np.copyto(buf, pristine)
                k = ks[name]
                t0 = time.perf_counter()
                for _ in range(k):
                    fn()
                times[name].append((time.perf_counter() - t0) / k)
        runtime.set_num_threads(nt)
        med = {name: statistics.median(v) for name, v in times.items()}
        s1 = med["ffht"] / med["d1"]
        sn = med["ffht"] / med["dN"]
        results.append((lg, s1, sn))
        cells = [med["ffht"], med["d1"], med["dN"]]
        if not args.no_public:
            cells += [med["norm"], med["public"]]
        gbs = 2 * 4 * n * lg / 1e9  # nominal: read+write of every element in each of the log2(n) stages
        line = (
            f"{'2^' + str(lg):>5} | " + " ".join(f"{c * 1e6:>10.2f}" for c in cells)
            + f" | {s1:>7.2f}x {sn:>7.2f}x"
            + (f" {med['public'] / med['norm']:>7.2f}x" if not args.no_public else "")
            + f" | {gbs / med['ffht']:>9.1f} {gbs / med['dN']:>8.1f}"
        )
        print(line, flush=True)

    print()
    print(
        "  FFHT 1T = ffht.fht_(buf); dprec 1T/NT = dprec._core.fwht(buf, n, normalize=False) at 1/N threads;"
        " all in place on the same 64-byte-aligned float32 buffer."
    )
    if not args.no_public:
        print(
            "  norm NT = _core.fwht(buf, n, normalize=True); public NT = dprec.transforms.hadamard.fwht(buf, inplace=True,"
            " normalize=True); API ovh = public / norm."
        )
    print("  GB/s is nominal: 8 bytes * n * log2(n) / time (as if every butterfly stage went to memory).")
    print()

    miss1 = [lg for lg, s1, _ in results if s1 < SINGLE_TARGET]
    multi = [(lg, sn) for lg, _, sn in results if lg >= MULTI_FROM_LOG2]
    missn = [lg for lg, sn in multi if sn < MULTI_TARGET]
    lo1 = min(results, key=lambda r: r[1])
    print("performance targets (FWHT float32, CPU, against FFHT single thread):")
    print(
        f"  single thread >= {SINGLE_TARGET:g}x at every n: worst {lo1[1]:.2f}x at n=2^{lo1[0]}; "
        f"{len(results) - len(miss1)}/{len(results)} sizes meet it -> {'PASS' if not miss1 else 'MISS'}"
        + (f" (misses at n=2^{', 2^'.join(map(str, miss1))})" if miss1 else "")
    )
    if multi:
        lon = min(multi, key=lambda r: r[1])
        print(
            f"  {nt} threads >= {MULTI_TARGET:g}x at n >= 2^{MULTI_FROM_LOG2}: worst {lon[1]:.2f}x at n=2^{lon[0]}; "
            f"{len(multi) - len(missn)}/{len(multi)} sizes meet it -> {'PASS' if not missn else 'MISS'}"
            + (f" (misses at n=2^{', 2^'.join(map(str, missn))})" if missn else "")
        )
    else:
        print(f"  {nt} threads >= {MULTI_TARGET:g}x at n >= 2^{MULTI_FROM_LOG2}: no such size measured -> n/a")
    if nt < 2:
        print("  (only one thread available: the multi-thread target needs a 2-core machine)")
    print(f"total time {time.perf_counter() - t_start:.1f}s")
    return 0 if agree_ok else 2


if __name__ == "__main__":
    sys.exit(main())
