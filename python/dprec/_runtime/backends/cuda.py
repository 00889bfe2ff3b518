"""The CUDA backend: the operations of :class:`dprec._runtime.backends.Kernels` on the native module
``dprec._cuda``. Work is queued on the device and stream of the first array argument (the
caller's current stream); scratch memory comes from that array's framework."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import native as _native
from .composed import ComposedGroupSampling

if TYPE_CHECKING:
    from ..array_view import Array


#: Why the client-side SecAgg operations refuse GPU arrays.
_CLIENT_SIDE = (
    "{} is a client-side SecAgg operation (private randomness, one client's vector): it runs on the host "
    "(backend 'auto' with host arrays, 'cpu' or 'reference'); the CUDA backend serves the server side "
    "(mod_sum, mod_lift)"
)
# QMGeo payloads are bytes on the wire: packing and unpacking are byte work the host does at
# memory speed, with nothing a GPU would speed up.
_QMGEO_PACKING = (
    "{}: QMGeo packing runs on the host (payloads are bytes on the wire): use host arrays with backend 'auto', "
    "'cpu' or 'reference'"
)


def _cuda() -> Any:
    return _native.cuda_module()


def _norm_stats(xs: list[Array], divisor: float) -> np.ndarray:
    """Rows ``(sum (x / divisor)**2, max |x|)``, one wait for all arrays on the first's stream."""
    first = xs[0]
    return _cuda().norm_stats(first.device, first.stream, [x.ptr for x in xs], [x.dtype for x in xs],
                              [x.size for x in xs], divisor, scratch=first.scratch)


class CudaKernels(ComposedGroupSampling):
    name = "cuda"
    #: The CPU sorts up to 32 rows with a sorting network that the GPU repeats exactly (signed
    #: zeros included); beyond that the CPU's selection cannot be reproduced bit for bit.
    max_median_rows = 32

    @staticmethod
    def all_finite(x: Array) -> bool:
        return bool(np.isfinite(_norm_stats([x], 1.0)[0, 1]))

    @staticmethod
    def max_abs(xs: list[Array]) -> list[float]:
        return [float(m) for m in _norm_stats(xs, 1.0)[:, 1]]

    @staticmethod
    def abs_at_most(x: Array, limit: float) -> bool:
        return CudaKernels.max_abs([x])[0] <= limit  # NaN compares False

    @staticmethod
    def norm_stats(xs: list[Array], divisor: float) -> tuple[list[float], list[float]]:
        stats = _norm_stats(xs, divisor)
        return [float(s) for s in stats[:, 0]], [float(m) for m in stats[:, 1]]

    @staticmethod
    def convert(src: Array, dst: Array) -> None:
        if dst.dtype != "float32":
            raise ValueError(f"the CUDA backend converts to float32 only, not {dst.dtype}")
        if src.size:
            _cuda().to_float32(src.device, src.stream, src.ptr, src.dtype, src.size, dst.ptr)

    @staticmethod
    def scale(src: Array, factor: float, dst: Array) -> None:
        _cuda().scale_f64(src.device, src.stream, src.ptr, src.size, factor, dst.ptr)

    @staticmethod
    def fill_zero(a: Array) -> None:
        _cuda().memset_zero(a.device, a.stream, a.ptr, a.size * a.itemsize)

    @staticmethod
    def philox4x32(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
        raise ValueError("philox4x32 runs on the host only (backend 'auto', 'cpu' or 'reference')")

    @staticmethod
    def stream_words(out: Array, seed: int, substream: int, group: int, domain: int, offset: int) -> None:
        _cuda().stream_words(out.device, out.stream, seed, substream, group, domain, offset, out.size, out.ptr)

    @staticmethod
    def stream_normals(
        out: Array, seed: int, substream: int, group: int, domain: int, offset: int, scale: float
    ) -> None:
        _cuda().stream_normals(out.device, out.stream, seed, substream, group, domain, offset, out.size, scale, out.ptr)

    @staticmethod
    def dot_products(phi: Array, seed: int, group: int, factor: float, out: Array) -> None:
        _cuda().rec_dot_products(phi.device, phi.stream, phi.ptr, phi.dtype, phi.size, seed, group, out.size, factor,
                                 out.ptr, scratch=phi.scratch)

    @staticmethod
    def dot_products_groups(
        phis: list[Array], seed: int, groups: np.ndarray, offsets: np.ndarray, factors: np.ndarray, out: Array
    ) -> None:
        # A GPU runs each group's kernel asynchronously on the stream: a loop of launches costs
        # no waits, so the per-group operation serves.
        for (t, start, size, group), a, b, f in zip(groups.tolist(), offsets[:-1].tolist(), offsets[1:].tolist(),
                                                     factors.tolist()):
            CudaKernels.dot_products(phis[t].flat(start, size), seed, group, f, out.flat(a, b - a))

    @staticmethod
    def gumbel_argmax(logits: Array, noise: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        return _cuda().gumbel_argmax(logits.device, logits.stream, logits.ptr, noise, offsets, scratch=logits.scratch)

    @staticmethod
    def accumulate(out: Array, group: int, seeds: np.ndarray, indices: np.ndarray, coefs: np.ndarray) -> None:
        _cuda().accumulate(out.device, out.stream, out.ptr, out.dtype, out.size, group, seeds, indices, coefs,
                           scratch=out.scratch)

    @staticmethod
    def aggregate_f32(out: Array, group: int, seeds: np.ndarray, indices: np.ndarray, coefs: np.ndarray) -> None:
        _cuda().aggregate_f32(out.device, out.stream, out.ptr, out.size, group, seeds, indices, coefs,
                              scratch=out.scratch)

    @staticmethod
    def fwht(src: Array, dst: Array, n: int, normalize: bool) -> None:
        _cuda().fwht(src.device, src.stream, src.ptr, dst.ptr, src.dtype, src.size // n, n, bool(normalize),
                     scratch=src.scratch)

    @staticmethod
    def randomized_hadamard(
        src: Array, dst: Array, dim: int, n: int, seed: int, group: int, repeats: int, inverse: bool
    ) -> None:
        rows = src.size // (n if inverse else dim)
        _cuda().randomized_hadamard(src.device, src.stream, src.ptr, dst.ptr, src.dtype, rows, dim, n, seed, group,
                                    repeats, inverse, scratch=src.scratch)

    @staticmethod
    def count_sketch_encode(
        x: Array, seed: int, group: int, rows: int, cols: int, scale: float, table: Array
    ) -> None:
        _cuda().count_sketch_encode(x.device, x.stream, x.ptr, x.dtype, x.size, seed, group, rows, cols, scale,
                                    table.ptr, table.dtype, scratch=x.scratch)

    @staticmethod
    def count_sketch_decode(
        table: Array, dim: int, seed: int, group: int, rows: int, cols: int, median: bool, median_scale: float,
        out: Array,
    ) -> None:
        _cuda().count_sketch_decode(table.device, table.stream, table.ptr, table.dtype, dim, seed, group, rows, cols,
                                    median, median_scale, out.ptr)

    # -- SecAgg ----------------------------------------------------------------------------------
    # The client side (noise, rounding, the reduction mod M) draws private randomness and runs
    # on the client's host; the GPU serves the server side: the modular sum and the lift.

    @staticmethod
    def discrete_gaussian(out: Array, seed: int, sigma: float) -> None:
        raise ValueError(_CLIENT_SIDE.format("discrete_gaussian"))

    @staticmethod
    def skellam(out: Array, seed: int, variance: float) -> None:
        raise ValueError(_CLIENT_SIDE.format("skellam"))

    @staticmethod
    def conditional_round(x: Array, seed: int, attempt: int, group: int, out: Array) -> float:
        raise ValueError(_CLIENT_SIDE.format("conditional_round"))

    @staticmethod
    def qmgeo_quantize(w: Array, seed: int, group: int, w_max: float, levels: int, p: float, out: Array) -> None:
        raise ValueError(
            "qmgeo_quantize is a client-side operation (private randomness, one client's vector): it runs on the "
            "host (backend 'auto' with host arrays, 'cpu' or 'reference')"
        )

    @staticmethod
    def qmgeo_pack(indices: Array, bits: int, out: Array) -> None:
        raise ValueError(_QMGEO_PACKING.format("qmgeo_pack"))

    @staticmethod
    def qmgeo_unpack(payload: Array, bits: int, levels: int, out: Array) -> None:
        raise ValueError(_QMGEO_PACKING.format("qmgeo_unpack"))

    @staticmethod
    def qmgeo_accumulate(
        payload: Array, bits: int, levels: int, coef: float, low: float, step: float, acc: Array
    ) -> None:
        raise ValueError(_QMGEO_PACKING.format("qmgeo_accumulate"))

    @staticmethod
    def mod_reduce(x: Array, bits: int, out: Array) -> None:
        raise ValueError(_CLIENT_SIDE.format("mod_reduce"))

    @staticmethod
    def mod_sum(xs: Array, bits: int, out: Array, accumulate: bool) -> None:
        m = out.size
        n, rest = divmod(xs.size, m) if m else (0, xs.size)
        if rest or (len(xs.shape) == 2 and xs.shape[1] != m):
            raise ValueError(f"xs must have shape (n, {m}) to be summed into out of {m} elements, got {xs.shape}")
        _cuda().mod_sum(xs.device, xs.stream, xs.ptr, xs.dtype, n, m, bits, out.ptr, out.dtype, bool(accumulate))

    @staticmethod
    def mod_lift(x: Array, bits: int, scale: float, out: Array) -> None:
        if out.size != x.size:
            raise ValueError(f"out must have {x.size} elements like x, got {out.size}")
        _cuda().mod_lift(x.device, x.stream, x.ptr, x.dtype, x.size, bits, scale, out.ptr, out.dtype)


CUDA = CudaKernels()
