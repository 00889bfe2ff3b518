"""Parameter validation shared by every function in :mod:`dprec.accounting`.

Each helper returns the value converted to a plain Python ``float``/``int`` (or a float64
NumPy array for orders) and raises ``ValueError`` (or ``TypeError`` for a wrong type) whose
message names the offending parameter, as SPEC §7 requires. Booleans are rejected where a
number is expected: ``True`` silently meaning 1 is a classic source of wrong privacy numbers.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "check_bits",
    "check_count",
    "check_delta",
    "check_epsilon",
    "check_finite",
    "check_nonnegative",
    "check_orders",
    "check_positive",
    "check_probability",
]


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    out = float(value)
    if math.isnan(out):
        raise ValueError(f"{name} must not be NaN")
    return out


def check_finite(value: Any, name: str) -> float:
    """A finite real number."""
    out = _as_float(value, name)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {out!r}")
    return out


def check_positive(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """A real number > 0 (finite unless ``allow_inf``)."""
    out = _as_float(value, name)
    if not out > 0.0:
        raise ValueError(f"{name} must be > 0, got {out!r}")
    if math.isinf(out) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {out!r}")
    return out


def check_nonnegative(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """A real number >= 0 (finite unless ``allow_inf``)."""
    out = _as_float(value, name)
    if not out >= 0.0:
        raise ValueError(f"{name} must be >= 0, got {out!r}")
    if math.isinf(out) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {out!r}")
    return out


def check_probability(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """A probability (e.g. a sampling rate) in (0, 1], or [0, 1] with ``allow_zero``."""
    out = _as_float(value, name)
    low_ok = out >= 0.0 if allow_zero else out > 0.0
    if not (low_ok and out <= 1.0):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{name} must be in {interval}, got {out!r}")
    return out


def check_delta(delta: Any, name: str = "delta") -> float:
    """A target delta in the open interval (0, 1)."""
    out = _as_float(delta, name)
    if not 0.0 < out < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {out!r}")
    return out


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """A target epsilon, a finite real number >= 0."""
    return check_nonnegative(epsilon, name)


def check_count(value: Any, name: str, *, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (integral floats such as ``1e3`` are accepted)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(float(value)) and float(value).is_integer():
        out = int(value)
    else:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out}")
    return out


def check_bits(value: Any, name: str = "bits") -> int:
    """A total bit count >= 1."""
    return check_count(value, name, minimum=1)


def check_orders(orders: Any, name: str = "orders", *, integer: bool = False, minimum: float = 1.0) -> np.ndarray:
    """A non-empty 1-D float64 array of finite Renyi orders, each > ``minimum``.

    Renyi differential privacy is defined for orders alpha > 1 (the order-1 limit is the
    KL divergence, which none of the conversions here use). With ``integer=True`` every
    order must be a whole number (the DP-REC bound, eq. 62, is a binomial expectation
    that only exists at integer orders).
    """
    if isinstance(orders, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number or a sequence of numbers, got bool")
    try:
        arr = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a number or a sequence of numbers") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    if np.any(arr <= minimum):
        raise ValueError(f"{name} must all be > {minimum:g}, got minimum {arr.min()!r}")
    if integer and np.any(arr != np.floor(arr)):
        raise ValueError(f"{name} must be integers here, got {arr[arr != np.floor(arr)][0]!r}")
    return arr
