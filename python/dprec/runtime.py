"""Threads and SIMD selection of the native CPU kernels.

Threads
-------
The native kernels use every core by default. ``DPREC_NUM_THREADS`` (read when the first
kernel runs and by ``set_num_threads(0)``) or :func:`set_num_threads` changes that; results
never depend on the count. ``DPREC_NUM_THREADS`` follows the rule of ``set_num_threads``: a
decimal integer in [0, 4096] (``0``: every core), surrounding whitespace allowed; empty counts
as unset. Any other value (``abc``, ``-1``, ``1.5``, ``100000``) is ignored, the default is
used, and ``import dprec`` (and ``set_num_threads(0)``) gives a :class:`RuntimeWarning`
naming the variable and its value.

When the operating system refuses to start that many threads (a process or memory limit), the
kernel that needed them raises :class:`RuntimeError` naming the count; the threads already
started are stopped, and a smaller ``set_num_threads`` makes the next kernel work.

``set_num_threads`` and ``set_isa`` may be called while kernels run in other threads: they do
not wait for those kernels, which finish with the settings they started with.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._runtime.native import native, warn_num_threads_env
from ._runtime.validation import check_int


def set_num_threads(n: int) -> None:
    """Use ``n`` threads in native kernels, ``0 <= n <= 4096`` (0 restores the default).

    The default is the environment variable ``DPREC_NUM_THREADS`` if it is set to a valid
    count (see the module docstring), else every core. Results never depend on the thread
    count. A kernel running in another thread finishes with the count it started with.
    """
    native().set_num_threads(check_int(n, "n", 0, 4096))
    if n == 0:
        warn_num_threads_env()


def get_num_threads() -> int:
    """Threads the native kernels use."""
    return int(native().get_num_threads())


def available_isas() -> list[str]:
    """SIMD instruction sets this CPU can run, best first.

    ``["avx512", "avx2", "baseline"]`` on x86-64 (without the ones the CPU lacks),
    ``["neon", "baseline"]`` on AArch64 (Linux aarch64, macOS arm64), ``["baseline"]`` elsewhere
    and in macOS universal2 builds.
    """
    return list(native().available_isas())


def get_isa() -> str:
    """The instruction set the native kernels use now."""
    return str(native().get_isa())


def get_isa_setting() -> str:
    """``"auto"`` while the instruction set is the automatic choice, else the chosen one's name.

    What to give ``set_isa`` to restore the setting later: restoring ``get_isa()`` instead
    would pin the automatic choice's ISA and so turn off the per-kernel choices that only the
    automatic setting makes (``fwht_isa``).
    """
    return "auto" if native().isa_is_auto() else get_isa()


def fwht_isa(dtype: Any = "float32") -> str:
    """The instruction set whose kernels the CPU FWHT runs for ``dtype`` (float32 or float64).

    The ISA in use (``get_isa``), except under the automatic choice (no ``DPREC_ISA``, no
    ``set_isa`` but ``"auto"``): then every SIMD instruction set is timed once, on first use,
    on an in-cache transform, and the fastest runs the FWHT (on AMD Zen 4, which splits 512-bit
    operations in two, AVX2 beats AVX-512 by about 20%). Every instruction set gives the same
    bits, so this changes speed only.
    """
    kind = np.dtype(dtype)
    if kind not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dtype must be float32 or float64, got {kind}")
    return str(native().fwht_isa(kind == np.dtype(np.float64)))


def cache_sizes() -> dict[str, int | str]:
    """Data cache sizes the native kernels block for: ``{"l1d", "l2", "l3"}`` in bytes, and ``"source"``.

    ``l1d`` and ``l2`` are per core, ``l3`` the last-level cache as the system reports it
    (shared by its cores). Read once from the operating system (Linux sysfs or sysconf, macOS
    sysctl, Windows ``GetLogicalProcessorInformation``) or x86 CPUID; a size none of them
    gives is a safe default (32 KiB, 1 MiB, 8 MiB) and ``source`` says so. Block sizes change
    speed only, never results.
    """
    return dict(native().cache_sizes())


def cache_summary() -> str:
    """``cache_sizes()`` in one line, e.g. ``"L1d 32 KiB, L2 1 MiB, L3 32 MiB (sysfs)"``."""
    c = cache_sizes()

    def size(b: int | str) -> str:
        v = int(b)
        return f"{v >> 20} MiB" if v >= 1 << 20 and v % (1 << 20) == 0 else f"{v >> 10} KiB"

    return f"L1d {size(c['l1d'])}, L2 {size(c['l2'])}, L3 {size(c['l3'])} ({c['source']})"


def set_isa(name: str) -> None:
    """Force an instruction set (``"auto"`` for the best); also settable as ``DPREC_ISA``.

    Every ISA produces bit-identical candidates; this exists for testing and benchmarks.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    native().set_isa(name)
