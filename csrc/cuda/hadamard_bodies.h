// Fast Walsh-Hadamard transform and randomized Hadamard rotation on the GPU: the launch
// plans and the per-thread bodies of each phase of a pass.
//
// Arithmetic contract (the same as cpu/hadamard.h, so that results are bit-identical):
//
// * stages run in increasing stride h = 1, 2, 4, ..., n/2; each butterfly is
//   (a, b) -> (a + b, a - b) with a the lower index, in T, no FMA (nvcc -fmad=false; no
//   product is ever formed inside a butterfly anyway). A butterfly network computes every
//   element from the same operands in the same order whatever the blocking, so splitting
//   the stages into passes and rounds changes no bit as long as the stage order holds;
// * normalisation is one multiply by T(norm_scale) after the last stage: 2^-(k/2) for
//   n = 2^k with k even (exact), else T(1.0 / sqrt(double(n))), computed on the host as the
//   CPU computes it (fwht_norm_scale below); n = 1 is never scaled (as on the CPU);
// * the randomized rotation multiplies by the sign T(+1) or T(-1) (exact, and 0 * -1 = -0
//   like NumPy's `y *= signs`): before the first stage in forward, after the scale in
//   inverse, with the sign of element j of repeat s from word j of the Philox stream
//   (seed, substream = s, group, domain 3): -1 when the word is >= 2^31.
//
// Layout of a pass. A block holds a buffer of B = 2^p elements in shared memory (plus one
// padding slot per 32 against bank conflicts) and has 2^(p-s) threads of 2^s elements
// (s = kPerThreadLog2: 32 float32 or 16 float64 per thread, i.e. 128 bytes of registers).
// Buffer index i has three fields, low to high: `lo` column bits, `m` stage bits and the
// remaining row bits; its element of the flattened (rows x n) array is
//
//     e = base(block) + (i & (2^lo - 1)) + ((i >> lo) & (2^m - 1)) * h0 + (i >> (lo + m)) * n
//
// * the tile pass (always first): lo = 0, h0 = 1, m = min(log2 n, p); a block is B
//   consecutive elements, i.e. 2^p / n whole rows when n < B (short rows batch well);
// * a strided pass: stages h0 .. h0 * 2^(m-1), 2^lo = B / 2^m consecutive columns (a
//   "column run", >= 32 bytes, one DRAM sector; 64 bytes where the buffer allows) of 2^m
//   rows h0 apart.
//
// Schedule (fwht_geometry): every pass reads and writes all rows x n elements once, so the
// traffic is (passes) x (one copy) and the first aim is the fewest passes: n <= 2^P_max is
// one tile pass, else a tile pass of t stages and ceil((log2 n - t) / (P_max - minimum
// column bits)) strided passes. Among the splits with that many passes, the one whose
// largest buffer is smallest wins (ties: the larger tile): a smaller buffer means more
// blocks per SM, and so one block's loads overlap another's shared-memory rounds, and more
// blocks for the short vectors of 2^20..2^23 that could not fill 132 SMs otherwise. A
// strided pass of m stages takes the buffer 2^(m + 64-byte columns), within
// [P_min, P_max]. P_min = 32 KiB of data (fits the 48 KiB default of every GPU, and is the
// whole plan there); P_max is the largest of 32/64/128 KiB that the device's opt-in limit
// holds (128 KiB on sm_80 and sm_90). With P_max = 15 (float32), for example:
//
//     log2 n   passes: buffer log2 p / stages m [/ column run]     blocks per SM (smem each)
//     <= 13    1: 13 / log2 n                                    6 (33 KiB, 256 threads)
//     14, 15   1: log2 n / log2 n                                3 (66 KiB) or 1 (132 KiB)
//     20       2: 13 / 13, then 13 / 7 / 256 B                   6, 6
//     22       2: 13 / 13, then 13 / 9 / 64 B                    6, 6
//     23       2: 14 / 14, then 13 / 9 / 64 B                    3, 6
//     24       2: 14 / 14, then 14 / 10 / 64 B                   3, 3
//     25       2: 15 / 15, then 14 / 10 / 64 B                   1, 3
//     26       2: 15 / 15, then 15 / 11 / 64 B                   1, 1 (1024 threads)
//     27       2: 15 / 15, then 15 / 12 / 32 B                   1, 1
//     28..30   3: 13 / 13, then two 13 / 7..9 / 64..256 B        6
//
// (the fallback P_max = 13 needs 3 passes from 2^24 on). float64 is the same with every
// buffer log2 one less (the same bytes) and one column bit less: 2 passes up to 2^26.
// Two passes move two copies' worth of DRAM bytes; only while n fits the L2 (50 MB on
// H100: n <= 2^23 float32) can the second pass read the first's output from the cache.
//
// A pass runs these phases, separated by __syncthreads() on the GPU:
//   load:   thread t reads the quads (4 consecutive buffer elements: 4 consecutive columns
//           of one row, since 2^lo >= 4 in strided passes and the tile pass is contiguous)
//           4 (k * threads + t) .. + 3, as one 16-byte vector per quad (two for float64)
//           when the whole block is plain (in the data, no padding, aligned); applies the
//           input sign (one Philox block per quad), zero-pads columns >= in_cols (the
//           rotation's padding), and runs the pass's first stages that lie inside a quad
//           (buffer bits 0 and 1: strides 1 and 2 of the tile pass) in registers;
//   rounds: up to s stages each, on 2^s elements in registers (see round_index);
//   store:  thread t reads its quads back and runs the pass's last stages that lie on the
//           quad number k (the top s - 2 buffer bits) in registers, then the scale and the
//           output sign, and writes as in load, dropping columns >= out_cols (the inverse
//           rotation's truncation).
// Doing the first and the last stages in registers saves two shared-memory rounds of the
// 128 KiB tile pass (2 rounds instead of 3 for its 15 stages, plus the load and store).
// Every phase body takes the block number, the thread number and the shared buffer, so the
// host emulation (csrc/python/bind_emulation_hadamard.cpp) runs each phase for all threads
// of a block before the next, exactly as the barriers order them on the GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/macros.h"
#include "../common/philox.h"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

// Full unrolling on the GPU of every loop over a thread's values: with a run-time index
// the values would live in local memory instead of registers. (Nothing on the host, where
// the emulation's speed does not matter.)
#if defined(__CUDA_ARCH__)
#define DPREC_FWHT_UNROLL _Pragma("unroll")
#else
#define DPREC_FWHT_UNROLL
#endif

namespace dprec::gpu {

// ---------------------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------------------

template <class T>
struct FwhtTraits;
template <>
struct FwhtTraits<float> {
    static constexpr int kPerThreadLog2 = 5;  // 32 float32 per thread, 5 stages per round
    static constexpr int kMinBufLog2 = 13;    // 32 KiB: below the 48 KiB default everywhere
    static constexpr int kMaxBufLog2 = 15;    // 128 KiB: needs the opt-in (sm_80, sm_90)
    static constexpr int kMinColsLog2 = 3;    // 8 float32 = 32 bytes, one DRAM sector
    static constexpr int kGoodColsLog2 = 4;   // 16 float32 = 64 bytes
};
template <>
struct FwhtTraits<double> {
    static constexpr int kPerThreadLog2 = 4;  // 16 float64 per thread (the same 128 bytes)
    static constexpr int kMinBufLog2 = 12;
    static constexpr int kMaxBufLog2 = 14;
    static constexpr int kMinColsLog2 = 2;
    static constexpr int kGoodColsLog2 = 3;
};

constexpr int kFwhtQuadLog2 = 2;  // load/store unit: 4 consecutive elements (one Philox block)
constexpr int kFwhtMaxPasses = 8;  // log2 n <= 30 needs at most 3, even with the smallest buffers
constexpr int kFwhtMaxThreads = 1024;

template <class T>
DPREC_HD constexpr int fwht_per_thread() {
    return 1 << FwhtTraits<T>::kPerThreadLog2;
}

// Buffer index with one padding slot per 32 elements, against shared-memory bank conflicts.
DPREC_INLINE uint32_t fwht_pad(uint32_t i) { return i + (i >> 5); }

// Dynamic shared memory of a block with a buffer of 2^p elements: the padded buffer.
template <class T>
DPREC_HD constexpr uint32_t fwht_smem_bytes(int p) {
    return static_cast<uint32_t>(((uint32_t(1) << p) + (uint32_t(1) << (p - 5))) * sizeof(T));
}

template <class T>
DPREC_HD constexpr uint32_t fwht_threads(int p) {
    return uint32_t(1) << (p - FwhtTraits<T>::kPerThreadLog2);
}

static_assert(fwht_threads<float>(FwhtTraits<float>::kMaxBufLog2) <= kFwhtMaxThreads, "block too large");
static_assert(fwht_threads<double>(FwhtTraits<double>::kMaxBufLog2) <= kFwhtMaxThreads, "block too large");
static_assert(fwht_smem_bytes<float>(FwhtTraits<float>::kMinBufLog2) <= 48u * 1024u, "fallback above 48 KiB");
static_assert(fwht_smem_bytes<double>(FwhtTraits<double>::kMinBufLog2) <= 48u * 1024u, "fallback above 48 KiB");

// Where a pass reads and writes: the caller's input, its output, or a scratch buffer of
// rows x n elements (only the inverse rotation with dim < n and several passes needs one).
enum class FwhtBuffer : int { kInput = 0, kOutput = 1, kWork = 2 };

// Where a pass applies the rotation's signs.
enum class FwhtSign : int { kNone = 0, kLoad = 1, kStore = 2 };

// Everything a pass's kernel needs but the pointers (passed by value to the kernel).
struct FwhtPass {
    uint64_t rows;      // batch
    uint64_t n;         // transform length, 2^log2n
    uint64_t h0;        // stride of this pass's first stage
    uint64_t n_blocks;  // blocks of the grid
    uint64_t in_cols;   // row length of the source (n, or dim for the rotation's input)
    uint64_t out_cols;  // row length of the destination (n, or dim for the inverse's output)
    uint64_t seed;
    double scale;       // applied (cast to T) when `scaled`
    uint32_t group;
    uint32_t repeat;    // Philox substream of the signs
    int log2n;
    int p;              // buffer log2
    int threads_log2;   // p - kPerThreadLog2
    int lo;             // column bits
    int m;              // stage bits
    int load_stages;    // stages on buffer bits lo .. lo+load_stages-1, done in the load phase
    int store_first;    // stages on buffer bits store_first .. lo+m-1 are done in the store
    int n_rounds;       // shared-memory rounds between: bits lo+load_stages .. store_first-1
    int sign;           // FwhtSign
    int scaled;         // bool
    DPREC_HD uint64_t total() const { return rows * n; }
};

struct FwhtGeometry {
    int p, lo, m;
    uint64_t h0;
};

// Buffer log2 of a strided pass of m stages: 64-byte column runs where [P_min, P_max]
// allows, at least the 32-byte minimum (m <= P_max - kMinColsLog2 by construction).
template <class T>
inline int fwht_strided_buf_log2(int m, int max_buf_log2) {
    const int want = m + FwhtTraits<T>::kGoodColsLog2;
    const int p = want < FwhtTraits<T>::kMinBufLog2 ? FwhtTraits<T>::kMinBufLog2 : want;
    return p > max_buf_log2 ? max_buf_log2 : p;
}

// The passes of one transform of length 2^log2n with buffers of at most 2^max_buf_log2
// elements (kMinBufLog2 <= max_buf_log2 <= kMaxBufLog2; see the schedule above). A pure
// function of its arguments: the launcher and the emulation get the same plan for the same
// buffer limit. Returns the number of passes.
template <class T>
inline int fwht_geometry(int log2n, int max_buf_log2, FwhtGeometry (&out)[kFwhtMaxPasses]) {
    constexpr int min_buf = FwhtTraits<T>::kMinBufLog2;
    if (log2n <= max_buf_log2) {
        out[0] = FwhtGeometry{log2n < min_buf ? min_buf : log2n, 0, log2n, 1};
        return 1;
    }
    const int max_strided = max_buf_log2 - FwhtTraits<T>::kMinColsLog2;  // stages of one strided pass
    int best_tile = -1, best_passes = 0, best_peak = 0;
    for (int tile = max_buf_log2; tile >= min_buf; --tile) {
        const int rest = log2n - tile;
        const int n_strided = (rest + max_strided - 1) / max_strided;
        const int largest = (rest + n_strided - 1) / n_strided;  // the balanced split's first share
        const int strided_p = fwht_strided_buf_log2<T>(largest, max_buf_log2);
        const int peak = tile > strided_p ? tile : strided_p;
        const int passes = 1 + n_strided;
        if (best_tile < 0 || passes < best_passes || (passes == best_passes && peak < best_peak)) {
            best_tile = tile;
            best_passes = passes;
            best_peak = peak;
        }
    }
    int count = 0;
    out[count++] = FwhtGeometry{best_tile, 0, best_tile, 1};
    int remaining = log2n - best_tile;
    const int n_strided = best_passes - 1;
    uint64_t h0 = uint64_t(1) << best_tile;
    for (int pass = 0; pass < n_strided; ++pass) {
        const int m = (remaining + (n_strided - pass) - 1) / (n_strided - pass);
        remaining -= m;
        const int p = fwht_strided_buf_log2<T>(m, max_buf_log2);
        out[count++] = FwhtGeometry{p, p - m, m, h0};
        h0 <<= m;
    }
    return count;
}

// The CPU's normalisation factor (cpu/hadamard.cpp norm_scale), in double; cast to T by
// the body exactly as the CPU casts it.
inline double fwht_norm_scale(int log2n) {
    if (log2n % 2 == 0) return std::ldexp(1.0, -log2n / 2);
    return 1.0 / std::sqrt(static_cast<double>(uint64_t(1) << log2n));
}

template <class T>
inline FwhtPass fwht_pass(uint64_t rows, int log2n, const FwhtGeometry& g) {
    constexpr int s = FwhtTraits<T>::kPerThreadLog2;
    FwhtPass p{};
    p.rows = rows;
    p.log2n = log2n;
    p.n = uint64_t(1) << log2n;
    p.p = g.p;
    p.threads_log2 = g.p - s;
    p.lo = g.lo;
    p.m = g.m;
    p.h0 = g.h0;
    // Quads hold buffer bits 0, 1: stages there only in the tile pass (lo = 0).
    p.load_stages = g.lo == 0 ? (g.m < kFwhtQuadLog2 ? g.m : kFwhtQuadLog2) : 0;
    // The quad number k holds the top s - 2 buffer bits: the pass's last stages there.
    const int top_bits = g.p - (s - kFwhtQuadLog2);
    const int after_load = g.lo + p.load_stages;
    p.store_first = top_bits > after_load ? top_bits : after_load;
    if (p.store_first > g.lo + g.m) p.store_first = g.lo + g.m;
    p.n_rounds = (p.store_first - after_load + s - 1) / s;
    p.in_cols = p.n;
    p.out_cols = p.n;
    const uint64_t buf = uint64_t(1) << p.p;
    p.n_blocks = (rows * p.n + buf - 1) / buf;  // exact for strided passes (n > buf)
    p.sign = static_cast<int>(FwhtSign::kNone);
    return p;
}

// What the launcher and the emulation run, pass by pass: fn(pass, source, destination).
// Both call this one function, so they cannot drift apart.
//
// * kind 0, fwht: input -> output (or in place when the caller passes the same pointer),
//   the scale on the last pass when `normalize` and n > 1;
// * kind 1, rotation forward: input (rows x dim) -> output (rows x n); repeat s's signs on
//   the load of its first pass, the scale on its last pass;
// * kind 2, rotation inverse: input (rows x n) -> output (rows x dim); repeats in reverse
//   order, repeat s's scale and signs on the store of its last pass; the intermediate
//   results live in the output when dim == n, else in the work buffer.
enum class FwhtJob : int { kTransform = 0, kForward = 1, kInverse = 2 };

// Whether a job needs the rows x n work buffer.
template <class T>
inline bool fwht_needs_work(FwhtJob job, int log2n, int max_buf_log2, uint64_t dim, uint64_t repeats) {
    FwhtGeometry geo[kFwhtMaxPasses];
    const int passes = fwht_geometry<T>(log2n, max_buf_log2, geo);
    return job == FwhtJob::kInverse && dim != (uint64_t(1) << log2n) && repeats * passes > 1;
}

template <class T, class Fn>
inline void fwht_schedule(FwhtJob job, uint64_t rows, int log2n, int max_buf_log2, uint64_t dim, bool normalize,
                          uint64_t seed, uint32_t group, uint64_t repeats, const Fn& fn) {
    FwhtGeometry geo[kFwhtMaxPasses];
    const int passes = fwht_geometry<T>(log2n, max_buf_log2, geo);
    const uint64_t n = uint64_t(1) << log2n;
    const double scale = fwht_norm_scale(log2n);
    if (job == FwhtJob::kTransform) {
        for (int k = 0; k < passes; ++k) {
            FwhtPass p = fwht_pass<T>(rows, log2n, geo[k]);
            p.scaled = normalize && n > 1 && k == passes - 1;
            p.scale = scale;
            fn(p, k == 0 ? FwhtBuffer::kInput : FwhtBuffer::kOutput, FwhtBuffer::kOutput);
        }
        return;
    }
    const FwhtBuffer work = dim == n ? FwhtBuffer::kOutput : FwhtBuffer::kWork;
    const uint64_t total = repeats * static_cast<uint64_t>(passes);
    uint64_t done = 0;
    for (uint64_t r = 0; r < repeats; ++r) {
        const bool forward = job == FwhtJob::kForward;
        const uint64_t s = forward ? r : repeats - 1 - r;
        for (int k = 0; k < passes; ++k, ++done) {
            FwhtPass p = fwht_pass<T>(rows, log2n, geo[k]);
            p.seed = seed;
            p.group = group;
            p.repeat = static_cast<uint32_t>(s);
            p.scaled = n > 1 && k == passes - 1;
            p.scale = scale;
            const bool first = done == 0;
            const bool last = done == total - 1;
            if (forward) {
                if (k == 0) p.sign = static_cast<int>(FwhtSign::kLoad);
                if (first) p.in_cols = dim;
                fn(p, first ? FwhtBuffer::kInput : FwhtBuffer::kOutput, FwhtBuffer::kOutput);
            } else {
                if (k == passes - 1) p.sign = static_cast<int>(FwhtSign::kStore);
                if (last) p.out_cols = dim;
                fn(p, first ? FwhtBuffer::kInput : work, last ? FwhtBuffer::kOutput : work);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Per-thread bodies
// ---------------------------------------------------------------------------------------

// First element of `block`: rows of whole tiles for the tile pass; for a strided pass,
// (row, group of 2^m stage rows, chunk of 2^lo columns), all powers of two.
DPREC_INLINE uint64_t fwht_block_base(const FwhtPass& p, uint64_t block) {
    if (p.h0 == 1) return block << p.p;
    const int blocks_per_row_log2 = p.log2n - p.p;
    const uint64_t row = block >> blocks_per_row_log2;
    const uint64_t in_row = block & ((uint64_t(1) << blocks_per_row_log2) - 1);
    const uint64_t chunks = p.h0 >> p.lo;  // column chunks per group
    const uint64_t g = in_row / chunks;
    const uint64_t c = in_row % chunks;
    return (row << p.log2n) + g * (p.h0 << p.m) + (c << p.lo);
}

DPREC_INLINE uint64_t fwht_element(const FwhtPass& p, uint64_t base, uint32_t i) {
    const uint32_t col_mask = (uint32_t(1) << p.lo) - 1;
    const uint32_t stage_mask = (uint32_t(1) << p.m) - 1;
    return base + (i & col_mask) + static_cast<uint64_t>((i >> p.lo) & stage_mask) * p.h0 +
           (static_cast<uint64_t>(i >> (p.lo + p.m)) << p.log2n);
}

// First buffer element of thread t's quad k.
DPREC_INLINE uint32_t fwht_quad_index(const FwhtPass& p, uint32_t t, uint32_t k) {
    return ((k << p.threads_log2) + t) << kFwhtQuadLog2;
}

// Whether every quad of the block can move as 16-byte vectors between the buffer and
// `cols`-long rows at `data`: no padding or truncation (cols == n, so element e sits at
// data[e]), n >= 4 (a quad is 4 consecutive elements of one row), the block wholly inside
// the data, and data 16-byte aligned (then so is every quad: e is a multiple of 4).
template <class T>
DPREC_INLINE bool fwht_plain_block(const FwhtPass& p, uint64_t base, const T* data, uint64_t cols) {
    if (cols != p.n || p.n < 4 || (reinterpret_cast<uintptr_t>(data) & 15u) != 0) return false;
    return fwht_element(p, base, (uint32_t(1) << p.p) - 1) < p.total();
}

template <class T>
DPREC_INLINE void fwht_load4(const T* src, T* v) {
#if defined(__CUDA_ARCH__)
    // Streaming loads (evict first): every element is read once per pass.
    if constexpr (sizeof(T) == 4) {
        const float4 x = __ldcs(reinterpret_cast<const float4*>(src));
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
        const double2 a = __ldcs(reinterpret_cast<const double2*>(src));
        const double2 b = __ldcs(reinterpret_cast<const double2*>(src) + 1);
        v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    }
#else
    DPREC_FWHT_UNROLL
    for (int j = 0; j < 4; ++j) v[j] = src[j];
#endif
}

template <class T>
DPREC_INLINE void fwht_store4(T* dst, const T* v) {
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(T) == 4) {
        *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        reinterpret_cast<double2*>(dst)[0] = make_double2(v[0], v[1]);
        reinterpret_cast<double2*>(dst)[1] = make_double2(v[2], v[3]);
    }
#else
    DPREC_FWHT_UNROLL
    for (int j = 0; j < 4; ++j) dst[j] = v[j];
#endif
}

// Signs of the quad at buffer elements i0 .. i0+3: bit j set when element i0+j is negated.
// A quad is 4 consecutive columns 4c .. 4c+3 of one row, i.e. Philox block c -- or, for
// n < 4, columns of Philox block 0 (of consecutive rows).
DPREC_INLINE uint32_t fwht_quad_signs(const FwhtPass& p, uint64_t base, uint32_t i0) {
    const uint64_t col_mask = p.n - 1;
    const uint64_t col0 = fwht_element(p, base, i0) & col_mask;
    const Block4 w = philox4x32_10(static_cast<uint32_t>(col0 >> 2), p.repeat, p.group, kDomainHadamardSign,
                                   static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32));
    uint32_t bits = 0;
    DPREC_FWHT_UNROLL
    for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t j = static_cast<uint32_t>((fwht_element(p, base, i0 + k) & col_mask) & 3);
        // A select, not w.w[j]: a run-time index would put w in local memory.
        const uint32_t word = j == 0 ? w.w[0] : j == 1 ? w.w[1] : j == 2 ? w.w[2] : w.w[3];
        if (word >= 0x80000000u) bits |= uint32_t(1) << k;
    }
    return bits;
}

// A value the compiler cannot see through, so that it recomputes what derives from it
// rather than keeping the earlier results in registers (the GPU's 64 registers a thread).
template <class T>
DPREC_INLINE T fwht_opaque(T value) {
    static_assert(sizeof(T) == 8, "64-bit values and pointers");
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+l"(value));
#endif
    return value;
}

template <class T>
DPREC_INLINE void fwht_butterfly(T& a, T& b) {
    const T x = a, y = b;
    a = x + y;
    b = x - y;
}

// The signs of this thread's elements as a mask, bit 4k + j for element j of quad k
// (elements past the end count as +1).
template <class T>
DPREC_INLINE uint32_t fwht_sign_mask(const FwhtPass& p, uint64_t base, uint32_t t) {
    constexpr int kQuads = fwht_per_thread<T>() / 4;
    uint32_t neg = 0;
    DPREC_FWHT_UNROLL
    for (int k = 0; k < kQuads; ++k) {
        const uint32_t i0 = fwht_quad_index(p, t, k);
        if (fwht_element(p, base, i0) < p.total()) neg |= fwht_quad_signs(p, base, i0) << (4 * k);
    }
    return neg;
}

template <class T>
DPREC_INLINE void fwht_load_phase(const FwhtPass& p, uint64_t block, uint32_t t, const T* src, T* buf) {
    constexpr int kPer = fwht_per_thread<T>();
    constexpr int kQuads = kPer / 4;
    const uint64_t base = fwht_block_base(p, block);
    // The signs first, while no value is live yet: Philox next to 2^s loaded values would
    // not fit 64 registers.
    const uint32_t neg = p.sign == static_cast<int>(FwhtSign::kLoad) ? fwht_sign_mask<T>(p, base, t) : 0u;
    T v[kPer];
    if (fwht_plain_block(p, base, src, p.in_cols)) {
        // All loads first, so that each thread has its 128 bytes in flight at once.
        DPREC_FWHT_UNROLL
        for (int k = 0; k < kQuads; ++k)
            fwht_load4(src + fwht_element(p, base, fwht_quad_index(p, t, k)), v + 4 * k);
    } else {
        DPREC_FWHT_UNROLL
        for (int k = 0; k < kQuads; ++k) {
            const uint32_t i0 = fwht_quad_index(p, t, k);
            DPREC_FWHT_UNROLL
            for (int j = 0; j < 4; ++j) {
                const uint64_t e = fwht_element(p, base, i0 + j);
                T x = T(0);
                if (e < p.total()) {
                    const uint64_t row = e >> p.log2n;
                    const uint64_t col = e & (p.n - 1);
                    if (col < p.in_cols) x = src[row * p.in_cols + col];
                }
                v[4 * k + j] = x;
            }
        }
    }
    T* const mine = fwht_opaque(buf);
    DPREC_FWHT_UNROLL
    for (int k = 0; k < kQuads; ++k) {
        if (p.sign == static_cast<int>(FwhtSign::kLoad)) {
            // Only in-range quads have sign bits set; multiplying the others by +1 changes
            // nothing that is ever stored.
            DPREC_FWHT_UNROLL
            for (int j = 0; j < 4; ++j) v[4 * k + j] = v[4 * k + j] * (((neg >> (4 * k + j)) & 1u) ? T(-1) : T(1));
        }
        // Stages on buffer bits 0 and 1 (strides 1, 2 of the tile pass), in order.
        if (p.load_stages >= 1) {
            fwht_butterfly(v[4 * k + 0], v[4 * k + 1]);
            fwht_butterfly(v[4 * k + 2], v[4 * k + 3]);
        }
        if (p.load_stages >= 2) {
            fwht_butterfly(v[4 * k + 0], v[4 * k + 2]);
            fwht_butterfly(v[4 * k + 1], v[4 * k + 3]);
        }
        const uint32_t i0 = fwht_quad_index(p, t, k);
        DPREC_FWHT_UNROLL
        for (int j = 0; j < 4; ++j) mine[fwht_pad(i0 + j)] = v[4 * k + j];
    }
}

// Round r of a pass: stages on buffer bits b .. b+q-1 (b = lo + load_stages + s r). Thread
// t's slot k (2^s slots) holds the buffer element whose stage bits are the low q bits of k
// and whose other bits are u = t + (k >> q) * threads, spread around them: u's bits below
// b stay, the others move up by q. A warp's 32 threads differ in the low 5 bits of u, which
// land on 32 distinct banks after fwht_pad whatever b (b >= 5: consecutive; b < 5: the
// stride 2^(b+q) is undone by the padding).
DPREC_INLINE uint32_t fwht_spread(uint32_t u, int b, int q) {
    return ((u >> b) << (b + q)) | (u & ((uint32_t(1) << b) - 1));
}

DPREC_INLINE uint32_t fwht_round_index(uint32_t t, uint32_t k, int b, int q, int threads_log2) {
    const uint32_t kl = k & ((uint32_t(1) << q) - 1);
    return fwht_spread(t + ((k >> q) << threads_log2), b, q) | (kl << b);
}

// fwht_pad adds over disjoint bit sets (i + (i >> 5) is linear in i's bits), and so does
// fwht_spread; a slot's padded index is thus a per-thread part plus a part that depends on
// the slot alone (the same for every thread: uniform registers or immediates, instead of
// 2^s per-thread address registers that would spill at 64 registers a thread).
DPREC_INLINE uint32_t fwht_round_slot_offset(uint32_t k, int b, int q, int threads_log2) {
    return fwht_pad(fwht_round_index(0, k, b, q, threads_log2));
}

template <class T>
DPREC_INLINE void fwht_round_phase(const FwhtPass& p, int round, uint32_t t, T* buf) {
    constexpr int s = FwhtTraits<T>::kPerThreadLog2;
    constexpr int kPer = fwht_per_thread<T>();
    const int b = p.lo + p.load_stages + s * round;
    const int rest = p.store_first - b;
    const int q = rest < s ? rest : s;
    T* const mine = buf + fwht_pad(fwht_spread(t, b, q));
    T v[kPer];
    DPREC_FWHT_UNROLL
    for (uint32_t k = 0; k < kPer; ++k) v[k] = mine[fwht_round_slot_offset(k, b, q, p.threads_log2)];
    DPREC_FWHT_UNROLL
    for (int j = 0; j < s; ++j) {
        if (j >= q) break;
        DPREC_FWHT_UNROLL
        for (uint32_t k = 0; k < kPer; ++k) {
            if (k & (uint32_t(1) << j)) continue;
            fwht_butterfly(v[k], v[k | (uint32_t(1) << j)]);
        }
    }
    // The same addresses again, recomputed from an opaque copy of the thread's part: kept
    // from the loads, 2^s of them would be live across the butterflies next to the values.
    T* const again = fwht_opaque(mine);
    DPREC_FWHT_UNROLL
    for (uint32_t k = 0; k < kPer; ++k) again[fwht_round_slot_offset(k, b, q, p.threads_log2)] = v[k];
}

template <class T>
DPREC_INLINE void fwht_store_phase(const FwhtPass& p, uint64_t block, uint32_t t, const T* buf, T* dst) {
    constexpr int s = FwhtTraits<T>::kPerThreadLog2;
    constexpr int kPer = fwht_per_thread<T>();
    constexpr int kQuads = kPer / 4;
    const uint64_t base = fwht_block_base(p, block);
    // The signs first, before the values are read (as in the load phase).
    const uint32_t neg = p.sign == static_cast<int>(FwhtSign::kStore) ? fwht_sign_mask<T>(p, base, t) : 0u;
    const T* const mine = fwht_opaque(buf);
    T v[kPer];
    DPREC_FWHT_UNROLL
    for (int k = 0; k < kQuads; ++k) {
        const uint32_t i0 = fwht_quad_index(p, t, k);
        DPREC_FWHT_UNROLL
        for (int j = 0; j < 4; ++j) v[4 * k + j] = mine[fwht_pad(i0 + j)];
    }
    // The last stages, on buffer bits store_first .. lo+m-1: bits of the quad number k
    // (bit c of k is buffer bit top_bits + c), in increasing order.
    const int top_bits = p.p - (s - kFwhtQuadLog2);
    const int stage_end = p.lo + p.m;
    DPREC_FWHT_UNROLL
    for (int c = 0; c < s - kFwhtQuadLog2; ++c) {
        const int bit = top_bits + c;
        if (bit < p.store_first || bit >= stage_end) continue;
        DPREC_FWHT_UNROLL
        for (int k = 0; k < kQuads; ++k) {
            if (k & (1 << c)) continue;
            DPREC_FWHT_UNROLL
            for (int j = 0; j < 4; ++j) fwht_butterfly(v[4 * k + j], v[4 * (k | (1 << c)) + j]);
        }
    }
    const T scale = static_cast<T>(p.scale);
    DPREC_FWHT_UNROLL
    for (int k = 0; k < kPer; ++k) {
        if (p.scaled) v[k] = v[k] * scale;
        if (p.sign == static_cast<int>(FwhtSign::kStore)) v[k] = v[k] * (((neg >> k) & 1u) ? T(-1) : T(1));
    }
    if (fwht_plain_block(p, base, static_cast<const T*>(dst), p.out_cols)) {
        DPREC_FWHT_UNROLL
        for (int k = 0; k < kQuads; ++k) fwht_store4(dst + fwht_element(p, base, fwht_quad_index(p, t, k)), v + 4 * k);
        return;
    }
    DPREC_FWHT_UNROLL
    for (int k = 0; k < kQuads; ++k) {
        const uint32_t i0 = fwht_quad_index(p, t, k);
        DPREC_FWHT_UNROLL
        for (int j = 0; j < 4; ++j) {
            const uint64_t e = fwht_element(p, base, i0 + j);
            if (e >= p.total()) continue;
            const uint64_t row = e >> p.log2n;
            const uint64_t col = e & (p.n - 1);
            if (col >= p.out_cols) continue;
            dst[row * p.out_cols + col] = v[4 * k + j];
        }
    }
}

}  // namespace dprec::gpu
