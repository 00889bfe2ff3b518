"""dprec's own device memory: :class:`DeviceArray` (public as :class:`dprec.cuda.DeviceArray`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import native as _native

__all__ = ["DeviceArray"]


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
        The memory comes from dprec's pool in stream order on this stream and returns to
        it the same way when the array is collected, without synchronising: work on other
        streams that reads the array must finish before the last reference goes.
    """

    def __init__(self, shape: Any, dtype: str = "float32", *, device: int = 0, stream: int = 0) -> None:
        if dtype not in _TYPESTR:
            raise TypeError(f"dtype must be one of {sorted(_TYPESTR)}, got {dtype!r}")
        if not _native.cuda_available():
            raise ValueError(f"the CUDA backend is unavailable: {_native.cuda_unavailable_reason()}")
        self.shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        if any(s < 0 for s in self.shape):
            raise ValueError(f"shape must not be negative, got {self.shape}")
        self.dtype = np.dtype(_TYPESTR[dtype])
        self.device = int(device)
        self.stream = int(stream)
        self._buffer = _native.cuda_module().DeviceBuffer(self.device, self.stream, self.nbytes)

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

    def reshape(self, *shape: Any) -> "DeviceArray":
        """The same memory with another shape of the same size (a view, no copy), as NumPy's ``reshape``."""
        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        new = tuple(int(s) for s in dims)
        if math.prod(new) != self.size or any(s < 0 for s in new):
            raise ValueError(f"cannot reshape a DeviceArray of {self.size} elements into shape {new}")
        view = object.__new__(DeviceArray)
        view.__dict__.update(self.__dict__)  # the same buffer (kept alive by the view), device, stream
        view.shape = new
        return view

    def get(self) -> np.ndarray:
        """A NumPy copy (waits for the producing stream)."""
        out = np.empty(self.shape, dtype=self.dtype)
        if self.size:
            _native.cuda_module().copy_to_host(self.device, self.stream, self.ptr, out)
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, device=cuda:{self.device})"
