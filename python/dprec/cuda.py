"""The CUDA backend: availability, devices, and dprec's own device arrays.

DP-REC runs on the GPU whenever its inputs are GPU arrays (PyTorch CUDA tensors, CuPy
arrays, or anything exposing ``__cuda_array_interface__`` or ``__dlpack__``), through
the same functions as on the CPU (:mod:`dprec.rec`, :mod:`dprec.philox`,
:class:`dprec.DPRECCodec`). Work is queued on the caller's current stream and the host
waits only where a host value is returned (an index, a norm, a message).

The backend is optional: without a GPU, a driver, or a CUDA build, ``import dprec``
works and :func:`is_available` says why the backend cannot be used.

Memory. Kernels that need temporary device memory (norms, log-likelihood ratios,
sampling, aggregation, the FWHT's work buffer, the count-sketch sort) take it from the
caller's framework: PyTorch's caching allocator for PyTorch tensors, CuPy's allocator for
CuPy arrays, on the call's stream, so it is shared with the rest of your program and
shows up in ``torch.cuda.memory_allocated()`` while a call runs. For other producers
(DLPack, ``__cuda_array_interface__``) and for :class:`DeviceArray`, dprec uses a memory
pool of its own per device: freed memory is kept for reuse up to a release threshold
(by default min(1 GiB, 1/16 of the device's memory); :func:`set_memory_pool_release_threshold`)
and handed back to the driver above it; :func:`empty_cache` hands it all back. A failed
allocation raises :class:`MemoryError` and leaves the backend usable.

Kernels are loaded on a device's first use (all of them at once): under CUDA's default
lazy module loading, loading can wait for work already queued on that device, so that
first call may wait once; later calls never do. ``CUDA_MODULE_LOADING=EAGER`` loads
them when the process first touches the device instead.
"""

from __future__ import annotations

import numpy as np

from ._runtime import native as _native
from ._runtime.device_array import DeviceArray

__all__ = [
    "is_available",
    "unavailable_reason",
    "device_count",
    "device_name",
    "build_architectures",
    "DeviceArray",
    "empty_cache",
    "memory_pool_reserved",
    "memory_pool_release_threshold",
    "set_memory_pool_release_threshold",
]


def is_available() -> bool:
    """True when dprec was built with CUDA and a GPU is usable."""
    return _native.cuda_available()


def unavailable_reason() -> str:
    """Why the CUDA backend cannot be used here ('' when it can)."""
    return "" if is_available() else _native.cuda_unavailable_reason()


def device_count() -> int:
    """Number of usable CUDA devices (0 without a CUDA build, a driver or a GPU)."""
    return _native.device_count()


def build_architectures() -> list[str]:
    """The GPU targets this build's kernels were compiled for, as CMake names them.

    ``"90"`` is machine code for sm_90 plus PTX, ``"80-real"`` machine code only and
    ``"75-virtual"`` PTX only, which the driver compiles for the GPU at first use. Empty when
    dprec was built without CUDA. Works without a GPU or driver.
    """
    return _native.cuda_build_architectures()


def device_name(device: int = 0) -> str:
    """The name and compute capability of a device, e.g. ``'NVIDIA H100 (sm_90)'``."""
    if not is_available():
        raise ValueError(f"the CUDA backend is unavailable: {unavailable_reason()}")
    return str(_native.cuda_module().device_name(int(device)))


def _device_index(device: int) -> int:
    if not is_available():
        raise ValueError(f"the CUDA backend is unavailable: {unavailable_reason()}")
    if isinstance(device, bool) or not isinstance(device, (int, np.integer)):
        raise TypeError(f"device must be an int, got {type(device).__name__}")
    return int(device)


def empty_cache(device: int = 0) -> None:
    """Wait for ``device``, then return the unused memory of dprec's pool to the driver.

    Memory that dprec took from PyTorch or CuPy goes back to their caches when a call
    ends; release it with ``torch.cuda.empty_cache()`` or CuPy's pool."""
    _native.cuda_module().empty_cache(_device_index(device))


def memory_pool_reserved(device: int = 0) -> int:
    """Bytes that dprec's own pool on ``device`` holds, in use or kept for reuse."""
    return int(_native.cuda_module().memory_pool_reserved(_device_index(device)))


def memory_pool_release_threshold(device: int = 0) -> int:
    """Bytes of freed memory that dprec's pool on ``device`` keeps for reuse."""
    return int(_native.cuda_module().memory_pool_release_threshold(_device_index(device)))


def set_memory_pool_release_threshold(nbytes: int, device: int = 0) -> None:
    """Keep up to ``nbytes`` of freed memory in dprec's pool on ``device`` (0: return all
    freed memory to the driver at each synchronisation)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise ValueError(f"nbytes must be an int >= 0, got {nbytes!r}")
    _native.cuda_module().set_memory_pool_release_threshold(_device_index(device), int(nbytes))
