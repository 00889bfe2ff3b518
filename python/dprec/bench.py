"""DP-REC encode/decode throughput on this machine (``dprec bench``) against the performance targets (see *Benchmarks* in the docs).

Everything in the table is measured in one run, so the ratios compare like with like:

* **native**: ``rec.logits`` + ``rec.sample_index`` with ``backend="cpu"``, i.e. the fused
  Philox -> normal -> float64 dot-product kernel plus the Gumbel-max draw, in
  candidate-elements per second (``K * d / time``).
* **NumPy ref**: the same two calls with ``backend="reference"`` (pure NumPy). It is slow,
  so it runs on fewer candidates (``2**ref_bits``) and is reported per candidate-element.
* **PyTorch**: the plain approach a user would write: for tiles of candidates and
  elements, ``torch.randn(kc, chunk, generator=g) @ phi[chunk]``, summed over chunks in
  float64, then Gumbel-max; ``torch.set_num_threads`` equal to dprec's thread count.
* **gen-only**: generating the same ``K * d`` normals with the native kernel (no dot
  product), chunk by chunk into a reused buffer; ``LLR/gen`` is the fused encode time over
  this time.
* **decode**: ``rec.candidate`` (regenerate candidate ``k*`` as users call it, allocating
  its output) against generating ``d`` normals into a reused buffer.

Each cell is the median of ``repeat`` timings (more for the cheap rows: see
:func:`runs_for`) after a warm-up of every method. Within a row the NumPy reference is
timed first, then a pause lets NumPy's BLAS threads stop spinning, then native,
generate-only and PyTorch are timed round-robin (with a short pause after each PyTorch
run for its OpenMP threads), so that load from elsewhere hits all of them alike.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence, TextIO

import numpy as np

__all__ = ["BenchConfig", "BenchRow", "Agreement", "run_bench", "format_report", "median_time", "main"]

#: The performance targets (*Benchmarks* in the docs) at d = 2**20, K = 2**7 (CPU, 2-core machine).
TARGET_D_LOG2 = 20
TARGET_BITS = 7
TARGET_VS_TORCH = 6.0
TARGET_VS_NUMPY = 15.0
TARGET_LLR_OVER_GEN = 1.25
TARGET_DECODE_OVER_GEN = 1.5

# Elements per generate-only call (a reused 4 MiB buffer) and per PyTorch tile.
_GEN_CHUNK = 1 << 20
_TORCH_TILE = 1 << 20
_TORCH_CHUNK = 1 << 16

_SIGMA = 0.01
# Pauses that let other libraries' spinning worker threads go to sleep before a native timing.
_COOL_DOWN_S = 0.3  # after NumPy/BLAS (OpenBLAS spins ~0.2 s)
_TORCH_PAUSE_S = 0.02  # after a PyTorch (OpenMP) run
_SEED = 0x5EED_D9EC_0000_0001


# --------------------------------------------------------------------------- data


@dataclass
class BenchConfig:
    """What to measure. ``sizes`` are log2(d) at ``bits``; ``extra`` adds (log2 d, bits) rows."""

    sizes: list[int] = field(default_factory=lambda: list(range(16, 23)))
    bits: int = 7
    extra: list[tuple[int, int]] = field(default_factory=lambda: [(20, 10)])
    ref_bits: int = 3
    repeat: int = 3
    threads: int | None = None
    torch: bool = True
    agree_log2_d: int = 18
    agree_bits: int = 3
    progress: bool = True
    stat: str = "median"  # "median" (default) or "min" of the repetitions


@dataclass
class BenchRow:
    d_log2: int
    bits: int
    native_s: float  # time of logits + sample_index, K * d candidate-elements
    gen_s: float  # time to generate the same K * d normals
    decode_s: float  # rec.candidate, d elements
    gen_d_s: float  # generating d normals
    ref_s: float  # reference time for 2**ref_bits candidates
    ref_bits: int
    torch_s: float | None  # PyTorch time for K * d, or None when torch is absent
    runs: int = 1  # timed repetitions of each method in this row

    @property
    def d(self) -> int:
        return 1 << self.d_log2

    @property
    def k(self) -> int:
        return 1 << self.bits

    @property
    def native_rate(self) -> float:
        return self.k * self.d / self.native_s

    @property
    def gen_rate(self) -> float:
        return self.k * self.d / self.gen_s

    @property
    def ref_rate(self) -> float:
        return (1 << self.ref_bits) * self.d / self.ref_s

    @property
    def torch_rate(self) -> float | None:
        return None if self.torch_s is None else self.k * self.d / self.torch_s

    @property
    def vs_torch(self) -> float | None:
        r = self.torch_rate
        return None if r is None else self.native_rate / r

    @property
    def vs_numpy(self) -> float:
        return self.native_rate / self.ref_rate

    @property
    def llr_over_gen(self) -> float:
        return self.native_s / self.gen_s

    @property
    def decode_over_gen(self) -> float:
        return self.decode_s / self.gen_d_s


@dataclass
class Agreement:
    d: int
    k: int
    max_abs_diff: float
    tolerance: float
    same_index: bool
    bit_identical: int  # candidates bit-identical between native and reference
    checked: int

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance and self.same_index and self.bit_identical == self.checked


@dataclass
class BenchResult:
    config: BenchConfig
    rows: list[BenchRow]
    agreement: Agreement
    isa: str
    threads: int
    cpu: str
    torch_version: str | None
    torch_note: str
    elapsed_s: float

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for row, d in zip(self.rows, out["rows"]):
            d.update(
                native_rate=row.native_rate,
                gen_rate=row.gen_rate,
                ref_rate=row.ref_rate,
                torch_rate=row.torch_rate,
                vs_torch=row.vs_torch,
                vs_numpy=row.vs_numpy,
                llr_over_gen=row.llr_over_gen,
                decode_over_gen=row.decode_over_gen,
            )
        out["agreement"]["ok"] = self.agreement.ok
        return out


# --------------------------------------------------------------------------- helpers


def package_version() -> str:
    """dprec's version: ``dprec.__version__`` if defined, else the installed metadata."""
    from . import _version  # noqa: PLC0415

    v = getattr(_version, "__version__", None)
    if v:
        return str(v)
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version("dprec")
    except Exception:  # noqa: BLE001
        return "unknown"


def cpu_model() -> str:
    """A human-readable CPU name, best effort."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            import subprocess  # noqa: PLC0415

            return subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            ).stdout.strip() or platform.machine()
        except Exception:  # noqa: BLE001 - best effort only
            pass
    return platform.processor() or platform.machine() or "unknown"


class Progress:
    """A small text progress bar on a stream (stderr), redrawn at most ~10 times a second."""

    def __init__(self, total: float, stream: TextIO | None = None, enabled: bool = True, width: int = 30) -> None:
        self.total = max(float(total), 1e-12)
        self.done = 0.0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.start = time.perf_counter()
        self._last_draw = 0.0
        self._last_len = 0

    def update(self, amount: float, label: str = "") -> None:
        self.done = min(self.total, self.done + amount)
        self.draw(label)

    def draw(self, label: str = "", force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last_draw < 0.1 and self.done < self.total:
            return
        self._last_draw = now
        frac = self.done / self.total
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        text = f"\r[{bar}] {100 * frac:5.1f}%  {now - self.start:6.1f}s  {label}"
        pad = max(0, self._last_len - len(text))
        self._last_len = len(text)
        self.stream.write(text + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self.done = self.total
        self.draw("done", force=True)
        self.stream.write("\n")
        self.stream.flush()


def median_time(fn: Callable[[], Any], repeat: int, *, warm_up: bool = False) -> float:
    """Median wall time of ``repeat`` calls of ``fn`` (after one untimed call if ``warm_up``)."""
    if warm_up:
        fn()
    times = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _phi(d: int) -> np.ndarray:
    rng = np.random.default_rng(12345 + d)
    return (rng.standard_normal(d) * (_SIGMA / math.sqrt(d))).astype(np.float32)


def _import_torch() -> tuple[Any, str]:
    try:
        import torch  # noqa: PLC0415 - optional
    except Exception as exc:  # noqa: BLE001 - any import failure means "no torch column"
        return None, f"PyTorch column skipped: torch is not importable ({type(exc).__name__}: {exc})"
    return torch, ""


# --------------------------------------------------------------------------- measured methods


def _native_encode(phi: np.ndarray, bits: int) -> int:
    from .rec import kernels as rec  # noqa: PLC0415

    lg = rec.logits(phi, _SEED, 0, bits, sigma=_SIGMA, backend="cpu")
    return rec.sample_index(lg, backend="cpu")


def _reference_encode(phi: np.ndarray, bits: int) -> int:
    from .rec import kernels as rec  # noqa: PLC0415

    lg = rec.logits(phi, _SEED, 0, bits, sigma=_SIGMA, backend="reference")
    return rec.sample_index(lg, backend="reference")


def _generate_only(core: Any, d: int, k: int, buf: np.ndarray) -> None:
    chunk = buf.size
    for s in range(k):
        for i0 in range(0, d, chunk):
            n = min(chunk, d - i0)
            core.stream_normals(_SEED, s, 0, 0, i0, 1.0, buf[:n])


def _torch_encode(torch: Any, phi_t: Any, k: int, gen: Any) -> int:
    d = phi_t.numel()
    chunk = min(d, _TORCH_CHUNK)
    kc = max(1, min(k, _TORCH_TILE // chunk))
    acc = torch.zeros(k, dtype=torch.float64)
    for k0 in range(0, k, kc):
        kn = min(kc, k - k0)
        for i0 in range(0, d, chunk):
            n = min(chunk, d - i0)
            z = torch.randn(kn, n, generator=gen)
            acc[k0 : k0 + kn] += torch.mv(z, phi_t[i0 : i0 + n]).to(torch.float64)
    lg = acc / _SIGMA
    u = torch.rand(k, dtype=torch.float64, generator=gen).clamp_(1e-300, 1.0 - 1e-16)
    return int(torch.argmax(lg - torch.log(-torch.log(u))))


# --------------------------------------------------------------------------- run


def check_agreement(d: int, bits: int) -> Agreement:
    """Native versus reference: logits within the documented tolerance, same index under the
    same Gumbel noise, and bit-identical decoded candidates."""
    from .rec import kernels as rec  # noqa: PLC0415

    phi = (np.random.default_rng(7).standard_normal(d) * 0.003).astype(np.float32)
    k = 1 << bits
    ln = rec.logits(phi, _SEED, 3, bits, sigma=_SIGMA, backend="cpu")
    lr = rec.logits(phi, _SEED, 3, bits, sigma=_SIGMA, backend="reference")
    diff = float(np.max(np.abs(ln - lr)))
    tol = 1e-9 * math.sqrt(d) * float(np.linalg.norm(phi.astype(np.float64))) / _SIGMA
    g = rec.gumbel_noise(k, np.random.default_rng(11))
    same = rec.sample_index(ln, gumbel=g, backend="cpu") == rec.sample_index(lr, gumbel=g, backend="reference")
    identical = 0
    for idx in range(k):
        a = rec.candidate(_SEED, 3, idx, d, sigma=_SIGMA, backend="cpu")
        b = rec.candidate(_SEED, 3, idx, d, sigma=_SIGMA, backend="reference")
        identical += int(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
    return Agreement(d, k, diff, tol, bool(same), identical, k)


def runs_for(repeat: int, d_log2: int, bits: int) -> int:
    """Timed repetitions of a row: ``repeat``, times up to 5 for rows cheaper than K*d = 2**28
    (small rows are fast and noisier, so they get more samples; the target row gets 2x)."""
    kd = 1 << (d_log2 + bits)
    return repeat * max(1, min(5, (1 << 28) // kd))


def run_bench(config: BenchConfig, progress_stream: TextIO | None = None) -> BenchResult:
    """Measure every row of ``config`` and the agreement check; returns a :class:`BenchResult`."""
    from . import runtime  # noqa: PLC0415
    from ._runtime import native as _native
    from .rec import kernels as rec

    core = _native.native()
    if config.stat not in ("median", "min"):
        raise ValueError(f"stat must be 'median' or 'min', got {config.stat!r}")
    stat: Callable[[list[float]], float] = statistics.median if config.stat == "median" else min
    t_start = time.perf_counter()
    prev_threads = runtime.get_num_threads()
    if config.threads is not None:
        runtime.set_num_threads(config.threads)
    threads = runtime.get_num_threads()

    torch, torch_note = (None, "PyTorch column skipped (--no-torch)")
    if config.torch:
        torch, torch_note = _import_torch()
    prev_torch_threads = None
    if torch is not None:
        prev_torch_threads = torch.get_num_threads()
        torch.set_num_threads(threads)

    cells = [(s, config.bits) for s in config.sizes] + list(config.extra)
    # Rough relative costs per candidate-element, only for the progress bar.
    w_native, w_torch, w_ref = 1.0, 5.0, 80.0
    total = 0.0
    for s, b in cells:
        kd = (1 << b) * (1 << s)
        reps = runs_for(config.repeat, s, b)
        total += reps * (2 * kd * w_native + (w_torch * kd if torch is not None else 0.0))
        total += reps * ((1 << config.ref_bits) << s) * w_ref + 4 * reps * (1 << s)
    agree_cost = 2 * ((1 << config.agree_bits) << config.agree_log2_d) * w_ref
    total += agree_cost + 1.0
    bar = Progress(total, progress_stream, enabled=config.progress)
    bar.draw("warm-up", force=True)

    buf = np.empty(_GEN_CHUNK, dtype=np.float32)
    rows: list[BenchRow] = []
    try:
        # Warm-up: start the thread pool, touch the buffers, import and warm torch.
        wphi = _phi(1 << 14)
        _native_encode(wphi, 4)
        _reference_encode(wphi[:1024], 1)
        _generate_only(core, 1 << 14, 4, buf)
        rec.candidate(_SEED, 0, 1, 1 << 14, sigma=_SIGMA, backend="cpu")
        if torch is not None:
            _torch_encode(torch, torch.from_numpy(wphi), 16, torch.Generator().manual_seed(1))
        bar.update(1.0, "warm-up")

        for s, b in cells:
            d, k = 1 << s, 1 << b
            label = f"d=2^{s} K=2^{b}"
            reps = runs_for(config.repeat, s, b)
            phi = _phi(d)
            gbuf = buf[: min(d, buf.size)]
            dbuf = np.empty(d, dtype=np.float32)
            rb = min(config.ref_bits, b)
            ref_cost = ((1 << config.ref_bits) << s) * w_ref
            # The NumPy reference first, in a block of its own: NumPy's BLAS leaves its worker
            # threads spinning for ~0.2 s after each call, which would steal a core from
            # whatever runs next. Then a pause, so that they are asleep before the rest.
            ref_times = []
            for rep in range(reps):
                ref_times.append(median_time(lambda: _reference_encode(phi, rb), 1))
                bar.update(ref_cost, f"{label} NumPy reference ({rep + 1}/{reps})")
            time.sleep(_COOL_DOWN_S)

            _native_encode(phi, b)  # warm this size (pages of phi, partial sums)
            phi_t = torch.from_numpy(phi) if torch is not None else None
            tgen = torch.Generator().manual_seed(1234) if torch is not None else None

            def torch_run() -> None:
                _torch_encode(torch, phi_t, k, tgen)

            methods: list[tuple[str, Callable[[], Any], float, float]] = [
                ("native", lambda: _native_encode(phi, b), k * d * w_native, 0.0),
                ("generate-only", lambda: _generate_only(core, d, k, gbuf), k * d * w_native, 0.0),
            ]
            if torch is not None:
                # torch's OpenMP threads spin briefly after a parallel region: a short pause.
                methods.append(("PyTorch", torch_run, k * d * w_torch, _TORCH_PAUSE_S))
            # Round-robin over the other methods, so that every method sees the same machine
            # state (load from elsewhere on a shared machine hits all of them alike).
            times: dict[str, list[float]] = {m[0]: [] for m in methods}
            for rep in range(reps):
                for name, fn, cost, pause in methods:
                    times[name].append(median_time(fn, 1))
                    bar.update(cost, f"{label} {name} ({rep + 1}/{reps})")
                    if pause:
                        time.sleep(pause)
            native_s = stat(times["native"])
            gen_s = stat(times["generate-only"])
            torch_s = stat(times["PyTorch"]) if torch is not None else None
            ref_s = stat(ref_times)

            def decode() -> None:
                rec.candidate(_SEED, 0, k - 1, d, sigma=_SIGMA, backend="cpu")

            def gen_d() -> None:
                core.stream_normals(_SEED, k - 1, 0, 0, 0, 1.0, dbuf)

            gen_d()
            decode()
            # Interleave the two short timings too.
            dec_t, gen_t = [], []
            for _ in range(max(5, 2 * reps + 1)):
                dec_t.append(median_time(decode, 1))
                gen_t.append(median_time(gen_d, 1))
            decode_s, gen_d_s = stat(dec_t), stat(gen_t)
            bar.update(4 * reps * d, f"{label} decode")
            rows.append(BenchRow(s, b, native_s, gen_s, decode_s, gen_d_s, ref_s, rb, torch_s, reps))

        bar.draw("agreement check", force=True)
        agreement = check_agreement(1 << config.agree_log2_d, config.agree_bits)
        bar.update(agree_cost, "agreement check")
    finally:
        bar.close()
        if config.threads is not None:
            runtime.set_num_threads(prev_threads)
        if torch is not None and prev_torch_threads is not None:
            torch.set_num_threads(prev_torch_threads)

    return BenchResult(
        config=config,
        rows=rows,
        agreement=agreement,
        isa=runtime.get_isa(),
        threads=threads,
        cpu=cpu_model(),
        torch_version=None if torch is None else str(torch.__version__),
        torch_note=torch_note,
        elapsed_s=time.perf_counter() - t_start,
    )


# --------------------------------------------------------------------------- report


def _rate(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x / 1e6:,.1f}" if x < 1e9 else f"{x / 1e6:,.0f}"


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _mark(value: float | None, target: float, higher_is_better: bool) -> str:
    if value is None:
        return "n/a"
    ok = value >= target if higher_is_better else value <= target
    return "PASS" if ok else "MISS"


def target_row(result: BenchResult) -> BenchRow | None:
    """The row the performance targets are read at: d = 2**20, K = 2**7, else the largest d at K = 2**7."""
    rows = [r for r in result.rows if r.bits == TARGET_BITS] or list(result.rows)
    if not rows:
        return None
    exact = [r for r in rows if r.d_log2 == TARGET_D_LOG2]
    return exact[0] if exact else max(rows, key=lambda r: r.d_log2)


def _runs_text(result: BenchResult) -> str:
    runs = sorted({r.runs for r in result.rows}) or [result.config.repeat]
    return str(runs[0]) if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"


def format_report(result: BenchResult) -> str:
    """The text ``dprec bench`` prints: header, table, footnotes, targets, agreement line."""
    version = package_version()
    lines: list[str] = []
    tv = f"torch {result.torch_version}" if result.torch_version else "torch absent"
    lines.append(f"dprec {version} DP-REC encode benchmark (CPU)")
    lines.append(
        f"CPU: {result.cpu} | ISA: {result.isa} | threads: {result.threads} | "
        f"numpy {np.__version__} | {tv} | python {platform.python_version()}"
    )
    lines.append(
        f"{result.config.stat} of {_runs_text(result)} timed runs per cell, methods interleaved, after warm-up;"
        f" sigma={_SIGMA}, float32 phi"
    )
    lines.append("")
    lines.append("Throughput in M candidate-elements/s (K*d / time); decode and gen(d) in ms.")
    header = (
        f"{'d':>5} {'K':>5} | {'native':>9} {'NumPy ref*':>10} {'PyTorch':>9} | {'/torch':>7} {'/numpy':>8} |"
        f" {'gen-only':>9} {'LLR/gen':>7} | {'decode':>8} {'gen(d)':>8} {'dec/gen':>7}"
    )
    lines.append(header)
    lines.append("-" * len(header))
    for r in result.rows:
        vt = r.vs_torch
        lines.append(
            f"{'2^' + str(r.d_log2):>5} {'2^' + str(r.bits):>5} | {_rate(r.native_rate):>9} {_rate(r.ref_rate):>10}"
            f" {_rate(r.torch_rate):>9} | {_ratio(vt):>7} {r.vs_numpy:>7.1f}x |"
            f" {_rate(r.gen_rate):>9} {r.llr_over_gen:>6.2f}x |"
            f" {r.decode_s * 1e3:>8.3f} {r.gen_d_s * 1e3:>8.3f} {r.decode_over_gen:>6.2f}x"
        )
    lines.append("")
    ref_bits = sorted({r.ref_bits for r in result.rows})
    lines.append(
        "* NumPy ref: backend=\"reference\" timed on K=2^"
        + "/2^".join(str(b) for b in ref_bits)
        + " candidates only (it is slow) and reported per candidate-element; its cost is linear in K."
    )
    lines.append(
        "  native = rec.logits + rec.sample_index (backend=\"cpu\"); PyTorch = torch.randn(kc, chunk, generator) @ phi,"
        f" tiles of {_TORCH_TILE // _TORCH_CHUNK}x{_TORCH_CHUNK} (fewer candidates if K is smaller), float64 sums,"
        " torch.set_num_threads = dprec threads."
    )
    lines.append(
        "  gen-only = the same K*d normals from the native generator into a reused buffer of min(d, 2^20) elements"
        " (one call per candidate and chunk, so per-call overhead shows at small d); LLR/gen = encode time / gen-only time."
    )
    lines.append("  decode = rec.candidate (one candidate, d elements, fresh output); gen(d) = d normals into a reused buffer.")
    if result.torch_note:
        lines.append("  " + result.torch_note)
    lines.append("")

    tr = target_row(result)
    if tr is not None:
        where = f"d=2^{tr.d_log2}, K=2^{tr.bits}"
        if tr.d_log2 != TARGET_D_LOG2 or tr.bits != TARGET_BITS:
            where += f" (the targets' size is d=2^{TARGET_D_LOG2}, K=2^{TARGET_BITS}: not measured in this run)"
        lines.append(f"Performance targets at {where}:")
        checks = [
            ("native / PyTorch", tr.vs_torch, f">= {TARGET_VS_TORCH:g}x", TARGET_VS_TORCH, True),
            ("native / NumPy reference", tr.vs_numpy, f">= {TARGET_VS_NUMPY:g}x", TARGET_VS_NUMPY, True),
            ("fused LLR / generate-only", tr.llr_over_gen, f"<= {TARGET_LLR_OVER_GEN:g}x", TARGET_LLR_OVER_GEN, False),
            ("decode / generate d normals", tr.decode_over_gen, f"<= {TARGET_DECODE_OVER_GEN:g}x", TARGET_DECODE_OVER_GEN, False),
        ]
        for name, value, text, target, hib in checks:
            lines.append(f"  {name:<28} {_ratio(value):>8}   target {text:<8} {_mark(value, target, hib)}")
        lines.append("")

    a = result.agreement
    lines.append(
        f"agreement native vs reference (d=2^{int(math.log2(a.d))}, K={a.k}): "
        f"max |logit diff| {a.max_abs_diff:.2e} = {a.max_abs_diff / a.tolerance:.1e} x tolerance "
        f"(1e-9*sqrt(d)*||phi||/sigma = {a.tolerance:.2e}); "
        f"same index under the same Gumbel noise: {'yes' if a.same_index else 'NO'}; "
        f"decoded candidates bit-identical: {a.bit_identical}/{a.checked} -> {'OK' if a.ok else 'FAIL'}"
    )
    lines.append(f"total time {result.elapsed_s:.1f}s")
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def _parse_sizes(text: str) -> list[int]:
    """``"16-22"``, ``"16,18,20"`` or a mix; values are log2(d)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-", 1))
            out.extend(range(lo, hi + 1))
        else:
            out.append(int(part))
    for s in out:
        if not 1 <= s <= 30:
            raise argparse.ArgumentTypeError(f"size exponents must be in 1..30, got {s}")
    if not out:
        raise argparse.ArgumentTypeError("no sizes given")
    return out


def _parse_extra(text: str) -> list[tuple[int, int]]:
    """``"20:10"`` (log2 d : bits), comma-separated; ``"none"`` for no extra rows."""
    if text.strip().lower() in ("", "none"):
        return []
    out = []
    for part in text.split(","):
        s, b = (int(x) for x in part.split(":", 1))
        if not (1 <= s <= 30 and 1 <= b <= 24):
            raise argparse.ArgumentTypeError(f"bad extra row {part!r}")
        out.append((s, b))
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="threads for dprec and torch (default: dprec's default)")
    p.add_argument("--quick", action="store_true", help="small sizes and one repetition (a smoke test, not a measurement)")
    p.add_argument("--sizes", type=_parse_sizes, default=None, help="log2(d) values at K=2^bits, e.g. 16-22 or 16,20")
    p.add_argument("--bits", type=int, default=None, help="bits of the main rows (K = 2^bits, default 7)")
    p.add_argument("--extra", type=_parse_extra, default=None, help="extra rows as log2d:bits, e.g. 20:10 (default), or none")
    p.add_argument("--repeat", type=int, default=None, help="timed repetitions per cell, median reported (default 3; rows cheaper than d=2^21,K=2^7 get up to 5x more)")
    p.add_argument("--ref-bits", type=int, default=None, help="candidates of the NumPy reference timing: 2^ref_bits (default 3)")
    p.add_argument("--isa", default=None, help="force an instruction set (see dprec.runtime.available_isas())")
    p.add_argument("--stat", choices=("median", "min"), default="median", help="statistic of the repetitions (default median)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch column")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON to PATH")


def _option_value(value: int, option: str, low: int, high: int | None = None) -> int:
    """``value`` of the command-line ``option`` if in ``low..high`` (or ``>= low``); SystemExit naming it otherwise."""
    if high is None:
        if value < low:
            raise SystemExit(f"{option} must be >= {low}")
    elif not low <= value <= high:
        raise SystemExit(f"{option} must be in {low}..{high}")
    return value


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    cfg = BenchConfig()
    if args.quick:
        cfg.sizes = [12, 14]
        cfg.extra = [(14, 9)]
        cfg.repeat = 1
        cfg.ref_bits = 2
        cfg.agree_log2_d = 12
        cfg.agree_bits = 3
    if args.sizes is not None:
        cfg.sizes = args.sizes
    if args.bits is not None:
        cfg.bits = _option_value(args.bits, "--bits", 1, 24)
    if args.extra is not None:
        cfg.extra = args.extra
    if args.repeat is not None:
        cfg.repeat = _option_value(args.repeat, "--repeat", 1)
    if args.ref_bits is not None:
        cfg.ref_bits = _option_value(args.ref_bits, "--ref-bits", 1, 24)
    if args.threads is not None:
        cfg.threads = _option_value(args.threads, "--threads", 1)
    cfg.stat = args.stat
    cfg.torch = not args.no_torch
    cfg.progress = not args.no_progress
    return cfg


def run_from_args(args: argparse.Namespace, out: TextIO | None = None) -> BenchResult:
    from . import runtime  # noqa: PLC0415

    out = out if out is not None else sys.stdout
    cfg = config_from_args(args)
    prev_isa = None
    if args.isa is not None:
        prev_isa = runtime.get_isa_setting()
        try:
            runtime.set_isa(args.isa)
        except Exception as exc:  # noqa: BLE001
            raise SystemExit(f"--isa: {exc}") from None
    try:
        result = run_bench(cfg)
    finally:
        if prev_isa is not None:
            runtime.set_isa(prev_isa)
    print(format_report(result), file=out)
    if args.json:
        import json  # noqa: PLC0415

        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result.as_dict(), f, indent=2)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dprec.bench [options]``; the same as ``dprec bench``."""
    p = argparse.ArgumentParser(prog="dprec bench", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    run_from_args(args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
