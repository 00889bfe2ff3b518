"""The secure-aggregation distributed-DP pipeline of Chen et al. (SPEC §4)."""

from __future__ import annotations

from . import modular, noise, pipeline, rounding
from .modular import *  # noqa: F403
from .noise import *  # noqa: F403
from .pipeline import *  # noqa: F403
from .rounding import *  # noqa: F403

__all__ = [*noise.__all__, *rounding.__all__, *modular.__all__, *pipeline.__all__]
