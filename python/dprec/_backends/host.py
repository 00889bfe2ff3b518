"""What the two host backends (:mod:`.cpu` and :mod:`.reference`) share: the NumPy scans and
conversions of :class:`HostKernels`, their base class.

These operations were never native, and sharing them keeps the two host backends' results
identical (e.g. the codec's norm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .._arrays import Array

# Elements per float64 chunk when computing sums of squares (bounded temporary memory).
_NORM_CHUNK = 1 << 16


class HostKernels:
    """The operations of :class:`dprec._backends.Kernels` that the host backends share."""

    @staticmethod
    def norm_stats(xs: list[Array], divisor: float) -> tuple[list[float], None]:
        """Sum of ``(x / divisor)**2`` of each array in float64, in fixed chunks.

        NumPy's pairwise summation (not BLAS, whose order may depend on its thread count)
        keeps the result deterministic; the chunks bound the temporary memory. The division
        is done in float64, as on the GPU (a float32 divisor could round to 0 or overflow).
        """
        sums = []
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            for x in xs:
                flat = x.host.reshape(-1)
                total = 0.0
                for i in range(0, flat.size, _NORM_CHUNK):
                    c = flat[i : i + _NORM_CHUNK].astype(np.float64, copy=False)
                    if divisor != 1.0:
                        c = c / divisor
                    total += float(np.add.reduce(c * c))
                sums.append(total)
        return sums, None

    @staticmethod
    def max_abs(xs: list[Array]) -> list[float]:
        out = []
        for x in xs:
            h = x.host
            out.append(float("nan") if np.isnan(h).any() else max(float(h.max()), -float(h.min())))
        return out

    @staticmethod
    def convert(src: Array, dst: Array) -> None:
        dst.host[...] = src.host.reshape(dst.host.shape)

    @staticmethod
    def scale(src: Array, factor: float, dst: Array) -> None:
        np.multiply(src.host, factor, out=dst.host)

    @staticmethod
    def fill_zero(a: Array) -> None:
        a.host[...] = 0


def segments(offsets: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` of each segment of a flat batch with these offsets."""
    bounds = offsets.tolist()
    return list(zip(bounds[:-1], bounds[1:]))
