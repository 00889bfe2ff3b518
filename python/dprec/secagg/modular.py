"""Arithmetic modulo ``M = 2**bits`` for secure aggregation (see *Secure aggregation* in the docs).

Each client reduces its integer vector mod ``M`` (:func:`modular_reduce`); SecAgg reveals only
the sum of the clients' vectors mod ``M`` (:func:`modular_sum`, or :class:`ModularAccumulator`
for clients arriving one at a time); the server lifts that sum back to signed integers in
``[-M/2, M/2)`` and rescales it (:func:`centered_lift`). The lift recovers the true sum as long
as it lies in ``[-M/2, M/2)``; choosing ``bits`` so that it does is the caller's part.

Conventions
-----------
* ``1 <= bits <= 64`` (ValueError naming ``bits`` otherwise; this is not DP-REC's 1..24 rule).
* Values mod ``M`` are stored as uint32 for ``bits <= 32`` and uint64 above
  (:func:`storage_dtype`); functions taking them require exactly that dtype (TypeError naming
  the argument) and, on the host, values below ``2**bits`` (ValueError naming it). On a GPU the
  range is not checked (it would cost a pass over the data and a wait on the stream); the sum
  of out-of-range values is then still the sum of the values mod ``M``.
* Empty arrays are refused (ValueError naming the argument), as everywhere in dprec: an empty
  vector or a sum of no clients is a caller's mistake, not a result to pass on.
* Everything is integer arithmetic (wrapping adds, then a mask): exact, the same on every
  backend and for every thread count.

Client-side reduction runs on the host (as the rounding and the noise do); the server-side sum
and lift also run on GPU arrays (PyTorch CUDA tensors, CuPy arrays, ``__cuda_array_interface__``
producers), on their device and stream, with results in the caller's framework there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.validation import check_finite, check_int, check_modulus_bits
from ..reference.modular import storage_dtype as _storage_dtype

__all__ = ["ModularAccumulator", "centered_lift", "modular_reduce", "modular_sum", "storage_dtype"]

_INT64 = np.dtype(np.int64)
_LIFT_DTYPES = ("int64", "float64", "float32")


def storage_dtype(bits: Any) -> np.dtype:
    """The dtype of values mod ``2**bits``: uint32 for ``bits <= 32``, uint64 up to 64."""
    return _storage_dtype(check_modulus_bits(bits))


def modular_reduce(x: Any, bits: Any, *, backend: str = "auto") -> np.ndarray:
    """``x mod 2**bits`` of an integer vector (the client's last step before SecAgg).

    Parameters
    ----------
    x : array_like
        Host integers, any shape: int64 or an integer dtype that casts safely to int64 (int8 ..
        int64, uint8 .. uint32); floats, booleans, uint64 and Python integers beyond int64 are
        refused (TypeError naming ``x``). GPU arrays are refused (ValueError: this client-side
        step runs on the host). Not empty.
    bits : int
        ``1 <= bits <= 64``.
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    numpy.ndarray, ``x``'s shape, dtype :func:`storage_dtype` ``(bits)``
        ``x``'s two's complement bits masked to ``bits``: ``-1`` becomes ``2**bits - 1``.
    """
    bits = check_modulus_bits(bits)
    a = _arrays.read(x, "x")
    kernels = _dispatch.select_host(backend, a, "x", "modular_reduce")
    h = _arrays.host_array(a, "x").host
    assert h is not None
    dt = h.dtype
    if dt.kind not in "iu" or not np.can_cast(dt, _INT64, "safe"):
        hint = "; round floats first (dprec.secagg.conditional_round)" if dt.kind == "f" else ""
        raise TypeError(
            f"x must be int64 or an integer dtype that casts safely to int64 (int8 .. int64, uint8 .. uint32), "
            f"got {dt}{hint}"
        )
    if h.size == 0:
        raise ValueError("x must not be empty")
    src = _arrays.read(np.ascontiguousarray(h, dtype=_INT64), "x")
    out = _arrays.empty(src, src.shape, _storage_dtype(bits).name)
    kernels.mod_reduce(src, bits, out)
    return out.result()


def modular_sum(xs: Any, bits: Any, *, out: Any = None, backend: str = "auto") -> Any:
    """The sum of many clients' vectors mod ``2**bits`` (what SecAgg reveals to the server).

    Parameters
    ----------
    xs : array (n, m) or sequence of n arrays (m,)
        Values mod ``2**bits`` in :func:`storage_dtype` ``(bits)``, ``n, m >= 1``: one 2-D array
        (one kernel call) or a sequence of 1-D arrays (added one after the other, no stacking
        copy), all on one device. Host arrays (NumPy, PyTorch CPU tensors; non-contiguous ones
        are copied) or GPU arrays (PyTorch CUDA, CuPy, ``__cuda_array_interface__``;
        C-contiguous).
    bits : int
        ``1 <= bits <= 64``.
    out : array (m,), optional
        Where the sum goes (overwritten, not added to; see :class:`ModularAccumulator` for a
        running sum): writeable, C-contiguous, the storage dtype, on ``xs``'s device. When a
        sequence's later array is refused (out of range), ``out`` holds a partial sum.
    backend : {"auto", "cpu", "cuda", "reference"}
        "auto" runs GPU arrays on "cuda" and host arrays on "cpu".

    Returns
    -------
    array (m,) in the storage dtype
        ``out``, or a new array on ``xs``'s device (NumPy on the host, else ``xs``'s framework).
    """
    bits = check_modulus_bits(bits)
    rows, m = _summands(xs, bits, "xs")
    o = _arrays.read(out, "out") if out is not None else None
    _arrays.same_device([("xs", rows[0]), ("out", o)])
    kernels = _dispatch.select(backend, rows[0], "xs")
    total = _arrays.output(o, (m,), (_storage_dtype(bits).name,), like=rows[0], like_name="xs")
    for i, r in enumerate(rows):
        kernels.mod_sum(r, bits, total, i > 0)
    return out if out is not None else total.result()


def centered_lift(x: Any, bits: Any, *, scale: Any = None, dtype: Any = None, backend: str = "auto") -> Any:
    """The centered lift of values mod ``2**bits`` to signed integers, optionally rescaled.

    ``v`` becomes ``v - 2**bits`` when ``v >= 2**(bits-1)``, else stays ``v``: the
    representative in ``[-2**(bits-1), 2**(bits-1))``. For ``bits = 64`` that is the int64 with
    ``v``'s bits. With ``scale`` the result is ``scale * lifted``, computed in float64 and then
    cast to ``dtype`` (one rounding more for float32); e.g. ``scale = gamma / n`` turns the
    SecAgg sum of ``n`` clients into their mean in the original units.

    Parameters
    ----------
    x : array
        Values mod ``2**bits`` in :func:`storage_dtype` ``(bits)``, any shape, not empty; host or
        GPU, as for :func:`modular_sum`.
    bits : int
        ``1 <= bits <= 64``.
    scale : float, optional
        A finite multiplier; None for the plain lift.
    dtype : {None, "int64", "float64", "float32"} or a NumPy dtype
        The result's dtype: by default int64 without ``scale`` and float64 with it. int64 needs
        ``scale`` None or 1.
    backend : {"auto", "cpu", "cuda", "reference"}

    Returns
    -------
    array of ``x``'s shape, on ``x``'s device (NumPy on the host, else ``x``'s framework)
    """
    bits = check_modulus_bits(bits)
    factor = 1.0
    if scale is not None:
        factor = check_finite(scale, "scale")
    out_dtype = _lift_dtype(dtype, scale)
    # The largest lifted magnitude is 2**(bits-1): refuse a scale that could take a result past the
    # range of its dtype up front, instead of returning +-inf for some elements.
    limit = float(np.finfo(np.float32).max if np.dtype(out_dtype) == np.float32 else np.finfo(np.float64).max)
    if abs(factor) > limit / 2.0 ** (bits - 1):
        raise ValueError(
            f"scale = {scale!r} is too large for bits = {bits}: scale * 2**{bits - 1} overflows {out_dtype} "
            f"(|scale| must be at most {limit / 2.0 ** (bits - 1):.6g})"
        )
    if out_dtype == "int64" and factor != 1.0:
        raise ValueError(f"scale must be None or 1 for an int64 result, got {scale!r}; ask for dtype='float64'")
    a = _modular_input(x, bits, "x")
    if a.size == 0:
        raise ValueError("x must not be empty")
    kernels = _dispatch.select(backend, a, "x")
    out = _arrays.empty(a, a.shape, out_dtype)
    kernels.mod_lift(a, bits, factor, out)
    return out.result()


class ModularAccumulator:
    """A running sum mod ``2**bits`` of ``m``-element vectors, for a server adding clients one
    at a time (or in batches).

    The total lives on the device of the first array added (a NumPy array for host data, a
    GPU array in that array's framework otherwise); later arrays must be on the same device.
    Every add is one :func:`modular_sum` kernel call accumulating into the total (no copy).

    Parameters
    ----------
    m : int
        Elements per vector, ``>= 1``.
    bits : int
        ``1 <= bits <= 64``.
    backend : {"auto", "cpu", "cuda", "reference"}
        As for :func:`modular_sum`, applied to every add.
    """

    def __init__(self, m: Any, bits: Any, *, backend: str = "auto") -> None:
        self._m = check_int(m, "m", 1, 1 << 62)
        self._bits = check_modulus_bits(bits)
        _dispatch.check_backend(backend)
        self._backend = backend
        self._total: _arrays.Array | None = None
        self._count = 0

    @property
    def m(self) -> int:
        return self._m

    @property
    def bits(self) -> int:
        return self._bits

    @property
    def count(self) -> int:
        """Vectors added so far (rows of a 2-D add count one each)."""
        return self._count

    @property
    def total(self) -> Any:
        """The running sum mod ``2**bits`` (m,), in :func:`storage_dtype` ``(bits)``.

        The accumulator's own array, updated by later adds (copy it to keep a snapshot);
        NumPy zeros before anything was added.
        """
        if self._total is None:
            return np.zeros(self._m, dtype=_storage_dtype(self._bits))
        return self._total.result()

    def add(self, xs: Any) -> None:
        """Add one vector (m,) or a batch (n, m) of values mod ``2**bits`` (storage dtype, below
        ``2**bits``: checked on the host, where a refused add leaves the total unchanged), on
        the device of the earlier adds."""
        if isinstance(xs, Sequence) and not isinstance(xs, (str, bytes)):
            raise TypeError("xs must be one array (m,) or (n, m), not a sequence; add the vectors one by one")
        rows, m = _matrix(_modular_input(xs, self._bits, "xs", check_range=False), "xs", allow_1d=True)
        if m != self._m:
            raise ValueError(f"xs must have {self._m} elements per vector (m), got {m}")
        if self._total is not None:
            _arrays.same_device([("the accumulator's total", self._total), ("xs", rows[0])], "accumulator")
        kernels = _dispatch.select(self._backend, rows[0], "xs")
        if self._total is None:
            total = _arrays.empty(rows[0], (self._m,), _storage_dtype(self._bits).name)
            for i, r in enumerate(rows):
                kernels.mod_sum(r, self._bits, total, i > 0)
            self._total = total  # only once the first add has succeeded
        else:
            for r in rows:
                kernels.mod_sum(r, self._bits, self._total, True)
        self._count += sum(r.shape[0] for r in rows)

    def __repr__(self) -> str:
        where = "none yet" if self._total is None else self._total.label
        return f"ModularAccumulator(m={self._m}, bits={self._bits}, count={self._count}, device={where})"


# ---- internals -----------------------------------------------------------------------------


def _lift_dtype(dtype: Any, scale: Any) -> str:
    if dtype is None:
        return "int64" if scale is None else "float64"
    try:
        # a torch dtype (torch.float32) by its name; anything else as NumPy reads it
        name = str(dtype)[6:] if type(dtype).__module__ == "torch" else np.dtype(dtype).name
    except TypeError:
        name = ""
    if name not in _LIFT_DTYPES:
        raise TypeError(f"dtype must be int64, float64 or float32, got {dtype!r}")
    return name


def _modular_input(x: Any, bits: int, name: str, *, check_range: bool = True) -> _arrays.Array:
    """``x`` read, in the storage dtype of ``bits`` (TypeError) and, on the host, C-contiguous
    with values below ``2**bits`` (ValueError; with ``check_range=False`` the kernel checks)."""
    a = _arrays.read(x, name)
    want = _storage_dtype(bits).name
    if a.dtype != want:
        raise TypeError(
            f"{name} must have dtype {want} (values mod 2**{bits}), got {a.dtype}; reduce integers with modular_reduce"
        )
    if a.on_gpu:
        return a
    a = _arrays.host_array(a, name)
    h = a.host
    assert h is not None
    if not h.flags.c_contiguous:
        a = _arrays.read(np.ascontiguousarray(h), name)
        h = a.host
    if check_range and bits not in (32, 64) and h.size and int(h.max()) >> bits:
        raise ValueError(f"{name} has values >= 2**bits = 2**{bits} (largest {int(h.max())}); they are not mod 2**{bits}")
    return a


def _matrix(a: _arrays.Array, name: str, *, allow_1d: bool) -> tuple[list[_arrays.Array], int]:
    """One array of summands as a list of one 2-D Array (n, m), and m."""
    if allow_1d and len(a.shape) == 1:
        a = a.reshaped((1, a.shape[0]))
    if len(a.shape) != 2:
        what = "1-D (m,) or 2-D (n, m)" if allow_1d else "2-D (n clients, m elements) or a sequence of 1-D arrays"
        raise ValueError(f"{name} must be {what}, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {a.shape}")
    return [a], a.shape[1]


def _summands(xs: Any, bits: int, name: str) -> tuple[list[_arrays.Array], int]:
    """The rows of a modular sum as 2-D Arrays (n_i, m) on one device, and m."""
    is_sequence = isinstance(xs, Sequence) and not isinstance(xs, (str, bytes))
    if is_sequence:
        if len(xs) == 0:
            raise ValueError(f"{name} must not be empty (no vectors to add)")
        arrays = [_modular_input(x, bits, f"{name}[{i}]", check_range=False) for i, x in enumerate(xs)]
        for i, a in enumerate(arrays):
            if len(a.shape) != 1:
                raise ValueError(f"{name}[{i}] must be 1-D, got shape {a.shape}")
        m = arrays[0].shape[0]
        for i, a in enumerate(arrays):
            if a.shape[0] != m:
                raise ValueError(f"{name}[{i}] has {a.shape[0]} elements but {name}[0] has {m}; all must have the same")
        _arrays.same_device([(f"{name}[{i}]", a) for i, a in enumerate(arrays)])
        rows = [a.reshaped((1, m)) for a in arrays]
    else:
        rows, m = _matrix(_modular_input(xs, bits, name, check_range=False), name, allow_1d=False)
    if m == 0:
        raise ValueError(f"{name} must not be empty (its vectors have 0 elements)")
    return rows, m
