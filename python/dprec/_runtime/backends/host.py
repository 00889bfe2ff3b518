"""What the two host backends (:mod:`.cpu` and :mod:`.reference`) share: the NumPy scans and
conversions of :class:`HostKernels`, their base class.

These operations were never native, and sharing them keeps the two host backends' results
identical. (The codec's norm is native on the CPU, in the order of the reference's
:func:`dprec.reference.rec.sum_of_squares`, the same bits.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..array_view import Array

class HostKernels:
    """The operations of :class:`dprec._runtime.backends.Kernels` that the host backends share."""

    @staticmethod
    def max_abs(xs: list[Array]) -> list[float]:
        out = []
        for x in xs:
            h = x.host
            out.append(float("nan") if np.isnan(h).any() else max(float(h.max()), -float(h.min())))
        return out

    @staticmethod
    def abs_at_most(x: Array, limit: float) -> bool:
        return bool(np.all(np.abs(x.host) <= limit))  # NaN compares False

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
