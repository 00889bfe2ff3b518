"""Fast Walsh-Hadamard transform and randomized Hadamard rotation (SPEC §2, §4).

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
bit-identical to the CPU backend's. On the GPU, checking that the input is finite makes the
call wait for the caller's stream once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _backend, _device, philox
from ._validation import _all_finite, check_int, check_seed, check_u32, float_array, is_torch_tensor, to_numpy
from .constants import DOMAIN_HADAMARD_SIGN
from .reference import hadamard as _ref

__all__ = ["fwht", "RandomizedHadamard", "MAX_FWHT_LOG2"]

#: Largest transform length is ``2**MAX_FWHT_LOG2``.
MAX_FWHT_LOG2 = 30


def _host_backend(x: Any, backend: Any, what: str) -> str:
    """Resolve ``backend`` for host data; GPU arrays and "cuda" are not supported yet."""
    if _device.is_gpu_array(x):
        raise ValueError(
            f"{what}: the CUDA kernels for the Hadamard transform and count-sketch are not implemented yet; "
            "pass a host array (NumPy, or a PyTorch CPU tensor)"
        )
    if backend == "cuda":
        raise ValueError(
            f"{what}: backend='cuda' is not implemented yet for the Hadamard transform and count-sketch; "
            "use backend='auto', 'cpu' or 'reference'"
        )
    return _backend.resolve(backend)


def _resolve(x: Any, backend: Any, name: str) -> str:
    """Resolve ``backend`` for the array argument ``x``, host or GPU (see _backend.resolve)."""
    where = _device.device_of(x)
    return _backend.resolve(backend, where if where is not None and where.startswith("cuda") else None, name)


def _float_gpu(x: Any, name: str, check_shape: Any = None) -> tuple[_device.GpuArray, bool]:
    """The float32/float64 GPU view of ``x`` and whether it is a fresh float32 copy
    (float16 and bfloat16 input), which the caller may then overwrite. ``check_shape(shape)``
    runs before that copy is made."""
    g = _device.gpu_array(x, name)
    if g is None:
        raise ValueError(f"{name} is not a GPU array")
    if check_shape is not None and g.dtype in ("float16", "bfloat16") and g.size:
        check_shape(tuple(g.shape))  # before the float32 copy; other errors keep their usual order
    fresh = g.dtype in ("float16", "bfloat16")
    if fresh:
        g = _device.to_float32(g)
    elif g.dtype not in ("float32", "float64"):
        kind = "integer" if "int" in g.dtype else g.dtype
        raise TypeError(
            f"{name} must be a floating-point array (float16, bfloat16, float32 or float64), got {kind} dtype {g.dtype}"
        )
    return g, fresh


def _check_gpu(g: _device.GpuArray, name: str) -> None:
    """A GPU array must have an axis, elements, and only finite values (one wait for its stream)."""
    if not g.shape:
        raise ValueError(f"{name} must have at least one axis")
    if g.size == 0:
        raise ValueError(f"{name} must not be empty")
    maxabs = _backend.cuda_module().norm_stats(g.device, g.stream, [g.ptr], [g.dtype], [g.size], 1.0, scratch=g.scratch)[0, 1]
    if not np.isfinite(maxabs):
        raise ValueError(f"{name} contains {'NaN' if np.isnan(maxabs) else 'infinite'} values")


def _fwht_gpu(x: Any, normalize: bool, inplace: bool) -> Any:
    if inplace:
        g = _device.gpu_array(x, "x")
        assert g is not None
        if g.dtype not in ("float32", "float64"):
            raise TypeError(f"fwht(inplace=True) needs a float32 or float64 array, got dtype {g.dtype}")
        if g.readonly:
            raise ValueError("fwht(inplace=True) needs a writeable array, but x is read-only")
        fresh = False
    else:
        g, fresh = _float_gpu(x, "x", _check_last_axis)
    _check_gpu(g, "x")
    n = _check_length(g.shape[-1], "x")
    dst = g if inplace or fresh else _device.empty_like(g, g.shape, g.dtype)
    _backend.cuda_module().fwht(g.device, g.stream, g.ptr, dst.ptr, g.dtype, g.size // n, n, bool(normalize), scratch=g.scratch)
    return x if inplace else dst.obj


def _check_last_axis(shape: tuple[int, ...]) -> None:
    """fwht's shape rule for ``x``, checked before ``x`` is converted or copied."""
    if not shape:
        raise ValueError("x must have at least one axis")
    _check_length(shape[-1], "x")


def _inplace_view(x: Any) -> np.ndarray:
    """The NumPy view of ``x``'s own memory that fwht(inplace=True) overwrites.

    Anything that cannot be updated where it lies (a list, a float16/bfloat16 or integer
    array, a read-only or non-contiguous array) raises instead of being silently copied.
    """
    if is_torch_tensor(x):
        import torch  # noqa: PLC0415 - present, since x is a tensor

        if x.dtype not in (torch.float32, torch.float64):
            raise TypeError(
                f"fwht(inplace=True) needs x to be a float32 or float64 array, got dtype {x.dtype}; "
                "use inplace=False (float16/bfloat16 are computed in float32 and returned as a new array)"
            )
        if not x.is_contiguous():
            raise ValueError("fwht(inplace=True) needs a writeable C-contiguous array, but x is not contiguous")
        a = to_numpy(x, "x")
        if a.size and a.__array_interface__["data"][0] != x.data_ptr():  # e.g. a negative-bit view
            raise TypeError("fwht(inplace=True) cannot update x where it lies; use inplace=False")
        return a
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"fwht(inplace=True) needs x to be a float32 or float64 array (NumPy or PyTorch) that it can "
            f"overwrite, got {type(x).__name__}; use inplace=False"
        )
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"fwht(inplace=True) needs x to be a float32 or float64 array, got dtype {x.dtype}")
    if not x.flags.c_contiguous or not x.flags.writeable:
        raise ValueError("fwht(inplace=True) needs a writeable C-contiguous array")
    return np.asarray(x)


def _bump_version(x: Any) -> None:
    """Tell autograd that the tensor ``x`` was modified in place (a no-op for NumPy), so that
    a backward pass that saved ``x`` (or a tensor sharing its storage) fails loudly."""
    if is_torch_tensor(x):
        import torch  # noqa: PLC0415

        bump = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)
        if bump is not None:
            bump(x)


def _fwht_checked(a: np.ndarray, normalize: bool, backend: str, private: bool) -> None:
    """fwht of ``a`` in place; ValueError, naming ``x``, if the result is not finite.

    ``private``: ``a`` is our own copy, so it is transformed and then checked. Otherwise
    (``a`` is the caller's array) the caller's data must not be clobbered on overflow: when
    ``max|x| * n`` could overflow the dtype, the transform runs on a copy that is written
    back only if it is finite.
    """
    n = a.shape[-1]
    if not private:
        hi = max(float(a.max()), -float(a.min()))
        if hi <= float(np.finfo(a.dtype).max) / (2 * n):  # no stage can reach the overflow threshold
            _fwht_inplace(a, normalize, backend)
            return
    work = a if private else a.copy()
    with np.errstate(over="ignore", invalid="ignore"):
        _fwht_inplace(work, normalize, backend)
    if not _all_finite(work):
        raise ValueError(
            f"fwht(x) overflows {a.dtype.name}: the transform of x has infinite or NaN values (the values grow "
            f"up to n = {n} times max|x| before any normalization); scale x down, or pass a float64 array"
        )
    if not private:
        a[...] = work


def _check_length(n: int, name: str) -> int:
    if n < 1 or n & (n - 1):
        raise ValueError(f"{name} must have a power-of-two length along its last axis, got {n}")
    if n > 1 << MAX_FWHT_LOG2:
        raise ValueError(f"{name} is too long: the last axis must be at most 2**{MAX_FWHT_LOG2}, got {n}")
    return n


def _fwht_inplace(a: np.ndarray, normalize: bool, backend: str) -> None:
    """Transform the C-contiguous float32/float64 array ``a`` in place over its last axis."""
    n = a.shape[-1]
    if backend == "cpu":
        _backend.native().fwht(a.reshape(-1), n, bool(normalize))
    else:
        a[...] = _ref.fwht(a, normalize)


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
        Also when the result is not finite on the host: the unnormalized transform
        grows values up to ``n * max|x|``, so e.g. ``fwht(np.full(8, 3e38, np.float32),
        normalize=False)`` overflows float32. Nothing is returned then, and with
        ``inplace`` the caller's ``x`` is left as it was. (On the GPU the result is not
        checked.)
    """
    be = _resolve(x, backend, "x")
    if not isinstance(normalize, (bool, np.bool_)) or not isinstance(inplace, (bool, np.bool_)):
        raise TypeError("normalize and inplace must be bools")
    if inplace and is_torch_tensor(x) and x.requires_grad:
        raise ValueError(
            "fwht(inplace=True) cannot overwrite x: it requires grad, and autograd would not see the update; "
            "use inplace=False, or pass x.detach()"
        )
    if be == "cuda":
        return _fwht_gpu(x, bool(normalize), bool(inplace))
    if np.ndim(x) == 0:  # before float_array, which would make a scalar 1-D
        raise ValueError("x must have at least one axis")
    if inplace:
        a = _inplace_view(x)
        float_array(a, "x", max_size=None, check_shape=_check_last_axis)  # size and finiteness of the view
        _fwht_checked(a, bool(normalize), be, private=False)
        _bump_version(x)
        return x
    a = float_array(x, "x", max_size=None, check_shape=_check_last_axis)  # checked before any copy
    a = a.copy()
    _fwht_checked(a, bool(normalize), be, private=True)
    return a


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
        return (1 - 2 * (w >> np.uint32(31)).astype(np.int8)).astype(dtype)

    def forward(self, x: Any, *, backend: str = "auto") -> Any:
        """Rotate: ``H D x / sqrt(n)`` over the last axis (length ``dim``), batched.

        Returns a new array with last axis ``padded_dim`` (float64 for float64 input,
        float32 otherwise), on ``x``'s device and in its framework. Input rules as for
        :func:`fwht`.
        """
        be = _resolve(x, backend, "x")
        if be == "cuda":
            return self._rotate_gpu(x, "x", self._dim, inverse=False)
        a = float_array(x, "x", max_size=None, check_shape=self._shape_check("x", self._dim, "dim"))
        with np.errstate(over="ignore", invalid="ignore"):
            if be == "reference":
                y = _ref.randomized_hadamard_forward(a, self._dim, self._seed, self._repeats, self._group)
            else:
                y = np.zeros(a.shape[:-1] + (self._n,), dtype=a.dtype)
                y[..., : self._dim] = a
                for s in range(self._repeats):
                    y *= self.signs(s, dtype=a.dtype, backend=be)
                    _fwht_inplace(y, True, be)
        return self._finite(y, "x")

    def inverse(self, y: Any, *, backend: str = "auto") -> Any:
        """Undo :meth:`forward`: ``D H y / sqrt(n)`` per repeat in reverse order, then the
        first ``dim`` elements of the last axis (length ``padded_dim``), on ``y``'s device
        and in its framework."""
        be = _resolve(y, backend, "y")
        if be == "cuda":
            return self._rotate_gpu(y, "y", self._n, inverse=True)
        a = float_array(y, "y", max_size=None, check_shape=self._shape_check("y", self._n, "padded_dim"))
        with np.errstate(over="ignore", invalid="ignore"):
            if be == "reference":
                return self._finite(
                    _ref.randomized_hadamard_inverse(a, self._dim, self._seed, self._repeats, self._group), "y"
                )
            a = a.copy()
            for s in reversed(range(self._repeats)):
                _fwht_inplace(a, True, be)
                a *= self.signs(s, dtype=a.dtype, backend=be)
        return self._finite(np.ascontiguousarray(a[..., : self._dim]), "y")

    @staticmethod
    def _shape_check(name: str, cols: int, what: str) -> Any:
        """The last-axis rule for ``name``, run by float_array before anything is copied."""

        def check(shape: tuple[int, ...]) -> None:
            if not shape or shape[-1] != cols:
                raise ValueError(f"{name} must have a last axis of length {what}={cols}, got shape {shape}")

        return check

    @staticmethod
    def _finite(y: np.ndarray, name: str) -> np.ndarray:
        """``y``, or ValueError naming ``name`` when the rotation overflowed its dtype."""
        if not _all_finite(y):
            raise ValueError(
                f"the rotation of {name} overflows {y.dtype.name} (intermediate values grow up to padded_dim "
                f"times max|{name}|); scale {name} down, or pass a float64 array"
            )
        return y

    def _rotate_gpu(self, x: Any, name: str, cols: int, *, inverse: bool) -> Any:
        """forward (``inverse=False``) or inverse of the GPU array ``x`` on its device and stream."""
        check = self._shape_check(name, cols, "padded_dim" if inverse else "dim")
        g, _ = _float_gpu(x, name, check)
        check(tuple(g.shape))
        _check_gpu(g, name)
        out = _device.empty_like(g, g.shape[:-1] + (self._dim if inverse else self._n,), g.dtype)
        _backend.cuda_module().randomized_hadamard(
            g.device,
            g.stream,
            g.ptr,
            out.ptr,
            g.dtype,
            g.size // cols,
            self._dim,
            self._n,
            self._seed,
            self._group,
            self._repeats,
            inverse, scratch=g.scratch,
        )
        return out.obj
