"""Pure-NumPy randomized rounding to integers (Philox domain 4; secure aggregation).

One rounding of a float64 vector ``x`` with the uniforms of the client-private Philox stream
``(seed, substream=attempt, group, domain=4)``: element ``j`` reads words ``2j`` and ``2j+1``
and forms ``u = (w[2j] << 32) | w[2j+1]``. With ``a = |x_j|``, ``m = floor(a)`` and
``f = a - m`` (exact in float64), the magnitude is ``m + (u < floor(f * 2**64))`` and the sign
is ``x_j``'s. So ``P(|out_j| = m + 1) = floor(f * 2**64) / 2**64``: exactly ``f`` when ``f`` is
a multiple of ``2**-64`` (always when ``|x_j| >= 2**-11``), otherwise less than ``2**-64``
below it, and ``E[out_j] = x_j`` to that precision: the rounding is unbiased.

The magnitude is rounded rather than ``x`` itself because ``x - floor(x)`` is not exact for
small negative ``x`` (``-1e-300 - (-1)`` rounds to 1); ``|x| - floor(|x|)`` always is.

The sum of squares of the result is returned as well, in float64, added in the order the
native kernel uses (see :func:`sum_of_squares`), so the two agree bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..constants import DOMAIN_ROUNDING
from .philox import stream_words

__all__ = ["randomized_round", "sum_of_squares", "ROUND_CHUNK", "MAX_ROUND_MAGNITUDE"]

#: Elements per chunk of the sum of squares (part of its summation order, as in the native kernel).
ROUND_CHUNK = 1 << 14
#: Magnitudes at or above this (2**62) are refused: their rounding would not fit int64 safely.
MAX_ROUND_MAGNITUDE = float(2**62)
_TWO32 = float(2**32)


def _round_chunk(x: np.ndarray, words: np.ndarray) -> np.ndarray:
    """The rounding of ``x`` (float64) with its ``2 * x.size`` words (uint32), as int64."""
    a = np.abs(x)
    m = np.floor(a)
    f = a - m  # exact (Sterbenz), in [0, 1)
    # floor(f * 2**64) = hi * 2**32 + lo without a float -> uint64 conversion: every step is exact.
    scaled = f * _TWO32
    hi = np.floor(scaled)
    lo = np.floor((scaled - hi) * _TWO32)
    w0 = words[0::2].astype(np.float64)  # uint32 values: exact in float64
    w1 = words[1::2].astype(np.float64)
    up = (w0 < hi) | ((w0 == hi) & (w1 < lo))  # (w0 << 32 | w1) < floor(f * 2**64)
    magnitude = m.astype(np.int64) + up
    return np.where(x < 0.0, -magnitude, magnitude)


def sum_of_squares(values: np.ndarray) -> float:
    """``sum float64(v)**2`` of the int64 ``values`` in the native kernel's fixed order.

    Chunks of :data:`ROUND_CHUNK` elements; in a chunk, element ``i`` adds its square to lane
    ``i % 4`` in increasing ``i`` (``np.add.accumulate`` is a sequential scan); a chunk's sum is
    ``(lane0 + lane1) + (lane2 + lane3)``; chunks add in order from 0.
    """
    flat = np.asarray(values, dtype=np.int64).reshape(-1)
    total = 0.0
    for start in range(0, flat.size, ROUND_CHUNK):
        d = flat[start : start + ROUND_CHUNK].astype(np.float64)
        sq = np.zeros(-(-d.size // 4) * 4, dtype=np.float64)  # zero padding: adding +0.0 changes nothing
        sq[: d.size] = d * d
        lanes = np.add.accumulate(sq.reshape(-1, 4), axis=0)[-1]
        total += float((lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
    return total


def randomized_round(x: np.ndarray, seed: int, attempt: int = 0, group: int = 0) -> tuple[np.ndarray, float]:
    """One randomized rounding of ``x`` (float64, any shape) and the float64 sum of its squares.

    Returns an int64 array of ``x``'s shape. Raises ValueError naming ``x`` for NaN, infinity
    or ``|x| >= 2**62``.
    """
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    if not (np.abs(flat) < MAX_ROUND_MAGNITUDE).all():  # NaN fails the comparison too
        raise ValueError("x must be finite with |x| < 2**62 (too large to round to int64)")
    out = np.empty(flat.size, dtype=np.int64)
    for start in range(0, flat.size, ROUND_CHUNK):
        chunk = flat[start : start + ROUND_CHUNK]
        words = stream_words(seed, 2 * chunk.size, attempt, group, DOMAIN_ROUNDING, 2 * start)
        out[start : start + chunk.size] = _round_chunk(chunk, words)
    return out.reshape(x.shape), sum_of_squares(out)
