#include "sketch.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "../common/philox.h"
#include "cache_info.h"
#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements of bucket / sign words generated at once (encode): a power of two such that the
// tile's words, buckets, addends and slice of x fill at most ~2/3 of the L1d, which keeps
// them there between the steps (1024 on a 32 KiB L1d, 2048 on 48 KiB).
template <class T>
uint64_t word_tile() {
    static const uint64_t tile = std::min<uint64_t>(
        std::max<uint64_t>(pow2_floor(cache_sizes().l1d / (3 * 4 + 2 * sizeof(T))), 256), 4096);
    return tile;
}
constexpr uint64_t kMaxWordTile = 4096;
constexpr uint64_t kDecodeChunk = 4096;      // elements per word tile of the decode (a multiple of 4)
constexpr uint64_t kDecodeMaxValues = 1 << 15;  // cap on rows x chunk buffered for the median
constexpr uint32_t kSortNetworkRows = 32;       // up to this many rows: vectorised transposition sort

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Elements per work item of the mean decode, a multiple of kDecodeChunk. An item reads its
// rows one after another, and a row's cells at random: with few elements per item every row
// is fetched into the cache again for each item (with 4096 elements, about one 64-byte line
// per row-element, from the L3 once the table outgrows the L2). So an item takes as many
// elements as keep its float64 sums within a quarter of the L2 (the row being read gets
// the rest), but no fewer than four items per thread where the size allows.
uint64_t mean_decode_chunk(uint64_t dim) {
    const uint64_t by_cache = std::max<uint64_t>(kDecodeChunk, pow2_floor(cache_sizes().l2 / 4 / sizeof(double)));
    const uint64_t nt = static_cast<uint64_t>(std::max(1, get_num_threads()));
    const uint64_t by_threads = std::max<uint64_t>(kDecodeChunk, pow2_floor(std::max<uint64_t>(1, dim / (4 * nt))));
    return std::min(by_cache, by_threads) / kDecodeChunk * kDecodeChunk;
}

inline uint32_t bucket_of(uint32_t w, uint64_t cols) {
    return static_cast<uint32_t>((static_cast<uint64_t>(w) * cols) >> 32);
}

// v with its sign flipped when the sign word is >= 2^31 (sign -1): an exact negation.
inline float with_sign(float v, uint32_t sign_word) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits ^= sign_word & 0x80000000u;
    std::memcpy(&v, &bits, 4);
    return v;
}

inline double with_sign(double v, uint32_t sign_word) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    bits ^= static_cast<uint64_t>(sign_word & 0x80000000u) << 32;
    std::memcpy(&v, &bits, 8);
    return v;
}

// Words of elements [first, first + count) of (seed, row, group, domain); first % 4 == 0 and
// buf holds ceil(count / 4) * 4 words.
inline void words(const KernelTable& k, uint64_t seed, uint32_t row, uint32_t group, uint32_t domain, uint64_t first,
                  uint64_t count, uint32_t* buf) {
    const StreamId id{seed, row, group, domain};
    k.philox_words(id, static_cast<uint32_t>(first >> 2), static_cast<size_t>(ceil_div(count, 4)), buf);
}

inline void addends(const KernelTable& k, const uint32_t* hw, const uint32_t* sw, const float* x, float s,
                    uint64_t cols, size_t n, uint32_t* idx, float* val) {
    k.sketch_addends_f32(hw, sw, x, s, cols, n, idx, val);
}
inline void addends(const KernelTable& k, const uint32_t* hw, const uint32_t* sw, const double* x, double s,
                    uint64_t cols, size_t n, uint32_t* idx, double* val) {
    k.sketch_addends_f64(hw, sw, x, s, cols, n, idx, val);
}
inline void gather(const KernelTable& k, const float* row, const uint32_t* hw, const uint32_t* sw, uint64_t cols,
                   size_t n, double* acc) {
    k.sketch_gather_f32(row, hw, sw, cols, n, acc);
}
inline void gather(const KernelTable& k, const double* row, const uint32_t* hw, const uint32_t* sw, uint64_t cols,
                   size_t n, double* acc) {
    k.sketch_gather_f64(row, hw, sw, cols, n, acc);
}

}  // namespace

template <class T>
void count_sketch_encode(const T* x, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols,
                         double scale, T* table) {
    const KernelTable& k = kernels();
    const T s = static_cast<T>(scale);
    const uint64_t tile = word_tile<T>();
    // A work item is a run of consecutive rows, done tile by tile with its rows inside: each
    // tile of x is read from memory once per item instead of once per row (with one row per
    // item, an x too large for the caches is streamed from DRAM `rows` times, which costs
    // where memory is slow and the L3 share small). The item's table rows, which the scatter
    // hits at random, are kept within half the L2; and there are at least as many items as threads, in
    // balanced sizes. Each row still adds its elements in increasing j, so the table is the
    // same bits for any grouping and thread count.
    const uint64_t row_bytes = cols * sizeof(T);
    const uint64_t fit = std::max<uint64_t>(1, (cache_sizes().l2 / 2) / std::max<uint64_t>(row_bytes, 1));
    const uint64_t nt = static_cast<uint64_t>(std::max(1, get_num_threads()));
    uint64_t n_items = std::max(ceil_div(rows, fit), std::min<uint64_t>(rows, nt));
    if (n_items > nt) n_items = std::min<uint64_t>(rows, ceil_div(n_items, nt) * nt);
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        // Rows [r0, r1) of item: the first rows % n_items items have one row more.
        const uint64_t base = rows / n_items, extra = rows % n_items;
        const uint64_t r0 = item * base + std::min<uint64_t>(item, extra);
        const uint64_t r1 = r0 + base + (item < extra ? 1 : 0);
        alignas(64) uint32_t hb[kMaxWordTile], sb[kMaxWordTile], idx[kMaxWordTile];
        alignas(64) T val[kMaxWordTile];
        for (uint64_t j0 = 0; j0 < dim; j0 += tile) {
            const uint64_t n = std::min(tile, dim - j0);
            for (uint64_t r = r0; r < r1; ++r) {
                T* __restrict t = table + r * cols;
                words(k, seed, static_cast<uint32_t>(r), group, kDomainSketchBucket, j0, n, hb);
                words(k, seed, static_cast<uint32_t>(r), group, kDomainSketchSign, j0, n, sb);
                // Buckets and signed addends in SIMD; what is left is the scatter, in order.
                addends(k, hb, sb, x + j0, s, cols, static_cast<size_t>(n), idx, val);
                for (uint64_t i = 0; i < n; ++i) t[idx[i]] += val[i];
            }
        }
    });
}

template <class T>
void count_sketch_decode(const T* table, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols,
                         bool median, double median_scale, T* out) {
    const KernelTable& k = kernels();
    uint64_t chunk = mean_decode_chunk(dim);
    if (median) chunk = std::max<uint64_t>(4, std::min(kDecodeChunk, (kDecodeMaxValues / rows) & ~uint64_t(3)));
    const uint64_t n_items = ceil_div(dim, chunk);
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t j0 = item * chunk;
        const uint64_t n = std::min(chunk, dim - j0);
        const uint64_t tile = std::min(n, kDecodeChunk);
        std::vector<uint32_t> hb(static_cast<size_t>(ceil_div(tile, 4) * 4)), sb(hb.size());
        if (!median) {
            // Row by row, each row's elements tile by tile: every element still adds its rows
            // in increasing order, whatever the chunk.
            std::vector<double> acc(static_cast<size_t>(n), 0.0);
            for (uint32_t r = 0; r < rows; ++r) {
                const T* row = table + static_cast<uint64_t>(r) * cols;
                for (uint64_t s0 = 0; s0 < n; s0 += tile) {
                    const uint64_t m = std::min(tile, n - s0);
                    words(k, seed, r, group, kDomainSketchBucket, j0 + s0, m, hb.data());
                    words(k, seed, r, group, kDomainSketchSign, j0 + s0, m, sb.data());
                    gather(k, row, hb.data(), sb.data(), cols, static_cast<size_t>(m), acc.data() + s0);
                }
            }
            for (uint64_t i = 0; i < n; ++i) out[j0 + i] = static_cast<T>(acc[i]);
            return;
        }
        // values[r * n + i]: row-major, so the small-rows sort runs over contiguous vectors.
        std::vector<double> values(static_cast<size_t>(n * rows));
        for (uint32_t r = 0; r < rows; ++r) {
            words(k, seed, r, group, kDomainSketchBucket, j0, n, hb.data());
            words(k, seed, r, group, kDomainSketchSign, j0, n, sb.data());
            const T* t = table + static_cast<uint64_t>(r) * cols;
            double* dst = values.data() + static_cast<uint64_t>(r) * n;
            for (uint64_t i = 0; i < n; ++i) dst[i] = with_sign(static_cast<double>(t[bucket_of(hb[i], cols)]), sb[i]);
        }
        const uint64_t half = rows / 2;
        if (rows <= kSortNetworkRows) {
            // Odd-even transposition sort of every element's rows at once: branch-free
            // min / max over contiguous vectors (random data would mispredict a scalar sort).
            k.sort_columns_f64(values.data(), rows, n);
            const double* mid = values.data() + half * n;
            if (rows % 2) {
                for (uint64_t i = 0; i < n; ++i) out[j0 + i] = static_cast<T>(mid[i] * median_scale);
            } else {
                const double* below = mid - n;
                for (uint64_t i = 0; i < n; ++i)
                    out[j0 + i] = static_cast<T>(0.5 * (below[i] + mid[i]) * median_scale);
            }
            return;
        }
        std::vector<double> v(rows);
        for (uint64_t i = 0; i < n; ++i) {
            for (uint32_t r = 0; r < rows; ++r) v[r] = values[static_cast<size_t>(static_cast<uint64_t>(r) * n + i)];
            std::nth_element(v.begin(), v.begin() + half, v.end());
            double med = v[half];
            if (rows % 2 == 0) med = 0.5 * (*std::max_element(v.begin(), v.begin() + half) + med);
            out[j0 + i] = static_cast<T>(med * median_scale);
        }
    });
}

template void count_sketch_encode<float>(const float*, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, double,
                                         float*);
template void count_sketch_encode<double>(const double*, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, double,
                                          double*);
template void count_sketch_decode<float>(const float*, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, bool, double,
                                         float*);
template void count_sketch_decode<double>(const double*, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t, bool,
                                          double, double*);

}  // namespace dprec::cpu
