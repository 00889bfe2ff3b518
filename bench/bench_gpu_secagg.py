#!/usr/bin/env python
"""SecAgg server side on the GPU: the modular sum of many clients' vectors and the centered lift
(docs/secagg.md), dprec against PyTorch, with a device-to-device copy as the anchor.

Usage::

    python bench/bench_gpu_secagg.py                      # 1000 clients, d = 2^16 and 2^20, bits 16 and 40
    python bench/bench_gpu_secagg.py --quick              # d = 2^16 only, 3 repetitions (a smoke run)
    python bench/bench_gpu_secagg.py --clients 100 --log2-d 22 --bits 20 32 64

Needs PyTorch with CUDA and dprec built with its CUDA backend; elsewhere it prints why it
cannot run and exits with status 0. Everything runs on PyTorch's current stream; the clients'
vectors (``--clients`` x d values mod M = 2**bits, uniform) are made on the GPU once and every
method reads the same values, measured in this run:

Sum, in client-elements per second (``clients * d / time``, ``G/s`` = 1e9/s), and the bytes
it reads per second:

* **dprec**: the private ``mod_sum`` kernel (what the public modular sum calls), the
  clients' vectors in dprec's storage dtype (uint32 for bits <= 32, uint64 above), one
  thread per column summing the rows with wrapping integer additions, masked once: exact;
* **torch**: ``torch.remainder(xs64.sum(0), M)`` on the same values held as int64 (PyTorch's
  integer sum of a column reduction, then the remainder; the int64 sum cannot overflow for
  ``clients * M < 2**63``, so it is exact too; left out for bits >= 63);
* **copy**: ``torch.Tensor.copy_`` of dprec's input (the same bytes) into another buffer,
  device to device: reading them once costs at least about half of this.

Lift (the d-element sum into ``[-M/2, M/2)``), in elements per second:

* **dprec int64 / float32**: the private ``mod_lift`` kernel into int64 (scale 1) or float32
  (``scale * lifted`` in float64, rounded);
* **torch float32**: ``torch.where(s >= M/2, s - M, s).double().mul_(scale).float()`` on the
  int64 sum (the same arithmetic, so the same bits).

Agreement (printed): dprec's sum equals PyTorch's, element for element, and dprec's float32
lift equals PyTorch's bit for bit.

Timing: CUDA events around a batch of calls after warm-up (see bench/bench_gpu.py); the median
of ``--repeat`` measurements; methods measured round-robin within a row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import dprec
from dprec._runtime import native as _native

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import gpu_median_times, unavailable_reason  # noqa: E402 - the shared GPU timing

_G = 1e9
_SCALE = 2.0**-12


def _clients(n: int, d: int, bits: int, gen: Any) -> tuple[Any, Any, str]:
    """(dprec's input in its storage dtype, the same values as int64, the dtype name), made
    without n x d temporaries beyond the two results."""
    import torch

    device, shape = gen.device, (n, d)
    if bits <= 32:
        if bits < 32:
            xs32 = torch.randint(0, 1 << bits, shape, generator=gen, device=device, dtype=torch.int32)
        else:  # every int32 bit pattern: the same bits as uint32
            xs32 = torch.randint(-(1 << 31), 1 << 31, shape, generator=gen, device=device, dtype=torch.int32)
        xs64 = xs32.to(torch.int64).bitwise_and_(0xFFFFFFFF)
        return xs32.view(torch.uint32), xs64, "uint32"
    if bits < 63:
        xs64 = torch.randint(0, 1 << bits, shape, generator=gen, device=device, dtype=torch.int64)
    else:  # every int64 bit pattern, from two 32-bit halves (randint cannot span 2**64)
        xs64 = torch.randint(-(1 << 31), 1 << 31, shape, generator=gen, device=device, dtype=torch.int64)
        lo = torch.randint(0, 1 << 32, shape, generator=gen, device=device, dtype=torch.int64)
        xs64.bitwise_left_shift_(32).bitwise_or_(lo)
        del lo
    return xs64.view(torch.uint64), xs64, "uint64"


def bench_row(n: int, d_log2: int, bits: int, repeat: int, min_time_s: float) -> dict[str, Any]:
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    d = 1 << d_log2
    cm = _native.cuda_module()
    dev, stream = device.index, torch.cuda.current_stream(device).cuda_stream
    gen = torch.Generator(device=device).manual_seed(d_log2 * 100 + bits)
    xs, xs64, dtype = _clients(n, d, bits, gen)
    copy_dst = torch.empty_like(xs64 if dtype == "uint64" else xs.view(torch.int32))
    copy_src = xs.view(copy_dst.dtype)
    total = torch.empty(d, dtype=xs.dtype, device=device)
    lifted_i64 = torch.empty(d, dtype=torch.int64, device=device)
    lifted_f32 = torch.empty(d, dtype=torch.float32, device=device)
    m = 1 << bits
    torch_ok = bits < 63

    def sum_dprec() -> None:
        cm.mod_sum(dev, stream, xs.data_ptr(), dtype, n, d, bits, total.data_ptr(), dtype, False)

    def sum_torch() -> Any:
        return torch.remainder(xs64.sum(0), m)

    def copy() -> None:
        copy_dst.copy_(copy_src)

    def lift_i64() -> None:
        cm.mod_lift(dev, stream, total.data_ptr(), dtype, d, bits, 1.0, lifted_i64.data_ptr(), "int64")

    def lift_f32() -> None:
        cm.mod_lift(dev, stream, total.data_ptr(), dtype, d, bits, _SCALE, lifted_f32.data_ptr(), "float32")

    sum_dprec()
    s64 = sum_torch() if torch_ok else None

    def lift_torch() -> Any:
        return torch.where(s64 >= m // 2, s64 - m, s64).double().mul_(_SCALE).float()

    fns: dict[str, Callable[[], Any]] = {"sum dprec": sum_dprec, "copy": copy}
    if torch_ok:
        fns["sum torch"] = sum_torch
    fns.update({"lift dprec i64": lift_i64, "lift dprec f32": lift_f32})
    if torch_ok:
        fns["lift torch f32"] = lift_torch
    times: dict[str, Any] = gpu_median_times(fns, repeat, min_time_s)
    times["_bytes"] = xs.numel() * xs.element_size()
    if torch_ok:
        sum_dprec()
        lift_f32()
        total64 = total.view(torch.int32).to(torch.int64) & 0xFFFFFFFF if dtype == "uint32" else total.view(torch.int64)
        times["_sum_equal"] = bool(torch.equal(total64, s64))
        times["_lift_equal"] = bool(torch.equal(lifted_f32.view(torch.int32), lift_torch().view(torch.int32)))
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--log2-d", type=int, nargs="+", default=[16, 20])
    p.add_argument("--bits", type=int, nargs="+", default=[16, 40], help="M = 2**bits (1 .. 64)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-time-ms", type=float, default=50.0)
    p.add_argument("--quick", action="store_true", help="d = 2^16 only, 3 repetitions")
    args = p.parse_args(argv)
    if any(b < 1 or b > 64 for b in args.bits):
        p.error("--bits must be in 1 .. 64")
    reason = unavailable_reason()
    if reason:
        print(f"bench_gpu_secagg: cannot run here: {reason}")
        return 0
    if args.quick:
        args.log2_d, args.repeat = [16], 3
    import torch

    print(
        f"dprec {dprec.__version__}, torch {torch.__version__}, {dprec.cuda.device_name(torch.cuda.current_device())}"
    )
    n = args.clients
    print(f"SecAgg server side on the GPU: {n} clients; sum in G client-elements/s (and GB/s read), "
          "lift in G elements/s")
    print("| d | bits | dtype | sum dprec | GB/s | sum torch | copy (GB/s) | dprec / torch | dprec / copy time "
          "| lift dprec i64 | lift dprec f32 | lift torch f32 | agreement |")
    print("|" + "---|" * 13)
    ok = True
    for d_log2 in args.log2_d:
        for bits in args.bits:
            t = bench_row(n, d_log2, bits, args.repeat, args.min_time_ms / 1e3)
            torch.cuda.empty_cache()  # the row's gigabytes of clients' vectors go back before the next
            d = 1 << d_log2
            work = n * d
            gbs = t["_bytes"] / t["sum dprec"] / _G
            torch_cells = (
                f"{work / t['sum torch'] / _G:.2f}" if "sum torch" in t else "-",
                f"{t['sum torch'] / t['sum dprec']:.2f}x" if "sum torch" in t else "-",
                f"{d / t['lift torch f32'] / _G:.2f}" if "lift torch f32" in t else "-",
            )
            if "_sum_equal" in t:
                agree = t["_sum_equal"] and t["_lift_equal"]
                ok = ok and agree
                agreement = (f"sum {'equal' if t['_sum_equal'] else 'DIFFERS'}, "
                             f"lift {'bit-identical' if t['_lift_equal'] else 'DIFFERS'} -> {'OK' if agree else 'FAIL'}")
            else:
                agreement = "- (no torch reference at bits >= 63)"
            print(
                f"| 2^{d_log2} | {bits} | {'uint32' if bits <= 32 else 'uint64'} | {work / t['sum dprec'] / _G:.2f} "
                f"| {gbs:.0f} | {torch_cells[0]} | {t['_bytes'] / t['copy'] / _G:.0f} | {torch_cells[1]} "
                f"| {t['sum dprec'] / t['copy']:.2f}x | {d / t['lift dprec i64'] / _G:.2f} "
                f"| {d / t['lift dprec f32'] / _G:.2f} | {torch_cells[2]} | {agreement} |",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
