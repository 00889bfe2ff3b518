// Per-thread bodies of the count-sketch CUDA kernels, and the plan that batches the encode.
//
// Same rules as kernel_bodies.h: every body depends on its flat thread id alone (no shared
// memory, warp intrinsics or synchronisation), so csrc/python/bind_emulation_sketch.cpp runs
// the very same code on the host, thread by thread, and the GPU can be checked without one.
//
// The CPU kernel (csrc/cpu/sketch.cpp) defines the bits: per row r, for j = 0, 1, ...,
// dim - 1 in order, table[r, h_r(j)] += with_sign(x[j] * scale, sign word), in the table's
// dtype, starting from the table's contents. Float atomics would add in a random order, so
// the GPU encode reproduces that order instead:
//
//   1. pairs: for a batch of rows and a chunk of elements, one (key, value) pair per
//      element and row, key = local row * cols + bucket, value = the signed scaled element,
//      written in (row, j) order;
//   2. a stable radix sort of the pairs by key (CUB, only the key's bits): each cell's
//      values end up together, still in increasing j;
//   3. fold: the thread at the first pair of each run of equal keys adds the run, in order,
//      to the cell, starting from the cell's value.
//
// Each cell therefore sees the CPU's additions in the CPU's order: the same bits, whatever
// the GPU. Chunks over j are processed in increasing order, so batching keeps the order too.
//
// Build with nvcc -fmad=false (and g++ -ffp-contract=off): x * scale is rounded before the
// addition, as on the CPU.
#pragma once

#include <cstdint>
#include <cstring>

#include "../common/macros.h"
#include "../common/philox.h"

namespace dprec::gpu {

// ---------------------------------------------------------------------------------------
// Buckets and signs (SPEC §2), as cpu/sketch.cpp computes them
// ---------------------------------------------------------------------------------------

DPREC_INLINE uint32_t sketch_bucket(uint32_t word, uint64_t cols) {
    return static_cast<uint32_t>((static_cast<uint64_t>(word) * cols) >> 32);
}

// v with its sign bit flipped when the sign word is >= 2^31 (sign -1): an exact negation.
DPREC_INLINE float sketch_with_sign(float v, uint32_t sign_word) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits ^= sign_word & 0x80000000u;
    memcpy(&v, &bits, sizeof v);
    return v;
}

DPREC_INLINE double sketch_with_sign(double v, uint32_t sign_word) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits ^= static_cast<uint64_t>(sign_word & 0x80000000u) << 32;
    memcpy(&v, &bits, sizeof v);
    return v;
}

DPREC_INLINE Block4 sketch_words(uint64_t seed, uint32_t row, uint32_t group, uint32_t domain, uint64_t block) {
    return philox4x32_10(static_cast<uint32_t>(block), row, group, domain, static_cast<uint32_t>(seed),
                         static_cast<uint32_t>(seed >> 32));
}

// ---------------------------------------------------------------------------------------
// Encode plan: which rows and elements go into one sort
// ---------------------------------------------------------------------------------------

// Pairs sorted at once on the GPU (scratch: 2 x (4 + sizeof(T)) bytes per pair, i.e. 128 MiB
// for float32 tables and 192 MiB for float64, plus CUB's temporary storage).
constexpr uint64_t kSketchMaxPairs = uint64_t(1) << 23;

struct SketchEncodePlan {
    uint64_t dim;
    uint64_t cols;
    uint32_t rows;
    uint64_t chunk;      // elements of one row per batch: a multiple of 4 (whole Philox blocks)
    uint32_t row_batch;  // rows per batch; row_batch * cols <= 2^32, so keys fit 32 bits
    DPREC_HD uint64_t max_pairs() const { return chunk * row_batch; }
};

// `max_pairs` bounds the scratch memory; the launcher passes kSketchMaxPairs, the host
// emulation lets the tests pass small values to exercise many batches.
DPREC_INLINE SketchEncodePlan make_sketch_encode_plan(uint64_t dim, uint32_t rows, uint64_t cols,
                                                      uint64_t max_pairs) {
    SketchEncodePlan p{};
    p.dim = dim;
    p.cols = cols;
    p.rows = rows;
    const uint64_t cap = max_pairs < 4 ? 4 : max_pairs & ~uint64_t(3);
    const uint64_t padded = (dim + 3) & ~uint64_t(3);
    p.chunk = padded < cap ? padded : cap;
    uint64_t rb = cap / p.chunk;
    const uint64_t key_rows = (uint64_t(1) << 32) / cols;  // >= 1 since cols < 2^32
    if (rb > key_rows) rb = key_rows;
    if (rb > rows) rb = rows;
    if (rb < 1) rb = 1;
    p.row_batch = static_cast<uint32_t>(rb);
    return p;
}

// Radix bits of keys below `cells` (at least 1: CUB wants a non-empty bit range).
DPREC_INLINE int sketch_key_bits(uint64_t cells) {
    int bits = 1;
    while (bits < 64 && (uint64_t(1) << bits) < cells) ++bits;
    return bits;
}

// One batch: rows [row0, row0 + n_rows), elements [j0, j0 + n_elems); j0 % 4 == 0.
// Pair p = local row * n_elems + (j - j0).
DPREC_INLINE uint64_t sketch_pairs_threads(uint32_t n_rows, uint64_t n_elems) {
    return static_cast<uint64_t>(n_rows) * ((n_elems + 3) >> 2);
}

// Thread t: local row t / blocks, Philox block j0 / 4 + t % blocks; up to four pairs.
// X is the input's type, T the table's (x is converted to T first, as the CPU path does).
template <class X, class T>
DPREC_INLINE void sketch_pairs_thread(uint64_t t, const X* x, uint64_t j0, uint64_t n_elems, uint32_t row0,
                                      uint64_t seed, uint32_t group, uint64_t cols, T scale, uint32_t* keys,
                                      T* values) {
    const uint64_t blocks = (n_elems + 3) >> 2;
    const uint32_t local = static_cast<uint32_t>(t / blocks);
    const uint64_t b = t % blocks;
    const uint32_t row = row0 + local;
    const uint64_t block = (j0 >> 2) + b;
    const Block4 h = sketch_words(seed, row, group, kDomainSketchBucket, block);
    const Block4 s = sketch_words(seed, row, group, kDomainSketchSign, block);
    const uint64_t base = static_cast<uint64_t>(local) * n_elems + 4 * b;  // pair of element j0 + 4b
    const uint32_t key_base = static_cast<uint32_t>(static_cast<uint64_t>(local) * cols);
    for (int i = 0; i < 4; ++i) {
        if (4 * b + static_cast<uint64_t>(i) >= n_elems) break;
        const T v = static_cast<T>(x[j0 + 4 * b + static_cast<uint64_t>(i)]) * scale;
        keys[base + i] = key_base + sketch_bucket(h.w[i], cols);
        values[base + i] = sketch_with_sign(v, s.w[i]);
    }
}

// Thread i of a batch's sorted pairs: the first pair of a run of equal keys adds the run's
// values, in order, to table_batch[key] (table_batch = the table at the batch's first row).
template <class T>
DPREC_INLINE void sketch_fold_thread(uint64_t i, const uint32_t* keys, const T* values, uint64_t n_pairs,
                                     T* table_batch) {
    const uint32_t key = keys[i];
    if (i > 0 && keys[i - 1] == key) return;
    T acc = table_batch[key];
    for (uint64_t k = i; k < n_pairs && keys[k] == key; ++k) acc = acc + values[k];
    table_batch[key] = acc;
}

// ---------------------------------------------------------------------------------------
// Decode
// ---------------------------------------------------------------------------------------

// Mean: thread t owns Philox block t (elements 4t .. 4t+3) and sums the rows in order in
// float64, exactly as cpu::count_sketch_decode does per element.
DPREC_INLINE uint64_t sketch_mean_threads(uint64_t dim) { return (dim + 3) >> 2; }

template <class T>
DPREC_INLINE void sketch_decode_mean_thread(uint64_t t, const T* table, uint64_t dim, uint64_t seed, uint32_t group,
                                            uint32_t rows, uint64_t cols, T* out) {
    const uint64_t e0 = 4 * t;
    const int n = dim - e0 < 4 ? static_cast<int>(dim - e0) : 4;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (uint32_t r = 0; r < rows; ++r) {
        const Block4 h = sketch_words(seed, r, group, kDomainSketchBucket, t);
        const Block4 s = sketch_words(seed, r, group, kDomainSketchSign, t);
        const T* row = table + static_cast<uint64_t>(r) * cols;
        for (int i = 0; i < n; ++i)
            acc[i] = acc[i] + sketch_with_sign(static_cast<double>(row[sketch_bucket(h.w[i], cols)]), s.w[i]);
    }
    for (int i = 0; i < n; ++i) out[e0 + i] = static_cast<T>(acc[i]);
}

// Median: thread j owns element j. The CPU sorts up to 32 rows with an odd-even
// transposition network (min / max with the second operand winning ties); the very same
// network here gives the very same bits, signed zeros included. Beyond 32 rows the CPU
// uses std::nth_element, whose choice between +0 and -0 cannot be reproduced: the GPU
// median stops at 32 rows.
constexpr uint32_t kSketchMedianMaxRows = 32;

template <class T>
DPREC_INLINE void sketch_decode_median_thread(uint64_t j, const T* table, uint64_t seed, uint32_t group,
                                              uint32_t rows, uint64_t cols, double median_scale, T* out) {
    double v[kSketchMedianMaxRows] = {};  // rows >= 1 fill what is read; zeroed for the compilers
    const uint64_t block = j >> 2;
    const int lane = static_cast<int>(j & 3);
    for (uint32_t r = 0; r < rows; ++r) {
        const Block4 h = sketch_words(seed, r, group, kDomainSketchBucket, block);
        const Block4 s = sketch_words(seed, r, group, kDomainSketchSign, block);
        const T cell = table[static_cast<uint64_t>(r) * cols + sketch_bucket(h.w[lane], cols)];
        v[r] = sketch_with_sign(static_cast<double>(cell), s.w[lane]);
    }
    for (uint32_t pass = 0; pass < rows; ++pass)
        for (uint32_t a = pass & 1; a + 1 < rows; a += 2) {
            const double p = v[a], q = v[a + 1];
            v[a] = q < p ? q : p;
            v[a + 1] = q < p ? p : q;
        }
    const uint32_t half = rows / 2;
    const double mid = v[half];
    if (rows % 2)
        out[j] = static_cast<T>(mid * median_scale);
    else
        out[j] = static_cast<T>(0.5 * (v[half - 1] + mid) * median_scale);
}

}  // namespace dprec::gpu
