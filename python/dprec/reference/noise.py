"""Pure-Python reference of the discrete-noise samplers of secure aggregation.

This module is the executable definition of the samplers: the native kernels
(``csrc/common/discrete_noise.h``) consume the same Philox bits in the same order and do the same
integer and float64 operations, so both give the same samples bit for bit. It is a scalar loop
over Python ints (exact at any size) and is slow: use it to cross-check.

:func:`discrete_gaussian` ``(seed, sigma, n)``
    ``n`` exact samples of ``N_Z(0, sigma**2)`` (Canonne, Kamath and Steinke 2020, Algorithms
    1-3, in integer arithmetic), with ``sigma**2`` rounded *up* by :func:`gaussian_grid`.
:func:`skellam` ``(seed, variance, n)``
    ``n`` samples of ``Poisson(mu/2) - Poisson(mu/2)`` (variance ``mu``): Knuth's method below
    10, Hoermann's PTRS from 10 on.
:class:`WordReader`, :class:`BitReader`, :func:`uniform_below`, :func:`bernoulli`,
:func:`bernoulli_half`, :func:`bernoulli_exp`, :func:`discrete_laplace`, :func:`poisson`, ...
    The primitives, each consuming bits exactly as the native code does.
:func:`det_log`, :func:`det_log1p`, :func:`det_exp`, :func:`log_factorial`
    Deterministic float64 functions (no libm), for bit-identity with C++.

Element ``i`` of a call reads its own Philox stream ``(seed, i mod 2**32, i >> 32, domain 5)`` as
a sequence of bits, so it never depends on the others, on the thread count or on the chunking.

See *Randomness contract and wire formats* (*Discrete noise samplers, bit by bit*) in the
documentation for every step, the bounds that keep the integers within 128 bits, and the only
departures from exact sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from ..constants import DOMAIN_NOISE
from .philox import philox4x32

__all__ = [
    "WordReader",
    "BitReader",
    "uniform_below",
    "bernoulli",
    "bernoulli_half",
    "bernoulli_exp",
    "gaussian_grid",
    "gaussian_parameters",
    "discrete_laplace",
    "discrete_gaussian_one",
    "discrete_gaussian",
    "det_log",
    "det_log1p",
    "det_exp",
    "log_factorial",
    "uniform01",
    "poisson",
    "skellam",
]

_MASK32 = 0xFFFFFFFF
_PREFETCH_BLOCKS = 8  # blocks generated per NumPy call (costs the same as one; order unchanged)
_TWO63 = 1 << 63
_TWO64 = 1 << 64


class WordReader:
    """The words of element ``index``'s stream ``(seed, index mod 2**32, index >> 32, 5)``,
    one at a time: block 0 words 0..3, block 1, ... (the block counter wraps at 2**32)."""

    __slots__ = ("_key", "_sub", "_group", "_block", "_buf", "_pos")

    def __init__(self, seed: int, index: int) -> None:
        self._key = np.array([seed & _MASK32, seed >> 32], dtype=np.uint32)
        self._sub = index & _MASK32
        self._group = index >> 32
        self._block = 0
        self._buf: list[int] = []
        self._pos = 0

    def next(self) -> int:
        """The next 32-bit word of the stream."""
        if self._pos == len(self._buf):
            blocks = (self._block + np.arange(_PREFETCH_BLOCKS, dtype=np.uint64)) & np.uint64(_MASK32)
            counter = np.empty((_PREFETCH_BLOCKS, 4), dtype=np.uint32)
            counter[:, 0] = blocks
            counter[:, 1] = self._sub
            counter[:, 2] = self._group
            counter[:, 3] = DOMAIN_NOISE
            self._buf = philox4x32(counter, self._key).reshape(-1).tolist()
            self._block = (self._block + _PREFETCH_BLOCKS) & _MASK32
            self._pos = 0
        w = self._buf[self._pos]
        self._pos += 1
        return w


class BitReader:
    """The bits of element ``index``'s stream: its words (:class:`WordReader`) concatenated,
    each most significant bit first. ``taken`` counts the bits read so far.

    :meth:`from_words` reads given words instead (tests)."""

    __slots__ = ("_next_word", "_acc", "_avail", "taken")

    def __init__(self, seed: int, index: int) -> None:
        self._next_word: Callable[[], int] = WordReader(seed, index).next
        self._acc = 0  # the next _avail bits, as an integer
        self._avail = 0
        self.taken = 0

    @classmethod
    def from_words(cls, words: Iterable[int]) -> BitReader:
        """A reader of the given 32-bit words (StopIteration when they run out)."""
        reader = cls.__new__(cls)
        it = iter(words)
        reader._next_word = lambda: next(it) & _MASK32
        reader._acc = 0
        reader._avail = 0
        reader.taken = 0
        return reader

    def take(self, n: int) -> int:
        """The next ``n >= 0`` bits as an integer, the first one most significant."""
        while self._avail < n:
            self._acc = (self._acc << 32) | self._next_word()
            self._avail += 32
        self._avail -= n
        v = self._acc >> self._avail
        self._acc &= (1 << self._avail) - 1
        self.taken += n
        return v


# -- integer primitives --------------------------------------------------------------------------

def uniform_below(bits: BitReader, bound: int) -> int:
    """Uniform in ``[0, bound)`` for ``1 <= bound < 2**128``: ``take(bit_length(bound - 1))``
    until below ``bound``."""
    nbits = (bound - 1).bit_length()
    if nbits == 0:
        return 0
    while True:
        v = bits.take(nbits)
        if v < bound:
            return v


def bernoulli(bits: BitReader, num: int, den: int) -> bool:
    """Bernoulli(``num / den``), ``0 <= num <= den``, ``den >= 1``: lazy comparison of the
    stream's bits with ``num / den``, 16 bits at a time (see the docs' contract page)."""
    if num == 0:
        return False
    if num >= den:
        return True
    r = num
    while True:
        b = bits.take(16)
        x = (r << 16) - b * den
        if x >= den:
            return True
        if x <= 0:
            return False
        r = x


def bernoulli_half(bits: BitReader) -> bool:
    """Bernoulli(1/2): one bit."""
    return bits.take(1) == 1


def _bernoulli_exp_at_most_one(bits: BitReader, num: int, den: int) -> bool:
    # CKS Algorithm 1: P(K odd) = sum_j (-gamma)**j / j! = exp(-gamma), the trial
    # Bernoulli(gamma / K) split as Bernoulli(1/K) and Bernoulli(num/den) (no den * K).
    k = 1
    while uniform_below(bits, k) == 0 and bernoulli(bits, num, den):
        k += 1
    return k % 2 == 1


def bernoulli_exp(bits: BitReader, num: int, den: int) -> bool:
    """Bernoulli(``exp(-num / den)``) for ``num >= 0``, ``den >= 1`` (False outright when
    ``num // den >= 2**64``)."""
    if num <= den:
        return _bernoulli_exp_at_most_one(bits, num, den)
    q, r = divmod(num, den)
    if q >= _TWO64:
        return False
    for _ in range(q):
        if not _bernoulli_exp_at_most_one(bits, 1, 1):
            return False
    return _bernoulli_exp_at_most_one(bits, r, den)


# -- discrete Gaussian ---------------------------------------------------------------------------

def gaussian_grid(sigma: float) -> tuple[int, int]:
    """``(N, k)`` with ``N / 2**k`` the variance actually sampled for ``sigma`` (>= sigma**2).

    ``sigma**2`` is the exact square of the float64 ``sigma`` (``sigma = M 2**(e - 53)`` by
    frexp, so ``sigma**2 = M**2 2**(2e - 106)``), ``E = floor(log2 sigma**2)``, ``k = min(56,
    max(0, 40 - E))`` and ``N = ceil(sigma**2 2**k)``.
    """
    mant, e = math.frexp(float(sigma))
    m = int(math.ldexp(mant, 53))
    sq = m * m
    floor_log2 = sq.bit_length() - 1 + 2 * e - 106
    k = min(56, max(0, 40 - floor_log2))
    return -((-sq) >> (106 - 2 * e - k)), k  # ceil(sq / 2**sh)


def gaussian_parameters(sigma: float) -> tuple[int, int, int, int, int]:
    """``(N, k, t, den, y_limit)``: the grid, the Laplace scale ``t = isqrt(N >> k) + 1``,
    the acceptance denominator ``2 N t**2 2**k`` and the first rejected ``|Y|``,
    ``ceil(2**63 / (t 2**k))``."""
    n, k = gaussian_grid(sigma)
    t = math.isqrt(n >> k) + 1
    tk = t << k
    return n, k, t, 2 * n * t * tk, -(-_TWO63 // tk)


def discrete_laplace(bits: BitReader, t: int) -> int:
    """Discrete Laplace ``P(y) ~ exp(-|y| / t)`` (CKS Algorithm 2, ``s = 1``)."""
    while True:
        u = uniform_below(bits, t)
        if not bernoulli_exp(bits, u, t):
            continue
        v = 0
        while bernoulli_exp(bits, 1, 1):
            v += 1
        y = u + t * v
        b = bernoulli_half(bits)
        if b and y == 0:
            continue
        return -y if b else y


def discrete_gaussian_one(bits: BitReader, params: tuple[int, int, int, int, int]) -> int:
    """One ``N_Z(0, N / 2**k)`` sample (CKS Algorithm 3) from ``gaussian_parameters``."""
    n, k, t, den, y_limit = params
    tk = t << k
    while True:
        y = discrete_laplace(bits, t)
        m = abs(y)
        if m >= y_limit:  # |Y| t 2**k >= 2**63: rejected outright (see the docs' contract page)
            continue
        a = m * tk - n
        if bernoulli_exp(bits, a * a, den):
            return y


def discrete_gaussian(seed: int, sigma: float, n: int) -> np.ndarray:
    """``n`` samples of ``N_Z(0, sigma**2)`` (int64), element ``i`` from its own stream."""
    params = gaussian_parameters(sigma)
    return np.array([discrete_gaussian_one(BitReader(seed, i), params) for i in range(n)], dtype=np.int64)


# -- deterministic float64 math (the C++ side repeats every operation) --------------------------

_LN2_HI = float.fromhex("0x1.62e42fefa4000p-1")  # 41 significant bits: e * _LN2_HI is exact for |e| < 2**12
_LN2_LO = float.fromhex("-0x1.8432a1b0e2634p-43")  # ln 2 - _LN2_HI, rounded
_INV_LN2 = float.fromhex("0x1.71547652b82fep+0")
_SQRT_HALF = float.fromhex("0x1.6a09e667f3bcdp-1")
_HALF_LOG_2PI = float.fromhex("0x1.d67f1c864beb5p-1")
# 2 / (2j + 1), j = 1..10: the atanh series of log (correctly rounded quotients).
_LOG_C = tuple(2.0 / (2 * j + 1) for j in range(1, 11))
# 1 / j!, j = 0..14: the Taylor series of exp on |r| <= ln(2) / 2 (error below 1e-19).
_EXP_C = tuple(float.fromhex(h) for h in (
    "0x1.0000000000000p+0", "0x1.0000000000000p+0", "0x1.0000000000000p-1", "0x1.5555555555555p-3",
    "0x1.5555555555555p-5", "0x1.1111111111111p-7", "0x1.6c16c16c16c17p-10", "0x1.a01a01a01a01ap-13",
    "0x1.a01a01a01a01ap-16", "0x1.71de3a556c734p-19", "0x1.27e4fb7789f5cp-22", "0x1.ae64567f544e4p-26",
    "0x1.1eed8eff8d898p-29", "0x1.6124613a86d09p-33", "0x1.93974a8c07c9dp-37",
))
_LOG1P_DIRECT = 0.25  # det_log1p(d) sums the series on d itself for |d| <= 1/4
_STIRLING_FROM = 16  # log k! by summing logs below, by the Stirling series from here on
_TWO53 = float(1 << 53)


def _log1p_series(f: float) -> float:
    """log(1 + f) for ``|f|`` up to about 0.42: ``2 atanh(s)``, ``s = f / (2 + f)``, as
    ``f - s (f - R)``, ``R = z (2/3 + z (2/5 + ... + z 2/21))``, ``z = s**2``."""
    s = f / (2.0 + f)
    z = s * s
    c = _LOG_C
    r = c[9]
    for j in range(8, -1, -1):
        r = r * z + c[j]
    r = z * r
    return f - s * (f - r)


def det_log(x: float) -> float:
    """Natural log of a finite ``x > 0`` (about 1 ulp; no libm): ``x = m 2**e`` with ``m`` in
    ``[sqrt(1/2), sqrt(2))`` (frexp, exact), ``log x = e ln2_hi + (e ln2_lo + log1p(m - 1))``."""
    m, e = math.frexp(x)
    if m < _SQRT_HALF:
        m = m * 2.0
        e -= 1
    fe = float(e)
    return fe * _LN2_HI + (fe * _LN2_LO + _log1p_series(m - 1.0))


def det_log1p(d: float) -> float:
    """``log(1 + d)`` for ``d > -1``, accurate also for tiny ``d`` (no rounding of ``1 + d``
    when ``|d| <= 1/4``)."""
    if -_LOG1P_DIRECT <= d <= _LOG1P_DIRECT:
        return _log1p_series(d)
    return det_log(1.0 + d)


def det_exp(x: float) -> float:
    """``exp(x)`` for ``|x| <= 700`` (about 1 ulp; no libm): ``x = j ln 2 + r``, ``|r| <=
    ln(2)/2``, Taylor series to degree 14, scaled by ``2**j`` (ldexp, exact)."""
    j = math.floor(x * _INV_LN2 + 0.5)
    fj = float(j)
    r = (x - fj * _LN2_HI) - fj * _LN2_LO
    c = _EXP_C
    p = c[14]
    for i in range(13, -1, -1):
        p = p * r + c[i]
    return math.ldexp(p, j)


def _stirling_correction(x: float) -> float:
    """``1/(12x) - 1/(360x**3) + 1/(1260x**5) - 1/(1680x**7)`` (error below 1e-14 at x = 16)."""
    inv = 1.0 / x
    inv2 = inv * inv
    return inv * ((1.0 / 12.0) - inv2 * ((1.0 / 360.0) - inv2 * ((1.0 / 1260.0) - inv2 * (1.0 / 1680.0))))


def _log_factorial_table() -> tuple[float, ...]:
    table = [0.0]
    for j in range(1, _STIRLING_FROM):
        table.append(table[-1] + det_log(float(j)))
    return tuple(table)


_LOG_FACTORIAL = _log_factorial_table()


def log_factorial(k: int) -> float:
    """``log k!`` for an integer ``0 <= k < 2**53``: the running sum of :func:`det_log` below
    16, ``(k + 1/2) log k - k + log(2 pi)/2`` plus the Stirling correction from 16 on."""
    if k < _STIRLING_FROM:
        return _LOG_FACTORIAL[k]
    x = float(k)
    return (((x + 0.5) * det_log(x) - x) + _HALF_LOG_2PI) + _stirling_correction(x)


# -- Skellam ---------------------------------------------------------------------------------------

def uniform01(bits: BitReader) -> float:
    """``((w0 >> 6) 2**26 + (w1 >> 6) + 1/2) 2**-52`` with ``w0``, ``w1`` the halves of
    ``take(64)``: 52 random bits, exact, in (0, 1)."""
    w = bits.take(64)
    m = float(w >> 38) * 67108864.0 + float((w & _MASK32) >> 6)
    return (m + 0.5) * 2.0**-52


class _PoissonParams:
    """What Poisson(lam) precomputes once per call (PTRS constants after Hoermann, 1993)."""

    __slots__ = ("lam", "small", "exp_neg_lam", "log_lam", "a", "b", "log_inv_alpha", "v_r")

    def __init__(self, lam: float) -> None:
        self.lam = lam
        self.small = lam < 10.0
        self.exp_neg_lam = det_exp(-lam) if self.small else 0.0
        if self.small:
            self.log_lam = self.a = self.b = self.log_inv_alpha = self.v_r = 0.0
            return
        self.log_lam = det_log(lam)
        self.b = 0.931 + 2.53 * math.sqrt(lam)
        self.a = -0.059 + 0.02483 * self.b
        self.log_inv_alpha = det_log(1.1239 + 1.1328 / (self.b - 3.4))
        self.v_r = 0.9277 - 3.6224 / (self.b - 2.0)


def _log_pmf_bound(p: _PoissonParams, k: int) -> float:
    """``-lam + k log lam - log k!``, cancellation-free for ``k >= 16`` (see the docs' contract page)."""
    x = float(k)
    if k < _STIRLING_FROM:
        return (-p.lam + x * p.log_lam) - _LOG_FACTORIAL[k]
    delta = x - p.lam  # exact when lam/2 <= k <= 2 lam (Sterbenz), where it matters
    main = delta - x * det_log1p(delta / p.lam)
    return main - ((0.5 * det_log(x) + _HALF_LOG_2PI) + _stirling_correction(x))


def poisson(bits: BitReader, p: _PoissonParams) -> int:
    """One Poisson(``p.lam``) draw (Knuth below 10, PTRS from 10 on)."""
    if p.small:
        k = 0
        prod = 1.0
        while True:
            prod = prod * uniform01(bits)
            if prod <= p.exp_neg_lam:
                return k
            k += 1
    lam, a, b = p.lam, p.a, p.b
    while True:
        u = uniform01(bits) - 0.5
        v = uniform01(bits)
        us = 0.5 - abs(u)
        k = math.floor((((2.0 * a) / us + b) * u + lam) + 0.43)
        if us >= 0.07 and v <= p.v_r:
            return k
        if k < 0 or k >= _TWO53 or (us < 0.013 and v > us):
            continue
        if (det_log(v) + p.log_inv_alpha) - det_log(a / (us * us) + b) <= _log_pmf_bound(p, k):
            return k


def skellam(seed: int, variance: float, n: int) -> np.ndarray:
    """``n`` samples of Poisson(variance/2) - Poisson(variance/2) (int64), element ``i`` from
    its own stream (the first Poisson, then the second)."""
    p = _PoissonParams(float(variance) * 0.5)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        bits = BitReader(seed, i)
        first = poisson(bits, p)
        out[i] = first - poisson(bits, p)
    return out
