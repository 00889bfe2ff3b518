"""The three kernel backends, each offering the operations of :class:`Kernels`.

* :mod:`.cpu`: the native CPU module ``dprec._core`` (SIMD, multi-threaded);
* :mod:`.cuda`: the native CUDA module ``dprec._cuda``, on the caller's device and stream;
* :mod:`.reference`: pure NumPy, the cross-check of the native ones (it imports neither).

Every operation takes :class:`dprec._runtime.arrays.Array` arguments that the caller has already
validated (dtype, contiguity, sizes, finiteness, one device), writes into the outputs it is
given and allocates nothing the caller sees. Host-side parameters (seeds, indices,
coefficients, Gumbel noise, offsets) are NumPy arrays whatever the backend. Adding an
operation means one method here in :class:`Kernels` and one in each backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from . import cpu, cuda, reference

if TYPE_CHECKING:
    from ..array_view import Array

__all__ = ["Kernels", "BY_NAME"]

# Host-side parameter arrays.
U32s = npt.NDArray[np.uint32]
U64s = npt.NDArray[np.uint64]
I64s = npt.NDArray[np.int64]
F64s = npt.NDArray[np.float64]


class Kernels(Protocol):
    """The operations every backend implements, with these signatures."""

    name: str

    # -- scans and conversions ---------------------------------------------------------------
    def all_finite(self, x: Array) -> bool:
        """No NaN or infinity in ``x`` (on a GPU this waits for the stream)."""

    def max_abs(self, xs: list[Array]) -> list[float]:
        """``max |x|`` of each array, NaN where it holds a NaN (on a GPU: one wait)."""

    def abs_at_most(self, x: Array, limit: float) -> bool:
        """Every ``|x| <= limit`` (finite positive ``limit``; False for NaN or infinity)."""

    def norm_stats(self, xs: list[Array], divisor: float) -> tuple[list[float], list[float] | None]:
        """``sum (x / divisor)**2`` of each array in float64, and ``max |x|`` where the same pass
        yields it (the GPU: one wait for both), else None (the host: :meth:`max_abs` on demand)."""

    def convert(self, src: Array, dst: Array) -> None:
        """``dst <- src`` in ``dst``'s dtype (float32, or float64 from float64)."""

    def scale(self, src: Array, factor: float, dst: Array) -> None:
        """``dst <- src * factor`` for float64 arrays."""

    def fill_zero(self, a: Array) -> None: ...

    # -- Philox streams -------------------------------------------------------------------------
    def philox4x32(self, counter: U32s, key: U32s) -> U32s:
        """Philox4x32-10 of host counters (shape (..., 4)) under ``key`` (2 words)."""

    def stream_words(self, out: Array, seed: int, substream: int, group: int, domain: int, offset: int) -> None:
        """Elements ``offset .. offset + out.size - 1`` of a stream, as uint32 words."""

    def stream_normals(
        self, out: Array, seed: int, substream: int, group: int, domain: int, offset: int, scale: float
    ) -> None:
        """``float32(scale) * z`` for the standard normals of those elements (float32)."""

    # -- DP-REC ---------------------------------------------------------------------------------
    def dot_products(self, phi: Array, seed: int, group: int, factor: float, out: Array) -> None:
        """``out[k] = factor * <z_k, phi>`` for ``k < out.size`` (float64)."""

    def dot_products_groups(
        self, phis: list[Array], seed: int, groups: U64s, offsets: I64s, factors: F64s, out: Array
    ) -> None:
        """The logits of every group of an update in one call: row ``g`` of ``groups`` (shape
        ``(G, 4)``) is ``(tensor, start, size, group id)``, and ``out[offsets[g] + k] = factors[g] *
        <z_{group id, k}, phis[tensor].flat(start, size)>`` for ``k < offsets[g+1] - offsets[g]``,
        each value the bits :meth:`dot_products` gives for that group. ``phis`` are the update's
        C-contiguous tensors (any shape, read in flat order) on one device, ``out`` float64 of
        ``offsets[-1]`` elements there."""

    def gumbel_argmax(self, logits: Array, noise: F64s, offsets: I64s) -> I64s:
        """Per segment ``offsets[g] .. offsets[g+1]`` of the flat float64 ``logits``, the first
        ``argmax (logits + noise)`` (relative to the segment)."""

    def gumbel_argmax_words(self, logits: Array, words: U64s, offsets: I64s) -> I64s:
        """:meth:`gumbel_argmax` with the noise of the 53-bit ``words`` (host uint64), computed as
        :func:`dprec.reference.rec.gumbel_from_words` does (natively on the CPU, whose log may
        differ from NumPy's in the last bit: the noise is private, in no contract)."""

    def sample_groups(
        self, phis: list[Array], seed: int, groups: U64s, offsets: I64s, factors: F64s, words: U64s, logits: Array
    ) -> I64s:
        """Each group's Gumbel-max index: :meth:`dot_products_groups` into ``logits``, then
        :meth:`gumbel_argmax_words` (the same indices and logits). The CPU does both in one native
        call, the noise computed beside the dot products."""

    def accumulate(self, out: Array, group: int, seeds: U64s, indices: U32s, coefs: F64s) -> None:
        """``out += coefs[c] * z_c`` client after client, in ``out``'s dtype."""

    def aggregate_f32(self, out: Array, group: int, seeds: U64s, indices: U32s, coefs: F64s) -> None:
        """``out <- float32(sum_c coefs[c] * z_c)``, the sum taken in float64 client after client."""

    # -- Hadamard and count-sketch -------------------------------------------------------------
    def fwht(self, src: Array, dst: Array, n: int, normalize: bool) -> None:
        """``dst <- H_n src`` row by row (rows of ``n``); ``dst`` may be ``src``."""

    def randomized_hadamard(
        self, src: Array, dst: Array, dim: int, n: int, seed: int, group: int, repeats: int, inverse: bool
    ) -> None:
        """Forward (rows of ``dim`` -> rows of ``n``) or inverse rotation; ``dst`` is not ``src``."""

    def count_sketch_encode(
        self, x: Array, seed: int, group: int, rows: int, cols: int, scale: float, table: Array
    ) -> None:
        """``table[r, h_r(j)] += s_r(j) * x[j] * scale`` (``x`` in the table's dtype)."""

    def count_sketch_decode(
        self, table: Array, dim: int, seed: int, group: int, rows: int, cols: int, median: bool, median_scale: float,
        out: Array,
    ) -> None:
        """The mean or median estimate of the sketched vector into ``out``."""


    # -- SecAgg distributed DP: discrete noise, rounding, modular arithmetic -------------------
    def discrete_gaussian(self, out: Array, seed: int, sigma: float) -> None:
        """``out[i] <- N_Z(0, sigma**2)`` exactly (Canonne-Kamath-Steinke), int64 on the host;
        element ``i`` reads its own Philox stream ``(seed, substream=i % 2**32, group=i >> 32,
        domain=5)`` word after word, so the result does not depend on the thread count."""

    def skellam(self, out: Array, seed: int, variance: float) -> None:
        """``out[i] <- Poisson(variance/2) - Poisson(variance/2)`` (int64, host), streams as above."""

    def conditional_round(self, x: Array, seed: int, attempt: int, group: int, out: Array) -> float:
        """One randomized rounding of float64 ``x`` into int64 ``out`` with the uniforms of
        ``(seed, substream=attempt, group, domain=4)``, words ``2j, 2j+1`` for element ``j``
        (the rule: :mod:`dprec.reference.rounding`); returns ``sum out**2`` (float64, in a fixed
        order). ``x`` is finite with ``|x| < 2**62`` (checked by the caller)."""

    # -- QMGeo quantization -----------------------------------------------------------------------
    def qmgeo_quantize(self, w: Array, seed: int, group: int, w_max: float, levels: int, p: float, out: Array) -> None:
        """QMGeo level indices of float32 or float64 ``w`` (finite; each value taken as its exact
        float64 value; clipped to ``[-w_max, w_max]``) into uint16 ``out``, with the corrected pmf
        (see the *QMGeo* docs page), ``2 <= levels <= 2**16``, ``2**-512 <= p <= 1``. Element ``j`` reads words ``2j, 2j+1`` of ``(seed, substream=0,
        group, domain=4)`` (branch) and of substream 1 (offset); the rule is
        :mod:`dprec.reference.qmgeo`. Host only (the CUDA backend refuses: client side)."""

    def qmgeo_pack(self, indices: Array, bits: int, out: Array) -> None:
        """Packs the uint16 ``indices`` (flat C order, each ``< 2**bits``, checked by the caller)
        at ``bits`` (1..16) bits each into the uint8 ``out`` of ``ceil(n bits / 8)`` bytes, in the
        wire layout of :mod:`dprec.reference.qmgeo` (LSB first, zero padding). Host only."""

    def qmgeo_unpack(self, payload: Array, bits: int, levels: int, out: Array) -> None:
        """The ``out.size`` indices of the uint8 ``payload`` (its length checked by the caller)
        into uint16 ``out``; ``bits = ceil(log2 levels)``. ValueError (``out`` unspecified) for a
        set padding bit or an index ``>= levels``. Host only."""

    def qmgeo_accumulate(
        self, payload: Array, bits: int, levels: int, coef: float, low: float, step: float, acc: Array
    ) -> None:
        """``acc[i] += coef * (low + j_i * step)`` (float64, evaluated as written, no FMA) for the
        ``acc.size`` indices ``j_i`` of ``payload``: the server's decode (``acc`` zero, ``coef``
        1) and aggregation. The errors of :meth:`qmgeo_unpack`, with ``acc`` then unchanged.
        Host only."""

    def mod_reduce(self, x: Array, bits: int, out: Array) -> None:
        """``out <- x mod 2**bits`` for int64 ``x``; ``out`` uint32 (bits <= 32) or uint64."""

    def mod_sum(self, xs: Array, bits: int, out: Array, accumulate: bool) -> None:
        """``out <- (out if accumulate else 0) + sum of the rows of xs (n, m)`` mod ``2**bits``.
        The host backends check, in the same pass, that every value of ``xs`` is below
        ``2**bits`` (ValueError naming ``xs``, ``out`` unchanged); the GPU does not."""

    def mod_lift(self, x: Array, bits: int, scale: float, out: Array) -> None:
        """The centered lift of ``x`` (uint mod ``2**bits``) to ``[-2**(bits-1), 2**(bits-1))``
        times ``scale``, into int64 (``scale`` 1) or float64 / float32 ``out``."""


BY_NAME: dict[str, Kernels] = {"cpu": cpu.CPU, "cuda": cuda.CUDA, "reference": reference.REFERENCE}
