#!/usr/bin/env python
"""DP-REC on the GPU (docs/benchmarks.md): encode, decode and aggregation throughput, in one run.

Usage::

    python bench/bench_gpu.py                       # d = 2^20 .. 2^26, K = 2^7, the performance checks
    python bench/bench_gpu.py --quick               # d = 2^20 and 2^22, 3 repetitions (a smoke run)
    python bench/bench_gpu.py --log2-d 22 24 26 --bits 10
    python bench/bench_gpu.py --clients 1000 --agg-log2-d 20 24

Needs PyTorch with CUDA and dprec built with its CUDA backend; elsewhere it prints why it
cannot run and exits with status 0. Everything runs on PyTorch's current stream of the
current device, and every cell is measured in this run, so the ratios compare like with like:

* **encode** (``K * d`` candidate-elements per second, ``G/s`` = 1e9/s), float32 ``phi``:

  - *dprec encode*: the fused Philox -> normal -> float64 dot-product kernel alone (the
    private ``rec_dot_products`` call that ``rec.logits`` makes);
  - *public API*: ``rec.logits`` + ``rec.sample_index`` as users call them; ``rec.logits``
    checks that ``phi`` is finite and ``sample_index`` returns a host int, so this column
    includes host round trips;
  - *PyTorch*: ``torch.randn(chunk_k, d, generator=g, device="cuda") @ phi`` over all K
    candidates, in chunks of at most ``--torch-chunk-bytes`` (generation + matmul);
  - *generate-only*: the same normals generated, summed and discarded (the speed limit).

* **decode**: ``rec.candidate(..., out=buf)`` (and its kernel alone), against a
  device-to-device copy of the same ``4 d`` bytes.
* **aggregation**: ``rec.accumulate`` of ``--clients`` messages into float32 and float64
  accumulators, in client-elements per second (``clients * d / time``).
* **agreement**: GPU against CPU logits, and bit-identical decoded candidates.

Timing: CUDA events around a batch of calls after 2 warm-up calls; the batch size is chosen
so that one measurement lasts at least ``--min-time-ms`` (default 50 ms); the median of
``--repeat`` measurements is reported. Within a table row the methods are measured
round-robin, so that clock and thermal drift hit them alike. Host time between calls counts
(it leaves the GPU idle): where one call's device work is shorter than its launch from
Python (~10 us, e.g. the decode kernel at d = 2^20), a column shows that overhead.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

import dprec
import dprec.cuda
from dprec import rec
from dprec._runtime import native as _native

if TYPE_CHECKING:
    import torch

#: the performance targets, GPU encode at d >= 2^22: dprec / PyTorch and dprec / generate-only throughput.
CHECK_FROM_LOG2_D = 22
TARGET_VS_TORCH = 2.0
TARGET_VS_GEN = 0.70

_SEED = 0x5EED_D9EC_0000_0001
_GROUP = 0
_DECODE_INDEX = 5
_AGG_SIGMA = 0.01
_AGREE_LOG2_D = 18
_AGREE_BITS = 3
_WARM_UPS = 2
_MAX_BATCH = 100_000  # calls per measurement, whatever the calibration says
_G = 1e9


# --------------------------------------------------------------------------- availability


def unavailable_reason() -> str:
    """Why this benchmark cannot run here, on one line; '' when it can."""
    problems = []
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means "no PyTorch"
        problems.append(f"PyTorch is not importable ({type(exc).__name__}: {exc})")
    else:
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a build without CUDA"
            problems.append(f"torch.cuda.is_available() is False (torch {torch.__version__}, {build})")
    if not dprec.cuda.is_available():
        problems.append(f"dprec's CUDA backend is unavailable: {dprec.cuda.unavailable_reason()}")
    elif problems:
        problems.append("dprec's CUDA backend is available")
    return " ".join("; ".join(problems).split())  # one line, whatever the messages hold


# --------------------------------------------------------------------------- timing


def _cuda_batch_s(fn: Callable[[], Any], calls: int) -> float:
    """Seconds per call of ``calls`` back-to-back calls, between CUDA events on the current stream.

    The stream is drained first, so that earlier work is not counted; the end event is
    waited for, so that all the batch's device work is. Host time between calls (Python,
    host syncs inside ``fn``) is included: it keeps the device waiting.
    """
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3 / calls


def _calls_per_measurement(fn: Callable[[], Any], min_time_s: float) -> int:
    """Calls that take at least ``min_time_s``, estimated from batches growing until one lasts a tenth of it."""
    calls = 1
    while True:
        per_call = max(_cuda_batch_s(fn, calls), 1e-9)
        if per_call * calls >= min_time_s / 10 or calls >= _MAX_BATCH:
            return max(1, min(_MAX_BATCH, math.ceil(min_time_s / per_call)))
        calls = min(_MAX_BATCH, calls * 4)


def gpu_median_times(fns: dict[str, Callable[[], Any]], repeat: int, min_time_s: float) -> dict[str, float]:
    """Median seconds per call of each function, measured round-robin (see the module docstring)."""
    batch: dict[str, int] = {}
    for name, fn in fns.items():
        for _ in range(_WARM_UPS):
            fn()
        batch[name] = _calls_per_measurement(fn, min_time_s)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            samples[name].append(_cuda_batch_s(fn, batch[name]))
    return {name: statistics.median(ts) for name, ts in samples.items()}


# --------------------------------------------------------------------------- encode


@dataclass
class EncodeRow:
    d_log2: int
    bits: int
    kernel_s: float  # fused rec_dot_products alone
    public_s: float  # rec.logits + rec.sample_index
    torch_s: float  # torch.randn + matmul, all K candidates
    gen_s: float  # generate-only kernel
    torch_chunk_k: int  # candidates per torch.randn call
    same_logits: bool  # kernel-only and rec.logits results bit-identical

    @property
    def work(self) -> int:
        """Candidate-elements of one encode: K * d."""
        return (1 << self.bits) << self.d_log2

    def rate(self, seconds: float) -> float:
        return self.work / seconds / _G

    @property
    def vs_torch(self) -> float:
        return self.torch_s / self.kernel_s

    @property
    def vs_gen(self) -> float:
        return self.gen_s / self.kernel_s


def torch_chunk_candidates(d: int, k: int, chunk_bytes: int) -> int:
    """Candidates per ``torch.randn`` call: ``chunk_k * d * 4 <= chunk_bytes`` (at least 1, at most K)."""
    return max(1, min(k, chunk_bytes // (4 * d)))


def torch_encode(phi: torch.Tensor, k: int, chunk_k: int, gen: torch.Generator, acc: torch.Tensor) -> None:
    """What a PyTorch user writes: ``acc[k] = <z_k, phi>`` for all K candidates, z from ``torch.randn``."""
    import torch

    d = phi.numel()
    for k0 in range(0, k, chunk_k):
        kn = min(chunk_k, k - k0)
        z = torch.randn(kn, d, generator=gen, device=phi.device)
        acc[k0 : k0 + kn] = z @ phi
        del z  # release the chunk before the next one is drawn (peak: one chunk)


def bench_encode(d_log2: int, bits: int, repeat: int, min_time_s: float, chunk_bytes: int) -> EncodeRow:
    import torch

    cm = _native.cuda_module()
    d, k = 1 << d_log2, 1 << bits
    device = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device=device).manual_seed(1000 + d_log2)
    phi = torch.randn(d, device=device, generator=gen)  # float32
    dev = phi.device.index
    stream = torch.cuda.current_stream(device).cuda_stream
    out = torch.empty(k, dtype=torch.float64, device=device)
    acc = torch.empty(k, dtype=torch.float32, device=device)
    chunk_k = torch_chunk_candidates(d, k, chunk_bytes)
    torch_gen = torch.Generator(device=device).manual_seed(2000 + d_log2)

    def kernel() -> None:
        cm.rec_dot_products(dev, stream, phi.data_ptr(), "float32", d, _SEED, _GROUP, k, 1.0, out.data_ptr())

    def public() -> None:
        rec.sample_index(rec.logits(phi, _SEED, _GROUP, bits, sigma=1.0))

    def pytorch() -> None:
        torch_encode(phi, k, chunk_k, torch_gen, acc)

    def generate() -> None:
        cm.generate_only(dev, stream, d, _SEED, _GROUP, k)

    t = gpu_median_times(
        {"kernel": kernel, "public": public, "torch": pytorch, "gen": generate}, repeat, min_time_s
    )
    kernel()
    same = bool(torch.equal(out, rec.logits(phi, _SEED, _GROUP, bits, sigma=1.0)))  # waits for the stream
    return EncodeRow(d_log2, bits, t["kernel"], t["public"], t["torch"], t["gen"], chunk_k, same)


def encode_header(bits: int, chunk_bytes: int) -> list[str]:
    return [
        f"Encode, K = 2^{bits}, float32 phi, in G candidate-elements/s (K*d/time); PyTorch draws chunk_k "
        f"candidates per torch.randn (chunk_k*d*4 <= {_bytes(chunk_bytes)})",
        f"{'d':>6} | {'dprec encode':>12} {'public API (logits+sample)':>26} {'PyTorch':>8} {'generate-only':>13} | "
        f"{'dprec/PyTorch':>13} {'dprec/generate-only':>19} | {'encode ms':>9} {'chunk_k':>7}",
        "-" * 127,
    ]


def encode_line(r: EncodeRow) -> str:
    line = (
        f"  2^{r.d_log2:<2} | {r.rate(r.kernel_s):>12.1f} {r.rate(r.public_s):>26.1f} {r.rate(r.torch_s):>8.1f} "
        f"{r.rate(r.gen_s):>13.1f} | {r.vs_torch:>12.2f}x {r.vs_gen:>19.2f} | {r.kernel_s * 1e3:>9.3f} {r.torch_chunk_k:>7}"
    )
    if not r.same_logits:
        line += "  WARNING: kernel-only logits differ from rec.logits"
    return line


def format_checks(rows: list[EncodeRow]) -> list[str]:
    checked = [r for r in rows if r.d_log2 >= CHECK_FROM_LOG2_D]
    if not checked:
        return [f"GPU target checks skipped: no d >= 2^{CHECK_FROM_LOG2_D} was measured"]
    lines = [f"GPU encode targets at d >= 2^{CHECK_FROM_LOG2_D} (dprec encode = the kernel-only column):"]
    for r in checked:
        lines.append(
            f"  d=2^{r.d_log2:<2}  dprec/PyTorch {r.vs_torch:6.2f}x  target >= {TARGET_VS_TORCH:g}x  "
            f"{_verdict(r.vs_torch >= TARGET_VS_TORCH)}   "
            f"dprec/generate-only {r.vs_gen:5.2f}  target >= {TARGET_VS_GEN:.2f}  {_verdict(r.vs_gen >= TARGET_VS_GEN)}"
        )
    worst_torch = min(checked, key=lambda r: r.vs_torch)
    worst_gen = min(checked, key=lambda r: r.vs_gen)
    lines.append(
        f"  min over d: dprec/PyTorch {worst_torch.vs_torch:.2f}x (d=2^{worst_torch.d_log2}) "
        f"{_verdict(worst_torch.vs_torch >= TARGET_VS_TORCH)};  "
        f"dprec/generate-only {worst_gen.vs_gen:.2f} (d=2^{worst_gen.d_log2}) {_verdict(worst_gen.vs_gen >= TARGET_VS_GEN)}"
    )
    return lines


# --------------------------------------------------------------------------- decode


@dataclass
class DecodeRow:
    d_log2: int
    public_s: float  # rec.candidate(..., out=buf)
    kernel_s: float  # the stream_normals kernel alone
    copy_s: float  # buf2.copy_(buf), the same 4*d bytes

    @property
    def d(self) -> int:
        return 1 << self.d_log2


def bench_decode(d_log2: int, repeat: int, min_time_s: float) -> DecodeRow:
    import torch

    cm = _native.cuda_module()
    d = 1 << d_log2
    device = torch.device("cuda", torch.cuda.current_device())
    buf = torch.empty(d, device=device)  # float32
    buf2 = torch.empty_like(buf)
    dev = buf.device.index
    stream = torch.cuda.current_stream(device).cuda_stream

    def public() -> None:
        rec.candidate(_SEED, _GROUP, _DECODE_INDEX, d, sigma=1.0, out=buf)

    def kernel() -> None:
        cm.stream_normals(dev, stream, _SEED, _DECODE_INDEX, _GROUP, 0, 0, d, 1.0, buf.data_ptr())

    def copy() -> None:
        buf2.copy_(buf)

    t = gpu_median_times({"public": public, "kernel": kernel, "copy": copy}, repeat, min_time_s)
    return DecodeRow(d_log2, t["public"], t["kernel"], t["copy"])


def decode_header() -> list[str]:
    return [
        f"Decode one candidate: rec.candidate(seed, {_GROUP}, {_DECODE_INDEX}, d, sigma=1.0, out=buf), float32, "
        "and its kernel alone; anchor: buf2.copy_(buf) of the same 4*d bytes",
        f"{'d':>6} | {'decode ms':>9} {'G el/s':>8} | {'kernel ms':>9} {'G el/s':>8} | {'copy ms':>8} {'GB/s r+w':>9} | "
        f"{'decode/copy':>11} {'kernel/copy':>11}",
        "-" * 104,
    ]


def decode_line(r: DecodeRow) -> str:
    return (
        f"  2^{r.d_log2:<2} | {r.public_s * 1e3:>9.4f} {r.d / r.public_s / _G:>8.1f} | "
        f"{r.kernel_s * 1e3:>9.4f} {r.d / r.kernel_s / _G:>8.1f} | "
        f"{r.copy_s * 1e3:>8.4f} {2 * 4 * r.d / r.copy_s / _G:>9.0f} | "
        f"{r.public_s / r.copy_s:>10.2f}x {r.kernel_s / r.copy_s:>10.2f}x"
    )


# --------------------------------------------------------------------------- aggregation


@dataclass
class AggregateRow:
    d_log2: int
    clients: int
    f32_s: float
    f64_s: float

    def rate(self, seconds: float) -> float:
        return self.clients * (1 << self.d_log2) / seconds / _G


def bench_aggregate(d_log2: int, clients: int, repeat: int, min_time_s: float) -> AggregateRow:
    import torch

    d = 1 << d_log2
    device = torch.device("cuda", torch.cuda.current_device())
    rng = np.random.default_rng(d_log2)
    seeds = rng.integers(0, 2**64, clients, dtype=np.uint64)
    indices = rng.integers(0, 128, clients, dtype=np.uint32)
    out32 = torch.zeros(d, device=device, dtype=torch.float32)
    out64 = torch.zeros(d, device=device, dtype=torch.float64)

    def acc32() -> None:
        rec.accumulate(out32, _GROUP, seeds, indices, sigma=_AGG_SIGMA)

    def acc64() -> None:
        rec.accumulate(out64, _GROUP, seeds, indices, sigma=_AGG_SIGMA)

    t = gpu_median_times({"f32": acc32, "f64": acc64}, repeat, min_time_s)
    return AggregateRow(d_log2, clients, t["f32"], t["f64"])


def aggregate_header(clients: int) -> list[str]:
    return [
        f"Server aggregation: rec.accumulate(out, {_GROUP}, seeds, indices, sigma={_AGG_SIGMA}) of {clients} clients, "
        "in G client-elements/s (clients*d/time)",
        f"{'d':>6} | {'float32 ms':>10} {'G/s':>7} | {'float64 ms':>10} {'G/s':>7}",
        "-" * 50,
    ]


def aggregate_line(r: AggregateRow) -> str:
    return (
        f"  2^{r.d_log2:<2} | {r.f32_s * 1e3:>10.3f} {r.rate(r.f32_s):>7.1f} | "
        f"{r.f64_s * 1e3:>10.3f} {r.rate(r.f64_s):>7.1f}"
    )


# --------------------------------------------------------------------------- agreement


def agreement_line(d_log2: int = _AGREE_LOG2_D, bits: int = _AGREE_BITS) -> str:
    """GPU against CPU: logits within bench.py's tolerance, the same index under the same
    Gumbel noise, and every candidate bit-identical."""
    import torch

    d, k = 1 << d_log2, 1 << bits
    device = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator(device=device).manual_seed(7)
    phi = torch.randn(d, device=device, generator=gen)
    phi_host = phi.cpu().numpy()
    lg_gpu = rec.logits(phi, _SEED, _GROUP, bits, sigma=1.0)
    lg_cpu = rec.logits(phi_host, _SEED, _GROUP, bits, sigma=1.0, backend="cpu")
    diff = float(np.max(np.abs(lg_gpu.cpu().numpy() - lg_cpu)))
    tol = 1e-9 * math.sqrt(d) * float(np.linalg.norm(phi_host.astype(np.float64)))
    # Equal Generators give both draws the same private Gumbel noise.
    same_index = rec.sample_index(lg_gpu, rng=np.random.default_rng(11)) == rec.sample_index(
        lg_cpu, rng=np.random.default_rng(11), backend="cpu"
    )
    gpu = torch.empty(d, device=device)
    identical = 0
    for index in range(k):
        rec.candidate(_SEED, _GROUP, index, d, sigma=1.0, out=gpu)
        cpu = rec.candidate(_SEED, _GROUP, index, d, sigma=1.0, backend="cpu")
        identical += int(np.array_equal(gpu.cpu().numpy().view(np.uint32), cpu.view(np.uint32)))
    ok = diff <= tol and same_index and identical == k
    return (
        f"Agreement GPU vs CPU (d=2^{d_log2}, K={k}): max |logit diff| {diff:.2e} "
        f"(tolerance 1e-9*sqrt(d)*||phi||/sigma = {tol:.2e}); same index under the same Gumbel noise: "
        f"{'yes' if same_index else 'NO'}; rec.candidate(..., out=gpu) bit-identical to the CPU: "
        f"{identical}/{k} -> {'OK' if ok else 'FAIL'}"
    )


# --------------------------------------------------------------------------- report


def header_lines() -> list[str]:
    import torch

    dev = torch.cuda.current_device()
    cm = _native.cuda_module()
    mem = torch.cuda.get_device_properties(dev).total_memory
    return [
        f"GPU: {torch.cuda.get_device_name(dev)} ({_bytes(mem)}); dprec sees: {dprec.cuda.device_name(dev)}",
        f"torch {torch.__version__}, CUDA runtime {torch.version.cuda} (torch) / "
        f"{_cuda_version(cm.runtime_version())} (dprec), driver supports CUDA {_cuda_version(cm.driver_version())}; "
        f"dprec {dprec.__version__}",
    ]


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}" if v else "unknown"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def _emit(lines: list[str]) -> None:
    """Print as soon as measured: the full run takes minutes."""
    print("\n".join(lines), flush=True)


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# --------------------------------------------------------------------------- CLI


def _log2_d(text: str) -> int:
    v = int(text)
    if not 1 <= v <= 30:
        raise argparse.ArgumentTypeError(f"log2(d) must be in 1..30, got {v}")
    return v


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log2-d", type=_log2_d, nargs="+", default=None, help="log2(d) of the encode and decode tables (default 20..26)")
    p.add_argument("--bits", type=int, default=7, help="K = 2^bits candidates (default 7)")
    p.add_argument("--repeat", type=int, default=None, help="measurements per cell, median reported (default 5; 3 with --quick)")
    p.add_argument("--min-time-ms", type=float, default=50.0, help="shortest measurement; calls are batched to last this long (default 50)")
    p.add_argument("--torch-chunk-bytes", type=int, default=2 << 30, help="largest torch.randn block in bytes (default 2 GiB)")
    p.add_argument("--clients", type=int, default=100, help="clients aggregated (default 100)")
    p.add_argument("--agg-log2-d", type=_log2_d, nargs="+", default=None, help="log2(d) of the aggregation table (default 20 22 24)")
    p.add_argument("--quick", action="store_true", help="d = 2^20 and 2^22 only, 3 repetitions (a smoke run)")
    args = p.parse_args(argv)
    if not 1 <= args.bits <= 24:
        p.error("--bits must be in 1..24")
    if args.repeat is not None and args.repeat < 1:
        p.error("--repeat must be >= 1")
    if not args.min_time_ms > 0:
        p.error("--min-time-ms must be > 0")
    if args.torch_chunk_bytes < 4:
        p.error("--torch-chunk-bytes must be >= 4")
    if args.clients < 1:
        p.error("--clients must be >= 1")
    sizes = [20, 22] if args.quick else list(range(20, 27))
    args.log2_d = args.log2_d or sizes
    args.agg_log2_d = args.agg_log2_d or ([20, 22] if args.quick else [20, 22, 24])
    args.repeat = args.repeat or (3 if args.quick else 5)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = unavailable_reason()
    if reason:
        print(f"bench_gpu: nothing to measure on this machine: {reason}")
        return 0

    min_time_s = args.min_time_ms * 1e-3
    _emit(header_lines())
    _emit([f"repeat {args.repeat} (median), >= {args.min_time_ms:g} ms per measurement, {_WARM_UPS} warm-up calls", ""])

    _emit(encode_header(args.bits, args.torch_chunk_bytes))
    encode = []
    for s in args.log2_d:
        encode.append(bench_encode(s, args.bits, args.repeat, min_time_s, args.torch_chunk_bytes))
        _emit([encode_line(encode[-1])])
    _emit(["", *format_checks(encode), ""])

    _emit(decode_header())
    for s in args.log2_d:
        _emit([decode_line(bench_decode(s, args.repeat, min_time_s))])
    _emit([""])

    _emit(aggregate_header(args.clients))
    for s in args.agg_log2_d:
        _emit([aggregate_line(bench_aggregate(s, args.clients, args.repeat, min_time_s))])
    _emit([""])

    _emit([agreement_line()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
