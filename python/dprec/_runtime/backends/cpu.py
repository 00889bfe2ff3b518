"""The CPU backend: the operations of :class:`dprec._runtime.backends.Kernels` on the native module
``dprec._core`` (SIMD, multi-threaded, the GIL released)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...constants import DOMAIN_HADAMARD_SIGN
from ...reference.philox import words_to_signs
from .. import native as _native
from . import host

if TYPE_CHECKING:
    from ..array_view import Array


def _core() -> Any:
    return _native.native()


def _flat(a: Array) -> np.ndarray:
    """The host memory of ``a`` as the 1-D array the bindings take (a view, never a copy)."""
    h = a.host
    return h if h.ndim == 1 else h.reshape(-1)


class CpuKernels(host.HostKernels):
    name = "cpu"

    @staticmethod
    def all_finite(x: Array) -> bool:
        # One read, no temporary, multi-threaded for large arrays, and about 10x less call
        # overhead than numpy.isfinite for small ones.
        return bool(_core().all_finite(_flat(x)))

    @staticmethod
    def abs_at_most(x: Array, limit: float) -> bool:
        return bool(_core().abs_at_most(_flat(x), float(limit)))

    @staticmethod
    def norm_stats(xs: list[Array], divisor: float) -> tuple[list[float], None]:
        # One native call for every tensor; the same bits as the reference's order.
        return _core().sum_of_squares([_flat(x) for x in xs], float(divisor)), None

    @staticmethod
    def philox4x32(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
        out = np.empty_like(counter)
        _core().philox4x32(counter.reshape(-1), int(key[0]), int(key[1]), out.reshape(-1))
        return out

    @staticmethod
    def stream_words(out: Array, seed: int, substream: int, group: int, domain: int, offset: int) -> None:
        if out.host.size:
            _core().stream_words(seed, substream, group, domain, offset, _flat(out))

    @staticmethod
    def stream_normals(
        out: Array, seed: int, substream: int, group: int, domain: int, offset: int, scale: float
    ) -> None:
        if out.host.size:
            _core().stream_normals(seed, substream, group, domain, offset, scale, _flat(out))

    @staticmethod
    def dot_products(phi: Array, seed: int, group: int, factor: float, out: Array) -> None:
        _core().rec_dot_products(_flat(phi), seed, group, out.host)
        out.host *= factor

    @staticmethod
    def dot_products_groups(
        phis: list[Array], seed: int, groups: np.ndarray, offsets: np.ndarray, factors: np.ndarray, out: Array
    ) -> None:
        # One native call for all groups: one wake of the pool (or none for a small update, whose
        # thread count the kernel chooses by its work), no Python per group.
        _core().rec_dot_products_groups([_flat(p) for p in phis], seed, groups.reshape(-1), offsets, factors,
                                        _flat(out))

    @staticmethod
    def gumbel_argmax(logits: Array, noise: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        out = np.empty(offsets.size - 1, dtype=np.int64)
        _core().gumbel_argmax_groups(_flat(logits), noise, offsets, out)
        return out

    @staticmethod
    def gumbel_argmax_words(logits: Array, words: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        out = np.empty(offsets.size - 1, dtype=np.int64)
        _core().gumbel_argmax_words_groups(_flat(logits), words, offsets, out)
        return out

    @staticmethod
    def sample_groups(
        phis: list[Array], seed: int, groups: np.ndarray, offsets: np.ndarray, factors: np.ndarray,
        words: np.ndarray, logits: Array
    ) -> np.ndarray:
        # The caller checks the logits' finiteness where it has to (the status is not needed).
        out = np.empty(offsets.size - 1, dtype=np.int64)
        _core().rec_sample_groups([_flat(p) for p in phis], seed, groups.reshape(-1), offsets, factors, words,
                                  _flat(logits), out)
        return out

    @staticmethod
    def accumulate(out: Array, group: int, seeds: np.ndarray, indices: np.ndarray, coefs: np.ndarray) -> None:
        _core().rec_accumulate(_flat(out), group, seeds, indices, coefs)

    @staticmethod
    def aggregate_f32(out: Array, group: int, seeds: np.ndarray, indices: np.ndarray, coefs: np.ndarray) -> None:
        acc = np.zeros(out.size, dtype=np.float64)
        _core().rec_accumulate(acc, group, seeds, indices, coefs)
        _flat(out)[...] = acc

    @staticmethod
    def fwht(src: Array, dst: Array, n: int, normalize: bool) -> None:
        # Out of place, the copy rides on the transform's first pass over each block.
        _core().fwht(_flat(dst), n, bool(normalize), None if dst.host is src.host else _flat(src))

    @staticmethod
    def randomized_hadamard(
        src: Array, dst: Array, dim: int, n: int, seed: int, group: int, repeats: int, inverse: bool
    ) -> None:
        core = _core()
        dtype = src.host.dtype
        words = np.empty(n, dtype=np.uint32)

        def signs(repeat: int) -> np.ndarray:
            core.stream_words(seed, repeat, group, DOMAIN_HADAMARD_SIGN, 0, words)
            return words_to_signs(words, dtype)

        with np.errstate(over="ignore", invalid="ignore"):
            if inverse:
                a = src.host.reshape(-1, n).copy()
                for s in reversed(range(repeats)):
                    core.fwht(a.reshape(-1), n, True)
                    a *= signs(s)
                dst.host.reshape(-1, dim)[...] = a[:, :dim]
            else:
                y = dst.host.reshape(-1, n)
                y[...] = 0
                y[:, :dim] = src.host.reshape(-1, dim)
                for s in range(repeats):
                    y *= signs(s)
                    core.fwht(y.reshape(-1), n, True)

    @staticmethod
    def count_sketch_encode(
        x: Array, seed: int, group: int, rows: int, cols: int, scale: float, table: Array
    ) -> None:
        values = _flat(x).astype(table.host.dtype, copy=False)  # the table's dtype, as the GPU does
        _core().count_sketch_encode(values, seed, group, rows, cols, scale, _flat(table))

    @staticmethod
    def count_sketch_decode(
        table: Array, dim: int, seed: int, group: int, rows: int, cols: int, median: bool, median_scale: float,
        out: Array,
    ) -> None:
        _core().count_sketch_decode(_flat(table), seed, group, rows, cols, median, median_scale,
                                    _flat(out))

    # -- SecAgg (issue 16: being filled in) ---------------------------------------------------
    @staticmethod
    def discrete_gaussian(out: Array, seed: int, sigma: float) -> None:
        if out.host.size:
            _core().discrete_gaussian(seed, sigma, _flat(out))

    @staticmethod
    def skellam(out: Array, seed: int, variance: float) -> None:
        if out.host.size:
            _core().skellam(seed, variance, _flat(out))

    @staticmethod
    def conditional_round(x: Array, seed: int, attempt: int, group: int, out: Array) -> float:
        return float(_core().randomized_round(_flat(x), seed, attempt, group, _flat(out)))

    @staticmethod
    def qmgeo_quantize(w: Array, seed: int, group: int, w_max: float, levels: int, p: float, out: Array) -> None:
        _core().qmgeo_quantize(_flat(w), seed, group, w_max, levels, p, _flat(out))

    @staticmethod
    def qmgeo_pack(indices: Array, bits: int, out: Array) -> None:
        _core().qmgeo_pack(_flat(indices), bits, _flat(out))

    @staticmethod
    def qmgeo_unpack(payload: Array, bits: int, levels: int, out: Array) -> None:
        _core().qmgeo_unpack(_flat(payload), bits, levels, _flat(out))

    @staticmethod
    def qmgeo_accumulate(
        payload: Array, bits: int, levels: int, coef: float, low: float, step: float, acc: Array
    ) -> None:
        _core().qmgeo_accumulate(_flat(payload), bits, levels, coef, low, step, _flat(acc))

    @staticmethod
    def mod_reduce(x: Array, bits: int, out: Array) -> None:
        _core().mod_reduce(_flat(x), bits, _flat(out))

    @staticmethod
    def mod_sum(xs: Array, bits: int, out: Array, accumulate: bool) -> None:
        rows, cols = xs.shape
        _core().mod_sum(_flat(xs), rows, cols, bits, bool(accumulate), _flat(out))

    @staticmethod
    def mod_lift(x: Array, bits: int, scale: float, out: Array) -> None:
        _core().mod_lift(_flat(x), bits, scale, _flat(out))


CPU = CpuKernels()
