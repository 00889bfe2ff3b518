"""The array layer: every array argument of the public API becomes one :class:`Array`.

An :class:`Array` (defined in :mod:`.array_view`, beneath this module and the backends, which
read its fields) says where an argument lives (the host, or a CUDA device with the
caller's stream), its shape and dtype, and how to reach its memory (a NumPy array on the
host, a device pointer on a GPU). It is made by :func:`read` from any accepted input:
NumPy arrays and anything ``numpy.asarray`` takes, PyTorch tensors (CPU or CUDA), CuPy
arrays, ``__cuda_array_interface__`` and ``__dlpack__`` producers (see
:mod:`dprec._runtime.frameworks`).

The rules of the *Bad input* page of the docs are written here once and serve the host and the GPU alike:

* :func:`float_input`: float16 and bfloat16 are converted to float32, float32 and float64
  are kept, integers, booleans and complex numbers are refused (TypeError naming the
  argument); sizes and shapes are checked before anything is converted or copied; empty
  arrays and NaN or infinity are refused (ValueError naming the argument); non-contiguous
  host arrays are copied, non-contiguous GPU arrays are refused (making them contiguous is
  a device copy the caller should choose to make).
* :func:`output`: an ``out=`` argument has the right dtype and size, is writeable and
  contiguous, and lives where the inputs live; without one, a new array is made there.
* :func:`empty` makes results on the input's device in the input's framework (NumPy on
  the host). :meth:`Array.result` is what a public function hands back.

Work this layer needs on a device (a dtype conversion, a finiteness scan) is done by the
kernels of the array's own backend (:func:`dprec._runtime.dispatch.owner`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..constants import MAX_STREAM_ELEMENTS
from . import dispatch as _dispatch
from . import frameworks as _frameworks
from .array_view import HOST, Array
from .frameworks import LEGACY_DEFAULT_STREAM, is_torch_tensor
from .validation import check_size

if TYPE_CHECKING:
    from .backends import Kernels

_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
_KIND_WORDS = {"b": "boolean", "i": "integer", "u": "integer", "c": "complex"}

def _host(a: np.ndarray, obj: Any = None) -> Array:
    dt = a.dtype
    name = _NP_NAMES.get(dt) or dt.name  # dtype.name is slow to compute: the common ones first
    return Array(a if obj is None else obj, a, 0, a.shape, name, HOST, 0, "numpy", not a.flags.writeable)


_NP_NAMES = {np.dtype(t): np.dtype(t).name for t in (np.float16, np.float32, np.float64, np.uint32, np.uint64, np.int64)}
_NP_DTYPES = {name: dt for dt, name in _NP_NAMES.items()}


def read(x: Any, name: str) -> Array:
    """The :class:`Array` of ``x``, host or GPU; nothing is converted or copied.

    Raises ValueError for a non-contiguous GPU array, for a GPU array where the CUDA
    backend cannot run, and for a tensor on a device other than the CPU or CUDA.
    """
    if isinstance(x, Array):
        return x
    if isinstance(x, np.ndarray):
        return _host(x)
    if is_torch_tensor(x):
        kind = x.device.type
        if kind == "cpu":
            return Array(x, None, 0, tuple(int(s) for s in x.shape), _frameworks.torch_dtype_name(x), HOST, 0,
                         "torch")
        if kind == "cuda":
            return Array(x, None, **_frameworks.read_torch_cuda(x, name))
        raise ValueError(f"{name} is on device '{x.device}', but a host array is needed here")
    if hasattr(x, "__cuda_array_interface__"):
        return Array(x, None, **_frameworks.read_cuda_array_interface(x, name))
    dl = _frameworks.dlpack_device(x)
    if _frameworks.is_cuda_dlpack(dl):
        assert dl is not None
        return Array(x, None, **_frameworks.read_dlpack(x, name, dl))
    return _host(np.asarray(x), x)


def device_of(x: Any) -> str | None:
    """``"cuda:N"`` for a GPU array, ``None`` for anything else; reads and imports nothing."""
    if is_torch_tensor(x):
        return None if x.device.type == "cpu" else str(x.device)
    if hasattr(x, "__cuda_array_interface__"):
        dev = _frameworks.pointer_device(x.__cuda_array_interface__["data"][0])
        return f"cuda:{dev}" if dev >= 0 else "cuda:?"
    dl = _frameworks.dlpack_device(x)
    return f"cuda:{dl[1]}" if dl is not None and _frameworks.is_cuda_dlpack(dl) else None


def is_gpu_array(x: Any) -> bool:
    d = device_of(x)
    return d is not None and d.startswith("cuda")


# ---- the host side of reading --------------------------------------------------------------


def to_numpy(x: Any, name: str) -> np.ndarray:
    """A NumPy view or copy of a host array-like; a PyTorch tensor must be on the CPU
    (float16/bfloat16 tensors become float32, since NumPy has no bfloat16)."""
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise ValueError(f"{name} is on device '{x.device}', but a host array is needed here")
        import torch  # noqa: PLC0415 - torch is optional and imported lazily

        if x.layout != torch.strided:
            raise TypeError(f"{name} must be a dense (strided) tensor, got layout {x.layout}; use .to_dense()")
        if x.is_floating_point() and x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise TypeError(
                f"{name} must be float16, bfloat16, float32 or float64, got {x.dtype}; convert it with .float()"
            )
        t = x.detach()
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.to(torch.float32)
        return t.resolve_conj().resolve_neg().numpy()
    if hasattr(x, "__cuda_array_interface__"):
        raise ValueError(f"{name} is a GPU array, but a host array is needed here")
    return np.asarray(x)


def host_array(a: Array, name: str) -> Array:
    """``a`` with its NumPy array materialised (a PyTorch CPU tensor viewed or converted)."""
    if a.host is not None or a.on_gpu:
        return a
    return _host(to_numpy(a.obj, name), a.obj)


# ---- validation ----------------------------------------------------------------------------


def float_dtype_error(name: str, dtype: Any) -> TypeError:
    """The TypeError for a non-floating-point array argument."""
    dt = str(dtype)
    if dt.startswith("torch."):  # a PyTorch dtype NumPy does not know (float8, ...)
        return TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {dt}; convert it with .float()")
    try:
        kind = _KIND_WORDS.get(np.dtype(dt).kind, dt)
    except TypeError:
        kind = dt
    return TypeError(f"{name} must be a floating-point array (float16, bfloat16, float32 or float64), got {kind} dtype {dt}")


def is_float_dtype(dtype: str) -> bool:
    """float16, bfloat16, float32, float64 (and other NumPy floats, converted to float32)."""
    if dtype in _FLOAT_NAMES:
        return True
    try:
        return np.dtype(dtype).kind == "f"  # e.g. long double: converted to float32
    except TypeError:
        return False


@dataclass(frozen=True)
class ShapeRule:
    """A mechanism's shape rule for one array argument, as data: :func:`float_input` checks it on
    the argument itself, before anything is converted or copied (no callback into the caller).

    ``shape``: the exact shape. ``last_axis``: the exact length of the last axis, named
    ``last_axis_name`` in the message. ``max_log2``: the last axis is a power of two up to
    ``2**max_log2``.
    """

    shape: tuple[int, ...] | None = None
    last_axis: int | None = None
    last_axis_name: str = ""
    max_log2: int | None = None

    def check(self, shape: tuple[int, ...], name: str) -> None:
        if self.shape is not None and shape != self.shape:
            raise ValueError(f"{name} must have shape {self.shape}, got {shape}")
        if self.last_axis is not None and (not shape or shape[-1] != self.last_axis):
            raise ValueError(
                f"{name} must have a last axis of length {self.last_axis_name}={self.last_axis}, got shape {shape}"
            )
        if self.max_log2 is not None:
            if not shape:
                raise ValueError(f"{name} must have at least one axis")
            n = shape[-1]
            if n < 1 or n & (n - 1):
                raise ValueError(f"{name} must have a power-of-two length along its last axis, got {n}")
            if n > 1 << self.max_log2:
                raise ValueError(f"{name} is too long: the last axis must be at most 2**{self.max_log2}, got {n}")


def check_size_and_shape(shape: tuple[int, ...], name: str, max_size: int | None, check_shape: ShapeRule | None) -> None:
    """The size and shape rules of :func:`float_input`, on a shape alone (nothing is read)."""
    size = math.prod(shape)
    if size == 0:
        raise ValueError(f"{name} must not be empty")
    if max_size is not None and size > max_size:
        if max_size == MAX_STREAM_ELEMENTS:
            check_size(size, f"{name}.size")
        raise ValueError(f"{name} has {size} elements, more than the {max_size} allowed")
    if check_shape is not None:
        check_shape.check(tuple(shape), name)


def float_input(
    x: Any,
    name: str,
    *,
    check_shape: ShapeRule | None = None,
    max_size: int | None = MAX_STREAM_ELEMENTS,
    check_finite: bool = True,
    allow_float64: bool = True,
) -> Array:
    """A floating-point input, host or GPU: C-contiguous, non-empty, finite, float32 or
    float64 (float16 and bfloat16 converted to float32; float64 too unless
    ``allow_float64``).

    The dtype's kind, the size (at least 1, at most ``max_size``; None for no cap) and,
    when given, the :class:`ShapeRule` ``check_shape`` are checked on ``x`` itself, BEFORE anything is
    converted or copied: a zero-stride view of 2**35 elements is refused at once instead of
    being made contiguous first. On a GPU the finiteness scan waits for the caller's stream.
    """
    a = read(x, name)
    dtype = a.dtype
    if dtype not in _FLOAT_NAMES and not is_float_dtype(dtype):
        raise float_dtype_error(name, dtype)
    check_size_and_shape(a.shape, name, max_size, check_shape)
    kept = dtype == "float32" or (dtype == "float64" and allow_float64)
    if a.on_gpu:
        if not kept:
            a = convert(a, "float32")
    else:
        a = host_array(a, name)
        h = a.host
        assert h is not None
        if not (kept and _NP_NAMES.get(h.dtype) == dtype):  # (a PyTorch float16 tensor is float32 by now)
            h = h.astype(np.float32)
        if h is not a.host or not h.flags.c_contiguous:
            a = _host(np.ascontiguousarray(h))
    if check_finite:
        require_finite(a, name)
    return a


def require_finite(a: Array, name: str, message: str | None = None) -> None:
    """ValueError naming ``name`` (or ``message``) when ``a`` holds NaN or infinity."""
    kernels = _dispatch.owner(a)
    if kernels.all_finite(a):  # one pass (one wait on a GPU); the kind of failure only when there is one
        return
    (m,) = kernels.max_abs([a])
    raise ValueError(message or f"{name} contains {'NaN' if math.isnan(m) else 'infinite'} values")


def convert(a: Array, dtype: str) -> Array:
    """A copy of ``a`` in ``dtype`` (float32 or float64), on its device and in its framework."""
    if not a.on_gpu:
        assert a.host is not None
        return _host(a.host.astype(dtype))
    out = empty(a, a.shape, dtype)
    _dispatch.owner(a).convert(a, out)
    return out


def output(
    out: Any,
    shape: tuple[int, ...],
    dtypes: Sequence[str],
    *,
    like: Array | None = None,
    like_name: str = "the input",
    device: int = HOST,
    flat: bool = False,
    zero: bool = False,
) -> Array:
    """The array a call writes into: the caller's ``out`` (checked), or a new one.

    ``out`` must have the dtype ``dtypes[0]`` (or any of ``dtypes``), ``shape`` (or just its
    element count with ``flat=True``), be writeable and C-contiguous, and live where ``like``
    lives. Without ``out`` a new array of ``dtypes[0]`` is made like ``like`` (or, with no
    ``like``, on ``device``: the host, or a :class:`dprec.cuda.DeviceArray` there), zeroed
    with ``zero=True``.
    """
    if out is None:
        dtype = dtypes[0]
        if like is None and device != HOST:
            made = new_device_array(device, LEGACY_DEFAULT_STREAM, shape, dtype)
            if zero:
                _dispatch.owner(made).fill_zero(made)
            return made
        return empty(like, shape, dtype, zero=zero)
    o = read(out, "out")
    if not o.on_gpu and not isinstance(o.obj, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray or a GPU array, got {type(o.obj).__name__}")
    if like is not None:
        same_device([(like_name, like), ("out", o)])
    if o.dtype not in dtypes:
        raise TypeError(f"out must have dtype {' or '.join(dtypes)}, got {o.dtype}")
    if flat:
        count = math.prod(shape)
        if o.size != count:
            raise ValueError(f"out must have {count} elements, got {o.size}")
    elif o.shape != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)}, got {o.shape}")
    if o.readonly:
        raise ValueError("out must be writeable (it is read-only)")
    if not o.on_gpu:
        assert o.host is not None
        if not o.host.flags.c_contiguous:
            raise ValueError("out must be C-contiguous and writeable")
    return o


def empty(like: Array | None, shape: tuple[int, ...], dtype: str, *, zero: bool = False) -> Array:
    """An uninitialised (or, with ``zero``, zeroed) array on ``like``'s device, in its
    framework and on its stream (NumPy on the host, also when ``like`` is None)."""
    if like is None or like.device == HOST:
        np_dtype = _NP_DTYPES.get(dtype) or np.dtype(dtype)  # parsing the name each call costs more than the call
        made = np.zeros(shape, dtype=np_dtype) if zero else np.empty(shape, dtype=np_dtype)
        return Array(made, made, 0, made.shape, dtype, HOST, 0, "numpy")
    if like.framework in ("torch", "cupy"):
        obj, ptr = _frameworks.gpu_empty(like.framework, like.obj, like.device, tuple(shape), dtype)
        made = Array(obj, None, ptr, tuple(shape), dtype, like.device, like.stream, like.framework)
    else:
        made = new_device_array(like.device, like.stream, tuple(shape), dtype)
    if zero:
        _dispatch.owner(made).fill_zero(made)
    return made


def empty_aligned(like: Array, shape: tuple[int, ...], dtype: str) -> Array:
    """As :func:`empty`, with host memory 64-byte aligned (a view into a slightly larger
    buffer): NumPy aligns to 16 bytes only, and a kernel that streams whole cache lines
    (the FWHT) runs up to 40% slower across line boundaries. Below 64 KiB a plain array:
    there the extra view costs more than the alignment saves."""
    np_dtype = _NP_DTYPES.get(dtype) or np.dtype(dtype)
    if like.device != HOST or math.prod(shape) * np_dtype.itemsize < 1 << 16:
        return empty(like, shape, dtype)
    count = math.prod(shape)
    raw = np.empty(count * np_dtype.itemsize + 64, dtype=np.uint8)
    skip = -raw.ctypes.data % 64
    made = raw[skip : skip + count * np_dtype.itemsize].view(np_dtype).reshape(shape)
    return Array(made, made, 0, made.shape, dtype, HOST, 0, "numpy")


def new_device_array(device: int, stream: int, shape: tuple[int, ...], dtype: str) -> Array:
    """A :class:`dprec.cuda.DeviceArray` (dprec's own memory, in stream order on ``stream``)."""
    from .device_array import DeviceArray  # noqa: PLC0415 - a GPU-only path

    a = DeviceArray(shape, dtype, device=device, stream=stream)
    return Array(a, None, a.ptr, tuple(shape), dtype, device, stream, "cuda_array_interface")


def same_device(arrays: Sequence[tuple[str, Array | None]], what: str = "call") -> None:
    """ValueError when the named arrays of one call are not all on one device (None: absent)."""
    first: tuple[str, str] | None = None
    for name, a in arrays:
        if a is None:
            continue
        if first is None:
            first = (name, a.label)
        elif a.label != first[1]:
            raise ValueError(
                f"{name} is on {a.label} but {first[0]} is on {first[1]}; all arrays of one {what} must be on one device"
            )



def destination(out: Any, shape: tuple[int, ...], dtype: str, backend: Any) -> tuple[Kernels, Array]:
    """The kernels and the output of a call whose only array is ``out`` (a stream, a
    candidate): ``backend="auto"`` follows ``out``; ``backend="cuda"`` without ``out``
    writes a new :class:`dprec.cuda.DeviceArray` on device 0."""
    o = read(out, "out") if out is not None else None
    kernels = _dispatch.select(backend, o, "out", host_data=out is not None)
    if out is None:
        return kernels, output(None, shape, (dtype,), device=0 if kernels.name == "cuda" else HOST)
    return kernels, output(o, shape, (dtype,), flat=True)
