// Portable unsigned 128-bit integers for the exact discrete-noise samplers (discrete_noise.h).
//
// Two implementations with the same interface, both always compiled where possible:
//   U128Portable: two 64-bit limbs, 64x64->128 products from 32-bit halves; any C++17 compiler
//                 (MSVC, which has no __int128, uses it) and nvcc.
//   U128Builtin:  unsigned __int128 where the compiler has it (GCC, Clang, nvcc on such hosts).
// dprec::U128 is the builtin one when available, else the portable one; defining
// DPREC_NO_INT128 forces the portable one. The test-only module dprec._gpu_emulation runs
// both against Python ints.
//
// Interface (T is U128Portable or U128Builtin; arithmetic is modulo 2^128):
//   T::make(hi, lo), T::mul64(a, b) (the full 64x64 product), x.hi(), x.lo();
//   x + y, x - y, x * m (m a uint64_t), x << s, x >> s (0 <= s < 128), == != < <= > >=;
//   bit_length(x), divmod(x, y, &q, &r) (y != 0; binary long division for the portable type).
#pragma once

#include <cstdint>

#include "macros.h"

// The unnamed namespace gives the classes' member functions internal linkage too (the free
// functions have it through DPREC_INLINE): the per-ISA kernel files include this header, and
// the linker must never pick an AVX-512 copy of a member for baseline code.
namespace dprec {
namespace {

// Number of significant bits of x (0 for x = 0): one count-leading-zeros instruction where
// the compiler offers it (the samplers call this in their inner loops), else portable code.
DPREC_INLINE int bit_length64(uint64_t x) {
#if defined(__CUDA_ARCH__)
    return 64 - __clzll(static_cast<long long>(x));
#elif defined(__GNUC__) || defined(__clang__)
    return x == 0 ? 0 : 64 - __builtin_clzll(x);
#else
    int n = 0;
    if (x >> 32) { n += 32; x >>= 32; }
    if (x >> 16) { n += 16; x >>= 16; }
    if (x >> 8) { n += 8; x >>= 8; }
    if (x >> 4) { n += 4; x >>= 4; }
    if (x >> 2) { n += 2; x >>= 2; }
    if (x >> 1) { n += 1; x >>= 1; }
    return n + static_cast<int>(x);
#endif
}

// ---- portable: two 64-bit limbs -------------------------------------------------------------

struct U128Portable {
    uint64_t h;
    uint64_t l;

    DPREC_HD static constexpr U128Portable make(uint64_t hi, uint64_t lo) { return U128Portable{hi, lo}; }

    // a * b in full, from four 32x32->64 partial products.
    DPREC_HD static U128Portable mul64(uint64_t a, uint64_t b) {
        const uint64_t mask = 0xffffffffu;
        const uint64_t a0 = a & mask, a1 = a >> 32, b0 = b & mask, b1 = b >> 32;
        const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
        const uint64_t mid = (p00 >> 32) + (p01 & mask) + (p10 & mask);  // < 3 * 2^32: no overflow
        return U128Portable{p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32), (mid << 32) | (p00 & mask)};
    }

    DPREC_HD uint64_t hi() const { return h; }
    DPREC_HD uint64_t lo() const { return l; }
};

DPREC_INLINE U128Portable operator+(U128Portable a, U128Portable b) {
    const uint64_t lo = a.l + b.l;
    return U128Portable{a.h + b.h + (lo < a.l ? 1u : 0u), lo};
}
DPREC_INLINE U128Portable operator-(U128Portable a, U128Portable b) {
    return U128Portable{a.h - b.h - (a.l < b.l ? 1u : 0u), a.l - b.l};
}
DPREC_INLINE U128Portable operator*(U128Portable a, uint64_t m) {
    U128Portable p = U128Portable::mul64(a.l, m);
    p.h += a.h * m;  // the product's bits above 2^128 are dropped
    return p;
}
DPREC_INLINE U128Portable operator<<(U128Portable a, int s) {
    if (s == 0) return a;
    if (s >= 64) return U128Portable{a.l << (s - 64), 0};
    return U128Portable{(a.h << s) | (a.l >> (64 - s)), a.l << s};
}
DPREC_INLINE U128Portable operator>>(U128Portable a, int s) {
    if (s == 0) return a;
    if (s >= 64) return U128Portable{0, a.h >> (s - 64)};
    return U128Portable{a.h >> s, (a.l >> s) | (a.h << (64 - s))};
}
DPREC_INLINE bool operator==(U128Portable a, U128Portable b) { return a.h == b.h && a.l == b.l; }
DPREC_INLINE bool operator!=(U128Portable a, U128Portable b) { return !(a == b); }
DPREC_INLINE bool operator<(U128Portable a, U128Portable b) { return a.h < b.h || (a.h == b.h && a.l < b.l); }
DPREC_INLINE bool operator>(U128Portable a, U128Portable b) { return b < a; }
DPREC_INLINE bool operator<=(U128Portable a, U128Portable b) { return !(b < a); }
DPREC_INLINE bool operator>=(U128Portable a, U128Portable b) { return !(a < b); }

DPREC_INLINE int bit_length(U128Portable a) { return a.h ? 64 + bit_length64(a.h) : bit_length64(a.l); }

// Restoring binary long division: the divisor is aligned with the dividend's top bit, then
// one quotient bit per step. b != 0.
DPREC_INLINE void divmod(U128Portable a, U128Portable b, U128Portable* q, U128Portable* r) {
    U128Portable quot{0, 0};
    U128Portable rem = a;
    if (!(a < b)) {
        const int shift = bit_length(a) - bit_length(b);
        U128Portable d = b << shift;
        for (int i = shift; i >= 0; --i) {
            quot = quot << 1;
            if (!(rem < d)) {
                rem = rem - d;
                quot.l |= 1u;
            }
            d = d >> 1;
        }
    }
    *q = quot;
    *r = rem;
}

// ---- builtin: unsigned __int128 --------------------------------------------------------------

#if defined(__SIZEOF_INT128__)
#define DPREC_HAVE_BUILTIN_INT128 1

__extension__ typedef unsigned __int128 dprec_uint128_t;  // __extension__: no -Wpedantic warning

struct U128Builtin {
    dprec_uint128_t v;

    DPREC_HD static constexpr U128Builtin make(uint64_t hi, uint64_t lo) {
        return U128Builtin{(static_cast<dprec_uint128_t>(hi) << 64) | lo};
    }
    DPREC_HD static U128Builtin mul64(uint64_t a, uint64_t b) {
        return U128Builtin{static_cast<dprec_uint128_t>(a) * b};
    }
    DPREC_HD uint64_t hi() const { return static_cast<uint64_t>(v >> 64); }
    DPREC_HD uint64_t lo() const { return static_cast<uint64_t>(v); }
};

DPREC_INLINE U128Builtin operator+(U128Builtin a, U128Builtin b) { return U128Builtin{a.v + b.v}; }
DPREC_INLINE U128Builtin operator-(U128Builtin a, U128Builtin b) { return U128Builtin{a.v - b.v}; }
DPREC_INLINE U128Builtin operator*(U128Builtin a, uint64_t m) { return U128Builtin{a.v * m}; }
DPREC_INLINE U128Builtin operator<<(U128Builtin a, int s) { return U128Builtin{a.v << s}; }
DPREC_INLINE U128Builtin operator>>(U128Builtin a, int s) { return U128Builtin{a.v >> s}; }
DPREC_INLINE bool operator==(U128Builtin a, U128Builtin b) { return a.v == b.v; }
DPREC_INLINE bool operator!=(U128Builtin a, U128Builtin b) { return a.v != b.v; }
DPREC_INLINE bool operator<(U128Builtin a, U128Builtin b) { return a.v < b.v; }
DPREC_INLINE bool operator>(U128Builtin a, U128Builtin b) { return a.v > b.v; }
DPREC_INLINE bool operator<=(U128Builtin a, U128Builtin b) { return a.v <= b.v; }
DPREC_INLINE bool operator>=(U128Builtin a, U128Builtin b) { return a.v >= b.v; }

DPREC_INLINE int bit_length(U128Builtin a) {
    const uint64_t hi = a.hi();
    return hi ? 64 + bit_length64(hi) : bit_length64(a.lo());
}

DPREC_INLINE void divmod(U128Builtin a, U128Builtin b, U128Builtin* q, U128Builtin* r) {
    q->v = a.v / b.v;
    r->v = a.v % b.v;
}
#endif

#if defined(DPREC_HAVE_BUILTIN_INT128) && !defined(DPREC_NO_INT128)
using U128 = U128Builtin;
#else
using U128 = U128Portable;
#endif

}  // namespace
}  // namespace dprec
