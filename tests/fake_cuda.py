"""A fake ``dprec._cuda`` for machines without a GPU (a test helper, not a test module).

The Python plumbing of the CUDA backend (``dprec._runtime.arrays``, ``dprec._runtime.frameworks``, the CUDA backend ``dprec._runtime.backends.cuda`` behind
``dprec.rec``, ``dprec.philox``, ``dprec.rec.codec``, ``dprec.transforms.hadamard`` and ``dprec.transforms.sketch``,
``dprec.cuda.DeviceArray``) only talks to the compiled module through the functions of
csrc/python/bind_cuda_runtime.cpp, bind_cuda_rec.cpp, bind_cuda_hadamard.cpp,
bind_cuda_sketch.cpp and bind_cuda_modular.cpp (the SecAgg server side). :class:`FakeCuda`
offers the same functions, with the same argument order, on host memory:

* "device memory" is NumPy buffers in a registry ``{ptr: (nbytes, array)}``; a
  :class:`FakeCuda.DeviceBuffer` (and a :class:`FakeGpuArray`) allocates one, filled with
  0xFF bytes (NaN as float) like uninitialised memory, and frees it when collected;
* every function checks its pointers as the real binding does (null, device memory,
  alignment) and, stricter than the GPU, that the allocation holds every element the call
  touches: a pointer past its allocation is reported as ``... is not CUDA device memory``,
  which catches offset and size bugs in the plumbing;
* the kernels compute with ``dprec._gpu_emulation`` (the CUDA kernels' per-thread bodies
  run on the host, with launch.cu's plans and reductions), so results are bit-identical to
  what a real GPU produces; without that test-only module (a wheel) the fixture skips;
* every call is recorded in :attr:`FakeCuda.calls` as ``Call(name, stream, args)`` so tests
  can assert which stream the plumbing used.

Use the :func:`fake_cuda` fixture, which installs the fake as ``dprec._runtime.native._cuda`` for
one test.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pytest

from dprec._runtime import native as _native

from .conftest import gpu_emulation

MAX_STREAM_ELEMENTS = 1 << 34
_FLOAT_TYPES = {"float32": np.float32, "float64": np.float64}
_ABSENT = object()


class Call(NamedTuple):
    name: str
    stream: int | None  # None for functions without a stream (allocation, queries)
    args: tuple


def _emu() -> Any:
    return gpu_emulation()


def _uint(value: Any, name: str) -> int:
    """An unsigned integer argument, as pybind11's uintptr_t / uint64_t casters take it."""
    if isinstance(value, (bool, float)) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    v = operator.index(value)
    if v < 0 or v >= 1 << 64:
        raise TypeError(f"{name} must be an unsigned 64-bit int, got {v}")
    return v


def _check_stream_range(offset: int, count: int) -> None:
    if offset > MAX_STREAM_ELEMENTS or count > MAX_STREAM_ELEMENTS - offset:
        raise ValueError(
            f"offset + size must be <= 2**34 (the Philox counter holds 2**32 blocks of 4), got {offset} + {count}"
        )


def _check_candidates(k: int) -> None:
    if k == 0 or k > 1 << 24:
        raise ValueError(f"n_candidates must be in [1, 2**24], got {k}")


def _float_type(dtype: str, name: str) -> Any:
    if dtype not in _FLOAT_TYPES:
        raise TypeError(f"{name} must be float32 or float64 on the GPU, got {dtype}")
    return _FLOAT_TYPES[dtype]


def _host_input(a: Any, dtype: Any, name: str) -> np.ndarray:
    """The binding's ``input<T>``: a 1-D C-contiguous NumPy array of exactly ``dtype``."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if a.dtype != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype).name}, got {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got {a.ndim}-D")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return a


def _check_clients(seeds: Any, indices: Any, coefs: Any) -> None:
    _host_input(seeds, np.uint64, "seeds")
    _host_input(indices, np.uint32, "indices")
    _host_input(coefs, np.float64, "coefs")
    if seeds.size == 0:
        raise ValueError("seeds must not be empty")
    if indices.size != seeds.size or coefs.size != seeds.size:
        raise ValueError("seeds, indices and coefs must have the same length")


class FakeCuda:
    """Stands in for ``dprec._cuda``: one device (cuda:0) whose memory is host memory."""

    def __init__(self, fill: int = 0xFF) -> None:
        self.calls: list[Call] = []
        #: (function, scratch) for every call that may allocate scratch memory
        self.scratch_sources: list[tuple[str, Any]] = []
        self.registry: dict[int, tuple[int, np.ndarray]] = {}
        self.fill = fill
        self.DeviceBuffer = _buffer_class(self)

    # -- bookkeeping ---------------------------------------------------------------------

    def _record(self, name: str, stream: Any, *args: Any) -> None:
        self.calls.append(Call(name, None if stream is None else _uint(stream, "stream"), args))

    def _allocate(self, nbytes: int) -> tuple[int, np.ndarray]:
        """Register a fresh allocation (at least 1 byte, like device_malloc's cudaMalloc)."""
        mem = np.full(max(int(nbytes), 1), self.fill, dtype=np.uint8)
        ptr = int(mem.ctypes.data)
        self.registry[ptr] = (int(nbytes), mem)
        return ptr, mem

    def _free(self, ptr: int) -> None:
        self.registry.pop(ptr, None)

    def _find(self, ptr: int) -> tuple[int, int, np.ndarray] | None:
        """(base, nbytes, memory) of the allocation holding ``ptr``."""
        for base, (nbytes, mem) in self.registry.items():
            if base <= ptr < base + max(nbytes, 1):
                return base, nbytes, mem
        return None

    def calls_named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def kernel_streams(self) -> set[int]:
        """Streams of every recorded call that has one."""
        return {c.stream for c in self.calls if c.stream is not None}

    def memory(self, ptr: int, dtype: Any, count: int) -> np.ndarray:
        """A writeable NumPy view of ``count`` elements at ``ptr`` (unchecked against a device)."""
        return self._view(ptr, 0, dtype, count, "ptr")

    def _device(self, device: Any) -> int:
        d = operator.index(device)
        if d != 0:
            raise ValueError(f"device must be in [0, 1), got {d}")
        return d

    def _view(self, ptr: Any, device: int, dtype: Any, count: int, name: str) -> np.ndarray:
        """The binding's ``device_pointer<T>``, plus a bounds check: ``count`` elements at ``ptr``."""
        ptr = _uint(ptr, name)
        if ptr == 0:
            raise ValueError(f"{name} is a null pointer")
        found = self._find(ptr)
        if found is None:
            raise ValueError(f"{name} is not CUDA device memory (a host pointer or unknown memory)")
        if device != 0:
            raise ValueError(f"{name} is on cuda:0, not on cuda:{device} like the rest of the call")
        dt = np.dtype(dtype)
        if ptr % dt.itemsize:
            raise ValueError(f"{name} is not aligned to its element size ({dt.itemsize} bytes)")
        base, nbytes, mem = found
        start = ptr - base
        need = int(count) * dt.itemsize
        if start + need > nbytes:
            raise ValueError(
                f"{name} is not CUDA device memory for the whole call: {need} bytes at byte {start} of a "
                f"{nbytes}-byte allocation (fake _cuda bounds check)"
            )
        return mem[start : start + need].view(dt)

    # -- runtime (bind_cuda_runtime.cpp) ---------------------------------------------------

    def device_count(self) -> int:
        return 1

    def unavailable_reason(self) -> str:
        return ""

    def device_name(self, device: int) -> str:
        self._device(device)
        return "Fake CUDA device on the host (sm_00)"

    def runtime_version(self) -> int:
        return 12040

    def driver_version(self) -> int:
        return 12040

    def pointer_device(self, ptr: int) -> int:
        ptr = _uint(ptr, "ptr")
        return 0 if ptr and self._find(ptr) is not None else -1

    def copy_to_host(self, device: int, stream: int, src: int, out: np.ndarray) -> None:
        self._record("copy_to_host", stream, src)
        device = self._device(device)
        if not isinstance(out, np.ndarray) or not out.flags.writeable or not out.flags.c_contiguous:
            raise ValueError("out must be a writeable C-contiguous array")
        data = self._view(src, device, np.uint8, out.nbytes, "src")
        out.reshape(-1).view(np.uint8)[...] = data

    def copy_to_device(self, device: int, stream: int, src: np.ndarray, dst: int) -> None:
        self._record("copy_to_device", stream, dst)
        device = self._device(device)
        if not isinstance(src, np.ndarray) or not src.flags.c_contiguous:
            raise ValueError("src must be C-contiguous")
        self._view(dst, device, np.uint8, src.nbytes, "dst")[...] = src.reshape(-1).view(np.uint8)

    def memset_zero(self, device: int, stream: int, dst: int, nbytes: int) -> None:
        self._record("memset_zero", stream, dst, nbytes)
        device = self._device(device)
        self._view(dst, device, np.uint8, _uint(nbytes, "nbytes"), "dst")[...] = 0

    def synchronize(self, device: int, stream: int) -> None:
        self._record("synchronize", stream)
        self._device(device)

    # -- kernels (bind_cuda_rec.cpp) ---------------------------------------------------------

    def stream_normals(
        self,
        device: int,
        stream: int,
        seed: int,
        substream: int,
        group: int,
        domain: int,
        offset: int,
        count: int,
        scale: float,
        out: int,
    ) -> None:
        self._record("stream_normals", stream, seed, substream, group, domain, offset, count, scale, out)
        device = self._device(device)
        offset, count = _uint(offset, "offset"), _uint(count, "count")
        _check_stream_range(offset, count)
        if count == 0:
            return
        o = self._view(out, device, np.float32, count, "out")
        _emu().stream_normals(seed, substream, group, domain, offset, float(scale), o)

    def stream_words(
        self,
        device: int,
        stream: int,
        seed: int,
        substream: int,
        group: int,
        domain: int,
        offset: int,
        count: int,
        out: int,
    ) -> None:
        self._record("stream_words", stream, seed, substream, group, domain, offset, count, out)
        device = self._device(device)
        offset, count = _uint(offset, "offset"), _uint(count, "count")
        _check_stream_range(offset, count)
        if count == 0:
            return
        o = self._view(out, device, np.uint32, count, "out")
        _emu().stream_words(seed, substream, group, domain, offset, o)

    def rec_dot_products(
        self,
        device: int,
        stream: int,
        phi: int,
        dtype: str,
        d: int,
        seed: int,
        group: int,
        n_candidates: int,
        factor: float,
        out: int,
        scratch: Any = None,
    ) -> None:
        self._record("rec_dot_products", stream, phi, dtype, d, seed, group, n_candidates, factor, out)
        self.scratch_sources.append(("rec_dot_products", scratch))
        device = self._device(device)
        d, k = _uint(d, "d"), _uint(n_candidates, "n_candidates")
        if d == 0:
            raise ValueError("phi must not be empty")
        _check_stream_range(0, d)
        _check_candidates(k)
        t = _float_type(dtype, "phi")
        o = self._view(out, device, np.float64, k, "out")
        p = self._view(phi, device, t, d, "phi")
        _emu().rec_dot_products(p, seed, group, float(factor), o)

    def generate_only(
        self, device: int, stream: int, d: int, seed: int, group: int, n_candidates: int, scratch: Any = None
    ) -> None:
        self._record("generate_only", stream, d, seed, group, n_candidates)
        self.scratch_sources.append(("generate_only", scratch))
        self._device(device)
        if _uint(d, "d") == 0:
            raise ValueError("d must be at least 1")
        _check_stream_range(0, d)
        _check_candidates(_uint(n_candidates, "n_candidates"))

    def gumbel_argmax(
        self, device: int, stream: int, logits: int, gumbel: np.ndarray, offsets: np.ndarray, scratch: Any = None
    ) -> np.ndarray:
        self._record("gumbel_argmax", stream, logits, gumbel.copy(), offsets.copy())
        self.scratch_sources.append(("gumbel_argmax", scratch))
        device = self._device(device)
        _host_input(gumbel, np.float64, "gumbel")
        off = _host_input(offsets, np.int64, "offsets")
        if off.size < 2:
            raise ValueError("offsets must hold at least one group (2 entries)")
        if off[0] != 0:
            raise ValueError("offsets[0] must be 0")
        if np.any(np.diff(off) <= 0):
            raise ValueError("offsets must be strictly increasing (no empty group)")
        if off[-1] != gumbel.size:
            raise ValueError(f"offsets[-1] must equal the number of logits ({gumbel.size}), got {off[-1]}")
        lg = self._view(logits, device, np.float64, gumbel.size, "logits")
        return _emu().gumbel_argmax(lg, gumbel, offsets)

    def accumulate(
        self,
        device: int,
        stream: int,
        out: int,
        dtype: str,
        d: int,
        group: int,
        seeds: np.ndarray,
        indices: np.ndarray,
        coefs: np.ndarray,
        scratch: Any = None,
    ) -> None:
        self._record("accumulate", stream, out, dtype, d, group)
        self.scratch_sources.append(("accumulate", scratch))
        device = self._device(device)
        d = _uint(d, "d")
        if d == 0:
            raise ValueError("out must not be empty")
        _check_stream_range(0, d)
        _check_clients(seeds, indices, coefs)
        o = self._view(out, device, _float_type(dtype, "out"), d, "out")
        _emu().accumulate(o, group, seeds, indices, coefs)

    def aggregate_f32(
        self,
        device: int,
        stream: int,
        out: int,
        d: int,
        group: int,
        seeds: np.ndarray,
        indices: np.ndarray,
        coefs: np.ndarray,
        scratch: Any = None,
    ) -> None:
        self._record("aggregate_f32", stream, out, d, group)
        self.scratch_sources.append(("aggregate_f32", scratch))
        device = self._device(device)
        d = _uint(d, "d")
        if d == 0:
            raise ValueError("out must not be empty")
        _check_stream_range(0, d)
        _check_clients(seeds, indices, coefs)
        o = self._view(out, device, np.float32, d, "out")
        _emu().aggregate_f32(o, group, seeds, indices, coefs)

    def norm_stats(
        self,
        device: int,
        stream: int,
        ptrs: Sequence[int],
        dtypes: Sequence[str],
        sizes: Sequence[int],
        divisor: float,
        scratch: Any = None,
    ) -> np.ndarray:
        self._record("norm_stats", stream, ptrs, dtypes, sizes, divisor)
        self.scratch_sources.append(("norm_stats", scratch))
        device = self._device(device)
        for name, v in (("ptrs", ptrs), ("dtypes", dtypes), ("sizes", sizes)):
            # pybind11's std::vector caster takes a sequence, not a bare value or a string.
            if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
                raise TypeError(f"{name} must be a list, got {type(v).__name__}")
        if not ptrs:
            raise ValueError("norm_stats needs at least one array")
        if len(dtypes) != len(ptrs) or len(sizes) != len(ptrs):
            raise ValueError("ptrs, dtypes and sizes must have the same length")
        divisor = float(divisor)
        if not (divisor > 0.0) or divisor == math.inf:
            raise ValueError("divisor must be finite and > 0")
        views = []
        for i, (p, dt, n) in enumerate(zip(ptrs, dtypes, sizes)):
            name = f"x[{i}]"
            n = _uint(n, f"sizes[{i}]")
            if n == 0:
                raise ValueError(f"{name} must not be empty")
            views.append(self._view(p, device, _float_type(dt, name), n, name))
        result = np.empty((len(views), 2), dtype=np.float64)
        for i, v in enumerate(views):
            result[i] = _emu().norm_stats(v, divisor)
        return result

    def scale_f64(self, device: int, stream: int, src: int, n: int, factor: float, dst: int) -> None:
        self._record("scale_f64", stream, src, n, factor, dst)
        device = self._device(device)
        n = _uint(n, "n")
        if n == 0:
            return
        s = self._view(src, device, np.float64, n, "src")
        o = self._view(dst, device, np.float64, n, "dst")
        np.multiply(s, np.float64(factor), out=o)  # scale_f64_thread: dst[i] = src[i] * factor

    def to_float32(self, device: int, stream: int, src: int, dtype: str, n: int, dst: int) -> None:
        self._record("to_float32", stream, src, dtype, n, dst)
        device = self._device(device)
        n = _uint(n, "n")
        if n == 0:
            return
        o = self._view(dst, device, np.float32, n, "dst")
        if dtype in ("float16", "bfloat16"):
            s = self._view(src, device, np.uint16, n, "src")
            _emu().to_float32(s, dtype, o)
        elif dtype == "float64":
            o[...] = self._view(src, device, np.float64, n, "src")  # __double2float_rn
        else:
            raise TypeError(f"src must be float16, bfloat16 or float64, got {dtype}")

    # -- count-sketch (bind_cuda_sketch.cpp) ---------------------------------------------------

    @staticmethod
    def _check_sketch_shape(rows: int, cols: int) -> int:
        if rows < 1 or rows > 1 << 16:
            raise ValueError(f"rows must be in 1 .. 2**16, got {rows}")
        if cols < 1 or cols > 0xFFFFFFFF:
            raise ValueError(f"cols must be in 1 .. 2**32 - 1, got {cols}")
        if rows * cols > MAX_STREAM_ELEMENTS:
            raise ValueError(f"rows * cols must be at most 2**34, got {rows} * {cols}")
        return rows * cols

    @staticmethod
    def _check_sketch_dim(dim: int, name: str) -> None:
        if dim == 0:
            raise ValueError(f"{name} must not be empty")
        if dim > MAX_STREAM_ELEMENTS:
            raise ValueError(f"{name} must have at most 2**34 elements (the Philox counter), got {dim}")

    def count_sketch_encode(
        self,
        device: int,
        stream: int,
        x: int,
        x_dtype: str,
        dim: int,
        seed: int,
        group: int,
        rows: int,
        cols: int,
        scale: float,
        table: int,
        table_dtype: str,
        scratch: Any = None,
    ) -> None:
        self._record("count_sketch_encode", stream, x, x_dtype, dim, seed, group, rows, cols, scale, table, table_dtype)
        self.scratch_sources.append(("count_sketch_encode", scratch))
        device = self._device(device)
        dim = _uint(dim, "dim")
        cells = self._check_sketch_shape(int(rows), int(cols))
        self._check_sketch_dim(dim, "x")
        if not math.isfinite(scale):
            raise ValueError("scale must be finite")
        xv = self._view(x, device, _float_type(x_dtype, "x"), dim, "x")
        tv = self._view(table, device, _float_type(table_dtype, "table"), cells, "table")
        _emu().count_sketch_encode(xv, seed, group, rows, cols, float(scale), tv)

    def count_sketch_decode(
        self,
        device: int,
        stream: int,
        table: int,
        dtype: str,
        dim: int,
        seed: int,
        group: int,
        rows: int,
        cols: int,
        median: bool,
        median_scale: float,
        out: int,
    ) -> None:
        self._record(
            "count_sketch_decode", stream, table, dtype, dim, seed, group, rows, cols, median, median_scale, out
        )
        device = self._device(device)
        dim = _uint(dim, "dim")
        cells = self._check_sketch_shape(int(rows), int(cols))
        self._check_sketch_dim(dim, "out")
        if not math.isfinite(median_scale):
            raise ValueError("median_scale must be finite")
        if median and rows > 32:
            raise ValueError(f"rows must be at most 32 for the median decode on the GPU, got {rows}")
        t = _float_type(dtype, "table")
        tv = self._view(table, device, t, cells, "table")
        ov = self._view(out, device, t, dim, "out")
        _emu().count_sketch_decode(tv, seed, group, rows, cols, bool(median), float(median_scale), ov)

    # -- SecAgg server side (bind_cuda_modular.cpp) ---------------------------------------------

    @staticmethod
    def _mod_bits(bits: Any) -> int:
        bits = operator.index(bits)
        if bits < 1 or bits > 64:
            raise ValueError(f"bits must be in 1 .. 64, got {bits}")
        return bits

    @staticmethod
    def _mod_storage(dtype: str, bits: int, name: str) -> Any:
        want = "uint32" if bits <= 32 else "uint64"
        if dtype not in ("uint32", "uint64"):
            raise TypeError(f"{name} must be uint32 or uint64 (values mod 2**bits), got {dtype}")
        if dtype != want:
            raise TypeError(
                f"{name} must have dtype {want} for bits = {bits} (uint32 for bits <= 32, uint64 above), got {dtype}"
            )
        return np.dtype(dtype)

    def mod_sum(
        self,
        device: int,
        stream: int,
        xs: int,
        xs_dtype: str,
        n: int,
        m: int,
        bits: int,
        out: int,
        out_dtype: str,
        accumulate: bool,
    ) -> None:
        self._record("mod_sum", stream, xs, xs_dtype, n, m, bits, out, out_dtype, accumulate)
        bits = self._mod_bits(bits)
        t = self._mod_storage(xs_dtype, bits, "xs")
        self._mod_storage(out_dtype, bits, "out")
        n, m = operator.index(n), operator.index(m)
        if m < 1:
            raise ValueError(f"out must not be empty, got m = {m}")
        if n < 1:
            raise ValueError(f"xs must have at least one row, got n = {n}")
        if n * m > 1 << 60:
            raise ValueError(f"xs has too many elements: n * m = {n} * {m} exceeds 2**60")
        device = self._device(device)
        xv = self._view(xs, device, t, n * m, "xs")
        ov = self._view(out, device, t, m, "out")
        _emu().mod_sum(xv, n, m, bits, ov, bool(accumulate))

    def mod_lift(
        self,
        device: int,
        stream: int,
        x: int,
        x_dtype: str,
        count: int,
        bits: int,
        scale: float,
        out: int,
        out_dtype: str,
    ) -> None:
        self._record("mod_lift", stream, x, x_dtype, count, bits, scale, out, out_dtype)
        bits = self._mod_bits(bits)
        t = self._mod_storage(x_dtype, bits, "x")
        scale = float(scale)
        if not math.isfinite(scale):
            raise ValueError("scale must be finite")
        if out_dtype not in ("int64", "float64", "float32"):
            raise TypeError(f"out must be int64, float64 or float32 for the centered lift, got {out_dtype}")
        if out_dtype == "int64" and scale != 1.0:
            raise ValueError(f"scale must be 1 for an int64 out (scale a float32 or float64 out), got {scale}")
        count = operator.index(count)
        if count < 1:
            raise ValueError("x must not be empty")
        device = self._device(device)
        xv = self._view(x, device, t, count, "x")
        ov = self._view(out, device, np.dtype(out_dtype), count, "out")
        _emu().mod_lift(xv, bits, scale, ov)

    # -- FWHT (bind_cuda_hadamard.cpp) ---------------------------------------------------------

    @staticmethod
    def _fwht_n(n: Any) -> int:
        n = _uint(n, "n")
        if n < 1 or n > 1 << 30 or n & (n - 1):
            raise ValueError(f"n must be a power of two in 1 .. 2**30, got {n}")
        return n

    def fwht(
        self,
        device: int,
        stream: int,
        src: int,
        dst: int,
        dtype: str,
        rows: int,
        n: int,
        normalize: bool,
        scratch: Any = None,
    ) -> None:
        self._record("fwht", stream, src, dst, dtype, rows, n, normalize)
        self.scratch_sources.append(("fwht", scratch))
        device = self._device(device)
        n, rows = self._fwht_n(n), _uint(rows, "rows")
        if rows == 0:
            raise ValueError("rows must be at least 1")
        t = _float_type(dtype, "x")
        s = self._view(src, device, t, rows * n, "src")
        d = self._view(dst, device, t, rows * n, "dst")
        _emu().fwht(s, d, n, bool(normalize))

    def randomized_hadamard(
        self,
        device: int,
        stream: int,
        src: int,
        dst: int,
        dtype: str,
        rows: int,
        dim: int,
        n: int,
        seed: int,
        group: int,
        repeats: int,
        inverse: bool,
        scratch: Any = None,
    ) -> None:
        self._record("randomized_hadamard", stream, src, dst, dtype, rows, dim, n, seed, group, repeats, inverse)
        self.scratch_sources.append(("randomized_hadamard", scratch))
        device = self._device(device)
        n, rows, dim = self._fwht_n(n), _uint(rows, "rows"), _uint(dim, "dim")
        if rows == 0:
            raise ValueError("rows must be at least 1")
        if _uint(src, "src") == _uint(dst, "dst"):
            raise ValueError("src and dst must be different arrays")
        t = _float_type(dtype, "x")
        in_cols, out_cols = (n, dim) if inverse else (dim, n)
        s = self._view(src, device, t, rows * in_cols, "src")
        d = self._view(dst, device, t, rows * out_cols, "dst")
        _emu().randomized_hadamard(s, d, dim, n, seed, group, repeats, bool(inverse))

    # -- DLPack ------------------------------------------------------------------------------

    def dlpack_import(self, capsule: Any) -> Any:
        real = _REAL_CUDA
        if real is None:
            raise ValueError("the fake _cuda cannot import DLPack capsules (no real CUDA extension is built)")
        return real.dlpack_import(capsule)


_REAL_CUDA = _native._cuda


def _buffer_class(fake: FakeCuda) -> type:
    class DeviceBuffer:
        """A fake device allocation: registered host memory, freed when collected."""

        def __init__(self, device: int, stream: int, nbytes: int) -> None:
            self._ptr = 0
            self._device = fake._device(device)
            self._stream = _uint(stream, "stream")
            self._nbytes = _uint(nbytes, "nbytes")
            self._ptr, self._mem = fake._allocate(self._nbytes)
            fake._record("DeviceBuffer", None, self._nbytes, self._stream)

        @property
        def device(self) -> int:
            return self._device

        @property
        def stream(self) -> int:
            return self._stream

        @property
        def nbytes(self) -> int:
            return self._nbytes

        @property
        def ptr(self) -> int:
            return self._ptr

        def __del__(self) -> None:
            if self._ptr:
                fake._free(self._ptr)

    return DeviceBuffer


class FakeGpuArray:
    """A third-party GPU array (like Numba's or a custom framework's): fake device memory
    exposing ``__cuda_array_interface__`` version 3, nothing else.

    Parameters
    ----------
    fake : FakeCuda
    data : array_like
        Initial contents, copied into a fresh fake device allocation (C order).
    stream : int or None, optional
        The interface's ``"stream"`` entry; left out of the interface when not given.
    shape, strides : tuple of int, optional
        What the interface announces instead of ``data``'s shape and compact strides
        (strides in bytes, as the interface spells them), e.g. a transposed or strided view
        of the allocation.
    readonly : bool
        The interface's read-only flag.
    """

    def __init__(
        self,
        fake: FakeCuda,
        data: Any,
        *,
        stream: Any = _ABSENT,
        shape: tuple[int, ...] | None = None,
        strides: tuple[int, ...] | None = None,
        readonly: bool = False,
    ) -> None:
        host = np.ascontiguousarray(data)
        self._fake = fake
        self._buffer = fake.DeviceBuffer(0, 0, host.nbytes)
        if host.nbytes:
            fake.memory(self._buffer.ptr, np.uint8, host.nbytes)[...] = host.reshape(-1).view(np.uint8)
        self.dtype = host.dtype
        self.shape = tuple(host.shape) if shape is None else tuple(shape)
        self.strides = None if strides is None else tuple(strides)
        self.stream = stream
        self.readonly = readonly

    @property
    def ptr(self) -> int:
        return int(self._buffer.ptr)

    @property
    def nbytes(self) -> int:
        return int(self._buffer.nbytes)

    @property
    def __cuda_array_interface__(self) -> dict:
        cai = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, self.readonly),
            "version": 3,
            "strides": self.strides,
        }
        if self.stream is not _ABSENT:
            cai["stream"] = self.stream
        return cai

    def host(self) -> np.ndarray:
        """A NumPy copy of what the interface describes (reads the fake device memory)."""
        mem = self._fake.memory(self.ptr, np.uint8, self.nbytes)
        if self.strides is None:
            return mem.view(self.dtype)[: math.prod(self.shape)].reshape(self.shape).copy()
        view = np.lib.stride_tricks.as_strided(mem.view(self.dtype), shape=self.shape, strides=self.strides)
        return view.copy()

    def __repr__(self) -> str:
        return f"FakeGpuArray(shape={self.shape}, dtype={self.dtype.name}, stream={self.stream!r})"


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeCuda | None = None) -> FakeCuda:
    """Make ``fake`` dprec's CUDA module for the rest of the test (undone by monkeypatch)."""
    fake = FakeCuda() if fake is None else fake
    monkeypatch.setattr(_native, "_cuda", fake)
    monkeypatch.setattr(_native, "_CUDA_BUILT", True)
    monkeypatch.setattr(_native, "_cuda_reason", "")
    return fake


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """A :class:`FakeCuda` installed as ``dprec._runtime.native._cuda`` for one test; skips the test
    when dprec._gpu_emulation, which computes its kernels, is not built."""
    gpu_emulation()
    return install(monkeypatch)
