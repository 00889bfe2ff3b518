"""Checks of the public API's scalar arguments (see *Bad input* in the docs): integers in range, seeds, bits,
real numbers, and the client's private randomness. Array arguments are checked by
:mod:`dprec._runtime.arrays`.

Integers must be Python or NumPy integers: bool is refused although it is an int, and so
are floats, even integral ones (``16.9`` must not silently become 16).
"""

from __future__ import annotations

import math
import numbers
import reprlib
import secrets
from typing import Any

import numpy as np

from ..constants import MAX_BITS, MAX_STREAM_ELEMENTS, MIN_BITS

_UINT32_MAX = 0xFFFFFFFF
_UINT64_MAX = 0xFFFFFFFFFFFFFFFF


def check_integer(value: Any, name: str) -> int:
    """``value`` as a Python int; TypeError naming ``name`` unless it is an integer.

    Python ints and NumPy integer scalars are accepted. bool (and numpy.bool_) is
    rejected although it is an int subclass, and so are floats, even integral ones
    (``16.9`` must not silently become 16), strings and everything else.
    """
    if type(value) is int:  # the common case, without the ABC check below (bool is not of type int)
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {reprlib.repr(value)}")
    return int(value)


def check_size(n: Any, name: str) -> int:
    """A vector length that fits one Philox stream (1 .. 2**34); an integer (TypeError otherwise)."""
    n = check_integer(n, name)
    if n < 1:
        raise ValueError(f"{name} must be at least 1, got {n}")
    if n > MAX_STREAM_ELEMENTS:
        raise ValueError(f"{name} must be at most 2**34 (the Philox counter layout), got {n}")
    return n


def check_int(value: Any, name: str, low: int, high: int) -> int:
    """An integer in [low, high] (bool, float and str are rejected with TypeError)."""
    v = check_integer(value, name)
    if not low <= v <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {v}")
    return v


def check_seed(seed: Any, name: str = "seed") -> int:
    return check_int(seed, name, 0, _UINT64_MAX)


def check_u32(value: Any, name: str) -> int:
    return check_int(value, name, 0, _UINT32_MAX)


def check_bits(bits: Any, name: str = "bits") -> int:
    return check_int(bits, name, MIN_BITS, MAX_BITS)


def check_modulus_bits(bits: Any, name: str = "bits") -> int:
    """Bits of a secure-aggregation modulus ``M = 2**bits``: an integer in [1, 64] (values mod
    ``M`` are stored as uint32 or uint64). Not :func:`check_bits`, which is DP-REC's 1..24 rule."""
    return check_int(bits, name, 1, 64)


def check_real(value: Any, name: str) -> float:
    """``value`` as a float; TypeError naming ``name`` unless it is a real number (bool is not)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def check_finite(value: Any, name: str) -> float:
    """A finite real number (TypeError for non-reals, ValueError for NaN and infinities)."""
    v = check_real(value, name)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def check_positive(value: Any, name: str) -> float:
    """A finite real number > 0."""
    v = check_real(value, name)
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return v


def check_index(index: Any, bits: int, name: str = "index") -> int:
    return check_int(index, name, 0, (1 << bits) - 1)


def os_seed() -> int:
    """A fresh 64-bit seed from the operating system's entropy source."""
    return secrets.randbits(64)


def private_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """The caller's Generator, or a fresh one seeded from OS entropy (never a shared seed)."""
    if rng is None:
        return np.random.default_rng(secrets.randbits(128))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
    return rng


def private_seed(rng: np.random.Generator | None) -> int:
    """A client-private 64-bit Philox seed: from ``rng`` when given (tests, reproducible runs),
    else from the OS entropy source. Never a seed the server knows."""
    if rng is None:
        return os_seed()
    return int(private_rng(rng).integers(0, 1 << 64, dtype=np.uint64))
