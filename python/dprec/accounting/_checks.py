"""Parameter validation shared by every function in :mod:`dprec.accounting`.

Each helper returns the value converted to a plain Python ``float``/``int`` (or a float64
NumPy array for orders) and raises ``ValueError`` (or ``TypeError`` for a wrong type) whose
message names the offending parameter, as every public function does (see *Bad input* in the
docs). Booleans are rejected where a number is expected: ``True`` silently meaning 1 is a classic
source of wrong privacy numbers.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "MAX_INPUTS",
    "MAX_LEVELS",
    "MAX_ORDER",
    "MAX_ORDERS",
    "check_bits",
    "check_count",
    "check_levels",
    "check_delta",
    "check_epsilon",
    "check_finite",
    "check_nonnegative",
    "check_orders",
    "check_positive",
    "check_probability",
]

#: Largest Renyi order accepted (every function of :mod:`dprec.accounting`). The sampled-Gaussian
#: and subsampling bounds cost ``O(order)`` per order (the without-replacement bound an
#: ``orders x max(order)`` matrix), so an order of ``10**9`` would need gigabytes; the default
#: grids stop at 257 (DP-REC) and 1024 (:data:`dprec.accounting.DEFAULT_ORDERS`).
MAX_ORDER = 10_000
#: Most Renyi orders in one call. The default grids have 163 to 256 orders; 10,000 orders up
#: to :data:`MAX_ORDER` take a few seconds (at most about 20 s for fractional orders).
MAX_ORDERS = 10_000
#: Most quantization levels ``R`` of QMGeo (the pmf is an array of ``R`` values; the paper
#: uses R = 8 and 16).
MAX_LEVELS = 1 << 16
#: Most distinct input values of :func:`dprec.accounting.qmgeo.qmgeo_rdp`, whose worst case
#: compares every ordered pair (``n (n - 1)`` divergences).
MAX_INPUTS = 1024


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


def _check_from_zero(value: Any, name: str, *, strict: bool, allow_inf: bool) -> float:
    """A real number > 0 (``strict``) or >= 0, finite unless ``allow_inf``.

    The bound is checked before finiteness, so ``-inf`` is reported as below 0, not as infinite.
    """
    out = _as_float(value, name)
    if not (out > 0.0 if strict else out >= 0.0):
        raise ValueError(f"{name} must be {'>' if strict else '>='} 0, got {out!r}")
    if math.isinf(out) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {out!r}")
    return out


def check_positive(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """A real number > 0 (finite unless ``allow_inf``)."""
    return _check_from_zero(value, name, strict=True, allow_inf=allow_inf)


def check_nonnegative(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """A real number >= 0 (finite unless ``allow_inf``)."""
    return _check_from_zero(value, name, strict=False, allow_inf=allow_inf)


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


#: The largest count the accountants take (rounds, clients, steps): every count is used in float64
#: arithmetic, where integers above 2**53 are no longer exact (and above ~1.8e308 overflow).
MAX_COUNT = 1 << 53


def check_count(value: Any, name: str, *, minimum: int = 1, maximum: int | None = MAX_COUNT) -> int:
    """An integer >= ``minimum`` and <= ``maximum`` (default :data:`MAX_COUNT`; integral floats such as
    ``1e3`` are accepted)."""
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
    if maximum is not None and out > maximum:
        limit = "2**53" if maximum == MAX_COUNT else str(maximum)
        raise ValueError(f"{name} must be <= {limit}, got {value!r}")
    return out


def check_levels(value: Any, name: str = "levels") -> int:
    """A number of quantization levels, ``2 <= R <= MAX_LEVELS``."""
    out = check_count(value, name, minimum=2)
    if out > MAX_LEVELS:
        raise ValueError(f"{name} must be <= MAX_LEVELS = {MAX_LEVELS}, got {out}")
    return out


def check_bits(value: Any, name: str = "bits") -> int:
    """A total bit count >= 1."""
    return check_count(value, name, minimum=1)


def check_orders(orders: Any, name: str = "orders", *, integer: bool = False, minimum: float = 1.0) -> np.ndarray:
    """A non-empty 1-D float64 array of finite Renyi orders, each > ``minimum``.

    At most :data:`MAX_ORDERS` orders, each at most :data:`MAX_ORDER` (ValueError naming
    ``name`` otherwise, raised before any costly work).

    Renyi differential privacy is defined for orders alpha > 1 (the order-1 limit is the
    KL divergence, which none of the conversions here use). With ``integer=True`` every
    order must be a whole number (the DP-REC bound, eq. 62, is a binomial expectation
    that only exists at integer orders).
    """
    if isinstance(orders, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number or a sequence of numbers, got bool")
    size = getattr(orders, "size", None)
    if size is None and hasattr(orders, "__len__") and not isinstance(orders, (str, bytes)):
        size = len(orders)
    if isinstance(size, int) and size > MAX_ORDERS:  # before converting: the conversion alone can be costly
        raise ValueError(f"{name} must have at most MAX_ORDERS = {MAX_ORDERS} orders, got {size}")
    try:
        arr = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a number or a sequence of numbers") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if arr.size > MAX_ORDERS:
        raise ValueError(f"{name} must have at most MAX_ORDERS = {MAX_ORDERS} orders, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    if np.any(arr <= minimum):
        raise ValueError(f"{name} must all be > {minimum:g}, got minimum {arr.min()!r}")
    if np.any(arr > MAX_ORDER):
        raise ValueError(f"{name} must all be <= MAX_ORDER = {MAX_ORDER}, got maximum {float(arr.max())!r}")
    if integer and np.any(arr != np.floor(arr)):
        raise ValueError(f"{name} must be integers here, got {arr[arr != np.floor(arr)][0]!r}")
    return arr
