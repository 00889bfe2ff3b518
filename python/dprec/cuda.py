"""The CUDA backend: availability, devices, and dprec's own device arrays.

DP-REC runs on the GPU whenever its inputs are GPU arrays (PyTorch CUDA tensors, CuPy
arrays, or anything exposing ``__cuda_array_interface__`` or ``__dlpack__``), through
the same functions as on the CPU (:mod:`dprec.rec`, :mod:`dprec.philox`,
:class:`dprec.DPRECCodec`). Work is queued on the caller's current stream and the host
waits only where a host value is returned (an index, a norm, a message).

The backend is optional: without a GPU, a driver, or a CUDA build, ``import dprec``
works and :func:`is_available` says why the backend cannot be used.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _backend

__all__ = ["is_available", "unavailable_reason", "device_count", "device_name", "DeviceArray"]


def is_available() -> bool:
    """True when dprec was built with CUDA and a GPU is usable."""
    return _backend.cuda_available()


def unavailable_reason() -> str:
    """Why the CUDA backend cannot be used here ('' when it can)."""
    return "" if is_available() else _backend.cuda_unavailable_reason()


def device_count() -> int:
    """Number of usable CUDA devices (0 without a CUDA build, a driver or a GPU)."""
    return _backend.device_count()


def device_name(device: int = 0) -> str:
    """The name and compute capability of a device, e.g. ``'NVIDIA H100 (sm_90)'``."""
    if not is_available():
        raise ValueError(f"the CUDA backend is unavailable: {unavailable_reason()}")
    return str(_backend.cuda_module().device_name(int(device)))


_TYPESTR = {"float32": "<f4", "float64": "<f8", "int64": "<i8", "uint32": "<u4", "uint64": "<u8", "float16": "<f2"}


class DeviceArray:
    """A C-contiguous array in device memory owned by dprec.

    dprec returns one where it must allocate a GPU result but the caller's framework is
    unknown (for example ``rec.candidate(..., backend="cuda")``). It exposes
    ``__cuda_array_interface__`` (version 3), so ``torch.as_tensor(a, device="cuda")``,
    ``cupy.asarray(a)`` or Numba use it without a copy; :meth:`get` copies it to NumPy.

    Parameters
    ----------
    shape : tuple of int
    dtype : {"float32", "float64", "int64", "uint32", "uint64", "float16"}
    device : int
        CUDA device ordinal.
    stream : int
        The stream its contents are produced on (a ``cudaStream_t`` as an integer; 0 is
        the legacy default stream). Consumers synchronise with it through the interface.
    """

    def __init__(self, shape: Any, dtype: str = "float32", *, device: int = 0, stream: int = 0) -> None:
        if dtype not in _TYPESTR:
            raise TypeError(f"dtype must be one of {sorted(_TYPESTR)}, got {dtype!r}")
        if not is_available():
            raise ValueError(f"the CUDA backend is unavailable: {unavailable_reason()}")
        self.shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"shape must not be negative, got {self.shape}")
        self.dtype = np.dtype(_TYPESTR[dtype])
        self.device = int(device)
        self.stream = int(stream)
        self._buffer = _backend.cuda_module().DeviceBuffer(self.device, self.nbytes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ptr(self) -> int:
        return int(self._buffer.ptr)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            # The interface spells the legacy default stream 1 (0 is not allowed).
            "stream": self.stream if self.stream else 1,
        }

    def get(self) -> np.ndarray:
        """A NumPy copy (waits for the producing stream)."""
        out = np.empty(self.shape, dtype=self.dtype)
        if self.size:
            _backend.cuda_module().copy_to_host(self.device, self.stream, self.ptr, out)
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, device=cuda:{self.device})"
