// Exact discrete Gaussian and Skellam samplers, one element at a time (docs/contract.md, docs/secagg.md).
//
// The definition, bit for bit, is the Python reference dprec/reference/noise.py (its
// module docstring states the algorithms); this header repeats it operation by operation so
// that both give the same samples bit for bit. Header-only and free of libm
// transcendentals, so any C++17 compiler (and nvcc) can build it; the CPU kernels
// (cpu/discrete_noise.cpp) run it over chunks of elements, and the test-only module builds it
// with the portable 128-bit integers too.
//
// Randomness: element i reads the Philox stream (seed, substream = i mod 2^32, group = i >> 32,
// domain 5) as a sequence of bits: blocks 0, 1, 2, ..., word 0 first, each word most
// significant bit first (BitReader), so a sample depends only on the seed and i. The
// primitives take the bits they need: uniform_below(bound) bit_length(bound - 1) bits per try,
// Bernoulli(1/2) one bit, Bernoulli(num/den) a lazy comparison of 16-bit pieces with num/den
// (a single piece except with probability 2^-16), a Skellam uniform 64 bits.
//
// Discrete Gaussian N_Z(0, sigma^2), Canonne-Kamath-Steinke 2020 (Algorithms 1-3), integers only.
// sigma^2 (the exact square of the float64 sigma) is taken as N / 2^k with E = floor(log2
// sigma^2), k = min(56, max(0, 40 - E)), N = ceil(sigma^2 2^k) >= 1 (rounded up: never less
// noise than asked; 40 significant bits, grid 2^-56).
// Bounds, for 0 < sigma <= 2^24 (sigma^2 <= 2^48):
//   * N < 2^49: if E >= 40, k = 0 and N = ceil(sigma^2) <= 2^48; if -16 <= E < 40, sigma^2 2^k
//     lies in [2^40, 2^41), so N <= 2^41; if E < -16, k = 56 and sigma^2 2^56 < 2^40.
//   * t = isqrt(N >> k) + 1 <= sigma' + 1 (sigma'^2 = N / 2^k) and t 2^k <= 2^56: for k = 0,
//     t <= 2^24 + 1; for E < 0 (k > 40), N >> k <= 1, so t <= 2, and t = 1 when k = 56
//     (N <= 2^41): t 2^k <= 2^56; for
//     0 <= E < 40, t <= 2^((E+1)/2) + 1 and 2^k = 2^(40-E), so t 2^k <= 2^41 + 2^40.
//   * den = 2 N t^2 2^k < 2^100: for k = 0, 2 2^48 (2^24 + 1)^2 < 2^98; for t = 1,
//     2 N 2^k <= 2 2^41 2^56 = 2^98; otherwise (0 <= E < 40) den = 2 sigma'^2 t^2 2^(2k) <=
//     2 2^(E+1) 2^(E+3) 2^(80-2E) = 2^85. It is computed once per call, in 128 bits.
//   * A candidate is rejected outright when |Y| t 2^k >= 2^63, i.e. |Y| >= y_limit =
//     ceil(2^63 / (t 2^k)) >= 2^7 (and >= 2^14 sigma'); otherwise a = |Y| t 2^k - N has
//     |a| < 2^63 and num = a^2 < 2^126. Exact sampling would accept such a candidate with
//     probability exp(-(|Y| - sigma'^2/t)^2 / (2 sigma'^2)) < exp(-2^27) (the least exponent
//     over every allowed sigma is 2.7e8, at sigma near 2^-7.5: |Y| = 128, sigma'^2 = 2^-15),
//     so the output is the exact law conditioned on |Y| < y_limit: total-variation distance
//     P(|X| >= y_limit) < exp(-2^27).
//   * In bernoulli_exp, num / den >= 2^64 gives False outright (probability < exp(-2^64)).
// Y = U + t V is kept in 128 bits (V, a geometric count, is far below 2^64 in practice, but
// nothing may overflow whatever the words).
//
// Skellam: Poisson(mu/2) - Poisson(mu/2); Poisson by Knuth's multiplication below lam = 10, by
// Hoermann's PTRS (1993) from 10 on, in float64 with the own log/exp of det_math.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "det_math.h"
#include "macros.h"
#include "philox.h"
#include "uint128.h"

// Unnamed inner namespace: internal linkage for the member functions (see uint128.h).
namespace dprec::noise {
namespace {

// The bits of one element's stream (the rule of dprec/reference/noise.py, BitReader): the
// words w0, w1, ... (block 0 words 0..3, block 1, ...; the block counter wraps at 2^32, after
// 2^39 bits, and a sample needs a few hundred at most on average) concatenated, each word most
// significant bit first. take(n) returns the next n bits as an integer, the first one most
// significant; reading n bits at once or in pieces gives the same bits.
struct BitReader {
    StreamId id;
    uint32_t block;
    int pos;         // next word pair of buf: 0 or 2; 4: buf spent
    int avail;       // bits left in cache, 0..64
    uint64_t cache;  // the next `avail` bits, top-aligned (the bits below them are zero)
    Block4 buf;

    DPREC_HD BitReader(uint64_t seed, uint64_t index)
        : id{seed, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), kDomainNoise},
          block(0),
          pos(4),
          avail(0),
          cache(0),
          buf{} {}

    // The same reader with block 0 already at hand (computed by the caller, e.g. for several
    // elements at once): the same bits as the constructor above.
    DPREC_HD BitReader(uint64_t seed, uint64_t index, const Block4& block0)
        : id{seed, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), kDomainNoise},
          block(1),
          pos(0),
          avail(0),
          cache(0),
          buf(block0) {}

    // The next two words, the first in the high half.
    DPREC_HD uint64_t next_pair() {
        if (pos == 4) {
            buf = philox_block(id, block);
            ++block;
            pos = 0;
        }
        const uint64_t v = (static_cast<uint64_t>(buf.w[pos]) << 32) | buf.w[pos + 1];
        pos += 2;
        return v;
    }

    // The next n bits, 1 <= n <= 64. When the cache holds fewer, it is topped up with the next
    // two words (the refill every 64 bits, not every 32: fewer hard-to-predict branches).
    DPREC_HD uint64_t take64(int n) {
        if (n <= avail) {
            const uint64_t v = cache >> (64 - n);
            cache = n == 64 ? 0 : cache << n;
            avail -= n;
            return v;
        }
        const int more = n - avail;  // 1..64, taken from the next 64 bits
        const uint64_t w = next_pair();
        const uint64_t v = (cache >> (64 - n)) | (w >> (64 - more));
        cache = more == 64 ? 0 : w << more;
        avail = 64 - more;
        return v;
    }

    DPREC_HD uint32_t take(int n) { return static_cast<uint32_t>(take64(n)); }  // 1 <= n <= 32

    // The next n bits, 1 <= n <= 64, without taking them: when the cache holds fewer, the
    // next word pair is looked at where next_pair would find it (a spent buffer is refilled
    // with the next block now rather than at the next take: the same state either way).
    DPREC_HD uint64_t peek(int n) {
        if (n <= avail) return cache >> (64 - n);
        if (pos == 4) {
            buf = philox_block(id, block);
            ++block;
            pos = 0;
        }
        const uint64_t w = (static_cast<uint64_t>(buf.w[pos]) << 32) | buf.w[pos + 1];
        return (cache | (w >> avail)) >> (64 - n);  // avail < n <= 64; the cache's low bits are zero
    }

    DPREC_HD bool bit() { return take64(1) != 0; }
};

// ---- integer primitives ----------------------------------------------------------------------

// Uniform in [0, bound), 1 <= bound < 2^64: nbits = bit_length(bound - 1) bits per try, tried
// again until below bound (nbits = 0: 0, nothing read).
DPREC_INLINE uint64_t uniform_below(BitReader& r, uint64_t bound) {
    const int nbits = bit_length64(bound - 1);
    if (nbits == 0) return 0;
    for (;;) {
        const uint64_t v = r.take64(nbits);
        if (v < bound) return v;
    }
}

// The same for 1 <= bound < 2^128 (the same bits as the 64-bit one when the bound fits 64
// bits): the top nbits - 32 (words - 1) bits first, then 32 at a time.
template <class U>
DPREC_INLINE U uniform_below(BitReader& r, U bound) {
    const int nbits = bit_length(bound - U::make(0, 1));
    if (nbits == 0) return U::make(0, 0);
    const int nwords = (nbits + 31) / 32;
    const int top = nbits - 32 * (nwords - 1);
    for (;;) {
        U v = U::make(0, r.take(top));
        for (int j = 1; j < nwords; ++j) v = (v << 32) + U::make(0, r.take(32));
        if (v < bound) return v;
    }
}

// Bernoulli(num / den), 0 <= num <= den, by lazy comparison of a uniform U (the stream's bits
// read as a binary fraction) with num / den, 16 bits at a time: with rem = num, draw b =
// take(16) and compare rem 2^16 with b den: at least (b + 1) den means U < (b + 1) 2^-16 <=
// rem / den, True; at most b den means U >= rem / den, False; otherwise (probability 2^-16)
// rem <- rem 2^16 - b den and go on with the next 16 bits (U 2^16 - b is uniform again). num =
// 0 gives False and num = den True, reading nothing. One hard-to-predict branch per draw,
// whatever the size of den; no division. This one takes den < 2^112 (so that rem 2^16 and
// (b + 1) den fit 128 bits; the samplers' den is below 2^100).
template <class U>
DPREC_INLINE bool bernoulli(BitReader& r, U num, U den) {
    if (num == U::make(0, 0)) return false;
    if (!(num < den)) return true;
    U rem = num;
    for (;;) {
        const U a = rem << 16;
        const U b = den * static_cast<uint64_t>(r.take(16));
        if (!(a < b + den)) return true;
        if (!(b < a)) return false;
        rem = a - b;
    }
}

// The same in 64 bits when den < 2^48 (the same bits; a larger den goes to the 128-bit one).
DPREC_INLINE bool bernoulli(BitReader& r, uint64_t num, uint64_t den) {
    if (num == 0) return false;
    if (num >= den) return true;
    if (den >> 48) return bernoulli(r, U128::make(0, num), U128::make(0, den));
    uint64_t rem = num;
    for (;;) {
        const uint64_t a = rem << 16;
        const uint64_t b = static_cast<uint64_t>(r.take(16)) * den;
        if (a >= b + den) return true;
        if (a <= b) return false;
        rem = a - b;
    }
}

DPREC_INLINE bool bernoulli_half(BitReader& r) { return r.bit(); }

// Bernoulli(exp(-num/den)) for num <= den (CKS Algorithm 1): K = 1; while
// uniform_below(K) == 0 and Bernoulli(num/den) (the second drawn only when the first holds):
// K += 1; return K odd. P(K odd) = sum_j (-num/den)^j / j!.
DPREC_INLINE bool bernoulli_exp_le1(BitReader& r, uint64_t num, uint64_t den) {
    uint64_t k = 1;
    while (uniform_below(r, k) == 0 && bernoulli(r, num, den)) ++k;
    return (k & 1u) != 0;
}

template <class U>
DPREC_INLINE bool bernoulli_exp_le1(BitReader& r, U num, U den) {
    uint64_t k = 1;
    while (uniform_below(r, k) == 0 && bernoulli(r, num, den)) ++k;
    return (k & 1u) != 0;
}

// bernoulli_exp_le1(1, 1): Bernoulli(1/1) reads nothing and holds, so only the uniform draws
// remain (the same bits).
DPREC_INLINE bool bernoulli_exp_minus_one(BitReader& r) {
    uint64_t k = 1;
    while (uniform_below(r, k) == 0) ++k;
    return (k & 1u) != 0;
}

// The number of True results of bernoulli_exp_minus_one before the first False (a geometric
// count, CKS Algorithm 2's V), read off a table of the next kGeoBits bits when the loop ends
// within them (908 of the 1024 patterns, probability 0.89): the same bits taken, and a load and
// a take in place of the loop's hard-to-predict branches. The table is built by running the loop on every bit
// pattern at compile time. Device code keeps the loop.
constexpr int kGeoBits = 10;

struct GeoTable {
    uint8_t e[1 << kGeoBits];  // (bits taken) << 4 | count, or 0: the loop needs more bits
};

constexpr GeoTable make_geo_table() {
    GeoTable t{};
    for (uint32_t x = 0; x < (1u << kGeoBits); ++x) {
        int pos = 0;  // bits of x taken
        uint32_t count = 0;
        bool ended = false;
        bool short_of_bits = false;
        while (!ended && !short_of_bits) {
            uint32_t k = 1;  // one bernoulli_exp_minus_one: K = 1; while uniform_below(K) == 0: K += 1
            for (;;) {
                int nbits = 0;
                while ((k - 1) >> nbits) ++nbits;
                uint32_t u = 0;
                bool got = nbits == 0;
                while (!got) {
                    if (pos + nbits > kGeoBits) break;
                    u = (x >> (kGeoBits - pos - nbits)) & ((1u << nbits) - 1u);
                    pos += nbits;
                    got = u < k;
                }
                if (!got) {
                    short_of_bits = true;
                    break;
                }
                if (u != 0) break;
                ++k;
            }
            if (short_of_bits) break;
            if ((k & 1u) != 0) {
                ++count;
            } else {
                ended = true;
            }
        }
        t.e[x] = ended ? static_cast<uint8_t>((pos << 4) | static_cast<int>(count)) : uint8_t(0);
    }
    return t;
}

DPREC_INLINE uint64_t geometric_count(BitReader& r) {
#if !defined(__CUDA_ARCH__)
    static constexpr GeoTable kTable = make_geo_table();
    const uint8_t e = kTable.e[r.peek(kGeoBits)];
    if (e != 0) {
        r.take64(e >> 4);
        return e & 15u;
    }
#endif
    uint64_t v = 0;
    while (bernoulli_exp_minus_one(r)) ++v;
    return v;
}

// Bernoulli(exp(-num/den)) for any num >= 0, den >= 1: q = num / den rounds of exp(-1), then
// exp(-(num mod den)/den); False outright when q >= 2^64 (probability < exp(-2^64)).
// q >= 2^64 iff floor(num / 2^64) >= den. The quotient is then found by subtracting den once
// per round, as the rounds are drawn: no 128-bit division (a library call), and the first
// False round (probability 1 - 1/e each) ends the work.
template <class U>
DPREC_INLINE bool bernoulli_exp(BitReader& r, U num, U den) {
    if (num <= den) return bernoulli_exp_le1(r, num, den);
    if (!((num >> 64) < den)) return false;
    U rem = num;
    do {
        rem = rem - den;
        if (!bernoulli_exp_minus_one(r)) return false;
    } while (!(rem < den));
    return bernoulli_exp_le1(r, rem, den);
}

// ---- discrete Gaussian -------------------------------------------------------------------------

template <class U>
struct GaussianParams {
    uint64_t n;        // sigma'^2 = n / 2^k
    int k;
    uint64_t t;        // discrete Laplace scale, floor(sigma') + 1
    uint64_t tk;       // t 2^k <= 2^56
    uint64_t y_limit;  // candidates with |Y| >= y_limit (|Y| t 2^k >= 2^63) are rejected
    U den;             // 2 n t^2 2^k < 2^100
};

DPREC_INLINE uint64_t isqrt64(uint64_t x) {  // floor(sqrt(x)) for x < 2^52
    uint64_t s = static_cast<uint64_t>(std::sqrt(static_cast<double>(x)));
    while (s * s > x) --s;
    while ((s + 1) * (s + 1) <= x) ++s;
    return s;
}

// The grid and constants for 0 < sigma <= 2^24 (validated by the caller). sigma = M 2^(e-53)
// exactly (frexp), so sigma^2 = M^2 2^(2e-106) with M^2 < 2^106 exact in 128 bits.
template <class U>
DPREC_INLINE GaussianParams<U> gaussian_params(double sigma) {
    GaussianParams<U> p{};
    int e = 0;
    const double mant = std::frexp(sigma, &e);
    const uint64_t m = static_cast<uint64_t>(std::ldexp(mant, 53));  // exact: 2^52 <= m < 2^53
    const U sq = U::mul64(m, m);
    const int floor_log2 = bit_length(sq) - 1 + 2 * e - 106;  // floor(log2 sigma^2)
    p.k = floor_log2 >= 40 ? 0 : (40 - floor_log2 > 56 ? 56 : 40 - floor_log2);
    // n = ceil(sigma^2 2^k) = ceil(sq / 2^sh); sh >= 56 for every sigma <= 2^24.
    const int sh = 106 - 2 * e - p.k;
    if (sh >= 128) {
        p.n = 1;  // 0 < sigma^2 2^k < 1
    } else {
        const U q = sq >> sh;
        p.n = q.lo() + ((q << sh) == sq ? 0u : 1u);  // < 2^49
    }
    p.t = isqrt64(p.n >> p.k) + 1;
    p.tk = p.t << p.k;
    p.y_limit = ((uint64_t(1) << 63) + p.tk - 1) / p.tk;  // no overflow: tk <= 2^56
    p.den = U::mul64(p.n, p.tk) * p.t * 2u;
    return p;
}

// Discrete Laplace of scale t (CKS Algorithm 2 with s = 1): |Y| into *mag, the sign into *neg.
template <class U>
DPREC_INLINE void discrete_laplace(BitReader& r, uint64_t t, U* mag, bool* neg) {
    for (;;) {
        const uint64_t u = uniform_below(r, t);
        if (!bernoulli_exp_le1(r, u, t)) continue;  // u < t
        const uint64_t v = geometric_count(r);
        const U y = U::mul64(t, v) + U::make(0, u);
        const bool b = bernoulli_half(r);
        if (b && y == U::make(0, 0)) continue;
        *mag = y;
        *neg = b;
        return;
    }
}

// One N_Z(0, n / 2^k) sample (CKS Algorithm 3).
template <class U>
DPREC_INLINE int64_t discrete_gaussian(BitReader& r, const GaussianParams<U>& p) {
    for (;;) {
        U y;
        bool neg;
        discrete_laplace(r, p.t, &y, &neg);
        if (!(y < U::make(0, p.y_limit))) continue;  // |Y| t 2^k >= 2^63: rejected outright
        const uint64_t m = y.lo() * p.tk;            // < 2^63
        const uint64_t a = m >= p.n ? m - p.n : p.n - m;
        if (bernoulli_exp(r, U::mul64(a, a), p.den)) {
            const int64_t s = static_cast<int64_t>(y.lo());
            return neg ? -s : s;
        }
    }
}

// ---- Skellam -----------------------------------------------------------------------------------

// The next 64 bits w = (w0, w1), two 32-bit halves: ((w0 >> 6) 2^26 + (w1 >> 6) + 1/2) 2^-52,
// 52 random bits, exact, in (0, 1). (Skellam reads only 64-bit pieces, so w0 and w1 are the
// stream's words 2j and 2j + 1.)
DPREC_INLINE double uniform01(BitReader& r) {
    const uint64_t w = r.take64(64);
    const uint32_t w0 = static_cast<uint32_t>(w >> 32);
    const uint32_t w1 = static_cast<uint32_t>(w);
    const double m = static_cast<double>(w0 >> 6) * 0x1p26 + static_cast<double>(w1 >> 6);
    return (m + 0.5) * 0x1p-52;
}

struct PoissonParams {
    double lam;
    bool small;            // lam < 10: Knuth
    double exp_neg_lam;    // Knuth's threshold
    double log_lam, a, b, log_inv_alpha, v_r;  // PTRS (Hoermann 1993)
    detmath::LogFactorialTable log_fact;

    DPREC_HD explicit PoissonParams(double lambda)
        : lam(lambda), small(lambda < 10.0), exp_neg_lam(0.0), log_lam(0.0), a(0.0), b(0.0), log_inv_alpha(0.0),
          v_r(0.0), log_fact() {
        if (small) {
            exp_neg_lam = detmath::exp(-lam);
            return;
        }
        log_lam = detmath::log(lam);
        b = 0.931 + 2.53 * std::sqrt(lam);
        a = -0.059 + 0.02483 * b;
        log_inv_alpha = detmath::log(1.1239 + 1.1328 / (b - 3.4));
        v_r = 0.9277 - 3.6224 / (b - 2.0);
    }
};

// -lam + k log lam - log k!, for k >= 16 as (k - lam) - k log1p((k - lam)/lam) - (log(k)/2 +
// log(2 pi)/2 + stirling(k)): the same quantity without the cancellation of terms near k log k
// (absolute error below 1e-8 at lam = 2^47, where the textbook form is off by about 1).
DPREC_INLINE double log_pmf_bound(const PoissonParams& p, double k) {
    if (k < detmath::kStirlingFrom) return (-p.lam + k * p.log_lam) - p.log_fact.v[static_cast<int>(k)];
    const double delta = k - p.lam;  // exact when lam/2 <= k <= 2 lam (Sterbenz)
    const double main = delta - k * detmath::log1p(delta / p.lam);
    const double rest = (0.5 * detmath::log(k) + detmath::kHalfLog2Pi) + detmath::stirling_correction(k);
    return main - rest;
}

// PTRS's full acceptance test, branch-free (the vector fast path, cpu/kernels_generic.h): for
// a proposal (k, us, v) that the squeeze did not accept and that was not rejected outright
// (so 0 <= k < 2^53), whether poisson below accepts it, bit for bit: the same operations in
// the same order, with detmath's branch-free log and log1p and both forms of log_pmf_bound
// evaluated and one selected. log_fact_k is log k! from the table when k < 16 (ignored
// otherwise: the caller looks it up, a gather that not every ISA has). *decided is false
// when an argument of a log is not a positive normal number; the caller then leaves the
// proposal to the scalar code. That never happens for lam >= 10: v >= 2^-53; a / us^2 + b >= b
// > 8 is finite (us >= 2^-53); k >= 16 when its log is used; and 1 + (k - lam)/lam >= 16 / lam
// is far above 2^-1022 for lam <= 2^47 (lam is validated).
DPREC_INLINE bool ptrs_accept_branchless(const double lam, const double log_lam, const double a, const double b,
                                         const double log_inv_alpha, const double k, const double us,
                                         const double v, const double log_fact_k, bool* decided) {
    const double x = a / (us * us) + b;
    const double lhs = (detmath::log_normal(v) + log_inv_alpha) - detmath::log_normal(x);
    const double table_form = (-lam + k * log_lam) - log_fact_k;
    const double delta = k - lam;
    const double d = delta / lam;
    const double main = delta - k * detmath::log1p_normal(d);
    const double rest = (0.5 * detmath::log_normal(k) + detmath::kHalfLog2Pi) + detmath::stirling_correction(k);
    const double stirling_form = main - rest;
    const bool small_k = k < detmath::kStirlingFrom;
    const double bound = detmath::select_bits(small_k, table_form, stirling_form);
    const bool direct = (-detmath::kLog1pDirect <= d) & (d <= detmath::kLog1pDirect);
    *decided = detmath::is_positive_normal(v) & detmath::is_positive_normal(x) &
               (small_k | (detmath::is_positive_normal(k) & (direct | detmath::is_positive_normal(1.0 + d))));
    return lhs <= bound;
}

// One Poisson(lam) draw as a float64 integer (< 2^53).
DPREC_INLINE double poisson(BitReader& r, const PoissonParams& p) {
    if (p.small) {
        double k = 0.0;
        double prod = 1.0;
        for (;;) {
            prod = prod * uniform01(r);
            if (prod <= p.exp_neg_lam) return k;
            k += 1.0;
        }
    }
    for (;;) {
        const double u = uniform01(r) - 0.5;
        const double v = uniform01(r);
        const double us = 0.5 - std::fabs(u);
        const double k = std::floor(((((2.0 * p.a) / us + p.b) * u) + p.lam) + 0.43);
        if (us >= 0.07 && v <= p.v_r) return k;
        if (k < 0.0 || k >= 0x1p53 || (us < 0.013 && v > us)) continue;
        const double lhs = (detmath::log(v) + p.log_inv_alpha) - detmath::log(p.a / (us * us) + p.b);
        if (lhs <= log_pmf_bound(p, k)) return k;
    }
}

DPREC_INLINE int64_t skellam(BitReader& r, const PoissonParams& p) {
    const double first = poisson(r, p);
    const double second = poisson(r, p);
    return static_cast<int64_t>(first) - static_cast<int64_t>(second);
}

}  // namespace
}  // namespace dprec::noise
