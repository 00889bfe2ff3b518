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
// Layout of a pass. A block holds a buffer of B = 2^p elements in shared memory
// (p = kFwhtBufLog2<T>: 32 KiB of data) and has 2^(p-4) threads, 16 elements each.
// Buffer index i has three fields, low to high: `lo` column bits, `m` stage bits and the
// remaining row bits; its element of the flattened (rows x n) array is
//
//     e = base(block) + (i & (2^lo - 1)) + ((i >> lo) & (2^m - 1)) * h0 + (i >> (lo + m)) * n
//
// * the tile pass (always first): lo = 0, h0 = 1, m = min(log2 n, p); a block is B
//   consecutive elements, i.e. 2^p / n whole rows when n < B (short rows batch well);
// * a strided pass: stages h0 .. h0 * 2^(m-1) (h0 = 2^p, 2^(p+m_1), ...), 2^lo = B / 2^m
//   consecutive columns (>= 32 bytes, a full DRAM sector) of 2^m rows h0 apart.
//
// A pass runs these phases, separated by __syncthreads() on the GPU:
//   signs  (only with a sign): thread t computes the signs of buffer elements 16t .. 16t+15
//          (four Philox blocks) into a 16-bit mask;
//   load:  thread t reads buffer elements k * threads + t (coalesced in e), applies the
//          input sign, zero-pads columns >= in_cols (the rotation's padding);
//   rounds: up to 4 stages each, on 16 elements in registers (see round_index);
//   store: thread t writes buffer elements k * threads + t, times the scale and the output
//          sign, dropping columns >= out_cols (the inverse rotation's truncation).
// Every phase body takes the block number, the thread number and the shared buffers, so
// the host emulation (csrc/python/bind_emulation_hadamard.cpp) runs each phase for all
// threads of a block before the next, exactly as the barriers order them on the GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/macros.h"
#include "../common/philox.h"

namespace dprec::gpu {

// ---------------------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------------------

template <class T>
struct FwhtTraits;
template <>
struct FwhtTraits<float> {
    static constexpr int kBufLog2 = 13;     // 8192 float32 = 32 KiB
    static constexpr int kMinColsLog2 = 3;  // 8 float32 = 32 bytes
};
template <>
struct FwhtTraits<double> {
    static constexpr int kBufLog2 = 12;     // 4096 float64 = 32 KiB
    static constexpr int kMinColsLog2 = 2;  // 4 float64 = 32 bytes
};

constexpr int kFwhtPerThreadLog2 = 4;  // 16 elements per thread
constexpr int kFwhtPerThread = 1 << kFwhtPerThreadLog2;
constexpr int kFwhtRoundStages = 4;    // stages per round, in registers
constexpr int kFwhtMaxPasses = 8;      // log2 n <= 30: one tile pass + at most 2 strided

// Buffer index with one padding slot per 32 elements, against shared-memory bank conflicts.
DPREC_INLINE uint32_t fwht_pad(uint32_t i) { return i + (i >> 5); }

template <class T>
DPREC_HD constexpr uint32_t fwht_threads() {
    return uint32_t(1) << (FwhtTraits<T>::kBufLog2 - kFwhtPerThreadLog2);
}

// Dynamic shared memory of one block: the padded buffer, then one sign mask per thread.
template <class T>
DPREC_HD constexpr uint32_t fwht_smem_bytes() {
    return static_cast<uint32_t>(((uint32_t(1) << FwhtTraits<T>::kBufLog2) +
                                  (uint32_t(1) << (FwhtTraits<T>::kBufLog2 - 5))) * sizeof(T) +
                                 fwht_threads<T>() * sizeof(uint32_t));
}

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
    int lo;             // column bits
    int m;              // stage bits
    int sign;           // FwhtSign
    int scaled;         // bool
    DPREC_HD uint64_t total() const { return rows * n; }
    DPREC_HD int n_rounds() const { return (m + kFwhtRoundStages - 1) / kFwhtRoundStages; }
};

struct FwhtGeometry {
    int lo, m;
    uint64_t h0;
};

// The passes of one transform of length 2^log2n: the tile pass, then strided passes of at
// most p - kMinColsLog2 stages each, balanced with the larger share first. Returns the
// number of passes.
template <class T>
inline int fwht_geometry(int log2n, FwhtGeometry (&out)[kFwhtMaxPasses]) {
    constexpr int p = FwhtTraits<T>::kBufLog2;
    constexpr int max_stages = p - FwhtTraits<T>::kMinColsLog2;
    int count = 0;
    const int tile = log2n < p ? log2n : p;
    out[count++] = FwhtGeometry{0, tile, 1};
    int remaining = log2n - tile;
    const int n_strided = (remaining + max_stages - 1) / max_stages;
    uint64_t h0 = uint64_t(1) << tile;
    for (int pass = 0; pass < n_strided; ++pass) {
        const int m = (remaining + (n_strided - pass) - 1) / (n_strided - pass);
        remaining -= m;
        out[count++] = FwhtGeometry{p - m, m, h0};
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
    FwhtPass p{};
    p.rows = rows;
    p.log2n = log2n;
    p.n = uint64_t(1) << log2n;
    p.p = FwhtTraits<T>::kBufLog2;
    p.lo = g.lo;
    p.m = g.m;
    p.h0 = g.h0;
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
inline bool fwht_needs_work(FwhtJob job, int log2n, uint64_t dim, uint64_t repeats) {
    FwhtGeometry geo[kFwhtMaxPasses];
    const int passes = fwht_geometry<T>(log2n, geo);
    return job == FwhtJob::kInverse && dim != (uint64_t(1) << log2n) && repeats * passes > 1;
}

template <class T, class Fn>
inline void fwht_schedule(FwhtJob job, uint64_t rows, int log2n, uint64_t dim, bool normalize, uint64_t seed,
                          uint32_t group, uint64_t repeats, const Fn& fn) {
    FwhtGeometry geo[kFwhtMaxPasses];
    const int passes = fwht_geometry<T>(log2n, geo);
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

// Signs of buffer elements 16t .. 16t+15: bit k of mask[t] set when element 16t+k is
// negated. Four aligned buffer elements are four consecutive columns of one row (2^lo >= 4
// in strided passes; whole rows in the tile pass), i.e. one Philox block -- or, for
// n < 4, columns of Philox block 0.
DPREC_INLINE void fwht_signs_phase(const FwhtPass& p, uint64_t block, uint32_t t, uint32_t* mask) {
    const uint64_t base = fwht_block_base(p, block);
    const uint64_t col_mask = p.n - 1;
    uint32_t bits = 0;
    for (uint32_t q = 0; q < kFwhtPerThread / 4; ++q) {
        const uint32_t i0 = t * kFwhtPerThread + 4 * q;
        const uint64_t e0 = fwht_element(p, base, i0);
        if (e0 >= p.total()) break;
        const uint64_t col0 = e0 & col_mask;
        const Block4 w = philox4x32_10(static_cast<uint32_t>(col0 >> 2), p.repeat, p.group, kDomainHadamardSign,
                                       static_cast<uint32_t>(p.seed), static_cast<uint32_t>(p.seed >> 32));
        for (uint32_t k = 0; k < 4; ++k) {
            const uint64_t col = fwht_element(p, base, i0 + k) & col_mask;
            // A select, not w.w[col & 3]: a run-time index would put w in local memory.
            const uint32_t j = static_cast<uint32_t>(col & 3);
            const uint32_t word = j == 0 ? w.w[0] : j == 1 ? w.w[1] : j == 2 ? w.w[2] : w.w[3];
            if (word >= 0x80000000u) bits |= uint32_t(1) << (4 * q + k);
        }
    }
    mask[t] = bits;
}

DPREC_INLINE bool fwht_negative(const uint32_t* mask, uint32_t i) {
    return ((mask[i >> kFwhtPerThreadLog2] >> (i & (kFwhtPerThread - 1))) & 1u) != 0;
}

template <class T>
DPREC_INLINE void fwht_load_phase(const FwhtPass& p, uint64_t block, uint32_t t, uint32_t n_threads,
                                  const uint32_t* mask, const T* src, T* buf) {
    const uint64_t base = fwht_block_base(p, block);
    const bool sign = p.sign == static_cast<int>(FwhtSign::kLoad);
    for (uint32_t k = 0; k < kFwhtPerThread; ++k) {
        const uint32_t i = k * n_threads + t;
        const uint64_t e = fwht_element(p, base, i);
        T v = T(0);
        if (e < p.total()) {
            const uint64_t row = e >> p.log2n;
            const uint64_t col = e & (p.n - 1);
            if (col < p.in_cols) v = src[row * p.in_cols + col];
            if (sign) v = v * (fwht_negative(mask, i) ? T(-1) : T(1));
        }
        buf[fwht_pad(i)] = v;
    }
}

// Round r of a pass: stages on buffer bits b .. b+q-1 (b = lo + 4r). Thread t's slot k
// (16 slots) holds the buffer element whose stage bits are the low q bits of k and whose
// other bits are u = t + (k >> q) * threads, spread around them.
DPREC_INLINE uint32_t fwht_round_index(uint32_t t, uint32_t k, int b, int q, int threads_log2) {
    const uint32_t kl = k & ((uint32_t(1) << q) - 1);
    const uint32_t u = t + ((k >> q) << threads_log2);
    const uint32_t low = u & ((uint32_t(1) << b) - 1);
    return ((u >> b) << (b + q)) | (kl << b) | low;
}

template <class T>
DPREC_INLINE void fwht_round_phase(const FwhtPass& p, int round, uint32_t t, T* buf) {
    const int b = p.lo + kFwhtRoundStages * round;
    const int rest = p.lo + p.m - b;
    const int q = rest < kFwhtRoundStages ? rest : kFwhtRoundStages;
    const int threads_log2 = p.p - kFwhtPerThreadLog2;
    T v[kFwhtPerThread];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t k = 0; k < kFwhtPerThread; ++k) v[k] = buf[fwht_pad(fwht_round_index(t, k, b, q, threads_log2))];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int j = 0; j < kFwhtRoundStages; ++j) {
        if (j >= q) break;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (uint32_t k = 0; k < kFwhtPerThread; ++k) {
            if (k & (uint32_t(1) << j)) continue;
            const uint32_t k2 = k | (uint32_t(1) << j);
            const T a = v[k], c = v[k2];
            v[k] = a + c;
            v[k2] = a - c;
        }
    }
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t k = 0; k < kFwhtPerThread; ++k) buf[fwht_pad(fwht_round_index(t, k, b, q, threads_log2))] = v[k];
}

template <class T>
DPREC_INLINE void fwht_store_phase(const FwhtPass& p, uint64_t block, uint32_t t, uint32_t n_threads,
                                   const uint32_t* mask, const T* buf, T* dst) {
    const uint64_t base = fwht_block_base(p, block);
    const bool sign = p.sign == static_cast<int>(FwhtSign::kStore);
    const T scale = static_cast<T>(p.scale);
    for (uint32_t k = 0; k < kFwhtPerThread; ++k) {
        const uint32_t i = k * n_threads + t;
        const uint64_t e = fwht_element(p, base, i);
        if (e >= p.total()) continue;
        const uint64_t row = e >> p.log2n;
        const uint64_t col = e & (p.n - 1);
        if (col >= p.out_cols) continue;
        T v = buf[fwht_pad(i)];
        if (p.scaled) v = v * scale;
        if (sign) v = v * (fwht_negative(mask, i) ? T(-1) : T(1));
        dst[row * p.out_cols + col] = v;
    }
}

}  // namespace dprec::gpu
