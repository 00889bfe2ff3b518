// Per-thread bodies of the SecAgg server-side CUDA kernels: the modular sum of the clients'
// vectors and the centered lift of the result (the server's step, see docs/secagg.md: it lifts to
// [-M/2, M/2) and rescales), M = 2^bits, 1 <= bits <= 64.
//
// Same rules as kernel_bodies.h: a body depends on its flat thread id alone (no shared
// memory, warp intrinsics or synchronisation), so csrc/python/bind_emulation_modular.cpp
// runs the very same code on the host, thread by thread, and the GPU can be checked without
// one. The grid-stride loop is part of the body (thread t handles t, t + stride, ...), so the
// emulation, given a small grid, checks that the stride covers every element exactly once.
//
// Storage: uint32 for bits <= 32, uint64 above. Both kernels are integer arithmetic up to the
// lift's final conversion, so they are exact and deterministic whatever the GPU or the order:
// wrapping unsigned additions are addition mod 2^32 (2^64), and M divides that, so masking
// once at the end gives the sum mod M.
#pragma once

#include <cstdint>

#include "../common/macros.h"

namespace dprec::gpu {

// Threads per block of both kernels, and the grid cap beyond which the threads loop (the
// grid-stride loop): 2^16 blocks x 256 threads already fill any current GPU many times.
constexpr unsigned kModThreads = 256;
constexpr uint64_t kModMaxBlocks = uint64_t(1) << 16;

// Independent rows in flight per thread in the sum. The sum of n rows of m columns runs one
// thread per column; with m = 2^16 (a small model) that is only 2048 warps, too few to hide
// the memory latency with one load at a time. 16 loads issued before their additions keep
// ~4 KiB (uint32) to 8 KiB (uint64) in flight per warp. Addition mod 2^w is associative and
// commutative, so splitting the rows among accumulators changes nothing in the result.
constexpr unsigned kModSumUnroll = 16;

#if defined(__CUDA_ARCH__)
#define DPREC_MOD_UNROLL _Pragma("unroll")
#else
#define DPREC_MOD_UNROLL
#endif

// Blocks of a grid-stride launch over `count` items: ceil(count / kModThreads), at most
// `max_blocks` (the launcher passes kModMaxBlocks; the emulation lets tests pass fewer).
DPREC_INLINE uint64_t mod_grid_blocks(uint64_t count, uint64_t max_blocks) {
    const uint64_t blocks = (count + kModThreads - 1) / kModThreads;
    return blocks < max_blocks ? blocks : max_blocks;
}

// M - 1 for M = 2^bits in the storage type T (all ones when bits is T's width).
template <class T>
DPREC_INLINE T mod_mask(int bits) {
    return bits >= static_cast<int>(8 * sizeof(T)) ? static_cast<T>(~T(0)) : static_cast<T>((T(1) << bits) - 1);
}

// out[j] <- ((accumulate ? out[j] : 0) + sum_{i < n} xs[i * m + j]) mod M, for the columns
// j = t, t + stride, ... < m. Threads of a warp read consecutive columns of a row: the loads
// of a warp are coalesced. out may be a row of xs (the column is read before it is written,
// by its thread alone).
template <class T>
DPREC_INLINE void mod_sum_thread(uint64_t t, uint64_t stride, const T* xs, uint64_t n, uint64_t m, T mask,
                                 bool accumulate, T* out) {
    for (uint64_t j = t; j < m; j += stride) {
        const T* col = xs + j;
        T acc[kModSumUnroll];
        DPREC_MOD_UNROLL
        for (unsigned u = 0; u < kModSumUnroll; ++u) acc[u] = T(0);
        uint64_t i = 0;
        for (; i + kModSumUnroll <= n; i += kModSumUnroll) {
            DPREC_MOD_UNROLL
            for (unsigned u = 0; u < kModSumUnroll; ++u) acc[u] = static_cast<T>(acc[u] + col[(i + u) * m]);
        }
        for (; i < n; ++i) acc[0] = static_cast<T>(acc[0] + col[i * m]);
        T s = accumulate ? out[j] : T(0);
        DPREC_MOD_UNROLL
        for (unsigned u = 0; u < kModSumUnroll; ++u) s = static_cast<T>(s + acc[u]);
        out[j] = static_cast<T>(s & mask);
    }
}

// The centered lift of v mod M: v mod M itself below M/2, v mod M - M from M/2 on, so the
// result lies in [-M/2, M/2). Bits of v at or above `bits` are ignored (v is read mod M).
// Written without a signed overflow or an out-of-range conversion for any bits <= 64:
// v - M = -((M - 1 - v) + 1), and M - 1 - v < M/2 <= 2^63 fits in int64.
template <class T>
DPREC_INLINE int64_t mod_centered(T v, int bits, T mask) {
    const T r = static_cast<T>(v & mask);
    const T half = static_cast<T>(T(1) << (bits - 1));
    if (r < half) return static_cast<int64_t>(r);
    return -static_cast<int64_t>(static_cast<T>(mask - r)) - 1;
}

// Lifted value in the output's type: int64 as is; float64 / float32 as scale * lifted,
// computed in float64 (int64 -> double and the product both round to nearest, on the GPU
// as on the host, and float32 is that double rounded to nearest): the CPU's
// `(float)(scale * (double)lifted)` bit for bit. (Build with -fmad=false / -ffp-contract=off
// as everywhere; there is a single operation here, so nothing could be contracted anyway.)
DPREC_INLINE void mod_store(int64_t lifted, double, int64_t* out) { *out = lifted; }
DPREC_INLINE void mod_store(int64_t lifted, double scale, double* out) { *out = scale * static_cast<double>(lifted); }
DPREC_INLINE void mod_store(int64_t lifted, double scale, float* out) {
    *out = static_cast<float>(scale * static_cast<double>(lifted));
}

// out[k] <- lift(x[k]) (times scale for floating-point out), k = t, t + stride, ... < count.
// out may alias x (uint64 in, int64 out): each element is read before it is written, by its
// thread alone.
template <class T, class O>
DPREC_INLINE void mod_lift_thread(uint64_t t, uint64_t stride, const T* x, uint64_t count, int bits, T mask,
                                  double scale, O* out) {
    for (uint64_t k = t; k < count; k += stride) mod_store(mod_centered(x[k], bits, mask), scale, out + k);
}

}  // namespace dprec::gpu
