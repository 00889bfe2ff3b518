"""GPU arrays from any framework, without linking one (SPEC §1).

A GPU array reaches the CUDA kernels as a :class:`GpuArray`: a device pointer with its
shape, dtype and device, plus the stream the caller is working on. It is read from

* a PyTorch CUDA tensor: ``data_ptr()``, and PyTorch's current stream on its device;
* anything with ``__cuda_array_interface__`` (CuPy, Numba, dprec's own
  :class:`dprec.cuda.DeviceArray`): the interface's pointer, and its ``stream`` entry
  (version 3; CuPy puts its current stream there) or the legacy default stream;
* anything with ``__dlpack__`` on a CUDA device (JAX, ...): the capsule is consumed on
  the legacy default stream, which dprec then runs on.

Nothing is copied to the host. Non-contiguous GPU arrays are rejected (making them
contiguous is a device copy the caller should choose to make). Results are allocated by
the caller's framework (``torch.empty``, ``cupy.empty``), or as a
:class:`dprec.cuda.DeviceArray` for other producers, on the input's device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _backend
from ._validation import is_torch_tensor

_KDL_CUDA = 2
_KDL_CUDA_MANAGED = 13
# Legacy default stream, as the CUDA runtime and __cuda_array_interface__ spell it.
LEGACY_DEFAULT_STREAM = 0

_TORCH_DTYPES = {
    "torch.float16": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float32": "float32",
    "torch.float64": "float64",
    "torch.int64": "int64",
    "torch.int32": "int32",
    "torch.uint32": "uint32",
    "torch.uint64": "uint64",
    "torch.int16": "int16",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.bool": "bool",
    "torch.complex64": "complex64",
    "torch.complex128": "complex128",
}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


class _TorchScratch:
    """Scratch memory from PyTorch's caching allocator, on the call's stream.

    Blocks freed here go back to PyTorch's cache for that stream (never to the driver), so
    dprec and PyTorch share one pool: dprec cannot run out of memory while PyTorch holds
    free blocks, and no synchronisation returns memory to the driver."""

    def allocate(self, device: int, stream: int, nbytes: int) -> int:
        import torch  # noqa: PLC0415 - only built for a torch tensor

        try:
            return int(torch.cuda.caching_allocator_alloc(int(nbytes), int(device), int(stream)))
        except torch.OutOfMemoryError as e:
            raise MemoryError(
                f"CUDA out of memory: dprec needs {nbytes} bytes of scratch on cuda:{device} "
                f"(from PyTorch's caching allocator): {e}"
            ) from None

    def free(self, ptr: int) -> None:
        import torch  # noqa: PLC0415

        torch.cuda.caching_allocator_delete(int(ptr))


class _CupyScratch:
    """Scratch memory from CuPy's current allocator (its memory pool by default)."""

    def __init__(self) -> None:
        self._live: dict[int, Any] = {}

    def allocate(self, device: int, stream: int, nbytes: int) -> int:
        import cupy  # noqa: PLC0415 - only built for a CuPy array

        with cupy.cuda.Device(device):
            # The pool keeps freed blocks per stream: allocate on the stream the kernels use.
            cp_stream = cupy.cuda.ExternalStream(stream) if stream else cupy.cuda.Stream.null
            try:
                with cp_stream:
                    mem = cupy.cuda.alloc(int(nbytes))
            except cupy.cuda.memory.OutOfMemoryError as e:
                raise MemoryError(
                    f"CUDA out of memory: dprec needs {nbytes} bytes of scratch on cuda:{device} "
                    f"(from CuPy's allocator): {e}"
                ) from None
        self._live[int(mem.ptr)] = mem
        return int(mem.ptr)

    def free(self, ptr: int) -> None:
        self._live.pop(int(ptr), None)


_SCRATCH: dict[str, Any] = {}


def scratch_allocator(framework: str) -> Any:
    """The scratch source for a call on ``framework``'s arrays: PyTorch's or CuPy's caching
    allocator, or None (dprec's own pool, see :func:`dprec.cuda.empty_cache`)."""
    if framework not in ("torch", "cupy"):
        return None
    if framework not in _SCRATCH:
        _SCRATCH[framework] = _TorchScratch() if framework == "torch" else _CupyScratch()
    return _SCRATCH[framework]


@dataclass
class GpuArray:
    """A device pointer with everything a kernel launch needs."""

    obj: Any  # the caller's object (keeps the memory alive)
    ptr: int
    shape: tuple[int, ...]
    dtype: str  # NumPy-style name; "bfloat16" for bfloat16
    device: int
    stream: int  # cudaStream_t of the caller's current stream, as an integer
    framework: str  # "torch", "cupy", "cuda_array_interface" or "dlpack"
    readonly: bool = False
    keepalive: Any = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype) or np.dtype(self.dtype).itemsize

    @property
    def label(self) -> str:
        return f"cuda:{self.device}"

    @property
    def scratch(self) -> Any:
        """Where the kernels of a call on this array take their scratch memory."""
        return scratch_allocator(self.framework)

    def offset(self, elements: int) -> int:
        """The pointer ``elements`` items further on."""
        return self.ptr + elements * self.itemsize


def device_of(x: Any) -> str | None:
    """``"cuda:N"`` for a GPU array, ``None`` for anything else; imports nothing."""
    if is_torch_tensor(x):
        return None if x.device.type == "cpu" else str(x.device)
    if hasattr(x, "__cuda_array_interface__"):
        dev = pointer_device(x.__cuda_array_interface__["data"][0])
        return f"cuda:{dev}" if dev >= 0 else "cuda:?"
    dl = _dlpack_device(x)
    if dl is not None and dl[0] in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        return f"cuda:{dl[1]}"
    return None


def is_gpu_array(x: Any) -> bool:
    d = device_of(x)
    return d is not None and d.startswith("cuda")


def _dlpack_device(x: Any) -> tuple[int, int] | None:
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack_device__"):
        return None
    try:
        t, i = x.__dlpack_device__()
        return int(t), int(i)
    except Exception:  # noqa: BLE001 - a broken producer is treated as "not a GPU array"
        return None


def _cuda_module() -> Any:
    return _backend.cuda_module()


def pointer_device(ptr: int) -> int:
    """The CUDA device owning ``ptr``; -1 for host memory, a null pointer, or no CUDA."""
    if not ptr or not _backend.cuda_built() or not _backend.cuda_available():
        return -1
    return int(_backend.cuda_module().pointer_device(int(ptr)))


def _c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, unit: int) -> bool:
    """Row-major compact, where ``strides`` are in multiples of ``unit``; size-1 axes are free."""
    if strides is None:
        return True
    expected = unit
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _require_backend(name: str, where: str) -> None:
    if not _backend.cuda_available():
        raise ValueError(
            f"{name} is a GPU array on {where}, but the CUDA backend is unavailable: {_backend.cuda_unavailable_reason()}"
        )


def gpu_array(x: Any, name: str) -> GpuArray | None:
    """The GPU view of ``x``, or ``None`` when ``x`` is not on a GPU.

    Raises ValueError for a non-contiguous GPU array, or when the CUDA backend is not
    usable on this machine.
    """
    if is_torch_tensor(x):
        if x.device.type != "cuda":
            return None
        _require_backend(name, str(x.device))
        import torch  # noqa: PLC0415 - present, since x is a tensor

        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous on the GPU (call .contiguous() first), got strides {x.stride()}")
        dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
        dtype = _TORCH_DTYPES.get(str(x.dtype), str(x.dtype))
        stream = torch.cuda.current_stream(dev).cuda_stream
        return GpuArray(x, int(x.data_ptr()), tuple(int(s) for s in x.shape), dtype, dev, int(stream), "torch")

    if hasattr(x, "__cuda_array_interface__"):
        cai = x.__cuda_array_interface__
        ptr, readonly = cai["data"]
        shape = tuple(int(s) for s in cai["shape"])
        if cai.get("mask") is not None:
            raise ValueError(f"{name} is a masked GPU array, which is not supported")
        dt = np.dtype(cai["typestr"])
        dtype = dt.name
        _require_backend(name, "a CUDA device (it exposes __cuda_array_interface__)")
        dev = pointer_device(int(ptr))
        if not _c_contiguous(shape, cai.get("strides"), dt.itemsize):
            raise ValueError(f"{name} must be C-contiguous on the GPU, got strides {cai.get('strides')}")
        if math.prod(shape) and dev < 0:
            raise ValueError(
                f"{name} is not a usable GPU array: it exposes __cuda_array_interface__ but its pointer is not CUDA "
                "device memory"
            )
        stream = cai.get("stream")
        framework = "cupy" if type(x).__module__.split(".")[0] == "cupy" else "cuda_array_interface"
        if framework == "cupy" and dev >= 0:
            # CuPy exports the current stream of the *current* device, which for an array
            # on another device is a stream that cannot order work there: use CuPy's
            # current stream of the array's own device.
            stream = _cupy_stream(dev)
        return GpuArray(
            x,
            int(ptr),
            shape,
            dtype,
            dev,
            LEGACY_DEFAULT_STREAM if stream in (None, 1) else int(stream),
            framework,
            readonly=bool(readonly),
        )

    dl = _dlpack_device(x)
    if dl is not None and dl[0] in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        where = f"cuda:{dl[1]}"
        _require_backend(name, where)
        try:  # the producer orders its pending work before the legacy default stream
            capsule = x.__dlpack__(stream=1)
        except TypeError:
            capsule = x.__dlpack__()
        t = _cuda_module().dlpack_import(capsule)
        shape = tuple(int(s) for s in t.shape)
        if not _c_contiguous(shape, t.strides, 1):
            raise ValueError(f"{name} must be C-contiguous on the GPU, got strides {t.strides} (in elements)")
        # Deleting the import waits for this stream before the producer gets its memory back
        # (bind_dlpack.cpp): DLPack gives no stream-ordered way to return it.
        t.stream = LEGACY_DEFAULT_STREAM
        return GpuArray(x, int(t.ptr), shape, t.dtype, int(t.device_id), LEGACY_DEFAULT_STREAM, "dlpack", keepalive=t)
    return None


def _cupy_stream(device: int) -> int:
    """CuPy's current stream on ``device`` as an integer (0 for the legacy default stream)."""
    import cupy  # noqa: PLC0415 - only called for CuPy arrays

    with cupy.cuda.Device(device):
        ptr = int(cupy.cuda.get_current_stream().ptr)
    return LEGACY_DEFAULT_STREAM if ptr in (0, 1) else ptr


def required_float_gpu_array(x: Any, name: str) -> GpuArray:
    """:func:`float_gpu_array` for an object already known to be on a GPU."""
    g = float_gpu_array(x, name)
    if g is None:
        raise ValueError(f"{name} is not a GPU array")
    return g


def float_gpu_array(x: Any, name: str, check_shape: Any = None) -> GpuArray | None:
    """:func:`gpu_array` restricted to floating point (SPEC §7): float16 and bfloat16 are
    converted to float32 on the device, integers and others raise TypeError.
    ``check_shape(shape)``, when given, runs before that conversion allocates anything."""
    g = gpu_array(x, name)
    if g is None:
        return None
    if check_shape is not None and g.dtype in ("float16", "bfloat16") and g.size:
        check_shape(tuple(g.shape))  # before the float32 copy; other errors keep their usual order
    if g.dtype in ("float32", "float64"):
        pass
    elif g.dtype in ("float16", "bfloat16"):
        g = to_float32(g)
    else:
        kind = "integer" if "int" in g.dtype else g.dtype
        raise TypeError(f"{name} must be a floating-point array (float16, bfloat16, float32 or float64), got {kind} dtype {g.dtype}")
    if g.size == 0:
        raise ValueError(f"{name} must not be empty")
    return g


def to_float32(g: GpuArray) -> GpuArray:
    """A float32 copy of a float16 / bfloat16 / float64 GPU array, on its device and stream."""
    out = empty_like(g, g.shape, "float32")
    if g.size:
        _cuda_module().to_float32(g.device, g.stream, g.ptr, g.dtype, g.size, out.ptr)
    return out


def empty_like(like: GpuArray, shape: tuple[int, ...], dtype: str) -> GpuArray:
    """An uninitialised array in ``like``'s framework, on its device and stream."""
    if like.framework == "torch":
        import torch  # noqa: PLC0415

        t = torch.empty(shape, dtype=getattr(torch, dtype), device=like.obj.device)
        return GpuArray(t, int(t.data_ptr()), tuple(shape), dtype, like.device, like.stream, "torch")
    if like.framework == "cupy":
        import cupy  # noqa: PLC0415

        with cupy.cuda.Device(like.device):
            a = cupy.empty(shape, dtype=dtype)
        return GpuArray(a, int(a.data.ptr), tuple(shape), dtype, like.device, like.stream, "cupy")
    return new_device_array(like.device, like.stream, shape, dtype)


def new_device_array(device: int, stream: int, shape: tuple[int, ...], dtype: str) -> GpuArray:
    from .cuda import DeviceArray  # noqa: PLC0415 - cuda imports this module

    a = DeviceArray(shape, dtype, device=device, stream=stream)
    return GpuArray(a, a.ptr, tuple(shape), dtype, device, stream, "cuda_array_interface")


def gpu_out(out: Any, count: int, dtype: str, backend: str) -> GpuArray | None:
    """The checked GPU view of ``out`` (None for host output); backend "cuda" without
    ``out`` allocates a :class:`dprec.cuda.DeviceArray` on device 0."""
    g = gpu_array(out, "out") if out is not None else None
    if _backend.resolve(backend, g.label if g else None, "out", host_data=out is not None) != "cuda":
        return None
    if g is None:
        return new_device_array(0, LEGACY_DEFAULT_STREAM, (count,), dtype)
    if g.dtype != dtype:
        raise TypeError(f"out must have dtype {dtype}, got {g.dtype}")
    if g.size != count:
        raise ValueError(f"out must have {count} elements, got {g.size}")
    if g.readonly:
        raise ValueError("out is read-only")
    return g


def same_device(arrays: list[tuple[str, GpuArray | None]]) -> None:
    """ValueError when the named arrays of one call are not all on the same device."""
    first: tuple[str, str] | None = None
    for name, g in arrays:
        where = "cpu" if g is None else g.label
        if first is None:
            first = (name, where)
        elif where != first[1]:
            raise ValueError(f"{name} is on {where} but {first[0]} is on {first[1]}; all arrays of one call must be on one device")
