"""Pure-NumPy arithmetic modulo ``M = 2**bits``, ``1 <= bits <= 64`` (secure aggregation).

Values mod ``M`` are stored as uint32 for ``bits <= 32`` and uint64 above (:func:`storage_dtype`).
NumPy's unsigned integer arithmetic wraps modulo ``2**32`` / ``2**64``, multiples of ``M``, so a
wrapped sum followed by a mask is the sum mod ``M`` exactly, whatever the order of the adds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["storage_dtype", "mask", "mod_reduce", "mod_sum", "mod_lift"]


def storage_dtype(bits: int) -> np.dtype:
    """uint32 for ``bits <= 32``, uint64 for ``bits <= 64``."""
    return np.dtype(np.uint32) if bits <= 32 else np.dtype(np.uint64)


def mask(bits: int) -> int:
    """``2**bits - 1``."""
    return (1 << bits) - 1


def mod_reduce(x: np.ndarray, bits: int) -> np.ndarray:
    """``x mod 2**bits`` for int64 ``x`` (its two's complement bits, masked), in the storage dtype."""
    wrapped = np.asarray(x, dtype=np.int64).view(np.uint64) & np.uint64(mask(bits))
    return wrapped.astype(storage_dtype(bits))


def mod_sum(xs: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """``((out if given else 0) + sum of the rows of xs) mod 2**bits`` (xs: (n, m), storage dtype).

    Values of ``xs`` (and ``out``) at or above ``2**bits`` are taken mod ``2**bits`` too.
    """
    dt = storage_dtype(bits)
    total = np.add.reduce(np.asarray(xs, dtype=dt), axis=0, dtype=dt)  # wraps mod 2**32 / 2**64
    if out is not None:
        total = total + np.asarray(out, dtype=dt)
    return total & dt.type(mask(bits))


def mod_lift(x: np.ndarray, bits: int, scale: float | None = None, dtype: type = np.float64) -> np.ndarray:
    """The centered lift of ``x mod 2**bits`` to ``[-2**(bits-1), 2**(bits-1))``: int64 when
    ``scale`` is None, else ``float64(scale) * float64(lifted)`` cast to ``dtype`` (float64 or
    float32). For ``bits = 64`` the lift is the int64 with the same bits."""
    v = np.asarray(x).astype(np.uint64) & np.uint64(mask(bits))
    if bits == 64:
        lifted = v.view(np.int64)
    else:
        signed = v.astype(np.int64)
        lifted = np.where(v >= np.uint64(1 << (bits - 1)), signed + np.int64(-(1 << bits)), signed)  # -2**63 fits int64
    if scale is None:
        return lifted
    return (np.float64(scale) * lifted.astype(np.float64)).astype(dtype)
