// The uint32 -> standard-normal transform of the randomness contract (docs/contract.md), scalar.
//
// Every step is a correctly rounded IEEE-754 float32 operation (+, -, *, /, sqrt) or an
// exact integer operation, in the same order as python/dprec/reference/philox.py, so
// the NumPy reference, each CPU ISA and CUDA produce bit-identical floats. Build this
// without fast-math and with FMA contraction off (-ffp-contract=off, nvcc -fmad=false).
// The SIMD version in csrc/cpu/kernels_generic.h follows the same steps lane-wise.
#pragma once

#include <cstdint>
#include <cstring>

#include "macros.h"

namespace dprec {

// Version of this transform; part of the wire format (changing it changes decodes).
constexpr int kNormalTransformVersion = 1;

namespace nt {
// Hexadecimal literals so that every backend sees exactly the same float32 values.
constexpr float kLn2Hi = 0x1.62e4p-1f;  // 15 significant bits: k * kLn2Hi exact for |k| <= 25
constexpr float kLn2Lo = 0x1.7f7d1cp-20f;
constexpr float kSqrt2Minus1 = 0x1.a8279ap-2f;
// 2 atanh(s) - 2 s = s^3 (P0 + P1 s^2 + P2 s^4 + P3 s^6), Taylor coefficients 2/(2n+1).
constexpr float kLogP0 = 0x1.555556p-1f;
constexpr float kLogP1 = 0x1.99999ap-2f;
constexpr float kLogP2 = 0x1.24924ap-2f;
constexpr float kLogP3 = 0x1.c71c72p-3f;
// sin(pi x / 2) = x (S0 + S1 x^2 + S2 x^4 + S3 x^6), |x| <= 1/2: near-minimax fit.
constexpr float kSin0 = 0x1.921fb6p+0f;
constexpr float kSin1 = -0x1.4abbbap-1f;
constexpr float kSin2 = 0x1.465ec4p-4f;
constexpr float kSin3 = -0x1.2d9b7cp-8f;
// cos(pi x / 2) = 1 + x^2 (C1 + C2 x^2 + C3 x^4 + C4 x^6), |x| <= 1/2: near-minimax fit.
constexpr float kCos1 = -0x1.3bd3ccp+0f;
constexpr float kCos2 = 0x1.03c1eap-2f;
constexpr float kCos3 = -0x1.55cb9ap-6f;
constexpr float kCos4 = 0x1.db6558p-11f;
}  // namespace nt

DPREC_INLINE float nt_bits_to_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

DPREC_INLINE uint32_t nt_float_to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

// -2 ln(u) with u = (2 (w >> 8) + 1) 2^-25.
DPREC_INLINE float nt_neg2_log_uniform(uint32_t w) {
    const int32_t a = static_cast<int32_t>(w >> 8);
    const int32_t n = 2 * a + 1;
    // floor(log2 n) from the exponent of float(n); float(n) rounds up to 2^25 only for
    // n = 2^25 - 1, where d = -1 gives the same reduced f and e as the exact split.
    int32_t e = static_cast<int32_t>(nt_float_to_bits(static_cast<float>(n)) >> 23) - 127;
    const int32_t d = n - (int32_t(1) << e);
    // d 2^-e by lowering the exponent field: exact, and d = 0 only when e = 0.
    float f = nt_bits_to_float(nt_float_to_bits(static_cast<float>(d)) - (static_cast<uint32_t>(e) << 23));
    if (f > nt::kSqrt2Minus1) {  // next power of two: (f - 1) / 2 is exact (Sterbenz)
        f = (f - 1.0f) * 0.5f;
        e += 1;
    }
    const float s = f / (2.0f + f);
    const float z = s * s;
    const float r = s * z * (nt::kLogP0 + z * (nt::kLogP1 + z * (nt::kLogP2 + z * nt::kLogP3)));
    const float log1p = f - (s * f - r);
    const float k = static_cast<float>(e - 25);
    const float log_u = k * nt::kLn2Hi + (k * nt::kLn2Lo + log1p);
    return -2.0f * log_u;
}

// cos and sin of 2 pi u with u = (2 (w >> 8) + 1) 2^-25.
DPREC_INLINE void nt_cos_sin_turn(uint32_t w, float* cos_out, float* sin_out) {
    const int32_t a = static_cast<int32_t>(w >> 8);
    const int32_t m = 2 * a + 1;
    int32_t quadrant = m >> 23;
    const int32_t rem = m & ((1 << 23) - 1);
    const int32_t upper = rem > (1 << 22) ? 1 : 0;
    const int32_t y = upper ? rem - (1 << 23) : rem;
    quadrant = (quadrant + upper) & 3;
    const float x = static_cast<float>(y) * 0x1p-23f;
    const float x2 = x * x;
    const float sin_x = x * (nt::kSin0 + x2 * (nt::kSin1 + x2 * (nt::kSin2 + x2 * nt::kSin3)));
    const float cos_x = 1.0f + x2 * (nt::kCos1 + x2 * (nt::kCos2 + x2 * (nt::kCos3 + x2 * nt::kCos4)));
    float c = (quadrant & 1) ? sin_x : cos_x;
    float s = (quadrant & 1) ? cos_x : sin_x;
    // Negation by flipping the sign bit, exactly as the SIMD path does it.
    c = nt_bits_to_float(nt_float_to_bits(c) ^ (static_cast<uint32_t>((quadrant + 1) & 2) << 30));
    s = nt_bits_to_float(nt_float_to_bits(s) ^ (static_cast<uint32_t>(quadrant & 2) << 30));
    *cos_out = c;
    *sin_out = s;
}

// Box-Muller on one pair of words: (radius cos, radius sin).
DPREC_INLINE void nt_words_to_normals(uint32_t w_radius, uint32_t w_angle, float* z0, float* z1) {
    const float radius = DPREC_SQRTF(nt_neg2_log_uniform(w_radius));
    float c, s;
    nt_cos_sin_turn(w_angle, &c, &s);
    *z0 = radius * c;
    *z1 = radius * s;
}

}  // namespace dprec
