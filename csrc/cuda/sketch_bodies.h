// Per-thread bodies of the count-sketch CUDA kernels, and the plan that batches the encode.
//
// Same rules as kernel_bodies.h: every body depends on its flat thread id alone (no shared
// memory, warp intrinsics or synchronisation), so csrc/python/bind_emulation_sketch.cpp runs
// the very same code on the host, thread by thread, and the GPU can be checked without one.
// The one exception is the cell fold (below), which a warp runs in phases around a shared
// tile, like the FWHT passes of hadamard_bodies.h: each phase is a body of its own, and the
// emulation runs every lane's phase before the next one.
//
// The CPU kernel (csrc/cpu/sketch.cpp) defines the bits: per row r, for j = 0, 1, ...,
// dim - 1 in order, table[r, h_r(j)] += with_sign(x[j] * scale, sign word), in the table's
// dtype, starting from the table's contents. Float atomics would add in a random order, so
// the GPU encode reproduces that order instead:
//
//   1. pairs: for a batch of rows and a chunk of elements, one (key, value) pair per
//      element and row, key = local row << bucket_bits | bucket, value = the signed scaled
//      element, written in (row, j) order;
//   2. a stable radix sort of the pairs on the bucket bits only (CUB): the pairs were
//      written row by row, so stability alone keeps each bucket's pairs in (row, j) order
//      and every cell (row, bucket) ends up as one run of equal keys, still in increasing
//      j. The row bits are never sorted, so batching rows costs no radix pass;
//   3. fold: each run is added, in order, to its cell, starting from the cell's value.
//
// Each cell therefore sees the CPU's additions in the CPU's order: the same bits, whatever
// the GPU. Chunks over j are processed in increasing order, so batching keeps the order too.
//
// A cell's additions form a dependent chain (that is the CPU's order), so the fold's time is
// at least the longest run times one addition's latency. Two folds, chosen per batch by the
// mean run length chunk / cols (the buckets are uniform, so runs are all close to it):
//
// * short runs (large cols, the common case): one thread per pair; the thread at the head
//   of a run walks it. Loads wait on the loop condition, but runs are short and there are
//   many of them, so the fold is throughput-bound;
// * long runs (cols <= chunk / kSketchCellFoldMinRun): one warp per cell. A thread walking
//   a run of 10^5..10^7 pairs would wait a full load latency every few pairs; instead the
//   lanes load the run in coalesced tiles, a tile ahead of the additions, and every lane
//   adds the staged tile in order (redundantly, so no lane diverges). The chain is then
//   limited by the adder alone. A pass over the sorted keys marks each cell's run first.
//
// The plan takes every row (as many as 32-bit keys allow) and a short chunk of j, rather
// than long chunks of one row: independent cells then fold side by side instead of one
// row's chain after another's, and a chunk never ends in a sliver (chunks are balanced).
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
// Buckets and signs (docs/contract.md), as cpu/sketch.cpp computes them
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
// for float32 tables and 192 MiB for float64, plus CUB's temporary storage and the cell
// fold's run bounds, 8 bytes per kSketchCellFoldMinRun pairs). A larger cap would save only
// the fixed cost of a sort (a few kernel boundaries against ~2^23 pairs of memory traffic).
constexpr uint64_t kSketchMaxPairs = uint64_t(1) << 23;

// Mean run length from which a batch folds one warp per cell (see the header comment): at
// ~1000 pairs, a thread walking its run (a load latency every few pairs) takes about as
// long as the warp fold's shared tiles take to stream a full batch.
constexpr uint64_t kSketchCellFoldMinRun = 1024;

// Bits of a bucket < cols: the smallest b with 2^b >= cols (0 for cols = 1, 32 at most).
DPREC_INLINE int sketch_bucket_bits(uint64_t cols) {
    int bits = 0;
    while (bits < 32 && (uint64_t(1) << bits) < cols) ++bits;
    return bits;
}

struct SketchEncodePlan {
    uint64_t dim;
    uint64_t cols;
    uint32_t rows;
    int bucket_bits;     // key = local row << bucket_bits | bucket; the sort reads these bits only
    uint32_t row_batch;  // rows per batch; row_batch << bucket_bits <= 2^32, so keys fit 32 bits
    uint64_t chunk;      // elements of each row per batch: a multiple of 4 (whole Philox blocks)
    uint64_t cell_fold_min_run;
    DPREC_HD uint64_t max_pairs() const { return chunk * row_batch; }
    // With cols == 1 every key of a row is equal and the pairs are written in row order:
    // they are sorted already.
    DPREC_HD bool sorts() const { return bucket_bits > 0; }
    // Each of the n_rows * cols cells receives n_elems / cols pairs on average.
    DPREC_HD bool fold_by_cells(uint64_t n_elems) const { return n_elems >= cell_fold_min_run * cols; }
    // Cells of a batch that folds by cells: n_rows * cols <= n_rows * n_elems / min_run.
    DPREC_HD uint64_t max_fold_cells() const {
        const uint64_t n = max_pairs() / cell_fold_min_run;
        return n > 0 ? n : 1;
    }
};

// `max_pairs` bounds the scratch memory; the launcher passes kSketchMaxPairs and
// kSketchCellFoldMinRun, the host emulation lets the tests pass small values to exercise
// many batches and both folds.
DPREC_INLINE SketchEncodePlan make_sketch_encode_plan(uint64_t dim, uint32_t rows, uint64_t cols, uint64_t max_pairs,
                                                      uint64_t cell_fold_min_run = kSketchCellFoldMinRun) {
    SketchEncodePlan p{};
    p.dim = dim;
    p.cols = cols;
    p.rows = rows;
    p.bucket_bits = sketch_bucket_bits(cols);
    p.cell_fold_min_run = cell_fold_min_run < 1 ? 1 : cell_fold_min_run;
    const uint64_t cap = max_pairs < 4 ? 4 : max_pairs & ~uint64_t(3);
    // Every row that fits the key (rows * cols <= 2^34 leaves at most 8 row groups), and at
    // least one Philox block of each.
    const uint64_t key_rows = (uint64_t(1) << 32) >> p.bucket_bits;
    uint64_t rb = rows;
    if (rb > key_rows) rb = key_rows;
    if (rb > cap / 4) rb = cap / 4;
    p.row_batch = static_cast<uint32_t>(rb);
    // The fewest chunks of at most cap / row_batch elements, then equal ones.
    const uint64_t padded = (dim + 3) & ~uint64_t(3);
    const uint64_t max_chunk = (cap / rb) & ~uint64_t(3);
    const uint64_t n_chunks = (padded + max_chunk - 1) / max_chunk;
    p.chunk = ((padded + n_chunks - 1) / n_chunks + 3) & ~uint64_t(3);
    return p;
}

DPREC_INLINE uint32_t sketch_key(uint32_t local_row, int bucket_bits, uint32_t bucket) {
    return static_cast<uint32_t>(static_cast<uint64_t>(local_row) << bucket_bits) | bucket;
}

// Cell of a key in the batch's table rows: local row * cols + bucket.
DPREC_INLINE uint64_t sketch_key_cell(uint32_t key, int bucket_bits, uint64_t cols) {
    const uint64_t k = key;
    return (k >> bucket_bits) * cols + (k & ((uint64_t(1) << bucket_bits) - 1));
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
                                      uint64_t seed, uint32_t group, uint64_t cols, int bucket_bits, T scale,
                                      uint32_t* keys, T* values) {
    const uint64_t blocks = (n_elems + 3) >> 2;
    const uint32_t local = static_cast<uint32_t>(t / blocks);
    const uint64_t b = t % blocks;
    const uint32_t row = row0 + local;
    const uint64_t block = (j0 >> 2) + b;
    const Block4 h = sketch_words(seed, row, group, kDomainSketchBucket, block);
    const Block4 s = sketch_words(seed, row, group, kDomainSketchSign, block);
    const uint64_t base = static_cast<uint64_t>(local) * n_elems + 4 * b;  // pair of element j0 + 4b
    for (int i = 0; i < 4; ++i) {
        if (4 * b + static_cast<uint64_t>(i) >= n_elems) break;
        const T v = static_cast<T>(x[j0 + 4 * b + static_cast<uint64_t>(i)]) * scale;
        keys[base + i] = sketch_key(local, bucket_bits, sketch_bucket(h.w[i], cols));
        values[base + i] = sketch_with_sign(v, s.w[i]);
    }
}

// Short-run fold. Thread i of a batch's sorted pairs: the first pair of a run of equal keys
// adds the run's values, in order, to its cell (table_batch = the table at the batch's
// first row).
template <class T>
DPREC_INLINE void sketch_fold_thread(uint64_t i, const uint32_t* keys, const T* values, uint64_t n_pairs,
                                     int bucket_bits, uint64_t cols, T* table_batch) {
    const uint32_t key = keys[i];
    if (i > 0 && keys[i - 1] == key) return;
    T& cell = table_batch[sketch_key_cell(key, bucket_bits, cols)];
    T acc = cell;
    for (uint64_t k = i; k < n_pairs && keys[k] == key; ++k) acc = acc + values[k];
    cell = acc;
}

// Long-run fold, step 1. Thread i of the sorted pairs: the run's first and last pairs record
// where the cell's run starts and ends. Cells that receive no pair keep begin = end = 0 (the
// launcher zeroes both arrays, n_rows * cols entries each).
DPREC_INLINE void sketch_cell_bounds_thread(uint64_t i, const uint32_t* keys, uint64_t n_pairs, int bucket_bits,
                                            uint64_t cols, uint32_t* run_begin, uint32_t* run_end) {
    const uint32_t key = keys[i];
    const uint64_t cell = sketch_key_cell(key, bucket_bits, cols);
    if (i == 0 || keys[i - 1] != key) run_begin[cell] = static_cast<uint32_t>(i);
    if (i + 1 == n_pairs || keys[i + 1] != key) run_end[cell] = static_cast<uint32_t>(i + 1);
}

// Long-run fold, step 2: one warp per cell walks the run [begin, end) in tiles of
// kSketchFoldTile pairs. Per tile, in phases separated by __syncwarp() on the GPU:
//   stage: lane writes the tile values it loaded (elements q * 32 + lane) to the warp's
//          shared tile;
//   load:  lane loads its elements of the next tile into registers (coalesced; in flight
//          while the adds run, which is what hides the load latency);
//   add:   every lane adds the staged tile to its copy of the cell, in index order;
// and lane 0 writes the cell. Increasing index is increasing j, so the sum is the short-run
// fold's, bit for bit.
constexpr uint32_t kSketchFoldLanes = 32;
constexpr uint32_t kSketchFoldPerLane = 8;
constexpr uint32_t kSketchFoldTile = kSketchFoldLanes * kSketchFoldPerLane;  // 256 pairs

template <class T>
DPREC_INLINE void sketch_fold_load(uint32_t lane, uint32_t tile_begin, uint32_t end, const T* values,
                                   T (&regs)[kSketchFoldPerLane]) {
    for (uint32_t q = 0; q < kSketchFoldPerLane; ++q) {
        const uint32_t i = tile_begin + q * kSketchFoldLanes + lane;
        regs[q] = i < end ? values[i] : T(0);
    }
}

template <class T>
DPREC_INLINE void sketch_fold_stage(uint32_t lane, const T (&regs)[kSketchFoldPerLane], T* tile) {
    for (uint32_t q = 0; q < kSketchFoldPerLane; ++q) tile[q * kSketchFoldLanes + lane] = regs[q];
}

#if defined(__CUDA_ARCH__)
#define DPREC_SKETCH_UNROLL _Pragma("unroll")
#else
#define DPREC_SKETCH_UNROLL
#endif

// The tile's first n values (n = kSketchFoldTile but in a run's last tile) added to acc in
// order. Unrolled on the GPU so that the shared loads run ahead of the dependent adds.
template <class T>
DPREC_INLINE T sketch_fold_add(const T* tile, uint32_t n, T acc) {
    if (n == kSketchFoldTile) {
        DPREC_SKETCH_UNROLL
        for (uint32_t i = 0; i < kSketchFoldTile; ++i) acc = acc + tile[i];
    } else {
        for (uint32_t i = 0; i < n; ++i) acc = acc + tile[i];
    }
    return acc;
}

DPREC_INLINE uint32_t sketch_fold_tile_length(uint32_t tile_begin, uint32_t end) {
    return end - tile_begin < kSketchFoldTile ? end - tile_begin : kSketchFoldTile;
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
