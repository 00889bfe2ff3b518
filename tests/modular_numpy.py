"""NumPy and plain-Python statements of the SecAgg server-side arithmetic (a test helper, not a
test module): the modular sum of clients' vectors and the centered lift, mod M = 2**bits.

The GPU kernels (csrc/cuda/modular_bodies.h), their host emulation and the CPU kernels are
held to these. Each operation is written twice: with Python integers (exact by definition,
for small inputs) and vectorised with NumPy's wrapping uint64 arithmetic (for large ones);
tests/cuda/test_gpu_emulation_modular.py checks that the two agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BITS = [1, 2, 7, 16, 31, 32, 33, 48, 63, 64]


def storage(bits: int) -> Any:
    """The dtype of values mod 2**bits: uint32 for bits <= 32, uint64 above."""
    return np.uint32 if bits <= 32 else np.uint64


def edge_values(bits: int) -> list[int]:
    """0, 1, M/2 - 1, M/2, M/2 + 1, M - 2, M - 1 (those that exist), as Python ints."""
    m = 1 << bits
    return sorted({v for v in (0, 1, m // 2 - 1, m // 2, m // 2 + 1, m - 2, m - 1) if 0 <= v < m})


def random_values(rng: np.random.Generator, shape: Any, bits: int, *, full_width: bool = False) -> np.ndarray:
    """Uniform values mod 2**bits in the storage dtype (``full_width``: any value of the
    storage dtype, bits above ``bits`` included, which the kernels must ignore), with the
    edge values mixed in."""
    dt = storage(bits)
    top = np.iinfo(dt).max if full_width else (1 << bits) - 1
    a = rng.integers(0, top, size=shape, dtype=dt, endpoint=True)
    flat = a.reshape(-1)
    edges = np.array(edge_values(bits), dtype=dt)
    k = min(flat.size, 4 * edges.size)
    pos = rng.choice(flat.size, size=k, replace=False)
    flat[pos] = np.resize(edges, k)
    return a


# ---- Python integers (exact by definition) ----------------------------------------------------


def sum_python(xs: np.ndarray, bits: int, start: np.ndarray | None = None) -> np.ndarray:
    """``(start + column sums of xs) mod 2**bits`` with Python ints (``start`` None: 0)."""
    m = 1 << bits
    cols = [sum(int(v) for v in col) for col in np.asarray(xs).reshape(-1, xs.shape[-1]).T]
    base = [0] * len(cols) if start is None else [int(v) for v in start]
    return np.array([(b + c) % m for b, c in zip(base, cols)], dtype=storage(bits))


def lift_python(x: np.ndarray, bits: int, scale: float = 1.0, dtype: Any = np.int64) -> np.ndarray:
    """The centered lift of ``x mod 2**bits`` with Python ints; float outputs are
    ``float(scale) * float(lifted)`` (each correctly rounded) rounded to ``dtype``."""
    m = 1 << bits
    lifted = [(int(v) % m) - m if int(v) % m >= m // 2 else int(v) % m for v in np.asarray(x).reshape(-1)]
    if np.dtype(dtype) == np.int64:
        return np.array(lifted, dtype=np.int64)
    return np.array([float(scale) * float(v) for v in lifted], dtype=np.float64).astype(dtype)


# ---- NumPy, vectorised ------------------------------------------------------------------------


def sum_numpy(xs: np.ndarray, bits: int, start: np.ndarray | None = None) -> np.ndarray:
    """``(start + column sums of xs (n, m)) mod 2**bits``: uint64 sums wrap mod 2**64, which
    2**bits divides, so one mask at the end is exact."""
    total = np.sum(np.asarray(xs).astype(np.uint64), axis=0, dtype=np.uint64)
    if start is not None:
        total = total + np.asarray(start).astype(np.uint64)
    mask = np.uint64((1 << bits) - 1)
    return (total & mask).astype(storage(bits))


def lift_numpy(x: np.ndarray, bits: int, scale: float = 1.0, dtype: Any = np.int64) -> np.ndarray:
    """The centered lift of ``x mod 2**bits`` into int64, or ``float64(scale) * float64(lifted)``
    rounded to ``dtype`` (NumPy's int64 -> float64 and float64 -> float32 conversions round to
    nearest, like the kernels')."""
    v = np.asarray(x).astype(np.uint64) & np.uint64((1 << bits) - 1)
    if bits == 64:
        lifted = v.view(np.int64)  # two's complement is the centered lift mod 2**64
    else:
        half = 1 << (bits - 1)
        s = v.astype(np.int64)  # v < 2**63
        lifted = np.where(v >= np.uint64(half), (s - half) - half, s)  # s - M without overflow
    if np.dtype(dtype) == np.int64:
        return lifted
    return (np.float64(scale) * lifted.astype(np.float64)).astype(dtype)
