// Deterministic float64 log, log1p, exp, expm1 (small arguments) and log k! for the Skellam sampler
// (discrete_noise.h) and the QMGeo quantizer (cpu/qmgeo.cpp).
//
// The samplers must give the same bits as the Python reference (dprec/reference/noise.py),
// which repeats every operation below in the same order. So: only + - * /, floor, frexp and
// ldexp (all exact or correctly rounded), fixed series with constants written as hex
// literals, no libm transcendental, and no FMA contraction (the targets that compile this are
// built with -ffp-contract=off or /fp:precise). Accuracy about 1 ulp (tests: below 4e-16
// relative against math.log / math.exp over their ranges).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "macros.h"

// Unnamed inner namespace: internal linkage for LogFactorialTable's constructor (see uint128.h).
namespace dprec::detmath {
namespace {

constexpr double kLn2Hi = 0x1.62e42fefa4000p-1;  // 41 significant bits: e * kLn2Hi exact for |e| < 2^12
constexpr double kLn2Lo = -0x1.8432a1b0e2634p-43;  // ln 2 - kLn2Hi, rounded
constexpr double kInvLn2 = 0x1.71547652b82fep+0;
constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;
constexpr double kHalfLog2Pi = 0x1.d67f1c864beb5p-1;
constexpr double kLog1pDirect = 0.25;  // log1p(d) sums the series on d itself for |d| <= 1/4
constexpr int kStirlingFrom = 16;      // log k! by summing logs below, by the Stirling series from here on

// log(1 + f) for |f| up to about 0.42: 2 atanh(s), s = f / (2 + f), as f - s (f - R) with
// R = z (2/3 + z (2/5 + ... + z 2/21)), z = s^2 (the terms left out are below 1e-19 relative).
DPREC_INLINE double log1p_series(double f) {
    // 2 / (2j + 1), j = 1..10, correctly rounded (the compiler folds each quotient exactly).
    constexpr double c[10] = {2.0 / 3.0,  2.0 / 5.0,  2.0 / 7.0,  2.0 / 9.0,  2.0 / 11.0,
                              2.0 / 13.0, 2.0 / 15.0, 2.0 / 17.0, 2.0 / 19.0, 2.0 / 21.0};
    const double s = f / (2.0 + f);
    const double z = s * s;
    double r = c[9];
    for (int j = 8; j >= 0; --j) r = r * z + c[j];
    r = z * r;
    return f - s * (f - r);
}

// Natural log of a finite x > 0: x = m 2^e, m in [sqrt(1/2), sqrt(2)) (frexp, exact), then
// log x = e ln2_hi + (e ln2_lo + log1p(m - 1)); m - 1 is exact (Sterbenz).
DPREC_INLINE double log(double x) {
    int e = 0;
    double m = std::frexp(x, &e);
    if (m < kSqrtHalf) {
        m = m * 2.0;
        e -= 1;
    }
    const double fe = static_cast<double>(e);
    const double tail = fe * kLn2Lo + log1p_series(m - 1.0);
    return fe * kLn2Hi + tail;
}

// ---- branch-free forms for vector loops ------------------------------------------------------
// The same results as log and log1p above, bit for bit, written without calls and with
// selects instead of branches, so that a compiler vectorises a loop over them (the SIMD
// fast path of the Skellam sampler, cpu/kernels_generic.h). Valid for arguments that are
// positive normal finite numbers (is_positive_normal); what they return otherwise is
// meaningless but harmless (no trap: IEEE default exception handling). Both arms of every
// select are computed first and chosen by select_bits, and conditions are combined with &
// rather than &&: GCC keeps -ftrapping-math on, under which it if-converts neither a
// floating-point operation that the source evaluates conditionally nor (for AVX2) a ?: on
// doubles under a floating-point compare, and would leave the loop scalar.

// c ? a : b on the bits (a mask from the condition): exact, and a plain and/or for the
// vectoriser.
DPREC_INLINE double select_bits(bool c, double a, double b) {
    uint64_t ab, bb;
    std::memcpy(&ab, &a, sizeof ab);
    std::memcpy(&bb, &b, sizeof bb);
    const uint64_t m = uint64_t(0) - static_cast<uint64_t>(c);
    const uint64_t rb = (ab & m) | (bb & ~m);
    double r;
    std::memcpy(&r, &rb, sizeof r);
    return r;
}

// std::floor(x), bit for bit for every x (+-0, NaN and infinities included), without the call:
// GCC vectorises neither std::floor nor its roundpd expansion under -ftrapping-math. For
// 0 < |x| < 2^52, (x + c) - c with c = 2^52 of x's sign is x rounded to an integer r (x + c
// lies where float64 steps by 1; both operations are exact but that rounding), and floor(x)
// is r, or r - 1 when r > x; any other x (zero, an integer already, NaN, an infinity) is its
// own floor.
DPREC_INLINE double floor_branchless(double x) {
    const double c = select_bits(x < 0.0, -0x1p52, 0x1p52);
    const double r = (x + c) - c;
    const double fl = select_bits(r > x, r - 1.0, r);
    const bool own = !(std::fabs(x) < 0x1p52) | (x == 0.0);
    return select_bits(own, x, fl);
}

// x > 0, finite and normal: the exponent field is 1..2046 and the sign bit 0.
DPREC_INLINE bool is_positive_normal(double x) {
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return (bits >> 52) - 1u < 2046u;
}

// frexp by the bits for a positive normal x = m 2^e, m in [1/2, 1): the exponent field set
// to that of 1/2 gives m, and the field E itself gives e = E - 1022, as a double (the bits of
// 2^52 + E minus 2^52 + 1022, exact; no 64-bit integer conversion, which AVX2 and AVX-512F
// lack). std::frexp returns the same m and e for these x.
DPREC_INLINE double frexp_normal(double x, double* e) {
    uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull;
    const uint64_t ebits = (bits >> 52) | 0x4330000000000000ull;
    double m, biased;
    std::memcpy(&m, &mbits, sizeof m);
    std::memcpy(&biased, &ebits, sizeof biased);
    *e = biased - (0x1p52 + 1022.0);
    return m;
}

// The reduction of log(x) to (m - 1, e), m in [sqrt(1/2), sqrt(2)), as in log: m 2 and e - 1
// are exact.
DPREC_INLINE double log_reduce_normal(double x, double* fe) {
    double e;
    const double m = frexp_normal(x, &e);
    const double m2 = m * 2.0;
    const double e1 = e - 1.0;
    const bool low = m < kSqrtHalf;
    *fe = select_bits(low, e1, e);
    return select_bits(low, m2, m) - 1.0;
}

// log(x) for a positive normal x: log's operations in log's order.
DPREC_INLINE double log_normal(double x) {
    double fe;
    const double f = log_reduce_normal(x, &fe);
    const double tail = fe * kLn2Lo + log1p_series(f);
    return fe * kLn2Hi + tail;
}

// log1p(d) for d in [-1/4, 1/4] or 1 + d positive normal: one series, on d itself or on the
// reduced 1 + d, and the result of the branch log1p takes (a select, not a sum with a zero
// exponent, so that no sign of zero can differ).
DPREC_INLINE double log1p_normal(double d) {
    const bool direct = (-kLog1pDirect <= d) & (d <= kLog1pDirect);
    double fe;
    const double f = log_reduce_normal(1.0 + d, &fe);
    const double series = log1p_series(select_bits(direct, d, f));
    const double tail = fe * kLn2Lo + series;
    const double reduced = fe * kLn2Hi + tail;
    return select_bits(direct, series, reduced);
}

// log(1 + d) for d > -1, without rounding 1 + d when |d| <= 1/4 (accurate for tiny d).
DPREC_INLINE double log1p(double d) {
    if (-kLog1pDirect <= d && d <= kLog1pDirect) return log1p_series(d);
    return log(1.0 + d);
}

// sum_{j=first}^{14} x^(j-first) / j! in Horner form (first = 0: exp's Taylor polynomial;
// first = 1: expm1's, divided by x).
DPREC_INLINE double taylor_exp_tail(double x, int first) {
    constexpr double c[15] = {0x1.0000000000000p+0,  0x1.0000000000000p+0,  0x1.0000000000000p-1,
                              0x1.5555555555555p-3,  0x1.5555555555555p-5,  0x1.1111111111111p-7,
                              0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-16,
                              0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22, 0x1.ae64567f544e4p-26,
                              0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33, 0x1.93974a8c07c9dp-37};  // 1/j!
    double p = c[14];
    for (int i = 13; i >= first; --i) p = p * x + c[i];
    return p;
}

// exp(x) for |x| <= 700: x = j ln 2 + r, |r| <= ln(2)/2, Taylor series to degree 14 (the rest
// is below 1e-19 relative), times 2^j (ldexp, exact).
DPREC_INLINE double exp(double x) {
    const double fj = std::floor(x * kInvLn2 + 0.5);
    const double r = (x - fj * kLn2Hi) - fj * kLn2Lo;
    return std::ldexp(taylor_exp_tail(r, 0), static_cast<int>(fj));
}

// expm1(x) = exp(x) - 1 for |x| <= 1/4, without the cancellation of exp(x) - 1: the Taylor
// series x (1 + x/2! + ... + x^13/14!) in Horner form, with exp's 1/j! constants (the first term
// left out is below 3e-21 relative at |x| = 1/4). Used by the QMGeo quantizer (cpu/qmgeo.cpp)
// for 1 - q^n when q^n is close to 1; dprec/reference/qmgeo.py repeats it.
DPREC_INLINE double expm1_small(double x) {
    return x * taylor_exp_tail(x, 1);
}

// 1/(12x) - 1/(360x^3) + 1/(1260x^5) - 1/(1680x^7): the Stirling series of log x! after
// (x + 1/2) log x - x + log(2 pi)/2 (the next term is below 1e-14 at x = 16).
DPREC_INLINE double stirling_correction(double x) {
    const double inv = 1.0 / x;
    const double inv2 = inv * inv;
    return inv * ((1.0 / 12.0) - inv2 * ((1.0 / 360.0) - inv2 * ((1.0 / 1260.0) - inv2 * (1.0 / 1680.0))));
}

// log j! for j < kStirlingFrom: the running sum of log(j), in order.
struct LogFactorialTable {
    double v[kStirlingFrom];
    DPREC_HD LogFactorialTable() {
        v[0] = 0.0;
        for (int j = 1; j < kStirlingFrom; ++j) v[j] = v[j - 1] + log(static_cast<double>(j));
    }
};

// log k! for an integer-valued 0 <= k < 2^53: the table below 16, Stirling from 16 on.
DPREC_INLINE double log_factorial(double k, const LogFactorialTable& table) {
    if (k < kStirlingFrom) return table.v[static_cast<int>(k)];
    return (((k + 0.5) * log(k) - k) + kHalfLog2Pi) + stirling_correction(k);
}

}  // namespace
}  // namespace dprec::detmath
