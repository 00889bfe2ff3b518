"""Linear transforms with shared randomness: the fast Walsh-Hadamard transform, the randomized
Hadamard rotation of the secure-aggregation pipelines, and the count-sketch.

Modules: :mod:`dprec.transforms.hadamard` (:func:`fwht`, :class:`RandomizedHadamard`) and
:mod:`dprec.transforms.sketch` (:class:`CountSketch`).
"""

from __future__ import annotations

from .hadamard import MAX_FWHT_LOG2, RandomizedHadamard, fwht
from .sketch import MAX_GPU_MEDIAN_ROWS, MAX_ROWS, CountSketch

__all__ = ["fwht", "RandomizedHadamard", "MAX_FWHT_LOG2", "CountSketch", "MAX_ROWS", "MAX_GPU_MEDIAN_ROWS"]
