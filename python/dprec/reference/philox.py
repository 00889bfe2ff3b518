"""Pure-NumPy Philox4x32-10 and the dprec normal transform (see *Randomness contract and wire formats*).

This module is the executable definition of the randomness contract. The native
kernels in ``dprec._core`` are tested against it bit for bit, so every floating-point
step here is an IEEE-754 float32 operation in a fixed order: no fused multiply-add,
no libm call, no float64 intermediate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..constants import NORMAL_TRANSFORM_VERSION

__all__ = [
    "philox4x32",
    "stream_words",
    "words_to_signs",
    "words_to_uniform",
    "words_to_normals",
    "stream_normals",
    "NORMAL_TRANSFORM_VERSION",
]

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)

# float32 constants of the normal transform (version 1). Changing any of them changes
# what a seed decodes to, so they are part of the wire format.
_F = np.float32
_LN2_HI = _F(0.693145751953125)  # 17 significant bits: k * LN2_HI is exact for |k| <= 25
_LN2_LO = _F(1.428606765330187e-06)
_SQRT2_M1 = _F(0.41421356237309503)
_LOG_P = (_F(2.0 / 3.0), _F(2.0 / 5.0), _F(2.0 / 7.0), _F(2.0 / 9.0))
# sin(pi x / 2) = x (S0 + S1 x^2 + S2 x^4 + S3 x^6) and cos(pi x / 2) = 1 + x^2 (C1 + ... +
# C4 x^6) for |x| <= 1/2: least-squares fits on Chebyshev nodes (near-minimax), rounded
# to float32; evaluated in float32 their maximum absolute errors are 8.9e-8 and 7.6e-8.
_SIN_P = tuple(_F(float.fromhex(h)) for h in ("0x1.921fb6p+0", "-0x1.4abbbap-1", "0x1.465ec4p-4", "-0x1.2d9b7cp-8"))
_COS_P = tuple(_F(float.fromhex(h)) for h in ("-0x1.3bd3ccp+0", "0x1.03c1eap-2", "-0x1.55cb9ap-6", "0x1.db6558p-11"))


def philox4x32(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox4x32-10 of ``counter`` (shape ``(..., 4)``) under ``key`` (shape ``(..., 2)``).

    Both are uint32 arrays that broadcast against each other. Returns the four output
    words per counter as uint32, shape ``(..., 4)``.
    """
    counter = np.asarray(counter, dtype=np.uint32)
    key = np.asarray(key, dtype=np.uint32)
    if counter.shape[-1:] != (4,):
        raise ValueError(f"counter must have a last axis of length 4, got shape {counter.shape}")
    if key.shape[-1:] != (2,):
        raise ValueError(f"key must have a last axis of length 2, got shape {key.shape}")
    c0, c1, c2, c3 = (counter[..., i].astype(np.uint64) for i in range(4))
    k0 = key[..., 0].astype(np.uint64)
    k1 = key[..., 1].astype(np.uint64)
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        hi0, lo0 = p0 >> _SHIFT32, p0 & _MASK32
        hi1, lo1 = p1 >> _SHIFT32, p1 & _MASK32
        c0, c1, c2, c3 = (
            hi1 ^ c1 ^ k0,
            lo1,
            hi0 ^ c3 ^ k1,
            lo0,
        )
        k0 = (k0 + _W0) & _MASK32
        k1 = (k1 + _W1) & _MASK32
    out = np.stack(np.broadcast_arrays(c0, c1, c2, c3), axis=-1)
    return out.astype(np.uint32)


def stream_words(seed: int, count: int, substream: int = 0, group: int = 0, domain: int = 0, offset: int = 0) -> np.ndarray:
    """Words ``offset .. offset+count-1`` of the Philox stream ``(seed, substream, group, domain)``.

    Word ``j`` comes from block ``j >> 2`` (the counter's first word), output word ``j & 3``.
    """
    if count == 0:
        return np.zeros(0, dtype=np.uint32)
    first_block = offset >> 2
    last_block = (offset + count - 1) >> 2
    blocks = np.arange(first_block, last_block + 1, dtype=np.uint64)
    counter = np.empty((blocks.size, 4), dtype=np.uint32)
    counter[:, 0] = blocks.astype(np.uint32)
    counter[:, 1] = substream
    counter[:, 2] = group
    counter[:, 3] = domain
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32)
    words = philox4x32(counter, key).reshape(-1)
    start = offset - 4 * first_block
    return words[start : start + count]


def words_to_signs(words: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``+1`` for a word below ``2**31``, else ``-1``, in ``dtype``: the sign rule of the
    count-sketch and of the Hadamard rotation's diagonal."""
    return (1 - 2 * (words >> np.uint32(31)).astype(np.int8)).astype(dtype)


def words_to_uniform(words: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """Map uint32 words to uniforms in the open interval (0, 1).

    The value is ``(w >> 8) * 2**-24 + 2**-25``. In float64 it is exact. In float32 the
    half-step offset is not representable at or above 0.5 (the spacing there is 2**-24),
    so the float32 result is that exact value rounded toward zero: exact below 0.5, and
    never 0 or 1 anywhere. (Round-to-nearest would give 1.0 for the top word.)
    """
    a = np.asarray(words, dtype=np.uint32) >> np.uint32(8)
    if np.dtype(dtype) == np.float64:
        return (a.astype(np.float64) + 0.5) * 2.0**-24
    if np.dtype(dtype) != np.float32:
        raise ValueError(f"dtype must be float32 or float64, got {np.dtype(dtype)}")
    high = a >= np.uint32(1 << 23)
    out = a.astype(np.float32) * _F(2.0**-24)
    return np.where(high, out, out + _F(2.0**-25)).astype(np.float32)


def _neg2_log_uniform(w: np.ndarray) -> np.ndarray:
    """-2 ln(u) for u = (2 (w >> 8) + 1) * 2**-25, as float32.

    The 25-bit odd integer N = 2a + 1 is split as N = 2**E (1 + f) with 1 + f in
    [sqrt(1/2), sqrt(2)] entirely in integer arithmetic, so f is exact; then
    ln(1 + f) = f - (s f - R(s)), s = f / (2 + f), R(s) = 2 atanh(s) - 2 s.
    """
    a = (w >> np.uint32(8)).astype(np.int32)
    n = 2 * a + 1
    # floor(log2(n)) from the exponent field of float32(n). float32(n) rounds up to 2**25
    # only for n = 2**25 - 1, where d = -1 yields the same reduced (f, e) as the exact split.
    e = (n.astype(np.float32).view(np.uint32) >> np.uint32(23)).astype(np.int32) - 127
    d = n - (np.int32(1) << e)
    # f = d 2**-e by lowering the exponent field: exact, and d = 0 only when e = 0.
    f = (d.astype(np.float32).view(np.uint32) - (e.astype(np.uint32) << np.uint32(23))).view(np.float32)
    # Above sqrt(2) - 1 take the next power of two: (f - 1) / 2 is exact (Sterbenz).
    big = f > _SQRT2_M1
    f = np.where(big, (f - _F(1.0)) * _F(0.5), f)
    e = np.where(big, e + 1, e)
    s = f / (_F(2.0) + f)
    z = s * s
    r = s * z * (_LOG_P[0] + z * (_LOG_P[1] + z * (_LOG_P[2] + z * _LOG_P[3])))
    log1p = f - (s * f - r)
    k = (e - 25).astype(np.float32)
    log_u = k * _LN2_HI + (k * _LN2_LO + log1p)
    return _F(-2.0) * log_u


def _cos_sin_turn(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) of 2 pi u for u = (2 (w >> 8) + 1) * 2**-25, as float32.

    The quadrant and the offset within it are taken from the integer, so the reduced
    argument x in [-1/2, 1/2] (angle pi x / 2) is exact; sin and cos of it are
    degree-7 and degree-8 polynomials (errors below 9e-8).
    """
    a = (w >> np.uint32(8)).astype(np.int32)
    m = 2 * a + 1
    quadrant = m >> 23
    rem = m & ((1 << 23) - 1)
    upper = rem > (1 << 22)
    y = np.where(upper, rem - (1 << 23), rem)
    quadrant = (quadrant + upper.astype(np.int32)) & 3
    x = y.astype(np.float32) * _F(2.0**-23)
    x2 = x * x
    sp = _SIN_P
    cp = _COS_P
    sin_x = x * (sp[0] + x2 * (sp[1] + x2 * (sp[2] + x2 * sp[3])))
    cos_x = _F(1.0) + x2 * (cp[0] + x2 * (cp[1] + x2 * (cp[2] + x2 * cp[3])))
    swap = (quadrant & 1) == 1
    c = np.where(swap, sin_x, cos_x)
    s = np.where(swap, cos_x, sin_x)
    c = np.where((quadrant == 1) | (quadrant == 2), -c, c)
    s = np.where(quadrant >= 2, -s, s)
    return c, s


def words_to_normals(words: np.ndarray) -> np.ndarray:
    """Standard normals from uint32 words, two per consecutive pair (Box-Muller).

    ``words`` has even length; the pair (w[2m], w[2m+1]) gives normals 2m (radius times
    cosine) and 2m+1 (radius times sine). Returns float32.
    """
    words = np.asarray(words, dtype=np.uint32)
    if words.size % 2:
        raise ValueError("words must have an even length")
    pairs = words.reshape(-1, 2)
    radius = np.sqrt(_neg2_log_uniform(pairs[:, 0]))
    c, s = _cos_sin_turn(pairs[:, 1])
    out = np.empty(pairs.shape, dtype=np.float32)
    out[:, 0] = radius * c
    out[:, 1] = radius * s
    return out.reshape(-1)


def stream_normals(seed: int, count: int, substream: int = 0, group: int = 0, offset: int = 0, domain: int = 0) -> np.ndarray:
    """Normals ``offset .. offset+count-1`` of the stream ``(seed, substream, group, domain)``."""
    if count == 0:
        return np.zeros(0, dtype=np.float32)
    start = offset & ~1
    stop = offset + count
    stop += stop & 1
    z = words_to_normals(stream_words(seed, stop - start, substream, group, domain, start))
    return z[offset - start : offset - start + count]
