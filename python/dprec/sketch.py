"""Count-sketch for secure-aggregation compression (SPEC §2, §4).

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

from . import _backend, _device
from ._validation import check_int, check_seed, check_u32, float_array
from .constants import MAX_STREAM_ELEMENTS
from .reference import sketch as _ref

__all__ = ["CountSketch", "MAX_ROWS", "MAX_GPU_MEDIAN_ROWS"]

#: Most rows a sketch may have. Philox allows 2**32 sub-streams; this cap keeps tables and
#: decode work sane (the paper uses 5..15 rows).
MAX_ROWS = 1 << 16
_MAX_COLS = 0xFFFFFFFF  # buckets are (w * cols) >> 32 with a 32-bit cols
#: Most rows of a median decode on the GPU. The CPU sorts up to 32 rows with a sorting
#: network that the GPU repeats exactly (signed zeros included); beyond that the CPU's
#: selection algorithm cannot be reproduced bit for bit. The mean decode has no such cap.
MAX_GPU_MEDIAN_ROWS = 32


def _check_finite_gpu(g: _device.GpuArray, name: str) -> None:
    """ValueError if the GPU array holds NaN or infinity (waits for the caller's stream once)."""
    maxabs = _backend.cuda_module().norm_stats(g.device, g.stream, [g.ptr], [g.dtype], [g.size], 1.0, scratch=g.scratch)[0, 1]
    if not np.isfinite(maxabs):
        raise ValueError(f"{name} contains {'NaN' if np.isnan(maxabs) else 'infinite'} values")


def _shape_check(name: str, shape: tuple[int, ...]) -> Any:
    """The exact-shape rule for ``name``, run by float_array before anything is converted or copied."""

    def check(got: tuple[int, ...]) -> None:
        if tuple(got) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(got)}")

    return check


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
        gx = _device.float_gpu_array(x, "x", _shape_check("x", (self._dim,)))
        go = _device.gpu_array(out, "out") if out is not None else None
        if out is not None:
            _device.same_device([("x", gx), ("out", go)])
        be = _backend.resolve(backend, gx.label if gx is not None else None, "x")
        if gx is not None:
            return self._encode_gpu(gx, go, out)
        a = float_array(x, "x", check_shape=_shape_check("x", (self._dim,)))  # before any copy
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

    def _encode_gpu(self, gx: _device.GpuArray, go: _device.GpuArray | None, out: Any) -> Any:
        if gx.shape != (self._dim,):
            raise ValueError(f"x must have shape ({self._dim},), got {gx.shape}")
        if go is not None:
            if go.dtype not in ("float32", "float64"):
                raise TypeError(f"out must have dtype float32 or float64, got {go.dtype}")
            if go.shape != self.shape:
                raise ValueError(f"out must have shape {self.shape}, got {go.shape}")
            if go.readonly:
                raise ValueError("out must be writeable (it is a read-only GPU array)")
        _check_finite_gpu(gx, "x")
        cuda = _backend.cuda_module()
        if go is None:
            table = _device.empty_like(gx, self.shape, gx.dtype)
            cuda.memset_zero(table.device, gx.stream, table.ptr, table.size * table.itemsize)
        else:
            table = go
        cuda.count_sketch_encode(
            gx.device,
            gx.stream,
            gx.ptr,
            gx.dtype,
            self._dim,
            self._seed,
            self._group,
            self._rows,
            self._cols,
            self.scale,
            table.ptr,
            table.dtype, scratch=gx.scratch,
        )
        return out if go is not None else table.obj

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
        gt = _device.float_gpu_array(table, "table", _shape_check("table", self.shape))
        be = _backend.resolve(backend, gt.label if gt is not None else None, "table")
        median_scale = float(self._rows) if self._normalize else 1.0
        if gt is not None:
            if gt.shape != self.shape:
                raise ValueError(f"table must have shape {self.shape}, got {gt.shape}")
            if method == "median" and self._rows > MAX_GPU_MEDIAN_ROWS:
                raise ValueError(
                    f"rows must be at most {MAX_GPU_MEDIAN_ROWS} for the median decode on the GPU, got {self._rows} "
                    "(use method='mean', or decode a host copy of the table)"
                )
            _check_finite_gpu(gt, "table")
            out = _device.empty_like(gt, (self._dim,), gt.dtype)
            _backend.cuda_module().count_sketch_decode(
                gt.device,
                gt.stream,
                gt.ptr,
                gt.dtype,
                self._dim,
                self._seed,
                self._group,
                self._rows,
                self._cols,
                method == "median",
                median_scale,
                out.ptr,
            )
            return out.obj
        t = float_array(table, "table", check_shape=_shape_check("table", self.shape))  # before any copy
        if be != "cpu":
            return _ref.count_sketch_decode(
                t, self._dim, self._seed, self._rows, self._cols, self._group, self._normalize, method
            )
        out = np.empty(self._dim, dtype=t.dtype)
        _backend.native().count_sketch_decode(
            t.reshape(-1), self._seed, self._group, self._rows, self._cols, method == "median", median_scale, out
        )
        return out
