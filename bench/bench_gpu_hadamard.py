#!/usr/bin/env python
"""FWHT on the GPU (docs/benchmarks.md): float32 transform time against a device-to-device copy.

Usage::

    python bench/bench_gpu_hadamard.py                 # n = 2^20 .. 2^28, batches, performance check
    python bench/bench_gpu_hadamard.py --quick         # n = 2^20 and 2^22, one batch (a smoke run)
    python bench/bench_gpu_hadamard.py --log2-n 20 24 --batch 14:10 12:12

Needs PyTorch with CUDA and dprec built with its CUDA backend; elsewhere it prints why it
cannot run and exits with status 0. Everything runs on PyTorch's current stream, and every
row is measured in this run, round-robin (timing as in bench/bench_gpu.py: CUDA events
around batches of calls lasting >= --min-time-ms, median of --repeat measurements):

* *kernel*: the private ``_cuda.fwht`` call alone, in place (orthonormal), on rows x n float32;
* *public*: ``dprec.transforms.hadamard.fwht(x)`` as users call it (out of place: allocates the result,
  checks that x is finite, which waits for the stream once);
* *rotation*: ``RandomizedHadamard(n, seed).forward(x)`` (signs and the copy fused in);
* *copy*: ``y.copy_(x)`` of the same 4 * rows * n bytes, the anchor of its target
  (FWHT <= 1.5x copy time at n = 2^20 .. 2^26).

GB/s counts one read and one write of the array (what a copy moves); the kernel makes one
such round trip per pass. The *plan* column gives the passes as buffer log2 / stages (and,
for strided passes, the bytes of a column run) for the device's opt-in shared memory
(csrc/cuda/hadamard_bodies.h): with 128 KiB blocks (sm_80, sm_90) one pass up to n = 2^15,
two up to 2^27, so n > L2 costs at least two copies' worth of DRAM traffic. It comes from the
test-only module ``dprec._gpu_emulation``: a dash where dprec was installed from a wheel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import gpu_median_times, header_lines, unavailable_reason  # noqa: E402
from dprec._runtime import native as _native  # noqa: E402
from dprec.transforms.hadamard import RandomizedHadamard, fwht  # noqa: E402

TARGET_VS_COPY = 1.5
CHECK_LOG2 = (20, 26)
_SEED = 0x5EED_4ADA_0000_0004
_G = 1e9


def bench_row(rows: int, log2n: int, repeat: int, min_time_s: float) -> dict[str, float]:
    import torch

    n = 1 << log2n
    device = torch.device("cuda", torch.cuda.current_device())
    x = torch.randn(rows, n, device=device)
    y = torch.empty_like(x)
    cm = _native.cuda_module()
    dev = device.index
    stream = torch.cuda.current_stream(device).cuda_stream
    rot = RandomizedHadamard(n, _SEED)

    def kernel() -> None:
        cm.fwht(dev, stream, y.data_ptr(), y.data_ptr(), "float32", rows, n, True)

    def public() -> None:
        fwht(x)

    def rotation() -> None:
        rot.forward(x)

    def copy() -> None:
        y.copy_(x)

    t = gpu_median_times({"kernel": kernel, "public": public, "rotation": rotation, "copy": copy}, repeat, min_time_s)
    ok = bool(torch.equal(fwht(x).cpu(), torch.from_numpy(fwht(x.cpu().numpy(), backend="cpu"))))
    t["bit_identical"] = float(ok)
    return t


def max_buf_log2() -> int:
    """The launcher's buffer limit for float32 on the current device (hadamard_launch.cu)."""
    import torch

    optin = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "shared_memory_per_block_optin", 0)
    for p in (15, 14):
        if ((1 << p) + (1 << (p - 5))) * 4 <= optin:
            return p
    return 13


def plan_text(rows: int, log2n: int) -> str:
    try:
        # The launchers' plan, as the test-only host emulation computes it (not in the wheels).
        from dprec import _gpu_emulation
    except ImportError:
        return "- (no _gpu_emulation)"
    passes = _gpu_emulation.fwht_plan(1 << log2n, rows, "float32", max_buf_log2())
    parts = []
    for q in passes:
        run = f"@{4 << q['lo']}B" if q["lo"] else ""
        parts.append(f"{q['buf_log2']}/{q['m']}{run}")
    return " ".join(parts)


def header() -> list[str]:
    return [
        "FWHT float32 (orthonormal) on the GPU; anchor: y.copy_(x) of the same bytes",
        f"{'rows x n':>14} | {'kernel ms':>9} {'GB/s':>6} {'/copy':>6} | {'public ms':>9} {'/copy':>6} | "
        f"{'rotation ms':>11} {'/copy':>6} | {'copy ms':>8} {'GB/s':>6} | {'= CPU':>5} | target",
        "-" * 122,
    ]


def line(rows: int, log2n: int, t: dict[str, float]) -> str:
    nbytes = 2 * 4 * rows * (1 << log2n)
    ratio = t["kernel"] / t["copy"]
    check = ""
    if rows == 1 and CHECK_LOG2[0] <= log2n <= CHECK_LOG2[1]:
        check = f"<= {TARGET_VS_COPY}x: {'PASS' if ratio <= TARGET_VS_COPY else 'MISS'}"
    shape = f"2^{log2n}" if rows == 1 else f"2^{rows.bit_length() - 1} x 2^{log2n}"
    return (
        f"{shape:>14} | {t['kernel'] * 1e3:>9.4f} {nbytes / t['kernel'] / _G:>6.0f} {ratio:>5.2f}x | "
        f"{t['public'] * 1e3:>9.4f} {t['public'] / t['copy']:>5.2f}x | "
        f"{t['rotation'] * 1e3:>11.4f} {t['rotation'] / t['copy']:>5.2f}x | "
        f"{t['copy'] * 1e3:>8.4f} {nbytes / t['copy'] / _G:>6.0f} | {'yes' if t['bit_identical'] else 'NO':>5} | "
        f"{plan_text(rows, log2n):<22} | {check}"
    )


def _batch(text: str) -> tuple[int, int]:
    a, b = (int(v) for v in text.split(":"))
    if not (0 <= a <= 24 and 0 <= b <= 30 and a + b <= 30):
        raise argparse.ArgumentTypeError(f"batch must be log2(rows):log2(n) with a sum <= 30, got {text}")
    return a, b


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log2-n", type=int, nargs="+", default=None, help="single vectors of n = 2^k (default 20..28)")
    p.add_argument("--batch", type=_batch, nargs="+", default=None, help="batches log2(rows):log2(n) (default 14:10 12:12 10:14)")
    p.add_argument("--repeat", type=int, default=None, help="measurements per cell, median reported (default 5; 3 with --quick)")
    p.add_argument("--min-time-ms", type=float, default=50.0, help="shortest measurement (default 50)")
    p.add_argument("--quick", action="store_true", help="n = 2^20 and 2^22, one batch, 3 repetitions")
    args = p.parse_args(argv)
    if args.log2_n and not all(0 <= k <= 30 for k in args.log2_n):
        p.error("--log2-n must be in 0..30")
    args.log2_n = args.log2_n or ([20, 22] if args.quick else list(range(20, 29)))
    args.batch = args.batch or ([(14, 10)] if args.quick else [(14, 10), (12, 12), (10, 14)])
    args.repeat = args.repeat or (3 if args.quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"bench_gpu_hadamard: nothing to measure on this machine: {reason}")
        return 0
    min_time_s = args.min_time_ms * 1e-3
    print("\n".join(header_lines()), flush=True)
    print(f"repeat {args.repeat} (median), >= {args.min_time_ms:g} ms per measurement\n", flush=True)
    print("\n".join(header()), flush=True)
    for k in args.log2_n:
        print(line(1, k, bench_row(1, k, args.repeat, min_time_s)), flush=True)
    for a, b in args.batch:
        print(line(1 << a, b, bench_row(1 << a, b, args.repeat, min_time_s)), flush=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
