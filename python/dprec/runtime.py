"""Threads and SIMD selection of the native CPU kernels."""

from __future__ import annotations

from ._backend import native
from ._validation import check_int


def set_num_threads(n: int) -> None:
    """Use ``n`` threads in native kernels (0 restores the default).

    The default is the environment variable ``DPREC_NUM_THREADS`` if set, else every
    core. Results never depend on the thread count.
    """
    native().set_num_threads(check_int(n, "n", 0, 4096))


def get_num_threads() -> int:
    """Threads the native kernels use."""
    return int(native().get_num_threads())


def available_isas() -> list[str]:
    """SIMD instruction sets this CPU can run, best first (e.g. ``["avx512", "avx2", "baseline"]``)."""
    return list(native().available_isas())


def get_isa() -> str:
    """The instruction set the native kernels use now."""
    return str(native().get_isa())


def set_isa(name: str) -> None:
    """Force an instruction set (``"auto"`` for the best); also settable as ``DPREC_ISA``.

    Every ISA produces bit-identical candidates; this exists for testing and benchmarks.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    native().set_isa(name)
