"""Pure-NumPy count-sketch (see *Rotation and sketching* in the docs).

Row ``r`` hashes element ``j`` to bucket ``h_r(j) = (uint64(w) * cols) >> 32`` with ``w``
element ``j`` of the Philox stream ``(seed, substream=r, group, domain=1)``, and gives it
the sign ``s_r(j) = +1 if w' < 2**31 else -1`` with ``w'`` from domain 2. Everything is
computed per row (or per chunk of elements for the median), so memory is O(dim + rows *
cols), never a rows x dim table.

Encode adds ``s_r(j) * x[j] * scale`` into ``table[r, h_r(j)]`` in increasing ``j`` order
in the table's dtype (``np.add.at`` is unbuffered and in order), which is the order the
native kernels use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..constants import DOMAIN_SKETCH_BUCKET, DOMAIN_SKETCH_SIGN
from .philox import stream_words, words_to_signs

__all__ = ["buckets", "signs", "count_sketch_encode", "count_sketch_decode"]

# Elements per chunk of the median decode (rows x chunk values in memory at once).
_MEDIAN_CHUNK = 1 << 16


def buckets(seed: int, dim: int, row: int, cols: int, group: int = 0, offset: int = 0) -> np.ndarray:
    """Buckets ``h_row(j)`` in ``[0, cols)`` of elements ``offset .. offset+dim-1`` (int64)."""
    w = stream_words(seed, dim, row, group, DOMAIN_SKETCH_BUCKET, offset).astype(np.uint64)
    return ((w * np.uint64(cols)) >> np.uint64(32)).astype(np.int64)


def signs(seed: int, dim: int, row: int, group: int = 0, offset: int = 0, dtype: Any = np.float64) -> np.ndarray:
    """Signs ``s_row(j)`` (``+-1`` in ``dtype``) of elements ``offset .. offset+dim-1``."""
    w = stream_words(seed, dim, row, group, DOMAIN_SKETCH_SIGN, offset)
    return words_to_signs(w, dtype)


def count_sketch_encode(
    x: np.ndarray,
    seed: int,
    rows: int,
    cols: int,
    group: int = 0,
    normalize: bool = True,
    table: np.ndarray | None = None,
) -> np.ndarray:
    """Add the sketch of the 1-D ``x`` into ``table`` (rows, cols) and return it.

    ``scale = 1/rows`` when ``normalize`` (count-mean), else 1. A new table has x's dtype.
    """
    x = np.asarray(x).reshape(-1)
    dim = x.size
    if table is None:
        table = np.zeros((rows, cols), dtype=x.dtype)
    dt = table.dtype.type
    xs = x.astype(table.dtype, copy=False) * dt(1.0 / rows if normalize else 1.0)
    for r in range(rows):
        np.add.at(table[r], buckets(seed, dim, r, cols, group), signs(seed, dim, r, group, dtype=dt) * xs)
    return table


def count_sketch_decode(
    table: np.ndarray,
    dim: int,
    seed: int,
    rows: int,
    cols: int,
    group: int = 0,
    normalize: bool = True,
    method: str = "mean",
) -> np.ndarray:
    """Estimate x (dim,) from a table (rows, cols), in the table's dtype.

    "mean": ``sum_r s_r(j) table[r, h_r(j)]`` (Algorithm 5), rows added in order.
    "median": ``median_r(s_r(j) table[r, h_r(j)])`` times ``rows`` when ``normalize``
    (the median of an even count is the mean of the two middle values).
    """
    table = np.asarray(table).reshape(rows, cols)
    dt = table.dtype.type
    out = np.zeros(dim, dtype=table.dtype)
    if method == "mean":
        for r in range(rows):
            out += signs(seed, dim, r, group, dtype=dt) * table[r][buckets(seed, dim, r, cols, group)]
        return out
    if method != "median":
        raise ValueError(f"method must be 'mean' or 'median', got {method!r}")
    scale = dt(rows if normalize else 1)
    for start in range(0, dim, _MEDIAN_CHUNK):
        m = min(_MEDIAN_CHUNK, dim - start)
        vals = np.empty((rows, m), dtype=table.dtype)
        for r in range(rows):
            vals[r] = signs(seed, m, r, group, start, dt) * table[r][buckets(seed, m, r, cols, group, start)]
        out[start : start + m] = np.median(vals, axis=0) * scale
    return out
