"""Pure-NumPy fast Walsh-Hadamard transform and randomized Hadamard rotation (see *Rotation and sketching*).

The transform is in natural (Sylvester) order: ``H_1 = [1]``,
``H_{2n} = [[H_n, H_n], [H_n, -H_n]]`` (the matrix of ``scipy.linalg.hadamard``). The
rotation's diagonal signs of repeat ``s`` are element ``j`` of the Philox stream
``(seed, substream=s, group, domain=3)``: ``+1`` if the word is below ``2**31``, else ``-1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..constants import DOMAIN_HADAMARD_SIGN
from .philox import stream_words, words_to_signs

__all__ = ["fwht", "rotation_signs", "randomized_hadamard_forward", "randomized_hadamard_inverse", "padded_length"]


def padded_length(dim: int) -> int:
    """The next power of two ``>= dim`` (1 for dim = 1)."""
    return 1 << max(int(dim) - 1, 0).bit_length()


def fwht(x: np.ndarray, normalize: bool = True) -> np.ndarray:
    """Walsh-Hadamard transform over the last axis (length a power of two), as a new array.

    Iterative radix-2 butterflies: at stride ``h = 1, 2, 4, ...`` each pair
    ``(a, b) = (x[i], x[i + h])`` becomes ``(a + b, a - b)``. ``normalize`` multiplies by
    ``1/sqrt(n)`` in the array's dtype, making the transform orthonormal.
    """
    x = np.asarray(x)
    n = x.shape[-1]
    if n & (n - 1) or n == 0:
        raise ValueError(f"the last axis must have a power-of-two length, got {n}")
    y = x.reshape(-1, n).copy()
    h = 1
    while h < n:
        v = y.reshape(-1, n // (2 * h), 2, h)
        a = v[:, :, 0, :].copy()
        b = v[:, :, 1, :]
        v[:, :, 0, :] += b
        v[:, :, 1, :] = a - b
        h *= 2
    if normalize and n > 1:
        y *= y.dtype.type(1.0 / np.sqrt(n))
    return y.reshape(x.shape)


def rotation_signs(seed: int, n: int, repeat: int = 0, group: int = 0, dtype: Any = np.float64) -> np.ndarray:
    """The ``n`` diagonal signs (``+-1`` in ``dtype``) of repeat ``repeat``, Philox domain 3."""
    w = stream_words(seed, n, repeat, group, DOMAIN_HADAMARD_SIGN)
    return words_to_signs(w, dtype)


def randomized_hadamard_forward(x: np.ndarray, dim: int, seed: int, repeats: int = 1, group: int = 0) -> np.ndarray:
    """Zero-pad the last axis from ``dim`` to ``n = padded_length(dim)``, then apply
    ``x <- H D_s x / sqrt(n)`` for ``s = 0 .. repeats-1``."""
    x = np.asarray(x)
    if x.shape[-1] != dim:
        raise ValueError(f"x must have a last axis of length {dim}, got {x.shape[-1]}")
    n = padded_length(dim)
    y = np.zeros(x.shape[:-1] + (n,), dtype=x.dtype)
    y[..., :dim] = x
    for s in range(repeats):
        y = fwht(y * rotation_signs(seed, n, s, group, y.dtype), normalize=True)
    return y


def randomized_hadamard_inverse(y: np.ndarray, dim: int, seed: int, repeats: int = 1, group: int = 0) -> np.ndarray:
    """The exact inverse: ``y <- D_s H y / sqrt(n)`` for ``s = repeats-1 .. 0``, then the
    first ``dim`` elements of the last axis."""
    y = np.asarray(y)
    n = padded_length(dim)
    if y.shape[-1] != n:
        raise ValueError(f"y must have a last axis of length {n}, got {y.shape[-1]}")
    for s in reversed(range(repeats)):
        y = fwht(y, normalize=True) * rotation_signs(seed, n, s, group, y.dtype)
    return np.ascontiguousarray(y[..., :dim])
