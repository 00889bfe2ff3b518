"""Count-sketch for secure-aggregation compression (see *Rotation and sketching* in the docs).

:class:`CountSketch` maps a vector of ``dim`` elements to a ``rows x cols`` table,
linearly: ``table[r, h_r(j)] += s_r(j) * x[j] * scale`` with ``scale = 1/rows`` (count-mean,
the paper's Algorithm 4) unless ``normalize=False``. Bucket ``h_r(j) = (uint64(w) * cols)
>> 32`` with ``w`` element ``j`` of Philox stream ``(seed, substream=r, group, domain=1)``;
sign ``s_r(j) = +1`` if element ``j`` of ``(seed, r, group, domain=2)`` is below ``2**31``,
else ``-1``. Buckets and signs are computed on the fly: no rows x dim index table is ever
stored. Sketches add: the sum of the clients' tables is the sketch of the sum of their
vectors.

GPU arrays (PyTorch CUDA tensors, CuPy, anything exposing ``__cuda_array_interface__``
or ``__dlpack__``) are sketched and decoded on their device, on the caller's current
stream, and results come back in the caller's framework on that device (see
:mod:`dprec.cuda`). The CUDA kernels produce the CPU's bits exactly: the encode sorts each
row's (bucket, value) pairs with a stable radix sort and adds every bucket's values in
increasing element order, as the CPU does, so no float atomics (and no run-to-run
variation) are involved. The GPU median decode supports up to :data:`MAX_GPU_MEDIAN_ROWS`
rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.validation import check_int, check_seed, check_u32
from ..constants import MAX_STREAM_ELEMENTS

__all__ = ["CountSketch", "MAX_ROWS", "MAX_GPU_MEDIAN_ROWS"]

#: Most rows a sketch may have. Philox allows 2**32 sub-streams; this cap keeps tables and
#: decode work sane (the paper uses 5..15 rows).
MAX_ROWS = 1 << 16
_MAX_COLS = 0xFFFFFFFF  # buckets are (w * cols) >> 32 with a 32-bit cols
#: Most rows of a median decode on the GPU. The CPU sorts up to 32 rows with a sorting
#: network that the GPU repeats exactly (signed zeros included); beyond that the CPU's
#: selection algorithm cannot be reproduced bit for bit. The mean decode has no such cap.
MAX_GPU_MEDIAN_ROWS: int = _dispatch.kernels("cuda").max_median_rows


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

    def encode(self, x: Any, out: Any = None, *, backend: str = "auto") -> Any:
        """Sketch ``x`` into a table, or add its sketch into ``out``.

        Parameters
        ----------
        x : array_like, shape (dim,)
            float16/bfloat16 are converted to float32; integers, NaN and infinity are
            rejected. NumPy, a PyTorch tensor (CPU or CUDA), or a GPU array (CuPy,
            ``__cuda_array_interface__``, ``__dlpack__``; C-contiguous).
        out : array, shape (rows, cols), optional
            A writeable C-contiguous float32 or float64 table to accumulate into (``x``
            is converted to its dtype), on the same device as ``x``: a NumPy array for
            host ``x``, a GPU array for GPU ``x``. Returned.
        backend : {"auto", "cpu", "cuda", "reference"}
            "auto" runs GPU arrays on "cuda" and host arrays on "cpu".

        Returns
        -------
        array, shape (rows, cols)
            ``out``, or a new table: float64 for float64 ``x``, float32 otherwise; a
            NumPy array for host ``x``, else an array of ``x``'s framework on its device.
            Deterministic and the same bits on the CPU and the GPU: rows are independent
            and each row adds its elements in increasing index order, whatever the
            thread count or the GPU.

        Notes
        -----
        On the GPU the work is queued on ``x``'s stream (PyTorch's or CuPy's current
        stream); checking that ``x`` is finite waits for that stream once. Scratch
        memory is bounded (about 128 MiB for float32 tables, 192 MiB for float64)
        whatever the sizes.
        """
        a = _arrays.read(x, "x")
        o = _arrays.read(out, "out") if out is not None else None
        _arrays.same_device([("x", a), ("out", o)])
        kernels = _dispatch.select(backend, a, "x")
        src = _arrays.float_input(a, "x", check_shape=_arrays.ShapeRule(shape=(self._dim,)))  # before any copy
        table = _arrays.output(o, self.shape, ("float32", "float64") if o is not None else (src.dtype,), like=src,
                               like_name="x", zero=True)
        kernels.count_sketch_encode(src, self._seed, self._group, self._rows, self._cols, self.scale, table)
        return out if out is not None else table.result()

    def decode(self, table: Any, method: str = "mean", *, backend: str = "auto") -> Any:
        """Estimate the vector from a (possibly summed) table.

        Parameters
        ----------
        table : array_like, shape (rows, cols)
            Finite floating-point table (float16/bfloat16 converted to float32): NumPy,
            a PyTorch tensor (CPU or CUDA) or a C-contiguous GPU array.
        method : {"mean", "median"}
            "mean": ``x_hat[j] = sum_r s_r(j) table[r, h_r(j)]`` (Algorithm 5; unbiased
            when ``normalize``). "median": count-median, ``median_r(s_r(j) table[r,
            h_r(j)])`` times ``rows`` when ``normalize``; robust, for heavy hitters. The
            median of an even number of rows is the mean of the two middle values. On
            the GPU the median needs ``rows <= MAX_GPU_MEDIAN_ROWS`` (32).
        backend : {"auto", "cpu", "cuda", "reference"}

        Returns
        -------
        array, shape (dim,), in the table's dtype (float32 or float64)
            NumPy for a host table; for a GPU table, an array of its framework on its
            device, computed on its stream (the same bits as the CPU).
        """
        if method not in ("mean", "median"):
            raise ValueError(f"method must be 'mean' or 'median', got {method!r}")
        a = _arrays.read(table, "table")
        kernels = _dispatch.select(backend, a, "table")
        t = _arrays.float_input(a, "table", check_shape=_arrays.ShapeRule(shape=self.shape))  # before any copy
        limit = getattr(kernels, "max_median_rows", None)
        if method == "median" and limit is not None and self._rows > limit:
            raise ValueError(
                f"rows must be at most {limit} for the median decode on the GPU, got {self._rows} "
                "(use method='mean', or decode a host copy of the table)"
            )
        est = _arrays.empty(t, (self._dim,), t.dtype)
        median_scale = float(self._rows) if self._normalize else 1.0
        kernels.count_sketch_decode(
            t, self._dim, self._seed, self._group, self._rows, self._cols, method == "median", median_scale, est
        )
        return est.result()
