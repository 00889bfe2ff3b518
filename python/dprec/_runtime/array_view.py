"""The :class:`Array` view every layer beneath the public API passes around.

It is a plain value: the array layer (:mod:`.arrays`) makes one per argument, dispatch reads
where it lives, the backends read its memory. It sits beneath all of them, so that using it
never calls back up into the layer that made it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import frameworks as _frameworks

#: ``Array.device`` of host memory.
HOST = -1
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "uint32": 4, "int64": 8, "uint64": 8}


class Array:
    """One array argument (or result) of a call: its memory, shape, dtype and place.

    Attributes
    ----------
    obj : the caller's object (it keeps the memory alive), or the one made for a result
    host : numpy.ndarray or None
        The host memory; None on a GPU (and, before :func:`float_input`, for a PyTorch CPU
        tensor not yet converted).
    ptr : int
        Device pointer (0 on the host).
    shape : tuple of int
    dtype : str
        NumPy-style name; "bfloat16" for bfloat16.
    device : int
        CUDA ordinal, or ``HOST`` (-1).
    stream : int
        ``cudaStream_t`` of the caller's current stream, as an integer (0 on the host).
    framework : str
        "numpy", "torch", "cupy", "cuda_array_interface" or "dlpack".
    readonly : bool
    on_gpu : bool
        ``device != HOST``.
    size : int
        The number of elements.
    label : str
        Where the array lives: "cpu" or "cuda:N".

    The fields are set once (an Array is never changed: a view or a conversion is a new one);
    ``on_gpu``, ``size`` and ``label`` are plain fields so that reading them calls nothing.
    """

    __slots__ = (
        "obj",
        "host",
        "ptr",
        "shape",
        "dtype",
        "device",
        "stream",
        "framework",
        "readonly",
        "keepalive",
        "on_gpu",
        "size",
        "label",
    )

    def __init__(
        self,
        obj: Any,
        host: np.ndarray | None,
        ptr: int,
        shape: tuple[int, ...],
        dtype: str,
        device: int,
        stream: int,
        framework: str,
        readonly: bool = False,
        keepalive: Any = None,
    ) -> None:
        self.obj, self.host, self.ptr, self.shape, self.dtype = obj, host, ptr, shape, dtype
        self.device, self.stream, self.framework, self.readonly, self.keepalive = (
            device,
            stream,
            framework,
            readonly,
            keepalive,
        )
        self.on_gpu = device != HOST
        self.size = math.prod(shape)
        self.label = f"cuda:{device}" if self.on_gpu else "cpu"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype) or np.dtype(self.dtype).itemsize

    @property
    def scratch(self) -> Any:
        """Where kernels working on this array take device scratch memory (see _frameworks)."""
        return _frameworks.scratch_allocator(self.framework)

    def offset(self, elements: int) -> int:
        """The device pointer ``elements`` items further on."""
        return self.ptr + elements * self.itemsize

    def flat(self, start: int, size: int) -> Array:
        """Elements ``start .. start + size - 1`` in flat (C) order, as a 1-D view (no copy)."""
        if self.on_gpu:
            return self._device_view(self.offset(start), (size,))
        assert self.host is not None
        return self._host_view(self.host.reshape(-1)[start : start + size])

    def reshaped(self, shape: tuple[int, ...]) -> Array:
        """The same memory with another shape of the same size (no copy)."""
        if self.on_gpu:
            return self._device_view(self.ptr, tuple(shape))
        assert self.host is not None
        return self._host_view(self.host.reshape(shape))

    def _device_view(self, ptr: int, shape: tuple[int, ...]) -> Array:
        return Array(
            self.obj,
            None,
            ptr,
            shape,
            self.dtype,
            self.device,
            self.stream,
            self.framework,
            self.readonly,
            self.keepalive,
        )

    def _host_view(self, view: np.ndarray) -> Array:
        return Array(view, view, 0, tuple(view.shape), self.dtype, HOST, 0, "numpy", self.readonly)

    def result(self) -> Any:
        """What a public function returns for this array: the NumPy array on the host, the
        framework's object on a GPU."""
        return self.obj if self.on_gpu else self.host

    def __repr__(self) -> str:
        return f"Array({self.framework}, {self.dtype}{list(self.shape)}, {self.label})"
