"""Pure-NumPy QMGeo quantizer (Wang and Gursoy; SPEC §5 corrected pmf; SPEC §2 domain 4).

This module is the executable definition of the quantizer; the native kernel
(``csrc/cpu/qmgeo.cpp``) repeats its float64 operations in the same order, and the two are
bit-identical for every input.

The pmf
-------
Levels ``Bin(j) = -w_max + j * step``, ``step = 2 w_max / (R - 1)``, ``j = 0 .. R-1``, q = 1 - p.
For ``c = clip(w, -w_max, w_max)``: ``r = min(floor((c + w_max) / step), R - 2)`` and
``theta = clip((c - Bin(r)) / step, 0, 1)`` (the clip only absorbs float64 rounding), computed
with exactly the operations of :func:`dprec.accounting.qmgeo.qmgeo_log_pmf`. Output ``j`` has
probability ``(1 - theta) p q^(r-j) / (1 - q^(r+1))`` for ``j <= r`` and
``theta p q^(j-r-1) / (1 - q^(R-r-1))`` for ``j > r``. It is sampled in two steps: a *branch*
(down, to a level ``<= r``, with probability ``1 - theta``; up otherwise) and an *offset*
``k >= 0`` within the branch, a geometric truncated to ``count`` values, ``P(k) ~ q^k``
(``count = r + 1`` down, ``R - r - 1`` up); the output is ``r - k`` or ``r + 1 + k``.

Randomness layout (fixed; part of the contract)
-----------------------------------------------
One client-private 64-bit seed per call. Element ``j`` reads words ``2j`` and ``2j + 1`` of two
Philox streams ``(seed, substream s, group, domain 4)``: ``s = 0`` gives the branch word
``u0 = (w[2j] << 32) | w[2j+1]``, ``s = 1`` the offset word ``u1`` formed the same way. Nothing
else is read, so the result of element ``j`` does not depend on the other elements, on chunking
or on the thread count. (With ``p = 1`` sub-stream 1 is not read at all.)

What is exact and what is float64-rounded
-----------------------------------------
* ``r`` and ``theta`` are float64 computations from ``w`` (as in the accounting's pmf).
* The branch is exact given ``theta``: up iff ``theta >= 1`` or ``u0 < floor(theta 2**64)``,
  so ``P(up) = floor(theta 2**64) / 2**64``, i.e. ``theta`` exactly when ``theta`` is a multiple
  of ``2**-64`` (always when ``theta >= 2**-11``), else below it by less than ``2**-64``.
* The offset is the inverse CDF in float64:
  ``k = trunc(min(log1p(-v t) / log q, count - 1))`` with ``v = (2 (u1 >> 12) + 1) 2**-53``
  (52 random bits, exact, in (0, 1)), ``t = 1 - q^count``, and ``log``, ``log1p``, ``exp`` and
  ``expm1`` the deterministic float64 functions of ``csrc/common/det_math.h`` (about 1 ulp;
  no libm). In exact arithmetic ``k`` would have the truncated geometric law exactly (up to the
  ``2**-52`` grid of ``v``); in float64 each CDF boundary ``1 - q^(k+1)`` is moved by a few
  ulp, so each ``P(k)`` is off by at most about ``1e-15`` in absolute terms. ``t`` is
  ``-expm1(x)`` by a series for ``|x| <= 1/4`` (``x = count log q``; no cancellation when q is
  close to 1), ``1 - exp(x)`` down to ``x = -40``, and 1 below.
* ``p = 1`` (plain stochastic rounding between ``Bin(r)`` and ``Bin(r+1)``) and ``count = 1``
  take ``k = 0`` without reading ``u1``.

Wire layout of the indices (fixed; part of the contract)
--------------------------------------------------------
SPEC §5: ``b = ceil(log2 R)`` bits per coordinate (``1 <= b <= 16``; :func:`index_bits`).
Index ``i`` of ``n`` occupies bits ``[i b, (i + 1) b)`` of the payload bit stream, least
significant bit first; payload bit ``t`` is bit ``t % 8`` (least significant = 0) of byte
``t // 8``. Equivalently the payload, read as one little-endian integer, is
``sum_i idx_i << (i b)``. It has ``ceil(n b / 8)`` bytes, and the padding bits of the last byte
(the top ``8 ceil(n b / 8) - n b`` bits) are 0. This is the bit order of
``numpy.packbits(..., bitorder="little")`` over the LSB-first bits of each index, the order the
DP-REC message uses for its indices. Example, ``b = 3``, indices ``[1, 2, 3, 4, 5]`` (15 bits,
2 bytes): the bit stream is ``100 010 110 001 101`` (each index LSB first) and one padding 0, so
byte 0 holds stream bits ``1 0 0 0 1 0 1 1`` (bit 0 first) = ``0xD1`` and byte 1
``0 0 0 1 1 0 1 0`` = ``0x58``; as an integer, ``1 + (2 << 3) + (3 << 6) + (4 << 9) + (5 << 12)
= 0x58D1``. Eight indices fill exactly ``b`` bytes, which is
how the native kernel (``csrc/cpu/qmgeo_pack.cpp``) works; it is byte-identical to
:func:`pack_indices` and gives the same indices, sums and errors as :func:`unpack_indices` and
:func:`accumulate_indices`.

A payload is *corrupted* when a padding bit is 1 (checked first) or an index is ``>= R`` (only
possible when ``R`` is not a power of two); both are ValueErrors, the second naming the first
such position.
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
    """QMGeo level indices (uint16, ``w``'s shape) of the float64 ``w`` (see the module notes).

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
    """The ``count`` indices (uint32) of ``payload``, checked (see the module notes)."""
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
