"""The secure-aggregation distributed-DP pipeline of Chen et al. (see *Secure aggregation* in the docs).

Building blocks (native C++, multi-threaded, with bit-identical NumPy references):

* :mod:`.noise`: exact discrete Gaussian (Canonne-Kamath-Steinke) and Skellam samplers,
  :func:`sample_discrete_gaussian`, :func:`sample_skellam` (Philox domain 5, client-private seed);
* :mod:`.rounding`: (conditional) randomized rounding, :func:`conditional_round`,
  :func:`randomized_round` (Philox domain 4, client-private seed);
* :mod:`.modular`: arithmetic mod ``2**bits`` (1..64 bits): :func:`modular_reduce`,
  :func:`modular_sum` (the SecAgg simulator's sum; CPU and CUDA), :func:`centered_lift` (CPU
  and CUDA), :class:`ModularAccumulator`.

Pipelines (:mod:`.pipeline`, need SciPy for the accounting): :class:`DDGPipeline` and
:class:`SkellamPipeline`: client = clip, optional count-sketch, randomized Hadamard, scale,
conditional rounding, noise, mod M; server = modular sum, lift, rescale, inverse rotation,
unsketch. They are imported on first use, so the building blocks work without SciPy.
"""

from __future__ import annotations

import importlib
from typing import Any

from .modular import ModularAccumulator, centered_lift, modular_reduce, modular_sum, storage_dtype
from .noise import (
    MAX_DISCRETE_GAUSSIAN_SIGMA,
    MAX_NOISE_SAMPLES,
    MAX_SKELLAM_VARIANCE,
    sample_discrete_gaussian,
    sample_skellam,
)
from .rounding import MAX_ROUND_ELEMENTS, conditional_round, randomized_round, rounding_norm_bound

_PIPELINE_NAMES = ("DistributedPipeline", "DDGPipeline", "SkellamPipeline", "MAX_INTEGER_NOISE_STDDEV")

__all__ = [
    "sample_discrete_gaussian",
    "sample_skellam",
    "MAX_DISCRETE_GAUSSIAN_SIGMA",
    "MAX_SKELLAM_VARIANCE",
    "MAX_NOISE_SAMPLES",
    "conditional_round",
    "randomized_round",
    "rounding_norm_bound",
    "MAX_ROUND_ELEMENTS",
    "ModularAccumulator",
    "centered_lift",
    "modular_reduce",
    "modular_sum",
    "storage_dtype",
    *_PIPELINE_NAMES,
]


def __getattr__(name: str) -> Any:
    # The pipelines calibrate through dprec.accounting (SciPy): import them on first use only.
    if name in _PIPELINE_NAMES or name == "pipeline":
        # import_module, not "from . import pipeline": the latter asks this __getattr__ first.
        pipeline = importlib.import_module(f"{__name__}.pipeline")
        return pipeline if name == "pipeline" else getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
