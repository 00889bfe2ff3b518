"""Fast Walsh-Hadamard transform and randomized Hadamard rotation (see *Rotation and sketching* in the docs).

:func:`fwht` is the Walsh-Hadamard transform in natural (Sylvester) order, the matrix of
``scipy.linalg.hadamard``: ``H_1 = [1]``, ``H_{2n} = [[H_n, H_n], [H_n, -H_n]]``.
:class:`RandomizedHadamard` is the rotation ``y = H D x / sqrt(n)`` of randomized-Hadamard
schemes (distributed discrete Gaussian, Skellam, DRIVE/EDEN), with the Rademacher
diagonal ``D`` taken from Philox domain 3 and ``x`` zero-padded to ``n``, the next power
of two.

Both run on the host (NumPy arrays, PyTorch CPU tensors) or on an NVIDIA GPU (PyTorch CUDA
tensors, CuPy arrays, ``__cuda_array_interface__`` or ``__dlpack__`` producers): GPU input is
transformed on its device, on the caller's current stream, and the result is an array of
the caller's framework on that device (a :class:`dprec.cuda.DeviceArray` for DLPack-only
producers). The GPU kernels follow the CPU's stage order and scaling, so results are
bit-identical to the CPU backend's. On the GPU, checking that the input is finite and that the
result did not overflow makes the call wait for the caller's stream (twice; an in-place
transform of values large enough to overflow first runs a checked trial).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import philox
from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.arrays import Array
from .._runtime.frameworks import is_torch_tensor
from .._runtime.validation import check_int, check_seed, check_u32
from ..constants import DOMAIN_HADAMARD_SIGN
from ..reference import hadamard as _ref
from ..reference import philox as _ref_philox

__all__ = ["fwht", "RandomizedHadamard", "MAX_FWHT_LOG2"]

#: Largest transform length is ``2**MAX_FWHT_LOG2``.
MAX_FWHT_LOG2 = 30


#: fwht's shape rule for ``x``, checked before ``x`` is converted or copied.
_FWHT_SHAPE = _arrays.ShapeRule(max_log2=MAX_FWHT_LOG2)


def _inplace_target(x: Any, a: Array) -> Array:
    """The memory of ``x`` that fwht(inplace=True) overwrites, host or GPU.

    Anything that cannot be updated where it lies (a list, a float16/bfloat16 or integer
    array, a read-only or non-contiguous array) raises instead of being silently copied.
    """
    if a.dtype not in ("float32", "float64"):
        raise TypeError(
            f"fwht(inplace=True) needs x to be a float32 or float64 array, got dtype {a.dtype}; "
            "use inplace=False (float16/bfloat16 are computed in float32 and returned as a new array)"
        )
    if a.readonly:
        raise ValueError("fwht(inplace=True) needs a writeable C-contiguous array, but x is read-only")
    if a.on_gpu:
        return a  # reading refused a non-contiguous GPU array
    if is_torch_tensor(x):
        if not x.is_contiguous():
            raise ValueError("fwht(inplace=True) needs a writeable C-contiguous array, but x is not contiguous")
        a = _arrays.host_array(a, "x")
        if a.size and a.host.__array_interface__["data"][0] != x.data_ptr():  # e.g. a negative-bit view
            raise TypeError("fwht(inplace=True) cannot update x where it lies; use inplace=False")
        return a
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"fwht(inplace=True) needs x to be a float32 or float64 array (NumPy or PyTorch) that it can "
            f"overwrite, got {type(x).__name__}; use inplace=False"
        )
    if not x.flags.c_contiguous:
        raise ValueError("fwht(inplace=True) needs a writeable C-contiguous array")
    return a


def _bump_version(x: Any) -> None:
    """Tell autograd that the tensor ``x`` was modified in place (a no-op for NumPy), so that
    a backward pass that saved ``x`` (or a tensor sharing its storage) fails loudly."""
    if is_torch_tensor(x):
        import torch  # noqa: PLC0415

        bump = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)
        if bump is not None:
            bump(x)


def _overflow_error(dtype: str, n: int) -> ValueError:
    return ValueError(
        f"fwht(x) overflows {dtype}: the transform of x has infinite or NaN values (the values grow "
        f"up to n = {n} times max|x| before any normalization); scale x down, or pass a float64 array"
    )


def _no_overflow_bound(dtype: str, n: int) -> float:
    """A bound on max|x| under which no stage of an n-point transform can overflow: every
    value stays within n * max|x| (times 1 + 2**-20 for the roundings of at most 30 stages)."""
    return float(np.finfo(dtype).max) / (2 * n)


def _fwht_inplace(kernels: Any, x: Array, n: int, normalize: bool) -> None:
    """fwht of the caller's ``x`` where it lies; ValueError, naming ``x``, if the result would
    not be finite, and then ``x`` is left as it was.

    The values grow up to ``n * max|x|``: only when that could overflow the dtype is the
    transform first run on a copy and checked, then (if finite) run again in place.
    """
    if kernels.abs_at_most(x, _no_overflow_bound(x.dtype, n)):  # one pass, the usual outcome
        kernels.fwht(x, x, n, normalize)
        return
    (m,) = kernels.max_abs([x])
    if not np.isfinite(m):
        raise ValueError(f"x contains {'NaN' if np.isnan(m) else 'infinite'} values")
    # Finite but beyond the bound: the transform may overflow, so it runs on a copy first.
    trial = _arrays.empty(x, x.shape, x.dtype)
    kernels.fwht(x, trial, n, normalize)
    if not kernels.all_finite(trial):
        raise _overflow_error(x.dtype, n)
    kernels.fwht(x, x, n, normalize)


def _check_length(n: int, name: str) -> int:
    if n < 1 or n & (n - 1):
        raise ValueError(f"{name} must have a power-of-two length along its last axis, got {n}")
    if n > 1 << MAX_FWHT_LOG2:
        raise ValueError(f"{name} is too long: the last axis must be at most 2**{MAX_FWHT_LOG2}, got {n}")
    return n


def fwht(x: Any, *, normalize: bool = True, inplace: bool = False, backend: str = "auto") -> Any:
    """Walsh-Hadamard transform over the last axis, in natural (Sylvester) order.

    ``y = H_n x`` for each row, with ``H_n`` the matrix of ``scipy.linalg.hadamard(n)``;
    batched over leading axes.

    Parameters
    ----------
    x : array_like
        Floating-point array whose last axis has length ``n = 2**k``, ``0 <= k <= 30``.
        float16 and bfloat16 are computed in float32; integers are rejected; NaN and
        infinity are rejected. Shape, size and dtype are checked before ``x`` is
        converted or copied. Host arrays (NumPy, PyTorch CPU tensors) or GPU arrays
        (transformed on their device, on the caller's stream; they must be C-contiguous).
    normalize : bool
        Divide by ``sqrt(n)``, making the transform orthonormal (and its own inverse).
    inplace : bool
        Overwrite ``x``, which must then be a writeable C-contiguous float32 or float64
        array (NumPy, PyTorch, or a GPU array), and return it. Anything that cannot be
        updated where it lies is refused rather than silently copied: a list, a
        float16/bfloat16 or integer array (TypeError), a read-only or non-contiguous array
        (ValueError), and a PyTorch tensor that requires grad (ValueError: autograd cannot
        see the update; use ``inplace=False`` or pass ``x.detach()``). Otherwise ``x`` is
        untouched (non-contiguous host input is copied).
    backend : {"auto", "cpu", "cuda", "reference"}
        "auto" follows ``x``; asking for a backend on data that lives elsewhere is a
        ValueError.

    Returns
    -------
    array
        A new array of the same shape (float64 for float64 input, float32 otherwise):
        NumPy for host input, the caller's framework on the same device for GPU input;
        or ``x`` itself when ``inplace``.

    Raises
    ------
    ValueError
        Also when the result is not finite (on the host and on the GPU): the unnormalized transform
        grows values up to ``n * max|x|``, so e.g. ``fwht(np.full(8, 3e38, np.float32),
        normalize=False)`` overflows float32. Nothing is returned then, and with
        ``inplace`` the caller's ``x`` is left as it was.
    """
    a = _arrays.read(x, "x")
    kernels = _dispatch.select(backend, a, "x")
    if not isinstance(normalize, (bool, np.bool_)) or not isinstance(inplace, (bool, np.bool_)):
        raise TypeError("normalize and inplace must be bools")
    if inplace and is_torch_tensor(x) and x.requires_grad:
        raise ValueError(
            "fwht(inplace=True) cannot overwrite x: it requires grad, and autograd would not see the update; "
            "use inplace=False, or pass x.detach()"
        )
    if not a.shape:  # before float_input, which would make a scalar 1-D
        raise ValueError("x must have at least one axis")
    if inplace:
        target = _inplace_target(x, a)
        _arrays.float_input(target, "x", max_size=None, check_shape=_FWHT_SHAPE, check_finite=False)
        _fwht_inplace(kernels, target, target.shape[-1], bool(normalize))
        _bump_version(x)
        return x
    # Shape and dtype checked before any copy; finiteness below, with the bound on max|x|.
    src = _arrays.float_input(a, "x", max_size=None, check_shape=_FWHT_SHAPE, check_finite=False)
    n = src.shape[-1]
    # One scan of x rules out NaN, infinity and overflow at once; only an x beyond the bound
    # is checked for NaN and infinity, and its result scanned.
    bounded = kernels.abs_at_most(src, _no_overflow_bound(src.dtype, n))
    if not bounded:
        _arrays.require_finite(src, "x")
    out = _arrays.empty_aligned(src, src.shape, src.dtype)
    kernels.fwht(src, out, n, bool(normalize))
    if not bounded:
        _arrays.require_finite(out, "x", str(_overflow_error(src.dtype, n)))
    return out.result()


class RandomizedHadamard:
    """The randomized Hadamard rotation ``y = H D x / sqrt(n)`` and its exact inverse.

    ``x`` (last axis of length ``dim``) is zero-padded to ``n = padded_dim``, the next
    power of two, then rotated ``repeats`` times: ``x <- H D_s x / sqrt(n)`` for
    ``s = 0 .. repeats-1``, where ``D_s`` holds the signs of Philox stream
    ``(seed, substream=s, group, domain=3)``: element ``j`` is ``+1`` if its word is below
    ``2**31``, else ``-1``. The rotation is orthonormal, so norms are preserved to float
    rounding; the padded length ``n`` is what a client sends.

    Parameters
    ----------
    dim : int
        Length of the vectors rotated, ``1 <= dim <= 2**30`` (so that ``n <= 2**30``).
    seed : int
        The shared 64-bit seed.
    repeats : int
        Rotations applied in turn, ``1 <= repeats < 2**32`` (a Philox sub-stream each).
    group : int
        Philox group id (< 2**32), e.g. the tensor or chunk number; 0 by default.
    """

    def __init__(self, dim: int, seed: int, repeats: int = 1, group: int = 0) -> None:
        self._dim = check_int(dim, "dim", 1, 1 << MAX_FWHT_LOG2)
        self._seed = check_seed(seed)
        self._repeats = check_int(repeats, "repeats", 1, 0xFFFFFFFF)
        self._group = check_u32(group, "group")
        self._n = _ref.padded_length(self._dim)

    @property
    def dim(self) -> int:
        """Length of the input vectors."""
        return self._dim

    @property
    def padded_dim(self) -> int:
        """Length of the rotated vectors: the next power of two ``>= dim``."""
        return self._n

    @property
    def repeats(self) -> int:
        return self._repeats

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def group(self) -> int:
        return self._group

    def __repr__(self) -> str:
        return (
            f"RandomizedHadamard(dim={self._dim}, seed={self._seed}, repeats={self._repeats}, "
            f"group={self._group}, padded_dim={self._n})"
        )

    def signs(self, repeat: int = 0, *, dtype: Any = np.float64, backend: str = "auto") -> np.ndarray:
        """The diagonal of ``D_repeat`` (``padded_dim`` values ``+-1`` in ``dtype``)."""
        repeat = check_int(repeat, "repeat", 0, self._repeats - 1)
        if backend == "cuda":
            raise ValueError("RandomizedHadamard.signs runs on the host only (backend 'auto', 'cpu' or 'reference')")
        w = philox.words(
            self._seed, self._n, substream=repeat, group=self._group, domain=DOMAIN_HADAMARD_SIGN, backend=backend
        )
        return _ref_philox.words_to_signs(w, dtype)

    def forward(self, x: Any, *, backend: str = "auto") -> Any:
        """Rotate: ``H D x / sqrt(n)`` over the last axis (length ``dim``), batched.

        Returns a new array with last axis ``padded_dim`` (float64 for float64 input,
        float32 otherwise), on ``x``'s device and in its framework. Input rules as for
        :func:`fwht`.
        """
        return self._rotate(x, "x", backend, inverse=False)

    def inverse(self, y: Any, *, backend: str = "auto") -> Any:
        """Undo :meth:`forward`: ``D H y / sqrt(n)`` per repeat in reverse order, then the
        first ``dim`` elements of the last axis (length ``padded_dim``), on ``y``'s device
        and in its framework."""
        return self._rotate(y, "y", backend, inverse=True)

    def _rotate(self, x: Any, name: str, backend: str, *, inverse: bool) -> Any:
        """forward (``inverse=False``) or inverse of ``x``, on its device and in its framework."""
        a = _arrays.read(x, name)
        kernels = _dispatch.select(backend, a, name)
        cols, what = (self._n, "padded_dim") if inverse else (self._dim, "dim")
        src = _arrays.float_input(a, name, max_size=None, check_shape=_arrays.ShapeRule(last_axis=cols, last_axis_name=what))
        out = _arrays.empty(src, src.shape[:-1] + ((self._dim,) if inverse else (self._n,)), src.dtype)
        kernels.randomized_hadamard(src, out, self._dim, self._n, self._seed, self._group, self._repeats, inverse)
        _arrays.require_finite(
            out, name,
            f"the rotation of {name} overflows {src.dtype} (intermediate values grow up to padded_dim "
            f"times max|{name}|); scale {name} down, or pass a float64 array",
        )
        return out.result()

