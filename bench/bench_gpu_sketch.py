#!/usr/bin/env python
"""Count-sketch encode and decode on the GPU: dprec against PyTorch ``scatter_add_`` (docs/benchmarks.md).

Usage::

    python bench/bench_gpu_sketch.py                     # d = 2^20, 2^22, 2^24; rows 5, 15; cols 2^16
    python bench/bench_gpu_sketch.py --cols-d-over 64    # cols = d / 64
    python bench/bench_gpu_sketch.py --cols 1 3 64 --rows 1 40   # degenerate shapes: long runs per cell
    python bench/bench_gpu_sketch.py --quick             # d = 2^20, rows 5, cols 2^16 and 3, 3 repetitions

Needs PyTorch with CUDA and dprec built with its CUDA backend; elsewhere it prints why it
cannot run and exits with status 0. Everything runs on PyTorch's current stream, float32,
the same vector and the same buckets and signs (Philox domains 1 and 2, docs/contract.md) for
every method, measured in this run:

Encode (count-mean, scale 1/rows), throughput ``d / time`` in G elements/s:

* **dprec kernel**: the private ``count_sketch_encode`` call into a preallocated table
  (pairs -> stable radix sort -> in-order fold: deterministic, the CPU's bits). With few
  columns every cell adds ``d / cols`` values one after another (the CPU's order), so
  its time is bounded below by ``d / cols`` dependent additions whatever the GPU: the
  ``--cols 1 3 64`` rows show how close the warp-per-cell fold comes to that;
* **dprec API**: ``CountSketch.encode(x)`` as users call it (allocates and zeroes the
  table, and checks that ``x`` is finite, which waits for the stream once);
* **torch pre**: the csvec approach, ``table.view(-1).scatter_add_(0, idx, signs * x)``
  with ``idx = r * cols + bucket`` (int64) and the signs (float32) precomputed for all
  rows (``12 * rows * d`` bytes kept on the GPU), after ``table.zero_()``; float atomics,
  so the result varies in its last bits from run to run;
* **torch otf**: the same ``scatter_add_``, with the buckets and signs computed on the fly
  per call from dprec's Philox words (``philox.words(..., out=gpu_buffer)``), row by row.

Decode, same units:

* **dprec mean / median** (kernels; float64 accumulation, exactly the CPU's result);
* **torch mean pre**: ``(table.view(-1)[idx] * signs).sum(0)`` (float32 accumulation);
* **torch median pre**: ``torch.median(table.view(-1)[idx] * signs, 0)`` (rows are odd
  here, so torch's lower median is the median).

Agreement (printed): dprec's GPU table and decodes are bit-identical to the CPU at
``--agree-log2-d``; torch's table is within float32 rounding of dprec's.

Timing: CUDA events around a batch of calls after warm-up (see bench/bench_gpu.py); the
median of ``--repeat`` measurements; methods measured round-robin within a row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

import dprec
from dprec import philox
from dprec._runtime import native as _native
from dprec.constants import DOMAIN_SKETCH_BUCKET, DOMAIN_SKETCH_SIGN
from dprec.transforms.sketch import MAX_GPU_MEDIAN_ROWS, CountSketch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import gpu_median_times, unavailable_reason  # noqa: E402 - the shared GPU timing

_SEED = 0x5EED_5CE7_0000_0004
_G = 1e9


def _precomputed(cs: CountSketch, device: Any) -> tuple[Any, Any]:
    """Flat indices r * cols + bucket (int64) and signs (float32), rows x d, on the GPU."""
    import torch

    idx = torch.empty((cs.rows, cs.dim), dtype=torch.int64, device=device)
    signs = torch.empty((cs.rows, cs.dim), dtype=torch.float32, device=device)
    w = torch.empty(cs.dim, dtype=torch.uint32, device=device)
    for r in range(cs.rows):
        _buckets_signs(cs, r, w, idx[r], signs[r])
    return idx, signs


def _buckets_signs(cs: CountSketch, r: int, w: Any, idx_row: Any, sign_row: Any) -> None:
    """Row r's flat indices and signs from dprec's Philox words, computed on the GPU."""
    import torch

    philox.words(cs.seed, cs.dim, substream=r, group=cs.group, domain=DOMAIN_SKETCH_BUCKET, out=w)
    torch.mul(w.to(torch.int64), cs.cols, out=idx_row)
    idx_row.bitwise_right_shift_(32).add_(r * cs.cols)
    philox.words(cs.seed, cs.dim, substream=r, group=cs.group, domain=DOMAIN_SKETCH_SIGN, out=w)
    # +1 below 2**31, else -1: 1 - 2 * (top bit)
    torch.sub(1.0, w.to(torch.int64).bitwise_right_shift_(31).to(torch.float32), alpha=2.0, out=sign_row)


def bench_row(d_log2: int, rows: int, cols: int, repeat: int, min_time_s: float) -> dict[str, float]:
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    d = 1 << d_log2
    cs = CountSketch(d, rows, cols, seed=_SEED)
    gen = torch.Generator(device=device).manual_seed(d_log2)
    x = torch.randn(d, device=device, generator=gen)
    cm = _native.cuda_module()
    dev, stream = device.index, torch.cuda.current_stream(device).cuda_stream
    table = torch.zeros(cs.shape, device=device)
    t_flat = table.view(-1)
    idx, signs = _precomputed(cs, device)
    w = torch.empty(d, dtype=torch.uint32, device=device)
    idx_row = torch.empty(d, dtype=torch.int64, device=device)
    sign_row = torch.empty(d, dtype=torch.float32, device=device)
    decoded = torch.empty(d, device=device)
    scale = cs.scale

    def enc_kernel() -> None:
        cm.count_sketch_encode(
            dev, stream, x.data_ptr(), "float32", d, cs.seed, cs.group, rows, cols, scale, table.data_ptr(), "float32"
        )

    def enc_api() -> Any:
        return cs.encode(x)

    def enc_torch_pre() -> None:
        table.zero_()
        t_flat.scatter_add_(0, idx.view(-1), (signs * (x * scale)).view(-1))

    def enc_torch_otf() -> None:
        table.zero_()
        xs = x * scale
        for r in range(rows):
            _buckets_signs(cs, r, w, idx_row, sign_row)
            t_flat.scatter_add_(0, idx_row, sign_row * xs)

    sketch = cs.encode(x)

    def dec_mean() -> None:
        cm.count_sketch_decode(
            dev, stream, sketch.data_ptr(), "float32", d, cs.seed, cs.group, rows, cols, False, 1.0, decoded.data_ptr()
        )

    def dec_median() -> None:
        cm.count_sketch_decode(
            dev,
            stream,
            sketch.data_ptr(),
            "float32",
            d,
            cs.seed,
            cs.group,
            rows,
            cols,
            True,
            float(rows),
            decoded.data_ptr(),
        )

    def dec_torch_mean() -> Any:
        return (sketch.view(-1)[idx] * signs).sum(0)

    def dec_torch_median() -> Any:
        return torch.median(sketch.view(-1)[idx] * signs, 0).values * rows

    fns: dict[str, Callable[[], Any]] = {
        "enc dprec": enc_kernel,
        "enc API": enc_api,
        "enc torch pre": enc_torch_pre,
        "enc torch otf": enc_torch_otf,
        "dec mean": dec_mean,
        "dec torch mean": dec_torch_mean,
        "dec torch median": dec_torch_median,
    }
    if rows <= MAX_GPU_MEDIAN_ROWS:  # dprec's GPU median stops there (the CPU's sorting network)
        fns["dec median"] = dec_median
    times = gpu_median_times(fns, repeat, min_time_s)
    # torch's table against dprec's (atomics: float32 rounding, in any order)
    enc_torch_pre()
    ref = cs.encode(x)
    times["_torch_rel_err"] = float((table - ref).norm() / ref.norm().clamp_min(1e-30))
    return times


def agreement(d_log2: int, rows: int, cols: int) -> tuple[bool, str]:
    """dprec's GPU encode / decodes against the CPU, bit for bit."""
    import torch

    d = (1 << d_log2) + 3
    cs = CountSketch(d, rows, cols, seed=_SEED)
    x = torch.randn(d, device="cuda")
    table = cs.encode(x)
    cpu = cs.encode(x.cpu().numpy(), backend="cpu")
    checks = {"encode": np.array_equal(table.cpu().numpy().view(np.uint32), cpu.view(np.uint32))}
    for method in ("mean", "median"):
        got = cs.decode(table, method).cpu().numpy()
        checks[method] = np.array_equal(got.view(np.uint32), cs.decode(cpu, method, backend="cpu").view(np.uint32))
    return all(checks.values()), ", ".join(f"{k} {'bit-identical' if v else 'DIFFERS'}" for k, v in checks.items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log2-d", type=int, nargs="+", default=[20, 22, 24])
    p.add_argument("--rows", type=int, nargs="+", default=[5, 15])
    p.add_argument("--log2-cols", type=int, default=16, help="cols = 2**N (default 16)")
    p.add_argument("--cols-d-over", type=int, default=0, help="cols = d / N instead of 2**log2-cols")
    p.add_argument(
        "--cols",
        type=int,
        nargs="+",
        default=None,
        help="these cols values, one row each (e.g. 1 3 64: degenerate shapes); overrides the two options above",
    )
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-time-ms", type=float, default=50.0)
    p.add_argument("--agree-log2-d", type=int, default=18)
    p.add_argument("--quick", action="store_true", help="d = 2^20, rows 5, 3 repetitions")
    args = p.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"bench_gpu_sketch: cannot run here: {reason}")
        return 0
    if args.quick:
        args.log2_d, args.rows, args.repeat = [20], [5], 3
        args.cols = args.cols or [1 << 16, 3]  # the common shape and a degenerate one
    import torch

    print(
        f"dprec {dprec.__version__}, torch {torch.__version__}, {dprec.cuda.device_name(torch.cuda.current_device())}"
    )
    ok = True
    for agree_cols in [1 << 10] + [c for c in args.cols or [] if c != 1 << 10]:
        agrees, detail = agreement(args.agree_log2_d, 5, agree_cols)
        ok = ok and agrees
        print(
            f"agreement GPU vs CPU at d = 2^{args.agree_log2_d} + 3, rows 5, cols {agree_cols}: {detail} "
            f"-> {'OK' if agrees else 'FAIL'}"
        )
    print()
    names = [
        "enc dprec",
        "enc API",
        "enc torch pre",
        "enc torch otf",
        "dec mean",
        "dec median",
        "dec torch mean",
        "dec torch median",
    ]
    print("count-sketch on the GPU, float32, throughput in G elements/s (d / time)")
    print("| d | rows | cols | " + " | ".join(names) + " | dprec / torch pre (enc) | torch rel. err |")
    print("|" + "---|" * (len(names) + 5))
    for d_log2 in args.log2_d:
        if args.cols:
            cols_list = args.cols
        elif args.cols_d_over:
            cols_list = [(1 << d_log2) // args.cols_d_over]
        else:
            cols_list = [1 << args.log2_cols]
        for rows in args.rows:
            for cols in cols_list:
                t = bench_row(d_log2, rows, cols, args.repeat, args.min_time_ms / 1e3)
                d = 1 << d_log2
                cells = [f"{d / t[n] / _G:.2f}" if n in t else "-" for n in names]
                print(
                    f"| 2^{d_log2} | {rows} | {cols} | "
                    + " | ".join(cells)
                    + f" | {t['enc torch pre'] / t['enc dprec']:.2f}x | {t['_torch_rel_err']:.1e} |",
                    flush=True,
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
