"""The reference backend: every operation of :class:`dprec._runtime.backends.Kernels` in pure NumPy,
from :mod:`dprec.reference`. It never imports the native modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...reference import hadamard as _hadamard
from ...reference import modular as _modular
from ...reference import noise as _noise
from ...reference import philox as _philox
from ...reference import qmgeo as _qmgeo
from ...reference import rec as _rec
from ...reference import rounding as _rounding
from ...reference import sketch as _sketch
from . import host
from .composed import ComposedGroupSampling

if TYPE_CHECKING:
    from ..array_view import Array


class ReferenceKernels(host.HostKernels, ComposedGroupSampling):
    name = "reference"

    @staticmethod
    def all_finite(x: Array) -> bool:
        return bool(np.isfinite(x.host).all())

    @staticmethod
    def norm_stats(xs: list[Array], divisor: float) -> tuple[list[float], None]:
        return [_rec.sum_of_squares(x.host, divisor) for x in xs], None

    @staticmethod
    def philox4x32(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
        return _philox.philox4x32(counter, key)

    @staticmethod
    def stream_words(out: Array, seed: int, substream: int, group: int, domain: int, offset: int) -> None:
        assert out.host is not None
        out.host[...] = _philox.stream_words(seed, out.size, substream, group, domain, offset).reshape(out.host.shape)

    @staticmethod
    def stream_normals(
        out: Array, seed: int, substream: int, group: int, domain: int, offset: int, scale: float
    ) -> None:
        assert out.host is not None
        z = _philox.stream_normals(seed, out.size, substream, group, offset, domain)
        out.host[...] = (np.float32(scale) * z).reshape(out.host.shape)

    @staticmethod
    def dot_products(phi: Array, seed: int, group: int, factor: float, out: Array) -> None:
        assert out.host is not None
        out.host[...] = _rec.dot_products(phi.host, seed, group, out.size) * factor

    @staticmethod
    def dot_products_groups(
        phis: list[Array], seed: int, groups: np.ndarray, offsets: np.ndarray, factors: np.ndarray, out: Array
    ) -> None:
        lg = out.host.reshape(-1)
        for (t, start, size, group), a, b, f in zip(groups.tolist(), offsets[:-1].tolist(), offsets[1:].tolist(),
                                                     factors.tolist()):
            phi = phis[t].host.reshape(-1)[start : start + size]
            lg[a:b] = _rec.dot_products(phi, seed, group, b - a) * f

    @staticmethod
    def gumbel_argmax(logits: Array, noise: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        lg = logits.host.reshape(-1)
        return np.array([_rec.gumbel_argmax(lg[a:b], noise[a:b]) for a, b in host.segments(offsets)], dtype=np.int64)

    @staticmethod
    def accumulate(out: Array, group: int, seeds: np.ndarray, indices: np.ndarray, coefs: np.ndarray) -> None:
        _rec.accumulate(out.host.reshape(-1), group, seeds, indices, coefs)

    @staticmethod
    def aggregate_f32(out: Array, group: int, seeds: np.ndarray, indices: np.ndarray, coefs: np.ndarray) -> None:
        acc = np.zeros(out.size, dtype=np.float64)
        _rec.accumulate(acc, group, seeds, indices, coefs)
        out.host.reshape(-1)[...] = acc

    @staticmethod
    def fwht(src: Array, dst: Array, n: int, normalize: bool) -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            dst.host.reshape(-1, n)[...] = _hadamard.fwht(src.host.reshape(-1, n), normalize)

    @staticmethod
    def randomized_hadamard(
        src: Array, dst: Array, dim: int, n: int, seed: int, group: int, repeats: int, inverse: bool
    ) -> None:
        with np.errstate(over="ignore", invalid="ignore"):
            if inverse:
                y = _hadamard.randomized_hadamard_inverse(src.host.reshape(-1, n), dim, seed, repeats, group)
                dst.host.reshape(-1, dim)[...] = y
            else:
                y = _hadamard.randomized_hadamard_forward(src.host.reshape(-1, dim), dim, seed, repeats, group)
                dst.host.reshape(-1, n)[...] = y

    @staticmethod
    def count_sketch_encode(
        x: Array, seed: int, group: int, rows: int, cols: int, scale: float, table: Array
    ) -> None:
        # The reference spells the scale as count-mean (1/rows) or not (1).
        if scale not in (1.0, 1.0 / rows):
            raise ValueError(f"the reference count-sketch scales by 1/rows or 1, got {scale!r}")
        _sketch.count_sketch_encode(x.host.reshape(-1), seed, rows, cols, group, scale != 1.0,
                                    table.host.reshape(rows, cols))

    @staticmethod
    def count_sketch_decode(
        table: Array, dim: int, seed: int, group: int, rows: int, cols: int, median: bool, median_scale: float,
        out: Array,
    ) -> None:
        est = _sketch.count_sketch_decode(table.host.reshape(rows, cols), dim, seed, rows, cols, group,
                                          median_scale != 1.0, "median" if median else "mean")
        out.host.reshape(-1)[...] = est

    # -- SecAgg (issue 16: being filled in) ---------------------------------------------------
    @staticmethod
    def discrete_gaussian(out: Array, seed: int, sigma: float) -> None:
        out.host.reshape(-1)[...] = _noise.discrete_gaussian(seed, sigma, out.size)

    @staticmethod
    def skellam(out: Array, seed: int, variance: float) -> None:
        out.host.reshape(-1)[...] = _noise.skellam(seed, variance, out.size)

    @staticmethod
    def conditional_round(x: Array, seed: int, attempt: int, group: int, out: Array) -> float:
        values, sum_sq = _rounding.randomized_round(x.host, seed, attempt, group)
        out.host[...] = values.reshape(out.host.shape)
        return sum_sq

    @staticmethod
    def qmgeo_quantize(w: Array, seed: int, group: int, w_max: float, levels: int, p: float, out: Array) -> None:
        out.host[...] = _qmgeo.quantize(w.host, seed, group, w_max, levels, p).reshape(out.host.shape)

    @staticmethod
    def qmgeo_pack(indices: Array, bits: int, out: Array) -> None:
        out.host.reshape(-1)[...] = _qmgeo.pack_indices(indices.host, bits)

    @staticmethod
    def qmgeo_unpack(payload: Array, bits: int, levels: int, out: Array) -> None:
        out.host.reshape(-1)[...] = _qmgeo.unpack_indices(payload.host, bits, levels, out.size)

    @staticmethod
    def qmgeo_accumulate(
        payload: Array, bits: int, levels: int, coef: float, low: float, step: float, acc: Array
    ) -> None:
        _qmgeo.accumulate_indices(payload.host, bits, levels, coef, low, step, acc.host)

    @staticmethod
    def mod_reduce(x: Array, bits: int, out: Array) -> None:
        out.host[...] = _modular.mod_reduce(x.host, bits).reshape(out.host.shape)

    @staticmethod
    def mod_sum(xs: Array, bits: int, out: Array, accumulate: bool) -> None:
        values = xs.host.reshape(xs.shape)
        if bits not in (32, 64) and int(values.max()) >> bits:  # as the CPU kernel checks (out unchanged)
            raise ValueError(f"xs has values >= 2**bits = 2**{bits}; they are not values mod 2**bits (out is unchanged)")
        total = _modular.mod_sum(values, bits, out.host.reshape(-1) if accumulate else None)
        out.host[...] = total.reshape(out.host.shape)

    @staticmethod
    def mod_lift(x: Array, bits: int, scale: float, out: Array) -> None:
        dtype = out.host.dtype
        lifted = _modular.mod_lift(x.host, bits, None if dtype == np.int64 else scale, dtype)
        out.host[...] = lifted.reshape(out.host.shape)


REFERENCE = ReferenceKernels()
