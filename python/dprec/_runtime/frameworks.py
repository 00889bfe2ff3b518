"""What dprec knows about each array framework, without linking or importing any of them.

The array layer (:mod:`dprec._runtime.arrays`) asks this module two things about an object: how to
read it (pointer, shape, dtype, device, stream) and how to make a new array like it. The
answers per framework:

* a NumPy array, or anything ``numpy.asarray`` takes: host memory;
* a PyTorch tensor: ``data_ptr()``, and PyTorch's current stream on its device; new arrays
  with ``torch.empty``; scratch from PyTorch's caching allocator;
* anything with ``__cuda_array_interface__`` (CuPy, Numba, dprec's own
  :class:`dprec.cuda.DeviceArray`): the interface's pointer, and its ``stream`` entry
  (version 3; CuPy puts its current stream there) or the legacy default stream; new CuPy
  arrays with ``cupy.empty``, others as a :class:`dprec.cuda.DeviceArray`;
* anything with ``__dlpack__`` on a CUDA device (JAX, ...): the capsule is consumed on the
  legacy default stream, which dprec then runs on.

Nothing is copied to the host. PyTorch and CuPy are imported only when one of their
objects is seen.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import native as _native

_KDL_CUDA = 2
_KDL_CUDA_MANAGED = 13
#: Legacy default stream, as the CUDA runtime and __cuda_array_interface__ spell it.
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


def is_torch_tensor(x: Any) -> bool:
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def torch_dtype_name(t: Any) -> str:
    """The NumPy-style name of a tensor's dtype ("bfloat16" for bfloat16)."""
    return _TORCH_DTYPES.get(str(t.dtype), str(t.dtype))


# ---- scratch memory ------------------------------------------------------------------------


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


# ---- reading GPU arrays --------------------------------------------------------------------


def dlpack_device(x: Any) -> tuple[int, int] | None:
    """``x.__dlpack_device__()``, or None when ``x`` has none (or a broken one)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack_device__"):
        return None
    try:
        t, i = x.__dlpack_device__()
        return int(t), int(i)
    except Exception:  # noqa: BLE001 - a broken producer is treated as "not a GPU array"
        return None


def is_cuda_dlpack(dl: tuple[int, int] | None) -> bool:
    return dl is not None and dl[0] in (_KDL_CUDA, _KDL_CUDA_MANAGED)


def pointer_device(ptr: int) -> int:
    """The CUDA device owning ``ptr``; -1 for host memory, a null pointer, or no CUDA."""
    if not ptr or not _native.cuda_built() or not _native.cuda_available():
        return -1
    return int(_native.cuda_module().pointer_device(int(ptr)))


def c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, unit: int) -> bool:
    """Row-major compact, where ``strides`` are in multiples of ``unit``; size-1 axes are free."""
    if strides is None:
        return True
    expected = unit
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def require_cuda(name: str, where: str) -> None:
    """ValueError naming ``name`` when a GPU array meets a machine where CUDA is unusable."""
    if not _native.cuda_available():
        raise ValueError(
            f"{name} is a GPU array on {where}, but the CUDA backend is unavailable, so backend='cuda' is not "
            f"available here: {_native.cuda_unavailable_reason()}"
        )


def read_torch_cuda(x: Any, name: str) -> dict[str, Any]:
    """Pointer, shape, dtype, device and stream of a PyTorch CUDA tensor."""
    require_cuda(name, str(x.device))
    import torch  # noqa: PLC0415 - present, since x is a tensor

    if not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous on the GPU (call .contiguous() first), got strides {x.stride()}")
    dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(dev).cuda_stream
    shape = tuple(int(s) for s in x.shape)
    return dict(ptr=int(x.data_ptr()), shape=shape, dtype=torch_dtype_name(x), device=dev, stream=int(stream),
                framework="torch")


def read_cuda_array_interface(x: Any, name: str) -> dict[str, Any]:
    """Pointer, shape, dtype, device and stream of a ``__cuda_array_interface__`` producer."""
    cai = x.__cuda_array_interface__
    ptr, readonly = cai["data"]
    shape = tuple(int(s) for s in cai["shape"])
    if cai.get("mask") is not None:
        raise ValueError(f"{name} is a masked GPU array, which is not supported")
    dt = np.dtype(cai["typestr"])
    require_cuda(name, "a CUDA device (it exposes __cuda_array_interface__)")
    dev = pointer_device(int(ptr))
    if not c_contiguous(shape, cai.get("strides"), dt.itemsize):
        raise ValueError(f"{name} must be C-contiguous on the GPU, got strides {cai.get('strides')}")
    if math.prod(shape) and dev < 0:
        raise ValueError(
            f"{name} is not a usable GPU array: it exposes __cuda_array_interface__ but its pointer is not CUDA "
            "device memory"
        )
    stream = cai.get("stream")
    framework = "cupy" if type(x).__module__.split(".")[0] == "cupy" else "cuda_array_interface"
    if framework == "cupy" and dev >= 0:
        # CuPy exports the current stream of the *current* device, which for an array on
        # another device is a stream that cannot order work there: use CuPy's current
        # stream of the array's own device.
        stream = _cupy_stream(dev)
    return dict(ptr=int(ptr), shape=shape, dtype=dt.name, device=dev,
                stream=LEGACY_DEFAULT_STREAM if stream in (None, 1) else int(stream), framework=framework,
                readonly=bool(readonly))


def read_dlpack(x: Any, name: str, dl: tuple[int, int]) -> dict[str, Any]:
    """Pointer, shape, dtype and device of a CUDA ``__dlpack__`` producer (consumed here)."""
    require_cuda(name, f"cuda:{dl[1]}")
    try:  # the producer orders its pending work before the legacy default stream
        capsule = x.__dlpack__(stream=1)
    except TypeError:
        capsule = x.__dlpack__()
    t = _native.cuda_module().dlpack_import(capsule)
    shape = tuple(int(s) for s in t.shape)
    if not c_contiguous(shape, t.strides, 1):
        raise ValueError(f"{name} must be C-contiguous on the GPU, got strides {t.strides} (in elements)")
    # Deleting the import waits for this stream before the producer gets its memory back
    # (bind_dlpack.cpp): DLPack gives no stream-ordered way to return it.
    t.stream = LEGACY_DEFAULT_STREAM
    return dict(ptr=int(t.ptr), shape=shape, dtype=t.dtype, device=int(t.device_id), stream=LEGACY_DEFAULT_STREAM,
                framework="dlpack", keepalive=t)


def _cupy_stream(device: int) -> int:
    """CuPy's current stream on ``device`` as an integer (0 for the legacy default stream)."""
    import cupy  # noqa: PLC0415 - only called for CuPy arrays

    with cupy.cuda.Device(device):
        ptr = int(cupy.cuda.get_current_stream().ptr)
    return LEGACY_DEFAULT_STREAM if ptr in (0, 1) else ptr


# ---- making GPU arrays ---------------------------------------------------------------------


def gpu_empty(framework: str, like_obj: Any, device: int, shape: tuple[int, ...], dtype: str) -> tuple[Any, int]:
    """An uninitialised ``(object, pointer)`` in ``framework`` on ``device``: a torch tensor or
    CuPy array for those frameworks, a :class:`dprec.cuda.DeviceArray` otherwise (allocated
    in stream order by the caller, see :func:`dprec._runtime.arrays.empty`)."""
    if framework == "torch":
        import torch  # noqa: PLC0415

        t = torch.empty(shape, dtype=getattr(torch, dtype), device=like_obj.device)
        return t, int(t.data_ptr())
    import cupy  # noqa: PLC0415 - the only other framework that allocates itself

    with cupy.cuda.Device(device):
        a = cupy.empty(shape, dtype=dtype)
    return a, int(a.data.ptr)
