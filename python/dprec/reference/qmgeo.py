"""Pure-NumPy QMGeo quantizer and index packing (Wang and Gursoy; the corrected pmf).

This module is the executable definition of the quantizer and of the wire layout of its indices:
the native kernels (``csrc/cpu/qmgeo.cpp``, ``csrc/cpu/qmgeo_pack.cpp``) repeat its float64
operations in the same order and are bit-identical to it for every input (the packing
byte-identical, with the same indices, sums and errors). It is for cross-checking them.

:func:`quantize`
    The level indices of ``w`` under one client-private seed (Philox domain 4: element ``j``
    reads words ``2j`` and ``2j + 1`` of sub-stream 0 for the branch and of sub-stream 1 for the
    geometric offset; sub-stream 1 is not read when ``p = 1``).
:func:`pack_indices`, :func:`unpack_indices`, :func:`accumulate_indices`, :func:`index_bits`,
:func:`payload_bytes`
    Indices at ``b = ceil(log2 R)`` bits each, least significant bit first; a payload with a
    padding bit set or an index ``>= R`` is a ValueError (the second naming the first such
    position).

See the *QMGeo* page of the documentation for the pmf, the randomness layout and what is exact
and what is float64-rounded, and *Randomness contract and wire formats* for the bit layout of a
payload, with a worked example.
"""

from __future__ import annotations

import numpy as np

from ..constants import DOMAIN_ROUNDING

# det_math's constants (1/j!, ln 2 split, sqrt(1/2), the atanh series of log), shared with the noise samplers
from .noise import _EXP_C, _LN2_HI, _LN2_LO, _LOG_C, _SQRT_HALF, det_exp, det_log1p
from .philox import stream_words

__all__ = [
    "quantize", "expm1_small", "QMGEO_CHUNK", "MIN_QMGEO_P", "index_bits", "payload_bytes", "pack_indices",
    "unpack_indices", "accumulate_indices",
]

#: Elements per chunk (bounds the temporary memory; the result does not depend on it).
QMGEO_CHUNK = 1 << 14
#: Smallest p: keeps every float64 intermediate of the offset sampler a normal number.
MIN_QMGEO_P = 2.0**-512

_TWO32 = float(2**32)
_TWO_M53 = 2.0**-53


def expm1_small(x: float) -> float:
    """``exp(x) - 1`` for ``|x| <= 1/4``: ``x (1 + x/2! + ... + x**13/14!)`` in Horner form
    (det_math.h ``expm1_small``; the first term left out is below 3e-21 relative)."""
    p = _EXP_C[14]
    for i in range(13, 0, -1):
        p = p * x + _EXP_C[i]
    return x * p


def _mass(x: float) -> float:
    """``1 - q^c`` from ``x = c log q <= 0`` (det_math ops; cpu/qmgeo.cpp ``one_minus_power``)."""
    if x >= -0.25:
        return -expm1_small(x)
    if x > -40.0:
        return 1.0 - det_exp(x)
    return 1.0


def _log1p_series(f: np.ndarray) -> np.ndarray:
    """det_math's ``log1p_series``, elementwise (NumPy ufuncs round each operation, no FMA)."""
    s = f / (2.0 + f)
    z = s * s
    r = np.full_like(f, _LOG_C[9])
    for j in range(8, -1, -1):
        r = r * z + _LOG_C[j]
    r = z * r
    return f - s * (f - r)


def _log1p(d: np.ndarray) -> np.ndarray:
    """det_math's ``log1p`` for ``-1 < d <= 0``, elementwise: the series on ``d`` for
    ``d >= -1/4``, else ``log(1 + d)`` by frexp reduction."""
    m, e = np.frexp(1.0 + d)
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)
    fe = np.where(low, e - 1, e).astype(np.float64)
    reduced = fe * _LN2_HI + (fe * _LN2_LO + _log1p_series(m - 1.0))
    return np.where(d >= -0.25, _log1p_series(d), reduced)


def _quantize_chunk(
    c: np.ndarray, u0: np.ndarray, u1: np.ndarray | None, w_max: float, levels: int, log_q: float, mass: np.ndarray
) -> np.ndarray:
    step = 2.0 * w_max / (levels - 1)
    r = np.minimum(np.floor((c + w_max) / step), float(levels - 2))
    theta = np.minimum(np.maximum((c - (-w_max + r * step)) / step, 0.0), 1.0)
    # floor(theta 2**64) = hi 2**32 + lo exactly, for theta < 1 (theta = 1 is "up" outright).
    below = np.where(theta < 1.0, theta, 0.0)
    scaled = below * _TWO32
    hi = np.floor(scaled)
    lo = np.floor((scaled - hi) * _TWO32)
    threshold = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
    up = (theta >= 1.0) | (u0 < threshold)
    ri = r.astype(np.int64)
    count = np.where(up, levels - ri - 1, ri + 1)
    k = np.zeros(c.size, dtype=np.int64)
    if u1 is not None:
        v = (((u1 >> np.uint64(12)) << np.uint64(1)) | np.uint64(1)).astype(np.float64) * _TWO_M53
        for n in np.unique(count):  # the normalisers this chunk needs, computed once per call
            if np.isnan(mass[n]):
                mass[n] = _mass(float(n) * log_q)
        t = mass[count]
        ratio = _log1p(-(v * t)) / log_q
        k = np.minimum(ratio, (count - 1).astype(np.float64)).astype(np.int64)  # truncation, as in C++
        k[count == 1] = 0
    return np.where(up, ri + 1 + k, ri - k).astype(np.uint16)


def quantize(w: np.ndarray, seed: int, group: int, w_max: float, levels: int, p: float) -> np.ndarray:
    """QMGeo level indices (uint16, ``w``'s shape) of the float64 ``w`` (see the *QMGeo* docs page).

    ``w`` is clipped to ``[-w_max, w_max]``; it must be finite (ValueError naming ``w``).
    ``2 <= levels <= 2**16``, ``w_max > 0``, ``MIN_QMGEO_P <= p <= 1``.
    """
    w = np.asarray(w, dtype=np.float64)
    flat = w.reshape(-1)
    if not np.isfinite(flat).all():
        raise ValueError("w must be finite (it contains NaN or infinite values)")
    plain = p == 1.0
    log_q = 0.0 if plain else det_log1p(-p)
    mass = np.full(levels, np.nan)  # mass[c] = 1 - q^c, filled on demand
    out = np.empty(flat.size, dtype=np.uint16)
    for start in range(0, flat.size, QMGEO_CHUNK):
        chunk = np.clip(flat[start : start + QMGEO_CHUNK], -w_max, w_max)
        n = chunk.size
        words0 = stream_words(seed, 2 * n, 0, group, DOMAIN_ROUNDING, 2 * start).astype(np.uint64)
        u0 = (words0[0::2] << np.uint64(32)) | words0[1::2]
        u1 = None
        if not plain:
            words1 = stream_words(seed, 2 * n, 1, group, DOMAIN_ROUNDING, 2 * start).astype(np.uint64)
            u1 = (words1[0::2] << np.uint64(32)) | words1[1::2]
        out[start : start + n] = _quantize_chunk(chunk, u0, u1, w_max, levels, log_q, mass)
    return out.reshape(w.shape)



# ---- the wire layout of the indices ------------------------------------------------------------


def index_bits(levels: int) -> int:
    """``ceil(log2 levels)``, the bits per index, for ``2 <= levels <= 2**16``."""
    if not 2 <= levels <= 1 << 16:
        raise ValueError(f"levels must be in [2, 2**16], got {levels}")
    return (int(levels) - 1).bit_length()


def payload_bytes(count: int, bits: int) -> int:
    """``ceil(count * bits / 8)``, the payload length of ``count`` indices."""
    return (count * bits + 7) // 8


def _check_bits(bits: int) -> None:
    if not 1 <= bits <= 16:
        raise ValueError(f"bits must be in [1, 16], got {bits}")


def pack_indices(indices: np.ndarray, bits: int) -> np.ndarray:
    """The payload (uint8, ``ceil(n bits / 8)`` bytes) of the indices (flattened in C order).

    Every index must be below ``2**bits`` (the caller's guarantee, as in the native kernel).
    """
    _check_bits(bits)
    idx = np.asarray(indices).reshape(-1).astype(np.uint32)
    # Row i holds the bits of index i, least significant first: flattened, that is the bit stream.
    stream = ((idx[:, None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    return np.packbits(stream.reshape(-1), bitorder="little")


def _decode(payload: np.ndarray, bits: int, levels: int, count: int) -> np.ndarray:
    """The ``count`` indices (uint32) of ``payload``, checked (padding first, then every index < levels)."""
    _check_bits(bits)
    if bits != index_bits(levels):
        raise ValueError(f"bits must be ceil(log2 levels) = {index_bits(levels)} for levels = {levels}, got {bits}")
    data = np.asarray(payload, dtype=np.uint8).reshape(-1)
    want = payload_bytes(count, bits)
    if data.size != want:
        raise ValueError(
            f"payload must have ceil(n * bits / 8) = {want} bytes for n = {count} indices of {bits} bits, got "
            f"{data.size}"
        )
    stream = np.unpackbits(data, bitorder="little")
    used = count * bits
    if stream[used:].any():
        raise ValueError(
            f"payload is corrupted: the padding bits after the last index (the top {stream.size - used} bits of the "
            "last byte) are not zero"
        )
    weights = np.left_shift(np.uint32(1), np.arange(bits, dtype=np.uint32))
    j = (stream[:used].reshape(count, bits).astype(np.uint32) * weights).sum(axis=1, dtype=np.uint32)
    bad = np.flatnonzero(j >= levels)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"payload is corrupted: index i = {i} is {int(j[i])} >= levels = {levels}")
    return j


def unpack_indices(payload: np.ndarray, bits: int, levels: int, count: int) -> np.ndarray:
    """The ``count`` level indices (uint16) of a payload of ``bits``-bit indices.

    ``bits = ceil(log2 levels)``; ``payload`` (uint8) must have ``ceil(count bits / 8)`` bytes.
    ValueError for a wrong length, a set padding bit or an index ``>= levels``.
    """
    return _decode(payload, bits, levels, count).astype(np.uint16)


def accumulate_indices(
    payload: np.ndarray, bits: int, levels: int, coef: float, low: float, step: float, acc: np.ndarray
) -> None:
    """``acc[i] += coef * (low + j_i * step)`` in float64, as written (NumPy rounds every
    operation: no FMA), for the ``acc.size`` indices ``j_i`` of ``payload``.

    ``acc`` is a writeable float64 array, updated in place (flat C order); it is unchanged when
    the payload is refused (the errors of :func:`unpack_indices`; ``coef``, ``low`` and ``step``
    must be finite).
    """
    if not (np.isfinite(coef) and np.isfinite(low) and np.isfinite(step)):
        raise ValueError(f"coef, low and step must be finite, got {coef}, {low} and {step}")
    flat = acc.reshape(-1)  # a view of a contiguous array
    j = _decode(payload, bits, levels, flat.size)
    flat += coef * (low + j.astype(np.float64) * step)
