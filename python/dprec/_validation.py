"""Input conversion and validation shared by the public API (SPEC §7).

Every public function funnels its arguments through these helpers, so the rules are
the same everywhere:

* float16 and bfloat16 are converted to float32; float32 and float64 are kept;
  integers, booleans and complex numbers are rejected with TypeError.
* NaN and infinity are rejected with ValueError naming the argument.
* Empty arrays are rejected; so are sizes beyond the Philox counter layout. Sizes,
  shapes and dtypes are checked before anything is converted or copied.
* Non-contiguous arrays are copied (never rejected).
* PyTorch tensors are accepted on the CPU (imported lazily; torch is optional). GPU
  arrays are taken by the functions that run on the CUDA backend (dprec._device);
  everywhere else they raise ValueError rather than being copied to the host.
"""

from __future__ import annotations

import math
import numbers
import reprlib
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _backend
from .constants import MAX_BITS, MAX_STREAM_ELEMENTS, MIN_BITS

_UINT32_MAX = 0xFFFFFFFF
_UINT64_MAX = 0xFFFFFFFFFFFFFFFF


def is_torch_tensor(x: Any) -> bool:
    """True for a torch.Tensor, without importing torch."""
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


def to_numpy(x: Any, name: str) -> np.ndarray:
    """A NumPy view or copy of an array-like; torch tensors must be on the CPU."""
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


def float_array(
    x: Any,
    name: str,
    *,
    allow_float64: bool = True,
    check_finite: bool = True,
    max_size: int | None = MAX_STREAM_ELEMENTS,
    check_shape: Callable[[tuple[int, ...]], None] | None = None,
) -> np.ndarray:
    """A C-contiguous, non-empty, finite float32 (or float64) NumPy array.

    The dtype's kind, the size (at least 1, at most ``max_size``; None for no cap) and,
    when given, ``check_shape(shape)`` are checked on ``x`` itself, BEFORE anything is
    converted or copied: a zero-stride view of 2**35 elements is refused at once instead
    of being made contiguous first (a MemoryError, or gigabytes copied for nothing).
    """
    if is_torch_tensor(x) and x.device.type == "cpu" and x.is_floating_point():
        _check_shape(tuple(x.shape), name, max_size, check_shape)  # before float16 -> float32
    a = to_numpy(x, name)
    dt = a.dtype
    if dt == np.float32 or (dt == np.float64 and allow_float64):
        convert = False  # the common case first: dtype.name is slow to compute
    elif dt == np.float16 or dt.name == "bfloat16" or dt.kind == "f":  # also float64 where not allowed, long double
        convert = True
    else:
        kind = {"b": "boolean", "i": "integer", "u": "integer", "c": "complex"}.get(dt.kind, str(dt))
        raise TypeError(f"{name} must be a floating-point array (float16, bfloat16, float32 or float64), got {kind} dtype {dt}")
    _check_shape(a.shape, name, max_size, check_shape)
    if convert:
        a = a.astype(np.float32)
    a = np.ascontiguousarray(a)
    if check_finite and not _all_finite(a):
        bad = "NaN" if np.isnan(a).any() else "infinite"
        raise ValueError(f"{name} contains {bad} values")
    return a


def _check_shape(
    shape: tuple[int, ...], name: str, max_size: int | None, check_shape: Callable[[tuple[int, ...]], None] | None
) -> None:
    """The size and shape checks of :func:`float_array`, on a shape alone (nothing is read)."""
    size = math.prod(shape)
    if size == 0:
        raise ValueError(f"{name} must not be empty")
    if max_size is not None and size > max_size:
        if max_size == MAX_STREAM_ELEMENTS:
            check_size(size, f"{name}.size")
        raise ValueError(f"{name} has {size} elements, more than the {max_size} allowed")
    if check_shape is not None:
        check_shape(tuple(shape))


def _all_finite(a: np.ndarray) -> bool:
    """Whether the C-contiguous float32/float64 array a is all finite: natively when the
    native module is there (one read, no temporary, multi-threaded for large arrays, and
    about 10x less call overhead than NumPy's isfinite for small ones)."""
    native = _backend._native
    if native is not None:
        return bool(native.all_finite(a.reshape(-1)))
    return bool(np.isfinite(a).all())


def check_integer(value: Any, name: str) -> int:
    """``value`` as a Python int; TypeError naming ``name`` unless it is an integer.

    Python ints and NumPy integer scalars are accepted. bool (and numpy.bool_) is
    rejected although it is an int subclass, and so are floats, even integral ones
    (``16.9`` must not silently become 16), strings and everything else.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {reprlib.repr(value)}")
    return int(value)


def check_size(n: Any, name: str) -> int:
    """A vector length that fits one Philox stream (1 .. 2**34); an integer (TypeError otherwise)."""
    n = check_integer(n, name)
    if n < 1:
        raise ValueError(f"{name} must be at least 1, got {n}")
    if n > MAX_STREAM_ELEMENTS:
        raise ValueError(f"{name} must be at most 2**34 (the Philox counter layout), got {n}")
    return n


def check_int(value: Any, name: str, low: int, high: int) -> int:
    """An integer in [low, high] (bool, float and str are rejected with TypeError)."""
    v = check_integer(value, name)
    if not low <= v <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {v}")
    return v


def check_seed(seed: Any, name: str = "seed") -> int:
    return check_int(seed, name, 0, _UINT64_MAX)


def check_u32(value: Any, name: str) -> int:
    return check_int(value, name, 0, _UINT32_MAX)


def check_bits(bits: Any, name: str = "bits") -> int:
    return check_int(bits, name, MIN_BITS, MAX_BITS)


def check_positive(value: Any, name: str) -> float:
    """A finite real number > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return v


def check_index(index: Any, bits: int, name: str = "index") -> int:
    return check_int(index, name, 0, (1 << bits) - 1)


def os_seed() -> int:
    """A fresh 64-bit seed from the operating system's entropy source."""
    return secrets.randbits(64)


def private_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """The caller's Generator, or a fresh one seeded from OS entropy (never a shared seed)."""
    if rng is None:
        return np.random.default_rng(secrets.randbits(128))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
    return rng


def host_out(out: Any, count: int, dtype: Any) -> np.ndarray:
    """A flat view of the caller's ``out`` (a writeable C-contiguous NumPy array of
    ``count`` elements of ``dtype``), or a new array when ``out`` is None."""
    if out is None:
        return np.empty(count, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray or a GPU array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise TypeError(f"out must have dtype {np.dtype(dtype).name}, got {out.dtype}")
    if out.size != count:
        raise ValueError(f"out must have {count} elements, got {out.size}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be C-contiguous and writeable")
    return out.reshape(-1)
