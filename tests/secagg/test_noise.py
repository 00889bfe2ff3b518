"""Exact discrete Gaussian and Skellam samplers (dprec.secagg.noise, docs/contract.md, docs/secagg.md).

* the native kernels, the portable-128-bit build and the pure-Python reference give the same
  samples bit for bit, for any thread count;
* the laws: chi-square goodness of fit against the exact pmf (fixed seeds, 2e5 samples, p >
  1e-4), tails, symmetry and variance within 5 standard errors;
* the primitives: uniform_below / bernoulli / bernoulli_exp frequencies and bit consumption, the own
  log / exp / log k! against math and mpmath, 128-bit arithmetic (builtin and portable)
  against Python ints;
* bad input.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

import dprec
from dprec import secagg
from dprec.constants import MAX_NOISE_SAMPLES
from dprec.reference import noise as ref
from dprec.secagg import MAX_DISCRETE_GAUSSIAN_SIGMA, MAX_SKELLAM_VARIANCE, sample_discrete_gaussian, sample_skellam
from tests.conftest import gpu_emulation, requires_native

SEED = 0x5EC5A6_D15C_9A55
SIGMAS = [0.05, 0.5, 1.0, 3.7, 100.0, 1e4, 2.0**24]
MUS = [0.3, 5.0, 9.99, 10.0, 19.99, 20.0, 1e3, 1e6, 2.0**48]


def _native(op: str, seed: int, scale: float, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.int64)
    getattr(dprec._runtime.native.native(), op)(seed, scale, out)
    return out


# -- bit identity -----------------------------------------------------------------------------------

@requires_native
@pytest.mark.parametrize("sigma", SIGMAS)
def test_discrete_gaussian_native_equals_reference(sigma):
    n = 400
    np.testing.assert_array_equal(_native("discrete_gaussian", SEED, sigma, n), ref.discrete_gaussian(SEED, sigma, n))


@requires_native
@pytest.mark.parametrize("mu", MUS)
def test_skellam_native_equals_reference(mu):
    n = 400
    np.testing.assert_array_equal(_native("skellam", SEED, mu, n), ref.skellam(SEED, mu, n))


@requires_native
@pytest.mark.parametrize(("op", "scale"), [("discrete_gaussian", 2.5), ("skellam", 7.0), ("skellam", 1e5)])
def test_public_api_backends_agree(op, scale):
    fn = sample_discrete_gaussian if op == "discrete_gaussian" else sample_skellam
    a = fn(300, scale, rng=np.random.default_rng(7), backend="cpu")
    b = fn(300, scale, rng=np.random.default_rng(7), backend="reference")
    c = fn(300, scale, rng=np.random.default_rng(7))
    assert a.dtype == np.int64 and a.shape == (300,)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


@requires_native
def test_element_i_reads_substream_i_and_group_i_high_bits():
    # Element i of a call of size n is independent of n: a prefix is a prefix.
    full = _native("discrete_gaussian", SEED, 3.0, 5000)
    np.testing.assert_array_equal(full[:123], _native("discrete_gaussian", SEED, 3.0, 123))
    # Elements beyond 2**32 use group i >> 32: the reference's reader for i = 2**32 + 5.
    r_hi, r_lo = ref.WordReader(SEED, (1 << 32) + 5), ref.WordReader(SEED, 5)
    assert [r_hi.next() for _ in range(4)] != [r_lo.next() for _ in range(4)]
    words = dprec.philox.words(SEED, 8, substream=5, group=1, domain=5)
    r = ref.WordReader(SEED, (1 << 32) + 5)
    assert [r.next() for _ in range(8)] == words.tolist()


@requires_native
@pytest.mark.parametrize(("op", "scale"), [("discrete_gaussian", 0.7), ("discrete_gaussian", 1e4), ("skellam", 3.0),
                                           ("skellam", 1e8)])
def test_same_samples_for_any_thread_count(threads, op, scale):
    n = 3 * 4096 + 17  # several work items
    results = []
    for count in (1, 2, 5):
        threads(count)
        results.append(_native(op, SEED, scale, n))
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


@pytest.mark.parametrize("sigma", [0.05, 1.0, 3.7, 1e4, 2.0**24])
def test_portable_uint128_sampler_equals_builtin_and_core(sigma):
    em = gpu_emulation()
    n = 2000
    portable = np.empty(n, np.int64)
    em.discrete_gaussian(SEED, sigma, portable, True)
    if em.HAVE_BUILTIN_INT128:
        builtin = np.empty(n, np.int64)
        em.discrete_gaussian(SEED, sigma, builtin, False)
        np.testing.assert_array_equal(portable, builtin)
    np.testing.assert_array_equal(portable, _native("discrete_gaussian", SEED, sigma, n))


# -- the laws ---------------------------------------------------------------------------------------

STAT_N = 200_000
P_MIN = 1e-4


def _chi2_pvalue(samples: np.ndarray, lo: int, pmf: np.ndarray, max_bins: int = 200) -> float:
    """Chi-square p-value of integer ``samples`` against ``pmf`` on ``lo, lo + 1, ...``
    (normalised; samples outside the window count in the end bins). Value ``x`` goes to bin
    ``floor(F_mid(x) * max_bins)`` (``F_mid`` the cdf at the middle of its step), so bins are
    runs of consecutive values of probability about ``1 / max_bins``; a bin expecting fewer
    than 5 samples is merged into its neighbour."""
    n = samples.size
    mid = np.cumsum(pmf) - pmf / 2
    _, bin_of = np.unique(np.floor(mid * max_bins).astype(np.int64), return_inverse=True)
    while True:
        probs = np.bincount(bin_of, weights=pmf)
        small = int(np.argmin(probs))
        if probs[small] * n >= 5 or probs.size == 1:
            break
        if small == 0 or (small < probs.size - 1 and probs[small + 1] < probs[small - 1]):
            bin_of[bin_of == small] = small + 1
        else:
            bin_of[bin_of == small] = small - 1
        _, bin_of = np.unique(bin_of, return_inverse=True)
    assert probs.size >= 2
    idx = np.clip(samples - lo, 0, pmf.size - 1)
    observed = np.bincount(bin_of[idx], minlength=probs.size)
    expected = probs * n
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    return float(stats.chi2.sf(chi2, probs.size - 1))


def _gaussian_pmf(sigma: float) -> tuple[int, np.ndarray]:
    n, k = ref.gaussian_grid(sigma)
    s2 = n / 2.0**k
    half = math.ceil(15 * math.sqrt(s2)) + 3
    x = np.arange(-half, half + 1, dtype=np.float64)
    pmf = np.exp(-(x * x) / (2 * s2))
    return -half, pmf / pmf.sum()


def _check_moments(samples: np.ndarray, lo: int, pmf: np.ndarray, sd: float) -> None:
    n = samples.size
    x = np.arange(lo, lo + pmf.size, dtype=np.float64)
    # Tail beyond 3 sd: binomial count within 5 standard errors.
    p_tail = float(pmf[np.abs(x) > 3 * sd].sum())
    seen = int(np.count_nonzero(np.abs(samples) > 3 * sd))
    assert abs(seen - n * p_tail) <= 5 * math.sqrt(n * p_tail * (1 - p_tail)) + 1, (seen, n * p_tail)
    # Symmetry: positives vs negatives.
    pos, neg = int(np.count_nonzero(samples > 0)), int(np.count_nonzero(samples < 0))
    assert abs(pos - neg) <= 5 * math.sqrt(pos + neg) + 1
    # Variance against the exact one, 5 standard errors of the second-moment estimate.
    var = float((pmf * x * x).sum())
    m4 = float((pmf * x**4).sum())
    se = math.sqrt(max(m4 - var * var, 0.0) / n)
    assert abs(float(np.mean(samples.astype(np.float64) ** 2)) - var) <= 5 * se + 1e-12, (var, se)


@requires_native
@pytest.mark.parametrize("sigma", [0.3, 0.8, 1.0, 2.5, 30.0, 1e4])
def test_discrete_gaussian_law(sigma):
    samples = sample_discrete_gaussian(STAT_N, sigma, rng=np.random.default_rng(int(sigma * 1000)))
    lo, pmf = _gaussian_pmf(sigma)
    assert _chi2_pvalue(samples, lo, pmf) > P_MIN
    _check_moments(samples, lo, pmf, sigma)


@requires_native
@pytest.mark.parametrize("mu", [0.3, 5.0, 19.99, 20.0, 1e3, 1e6])
def test_skellam_law(mu):
    samples = sample_skellam(STAT_N, mu, rng=np.random.default_rng(int(mu * 100)))
    half = math.ceil(15 * math.sqrt(mu)) + 10
    x = np.arange(-half, half + 1)
    pmf = stats.skellam.pmf(x, mu / 2, mu / 2)
    pmf = pmf / pmf.sum()
    assert _chi2_pvalue(samples, -half, pmf) > P_MIN
    _check_moments(samples, -half, pmf, math.sqrt(mu))


@requires_native
@pytest.mark.parametrize("mu", [1e10, 2.0**48])
def test_skellam_law_huge_variance(mu):
    # SciPy's Skellam cdf does not converge here; the normal law with continuity correction
    # is within about 1/mu of it (the Skellam law is symmetric with excess kurtosis 1/mu),
    # far below what 2e5 samples resolve. 200 equal-probability bins.
    samples = sample_skellam(STAT_N, mu, rng=np.random.default_rng(99))
    sd = math.sqrt(mu)
    edges = np.unique(np.round(stats.norm.ppf(np.linspace(0, 1, 201)[1:-1]) * sd))  # bin j: x < edges[j]
    cdf = stats.norm.cdf((edges - 0.5) / sd)
    probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    observed = np.bincount(np.searchsorted(edges, samples, side="right"), minlength=probs.size)
    expected = probs * samples.size
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert stats.chi2.sf(chi2, probs.size - 1) > P_MIN
    assert abs(float(np.var(samples.astype(np.float64))) / mu - 1) < 5 * math.sqrt(2 / samples.size)


def test_reference_law_matches_on_a_small_sample():
    # The reference alone (it also runs where the native module is missing).
    samples = ref.discrete_gaussian(SEED, 1.5, 3000)
    lo, pmf = _gaussian_pmf(1.5)
    assert _chi2_pvalue(samples, lo, pmf) > P_MIN


def test_grid_rounds_sigma_squared_up():
    from fractions import Fraction

    for sigma in [5e-324, 1e-170, 1e-5, 2.0**-8, 0.1, 1 / 3, 1.0, 3.0, 1e4 + 0.1, 2.0**20 + 0.5, 2.0**24]:
        n, k = ref.gaussian_grid(sigma)
        exact = Fraction(sigma) ** 2
        got = Fraction(n, 1 << k)
        assert got >= exact
        assert got - exact < max(exact / 2**40, Fraction(1, 1 << 56))
        n_, k_, t, den, y_limit = ref.gaussian_parameters(sigma)
        assert t == math.isqrt(n >> k) + 1 and t << k <= 1 << 56 and n < 1 << 49 and den < 1 << 100
        assert (y_limit - 1) * (t << k) < 1 << 63 <= y_limit * (t << k)


# -- primitives -------------------------------------------------------------------------------------

def test_bit_reader_reads_words_most_significant_bit_first():
    r = ref.BitReader.from_words([0x80000001, 0xF0000000, 0x12345678])
    assert r.take(1) == 1 and r.take(30) == 0 and r.take(1) == 1  # word 0: its top bit first
    assert r.take(4) == 0xF and r.take(28) == 0  # word 1
    assert r.take(0) == 0 and r.take(32) == 0x12345678 and r.taken == 96
    # Pieces that straddle words read the same bits as one piece.
    a, b = ref.BitReader(SEED, 9), ref.BitReader(SEED, 9)
    assert (a.take(20) << 100) | (a.take(37) << 63) | a.take(63) == b.take(120)
    # The bits are the stream's words concatenated.
    words = ref.WordReader(SEED, 9)
    assert ref.BitReader(SEED, 9).take(32 * 6) == int("".join(f"{words.next():032b}" for _ in range(6)), 2)


def test_uniform_below_bit_consumption():
    for bound, nbits in [(1, 0), (2, 1), (3, 2), (1000, 10), (1 << 32, 32), ((1 << 32) + 1, 33), (1 << 64, 64),
                         ((1 << 64) + 1, 65), ((1 << 127) + 5, 128)]:
        r = ref.BitReader(11, 0)
        ref.uniform_below(r, bound)
        if nbits == 0:
            assert r.taken == 0
        else:  # one try or more (rejections), each of nbits bits
            assert r.taken % nbits == 0 and r.taken >= nbits, (bound, r.taken)
    # bound 5 takes 3 bits per try: 0b111 and 0b110 and 0b101 are rejected, then 0b100 = 4.
    assert ref.uniform_below(ref.BitReader.from_words([0b111_110_101_100 << 20]), 5) == 4
    # bound 2**33 + 1 takes 34 bits: word 0 then the top 2 bits of word 1.
    assert ref.uniform_below(ref.BitReader.from_words([0x80000000, 0x3FFFFFFF]), (1 << 33) + 1) == 1 << 33
    assert ref.bernoulli_half(ref.BitReader.from_words([1 << 31]))
    assert not ref.bernoulli_half(ref.BitReader.from_words([(1 << 31) - 1]))


def test_bernoulli_lazy_comparison():
    # num = 0 and num = den read nothing.
    for num, den in [(0, 1), (0, 1 << 100), (1, 1), (7, 7)]:
        r = ref.BitReader(3, 0)
        assert ref.bernoulli(r, num, den) == (num > 0) and r.taken == 0
    # 1/3 = 0.0101...: a 16-bit piece b decides b < 0x5555 (True) or b >= 0x5556 (False); b =
    # 0x5555 leaves U 2**16 - b against 2**16/3 - 0x5555 = 1/3 again, so the next piece decides.
    assert ref.bernoulli(ref.BitReader.from_words([0x5554FFFF]), 1, 3)
    assert not ref.bernoulli(ref.BitReader.from_words([0x55560000]), 1, 3)
    r = ref.BitReader.from_words([0x55555554])
    assert ref.bernoulli(r, 1, 3) and r.taken == 32
    r = ref.BitReader.from_words([0x55555556])
    assert not ref.bernoulli(r, 1, 3) and r.taken == 32
    # A large den costs one piece too (all but a 2**-16 fraction of the time).
    r = ref.BitReader(SEED, 6)
    for _ in range(1000):
        ref.bernoulli(r, (1 << 99) + 12345, (1 << 100) - 1)
    assert r.taken == 16 * 1000


@pytest.mark.parametrize(("num", "den"), [(1, 2), (1, 3), (2, 3), (1234, 10001), (1, 1 << 40),
                                          ((1 << 99) // 7, 1 << 99), (5, (1 << 100) + 1)])
def test_bernoulli_frequencies(num, den):
    r = ref.BitReader(SEED, 8)
    n = 20_000
    hits = sum(ref.bernoulli(r, num, den) for _ in range(n))
    p = num / den
    assert abs(hits - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1e-9, (hits, n * p)


@pytest.mark.parametrize("bound", [3, 6, 1000, (1 << 32) + 12345, (1 << 64) * 3 + 1, (1 << 127) + (1 << 100)])
def test_uniform_below_frequencies(bound):
    r = ref.BitReader(SEED, 3)
    n = 20_000
    values = [ref.uniform_below(r, bound) for _ in range(n)]
    assert min(values) >= 0 and max(values) < bound
    cells = min(bound, 10)
    counts = np.bincount([v * cells // bound for v in values], minlength=cells)
    expected = np.array([float((((c + 1) * bound + cells - 1) // cells) - ((c * bound + cells - 1) // cells))
                         for c in range(cells)]) * n / bound
    assert stats.chisquare(counts, expected).pvalue > P_MIN


@pytest.mark.parametrize(("num", "den"), [(0, 1), (1, 3), (2, 3), (1, 1), (5, 2), (7, 3), (3, 1 << 100),
                                          ((1 << 101) + 3, 1 << 100)])
def test_bernoulli_exp_frequencies(num, den):
    r = ref.BitReader(SEED, 4)
    n = 20_000
    hits = sum(ref.bernoulli_exp(r, num, den) for _ in range(n))
    p = math.exp(-num / den)
    assert abs(hits - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1e-9, (hits, n * p)


def test_bernoulli_exp_of_a_huge_ratio_is_false_without_a_bit():
    r = ref.BitReader(1, 0)
    assert not ref.bernoulli_exp(r, 1 << 70, 3)
    assert r.taken == 0


def test_discrete_laplace_frequencies():
    r = ref.BitReader(SEED, 5)
    n, t = 20_000, 3
    values = np.array([ref.discrete_laplace(r, t) for _ in range(n)])
    x = np.arange(-60, 61)
    pmf = np.exp(-np.abs(x) / t)
    assert _chi2_pvalue(values, -60, pmf / pmf.sum()) > P_MIN


_DRAW_CASES = [
    ("uniform_below", 0, 7),
    ("uniform_below", 0, (1 << 32) + 9),
    ("uniform_below", 0, (1 << 64) + (1 << 40)),
    ("uniform_below", 0, (1 << 127) - 3),
    ("uniform_below64", 0, (1 << 63) + 11),
    ("bernoulli_half", 0, 1),
    ("bernoulli", 1, 3),
    ("bernoulli", 12345, 10001 * 3),
    ("bernoulli", (1 << 98) + 77, (1 << 99) + 5),
    ("bernoulli", (1 << 111) - 9, (1 << 111) + 1),
    ("bernoulli", 0, 9),
    ("bernoulli", 9, 9),
    ("bernoulli64", 1, 3),
    ("bernoulli64", 5, 1 << 47),
    ("bernoulli64", (1 << 62) + 3, (1 << 63) + 1),  # den >= 2**48: the 128-bit path, the same bits
    ("uniform01", 0, 1),
    ("bernoulli_exp", 2, 3),
    ("bernoulli_exp", 1 << 90, 1 << 88),
    ("bernoulli_exp", (1 << 120) + 1, (1 << 97) + 3),
    ("discrete_laplace", 0, 1),
    ("discrete_laplace", 0, 1000),
]


def _pair(v: int) -> tuple[int, int]:
    return v >> 64, v & ((1 << 64) - 1)


def _reference_draws(kind: str, index: int, num: int, den: int, count: int) -> list[tuple[int, int]]:
    r = ref.BitReader(SEED, index)
    out = []
    for _ in range(count):
        if kind.startswith("uniform_below"):
            out.append(_pair(ref.uniform_below(r, den)))
        elif kind == "bernoulli_half":
            out.append((0, int(ref.bernoulli_half(r))))
        elif kind.startswith("bernoulli") and kind != "bernoulli_exp":
            out.append((0, int(ref.bernoulli(r, num, den))))
        elif kind == "uniform01":
            out.append((0, int(np.float64(ref.uniform01(r)).view(np.uint64))))
        elif kind == "bernoulli_exp":
            out.append((0, int(ref.bernoulli_exp(r, num, den))))
        else:
            y = ref.discrete_laplace(r, den)
            out.append((int(y < 0), abs(y)))
    return out


@pytest.mark.parametrize("portable", [True, False], ids=["portable", "builtin"])
@pytest.mark.parametrize(("kind", "num", "den"), _DRAW_CASES)
def test_native_primitives_consume_bits_like_the_reference(kind, num, den, portable):
    em = gpu_emulation()
    if not portable and not em.HAVE_BUILTIN_INT128:
        pytest.skip("this compiler has no unsigned __int128")
    count, index = 200, (1 << 32) + 77
    out = np.empty(2 * count, np.uint64)
    em.noise_draws(kind, SEED, index, _pair(num), _pair(den), portable, out)
    got = [(int(a), int(b)) for a, b in out.reshape(-1, 2)]
    assert got == _reference_draws(kind, index, num, den, count)


def test_native_draws_check_the_bernoulli_bound():
    em = gpu_emulation()
    out = np.empty(2, np.uint64)
    with pytest.raises(ValueError, match="den must be < 2"):
        em.noise_draws("bernoulli", SEED, 0, (0, 1), _pair(1 << 112), True, out)
    with pytest.raises(ValueError, match="num must be <= den"):
        em.noise_draws("bernoulli", SEED, 0, (0, 4), (0, 3), True, out)
    em.noise_draws("bernoulli", SEED, 0, (0, 1), _pair((1 << 112) - 1), True, out)  # the bound itself is fine


# -- own log / exp / log k! -------------------------------------------------------------------------

def _log_inputs() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = np.exp(rng.uniform(-700, 700, 4000))
    near1 = 1 + rng.uniform(-0.3, 0.3, 2000) * 10.0 ** rng.integers(-15, 1, 2000)
    special = np.array([1.0, 2.0, 0.5, math.sqrt(0.5), math.sqrt(2.0), 5e-324, 2.2250738585072014e-308, 1.7e308,
                        2.0**-52, 1 - 2.0**-53, 1 + 2.0**-52, 10.0, 2.0**47])
    return np.concatenate([x, near1, special, np.arange(1, 64, dtype=np.float64)])


def _ulp_error(got: float, want: float) -> float:
    return abs(got - want) / max(abs(want), 2.2250738585072014e-308)


def test_own_log_and_exp_against_math():
    xs = _log_inputs()
    worst_log = max(_ulp_error(ref.det_log(float(x)), math.log(float(x))) for x in xs if float(x) != 1.0)
    assert ref.det_log(1.0) == 0.0
    assert worst_log < 4e-16, worst_log
    ds = np.concatenate([np.random.default_rng(4).uniform(-0.99, 3, 3000),
                         [1e-300, -1e-17, 1e-10, 0.25, -0.25, 0.2500001]])
    worst_log1p = max(_ulp_error(ref.det_log1p(float(d)), math.log1p(float(d))) for d in ds)
    assert worst_log1p < 4e-16, worst_log1p
    ys = np.concatenate([np.random.default_rng(5).uniform(-700, 700, 4000),
                         np.random.default_rng(6).uniform(-1, 1, 2000),
                         [0.0, -10.0, 1e-300, 0.34657359027997264, -0.3465735902799726, 700.0, -700.0]])
    worst_exp = max(_ulp_error(ref.det_exp(float(y)), math.exp(float(y))) for y in ys)
    assert worst_exp < 4e-16, worst_exp


def test_log_factorial_against_lgamma():
    ks = list(range(0, 200)) + [10**3, 12345, 10**6, 10**9, 2**40, 2**47 + 12345, 2**52]
    for k in ks:
        want = math.lgamma(k + 1)
        assert abs(ref.log_factorial(k) - want) <= 2e-15 * max(want, 1.0), k


def test_ptrs_bound_has_no_cancellation():
    """-lam + k log lam - log k! at large lam, against 50-digit mpmath."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    worst = 0.0
    for lam in [10.0, 123.456, 1e6, 1e12, 2.0**47]:
        p = ref._PoissonParams(lam)
        sd = math.sqrt(lam)
        for z in [-6, -2.5, -1, 0, 0.3, 1, 3, 6]:
            k = max(0, math.floor(lam + z * sd))
            exact = -mpmath.mpf(lam) + k * mpmath.log(mpmath.mpf(lam)) - mpmath.loggamma(k + 1)
            worst = max(worst, abs(float(ref._log_pmf_bound(p, k) - exact)))
    assert worst < 1e-8, worst


def test_native_math_is_bitwise_the_reference():
    em = gpu_emulation()
    cases = {
        "log": _log_inputs(),
        "log1p": np.random.default_rng(7).uniform(-0.99, 3, 2000),
        "exp": np.random.default_rng(8).uniform(-700, 700, 2000),
        "log_factorial": np.array([0, 1, 2, 15, 16, 17, 100, 1e6, 2.0**40, 2.0**52], dtype=np.float64),
    }
    fns = {"log": ref.det_log, "log1p": ref.det_log1p, "exp": ref.det_exp, "log_factorial": ref.log_factorial}
    for op, x in cases.items():
        out = np.empty_like(x)
        em.det_math(op, x, out)
        want = np.array([fns[op](int(v) if op == "log_factorial" else float(v)) for v in x])
        np.testing.assert_array_equal(out.view(np.uint64), want.view(np.uint64), err_msg=op)


def test_uniform01_is_open_and_exact():
    fixed = ref.BitReader.from_words
    assert ref.uniform01(fixed([0, 0])) == 0.5 * 2.0**-52
    top = ref.uniform01(fixed([0xFFFFFFFF, 0xFFFFFFFF]))
    assert top < 1.0 and top == 1.0 - 0.5 * 2.0**-52
    assert ref.uniform01(fixed([1 << 31, 0])) == 0.5 + 0.5 * 2.0**-52
    # The top 26 bits of each of two words (the 6 low bits of each are not used).
    assert ref.uniform01(fixed([0x3F, 0x3F])) == 0.5 * 2.0**-52
    assert ref.uniform01(fixed([0x40, 0x40])) == (2.0**26 + 1.5) * 2.0**-52
    # Skellam reads 64-bit pieces only, so uniform j is made of the stream's words 2j and 2j + 1.
    bits, words = ref.BitReader(SEED, 2), ref.WordReader(SEED, 2)
    for _ in range(5):
        w0, w1 = words.next(), words.next()
        assert ref.uniform01(bits) == ((w0 >> 6) * 2.0**26 + (w1 >> 6) + 0.5) * 2.0**-52


# -- 128-bit arithmetic ---------------------------------------------------------------------------

_M128 = (1 << 128) - 1


def _u128_expected(op: str, a: int, b: int) -> int:
    lo = b & ((1 << 64) - 1)
    return {
        "add": (a + b) & _M128,
        "sub": (a - b) & _M128,
        "mul": (a * lo) & _M128,
        "mul64": (a & ((1 << 64) - 1)) * lo,
        "shl": (a << (lo % 128)) & _M128,
        "shr": a >> (lo % 128),
        "div": a // b if b else None,
        "mod": a % b if b else None,
        "lt": int(a < b), "le": int(a <= b), "gt": int(a > b), "ge": int(a >= b), "eq": int(a == b),
        "ne": int(a != b),
        "bit_length": a.bit_length(),
    }[op]


@pytest.mark.parametrize("portable", [True, False], ids=["portable", "builtin"])
def test_uint128_against_python_ints(portable):
    em = gpu_emulation()
    if not portable and not em.HAVE_BUILTIN_INT128:
        pytest.skip("this compiler has no unsigned __int128")
    rnd = random.Random(12)
    edge = [0, 1, 2, (1 << 32) - 1, 1 << 32, (1 << 64) - 1, 1 << 64, (1 << 64) + 1, (1 << 127), _M128, _M128 - 1]

    def value() -> int:
        kind = rnd.randrange(4)
        if kind == 0:
            return rnd.choice(edge)
        return rnd.getrandbits(rnd.choice([8, 32, 63, 64, 65, 100, 127, 128]))

    ops = ["add", "sub", "mul", "mul64", "shl", "shr", "div", "mod", "lt", "le", "gt", "ge", "eq", "ne", "bit_length"]
    for _ in range(600):
        a, b = value(), value()
        for op in ops:
            bb = rnd.randrange(128) if op in ("shl", "shr") else b
            if op in ("div", "mod") and bb == 0:
                bb = rnd.getrandbits(rnd.choice([3, 64, 70, 128])) | 1
            hi, lo = em.uint128_op(op, _pair(a), _pair(bb), portable)
            assert (hi << 64) | lo == _u128_expected(op, a, bb), (op, a, bb)


def test_uint128_op_rejects_bad_arguments():
    em = gpu_emulation()
    with pytest.raises(ValueError, match="division by zero"):
        em.uint128_op("div", (0, 5), (0, 0), True)
    with pytest.raises(ValueError, match="unknown op"):
        em.uint128_op("pow", (0, 5), (0, 1), True)


# -- API and bad input ------------------------------------------------------------------------------

def test_exports():
    assert {"sample_discrete_gaussian", "sample_skellam", "MAX_DISCRETE_GAUSSIAN_SIGMA",
            "MAX_SKELLAM_VARIANCE"} <= set(secagg.__all__)
    assert MAX_DISCRETE_GAUSSIAN_SIGMA == 2.0**24 and MAX_SKELLAM_VARIANCE == 2.0**48 and MAX_NOISE_SAMPLES == 2**40


@pytest.mark.parametrize("fn", [sample_discrete_gaussian, sample_skellam])
def test_empty_and_private_seed(fn):
    e = fn(0, 1.0)
    assert e.dtype == np.int64 and e.shape == (0,)
    # Without rng the seed comes from the OS: two calls differ.
    assert not np.array_equal(fn(64, 1e6), fn(64, 1e6))
    # With the same Generator state, the same samples; different states, different samples.
    a = fn(64, 1e6, rng=np.random.default_rng(1))
    assert np.array_equal(a, fn(64, 1e6, rng=np.random.default_rng(1)))
    assert not np.array_equal(a, fn(64, 1e6, rng=np.random.default_rng(2)))
    np.testing.assert_array_equal(fn(np.int64(3), np.float32(2.0), rng=np.random.default_rng(1)),
                                  fn(3, 2.0, rng=np.random.default_rng(1)))


@pytest.mark.parametrize(("fn", "name", "limit"), [(sample_discrete_gaussian, "sigma", 2.0**24),
                                                   (sample_skellam, "mu", 2.0**48)])
def test_bad_input(fn, name, limit):
    for bad in [float("nan"), float("inf"), -float("inf"), 0.0, -1.0, limit * (1 + 2.0**-52), 1e300]:
        with pytest.raises(ValueError, match=name):
            fn(3, bad)
    for bad in [True, np.bool_(False), "1.0", None, 1 + 1j, [1.0]]:
        with pytest.raises(TypeError, match=name):
            fn(3, bad)
    assert fn(3, limit, rng=np.random.default_rng(0)).shape == (3,)  # the limit itself is allowed
    for bad_n in [-1, 2**40 + 1, 2**64]:
        with pytest.raises(ValueError, match="n must"):
            fn(bad_n, 1.0)
    for bad_n in [3.0, 2.5, True, "3", None]:
        with pytest.raises(TypeError, match="n must"):
            fn(bad_n, 1.0)
    for bad_rng in [42, "rng", np.random.RandomState(0)]:
        with pytest.raises(TypeError, match="rng"):
            fn(3, 1.0, rng=bad_rng)
    with pytest.raises(ValueError, match="host"):
        fn(3, 1.0, backend="cuda")
    for bad_backend in ["gpu", "", None, 3]:
        with pytest.raises(ValueError, match="backend"):
            fn(3, 1.0, backend=bad_backend)


@requires_native
def test_bindings_check_their_arguments():
    core = dprec._runtime.native.native()
    out = np.empty(4, np.int64)
    for op, name in [("discrete_gaussian", "sigma"), ("skellam", "variance")]:
        for bad in [float("nan"), 0.0, -2.0, float("inf"), 2.0**49]:
            with pytest.raises(ValueError, match=name):
                getattr(core, op)(1, bad, out)
        with pytest.raises(TypeError):
            getattr(core, op)(1, 1.0, np.empty(4, np.int32))
        with pytest.raises(ValueError, match="1-D"):
            getattr(core, op)(1, 1.0, np.empty((2, 2), np.int64))
        with pytest.raises(ValueError, match="contiguous"):
            getattr(core, op)(1, 1.0, np.empty(8, np.int64)[::2])
        ro = np.empty(4, np.int64)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="writeable"):
            getattr(core, op)(1, 1.0, ro)
        with pytest.raises(TypeError):
            getattr(core, op)(-1, 1.0, out)


def test_cuda_backend_refuses():
    from dprec._runtime.backends import BY_NAME

    with pytest.raises(ValueError, match="host"):
        BY_NAME["cuda"].discrete_gaussian(None, 1, 1.0)
    with pytest.raises(ValueError, match="host"):
        BY_NAME["cuda"].skellam(None, 1, 1.0)
