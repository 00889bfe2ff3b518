"""Fast Walsh-Hadamard transform and randomized Hadamard rotation (SPEC §2, §4).

:func:`fwht` is the Walsh-Hadamard transform in natural (Sylvester) order, the matrix of
``scipy.linalg.hadamard``: ``H_1 = [1]``, ``H_{2n} = [[H_n, H_n], [H_n, -H_n]]``.
:class:`RandomizedHadamard` is the rotation ``y = H D x / sqrt(n)`` of randomized-Hadamard
schemes (distributed discrete Gaussian, Skellam, DRIVE/EDEN), with the Rademacher
diagonal ``D`` taken from Philox domain 3 and ``x`` zero-padded to ``n``, the next power
of two.

Host arrays only for now (NumPy, or PyTorch on the CPU); GPU arrays raise ValueError
until the CUDA kernels land.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _backend, _device, philox
from ._validation import check_int, check_seed, check_u32, float_array, to_numpy
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
        infinity are rejected. A PyTorch CPU tensor is accepted.
    normalize : bool
        Divide by ``sqrt(n)``, making the transform orthonormal (and its own inverse).
    inplace : bool
        Overwrite ``x``, which must then be a writeable C-contiguous float32 or float64
        NumPy array (or PyTorch CPU tensor), and return it. Otherwise ``x`` is untouched
        (non-contiguous input is copied).
    backend : {"auto", "cpu", "reference"}

    Returns
    -------
    numpy.ndarray
        A new array of the same shape (float64 for float64 input, float32 otherwise), or
        ``x`` itself when ``inplace``.
    """
    be = _host_backend(x, backend, "fwht")
    if not isinstance(normalize, (bool, np.bool_)) or not isinstance(inplace, (bool, np.bool_)):
        raise TypeError("normalize and inplace must be bools")
    if np.ndim(x) == 0:  # before float_array, which would make a scalar 1-D
        raise ValueError("x must have at least one axis")
    if inplace:
        a = to_numpy(x, "x")
        if a.dtype not in (np.float32, np.float64):
            raise TypeError(f"fwht(inplace=True) needs a float32 or float64 array, got dtype {a.dtype}")
        if not a.flags.c_contiguous or not a.flags.writeable:
            raise ValueError("fwht(inplace=True) needs a writeable C-contiguous array")
        float_array(a, "x")  # size and finiteness (a view: nothing is copied)
    else:
        a = float_array(x, "x")
    _check_length(a.shape[-1], "x")
    if not inplace:
        a = a.copy()
    _fwht_inplace(a, bool(normalize), be)
    return x if inplace else a


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

    def forward(self, x: Any, *, backend: str = "auto") -> np.ndarray:
        """Rotate: ``H D x / sqrt(n)`` over the last axis (length ``dim``), batched.

        Returns a new array with last axis ``padded_dim`` (float64 for float64 input,
        float32 otherwise). Input rules as for :func:`fwht`.
        """
        be = _host_backend(x, backend, "RandomizedHadamard.forward")
        a = float_array(x, "x")
        if np.ndim(x) == 0 or a.shape[-1] != self._dim:
            raise ValueError(f"x must have a last axis of length dim={self._dim}, got shape {a.shape}")
        if be == "reference":
            return _ref.randomized_hadamard_forward(a, self._dim, self._seed, self._repeats, self._group)
        y = np.zeros(a.shape[:-1] + (self._n,), dtype=a.dtype)
        y[..., : self._dim] = a
        for s in range(self._repeats):
            y *= self.signs(s, dtype=a.dtype, backend=be)
            _fwht_inplace(y, True, be)
        return y

    def inverse(self, y: Any, *, backend: str = "auto") -> np.ndarray:
        """Undo :meth:`forward`: ``D H y / sqrt(n)`` per repeat in reverse order, then the
        first ``dim`` elements of the last axis (length ``padded_dim``)."""
        be = _host_backend(y, backend, "RandomizedHadamard.inverse")
        a = float_array(y, "y")
        if np.ndim(y) == 0 or a.shape[-1] != self._n:
            raise ValueError(f"y must have a last axis of length padded_dim={self._n}, got shape {a.shape}")
        if be == "reference":
            return _ref.randomized_hadamard_inverse(a, self._dim, self._seed, self._repeats, self._group)
        a = a.copy()
        for s in reversed(range(self._repeats)):
            _fwht_inplace(a, True, be)
            a *= self.signs(s, dtype=a.dtype, backend=be)
        return np.ascontiguousarray(a[..., : self._dim])
