"""Count-sketch for secure-aggregation compression (SPEC §2, §4).

:class:`CountSketch` maps a vector of ``dim`` elements to a ``rows x cols`` table,
linearly: ``table[r, h_r(j)] += s_r(j) * x[j] * scale`` with ``scale = 1/rows`` (count-mean,
the paper's Algorithm 4) unless ``normalize=False``. Bucket ``h_r(j) = (uint64(w) * cols)
>> 32`` with ``w`` element ``j`` of Philox stream ``(seed, substream=r, group, domain=1)``;
sign ``s_r(j) = +1`` if element ``j`` of ``(seed, r, group, domain=2)`` is below ``2**31``,
else ``-1``. Buckets and signs are computed on the fly: no rows x dim index table is ever
stored. Sketches add: the sum of the clients' tables is the sketch of the sum of their
vectors.

Host arrays only for now (NumPy, or PyTorch on the CPU); GPU arrays raise ValueError
until the CUDA kernels land.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _backend
from ._validation import check_int, check_seed, check_u32, float_array
from .constants import MAX_STREAM_ELEMENTS
from .hadamard import _host_backend
from .reference import sketch as _ref

__all__ = ["CountSketch", "MAX_ROWS"]

#: Most rows a sketch may have. Philox allows 2**32 sub-streams; this cap keeps tables and
#: decode work sane (the paper uses 5..15 rows).
MAX_ROWS = 1 << 16
_MAX_COLS = 0xFFFFFFFF  # buckets are (w * cols) >> 32 with a 32-bit cols


class CountSketch:
    """A linear count-sketch with Philox-derived buckets and signs.

    Parameters
    ----------
    dim : int
        Length of the vectors sketched, ``1 <= dim <= 2**34`` (the Philox counter layout).
    rows : int
        Rows (independent hash functions), ``1 <= rows <= 2**16``.
    cols : int
        Buckets per row, ``1 <= cols < 2**32``. The table, ``rows * cols`` elements, is at
        most ``2**34`` elements.
    seed : int
        The shared 64-bit seed.
    group : int
        Philox group id (< 2**32), e.g. the tensor or chunk number; 0 by default.
    normalize : bool
        Encode with ``scale = 1/rows`` (count-mean, so that the mean decode is unbiased);
        with False the scale is 1.
    """

    def __init__(self, dim: int, rows: int, cols: int, seed: int, group: int = 0, normalize: bool = True) -> None:
        self._dim = check_int(dim, "dim", 1, MAX_STREAM_ELEMENTS)
        self._rows = check_int(rows, "rows", 1, MAX_ROWS)
        self._cols = check_int(cols, "cols", 1, _MAX_COLS)
        if self._rows * self._cols > MAX_STREAM_ELEMENTS:
            raise ValueError(f"rows * cols must be at most 2**34, got {self._rows} * {self._cols}")
        self._seed = check_seed(seed)
        self._group = check_u32(group, "group")
        if not isinstance(normalize, (bool, np.bool_)):
            raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
        self._normalize = bool(normalize)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def rows(self) -> int:
        return self._rows

    @property
    def cols(self) -> int:
        return self._cols

    @property
    def shape(self) -> tuple[int, int]:
        """The table's shape, ``(rows, cols)``."""
        return (self._rows, self._cols)

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def group(self) -> int:
        return self._group

    @property
    def normalize(self) -> bool:
        return self._normalize

    @property
    def scale(self) -> float:
        """The encode scale: ``1/rows`` when ``normalize``, else 1."""
        return 1.0 / self._rows if self._normalize else 1.0

    def __repr__(self) -> str:
        return (
            f"CountSketch(dim={self._dim}, rows={self._rows}, cols={self._cols}, seed={self._seed}, "
            f"group={self._group}, normalize={self._normalize})"
        )

    def encode(self, x: Any, out: Any = None, *, backend: str = "auto") -> np.ndarray:
        """Sketch ``x`` into a table, or add its sketch into ``out``.

        Parameters
        ----------
        x : array_like, shape (dim,)
            float16/bfloat16 are converted to float32; integers, NaN and infinity are
            rejected. A PyTorch CPU tensor is accepted.
        out : numpy.ndarray, shape (rows, cols), optional
            A writeable C-contiguous float32 or float64 table to accumulate into (``x``
            is converted to its dtype). Returned.
        backend : {"auto", "cpu", "reference"}

        Returns
        -------
        numpy.ndarray, shape (rows, cols)
            ``out``, or a new table: float64 for float64 ``x``, float32 otherwise.
            Deterministic: rows are independent and each row adds its elements in
            increasing index order, whatever the thread count.
        """
        be = _host_backend(x, backend, "CountSketch.encode")
        if out is not None:
            _host_backend(out, backend, "CountSketch.encode")
        a = float_array(x, "x")
        if np.ndim(x) != 1 or a.shape != (self._dim,):
            raise ValueError(f"x must have shape ({self._dim},), got {np.shape(x)}")
        if out is None:
            table = np.zeros(self.shape, dtype=a.dtype)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
            if out.dtype not in (np.float32, np.float64):
                raise TypeError(f"out must have dtype float32 or float64, got {out.dtype}")
            if out.shape != self.shape:
                raise ValueError(f"out must have shape {self.shape}, got {out.shape}")
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise ValueError("out must be C-contiguous and writeable")
            table = out
            a = a.astype(out.dtype, copy=False)
        if be == "cpu":
            _backend.native().count_sketch_encode(
                a, self._seed, self._group, self._rows, self._cols, self.scale, table.reshape(-1)
            )
        else:
            _ref.count_sketch_encode(a, self._seed, self._rows, self._cols, self._group, self._normalize, table)
        return table

    def decode(self, table: Any, method: str = "mean", *, backend: str = "auto") -> np.ndarray:
        """Estimate the vector from a (possibly summed) table.

        Parameters
        ----------
        table : array_like, shape (rows, cols)
            Finite floating-point table (float16/bfloat16 converted to float32).
        method : {"mean", "median"}
            "mean": ``x_hat[j] = sum_r s_r(j) table[r, h_r(j)]`` (Algorithm 5; unbiased
            when ``normalize``). "median": count-median, ``median_r(s_r(j) table[r,
            h_r(j)])`` times ``rows`` when ``normalize``; robust, for heavy hitters. The
            median of an even number of rows is the mean of the two middle values.
        backend : {"auto", "cpu", "reference"}

        Returns
        -------
        numpy.ndarray, shape (dim,), in the table's dtype (float32 or float64)
        """
        be = _host_backend(table, backend, "CountSketch.decode")
        if method not in ("mean", "median"):
            raise ValueError(f"method must be 'mean' or 'median', got {method!r}")
        t = float_array(table, "table")
        if t.shape != self.shape:
            raise ValueError(f"table must have shape {self.shape}, got {t.shape}")
        if be != "cpu":
            return _ref.count_sketch_decode(
                t, self._dim, self._seed, self._rows, self._cols, self._group, self._normalize, method
            )
        out = np.empty(self._dim, dtype=t.dtype)
        median_scale = float(self._rows) if self._normalize else 1.0
        _backend.native().count_sketch_decode(
            t.reshape(-1), self._seed, self._group, self._rows, self._cols, method == "median", median_scale, out
        )
        return out
