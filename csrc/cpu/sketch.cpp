#include "sketch.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "../common/philox.h"
#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

constexpr uint64_t kWordTile = 1024;         // elements of bucket / sign words generated at once
constexpr uint64_t kDecodeChunk = 4096;      // elements per decode work item (a multiple of 4)
constexpr uint64_t kDecodeMaxValues = 1 << 15;  // cap on rows x chunk buffered for the median
constexpr uint32_t kSortNetworkRows = 32;       // up to this many rows: vectorised transposition sort

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

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
    parallel_for(static_cast<size_t>(rows), [&](size_t item) {
        const uint32_t r = static_cast<uint32_t>(item);
        T* __restrict t = table + static_cast<uint64_t>(r) * cols;
        alignas(64) uint32_t hb[kWordTile], sb[kWordTile], idx[kWordTile];
        alignas(64) T val[kWordTile];
        for (uint64_t j0 = 0; j0 < dim; j0 += kWordTile) {
            const uint64_t n = std::min(kWordTile, dim - j0);
            words(k, seed, r, group, kDomainSketchBucket, j0, n, hb);
            words(k, seed, r, group, kDomainSketchSign, j0, n, sb);
            // Buckets and signed addends in SIMD; what is left is the scatter, in order.
            addends(k, hb, sb, x + j0, s, cols, static_cast<size_t>(n), idx, val);
            for (uint64_t i = 0; i < n; ++i) t[idx[i]] += val[i];
        }
    });
}

template <class T>
void count_sketch_decode(const T* table, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols,
                         bool median, double median_scale, T* out) {
    const KernelTable& k = kernels();
    uint64_t chunk = kDecodeChunk;
    if (median) chunk = std::max<uint64_t>(4, std::min(kDecodeChunk, (kDecodeMaxValues / rows) & ~uint64_t(3)));
    const uint64_t n_items = ceil_div(dim, chunk);
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t j0 = item * chunk;
        const uint64_t n = std::min(chunk, dim - j0);
        std::vector<uint32_t> hb(static_cast<size_t>(ceil_div(n, 4) * 4)), sb(hb.size());
        if (!median) {
            std::vector<double> acc(static_cast<size_t>(n), 0.0);
            for (uint32_t r = 0; r < rows; ++r) {
                words(k, seed, r, group, kDomainSketchBucket, j0, n, hb.data());
                words(k, seed, r, group, kDomainSketchSign, j0, n, sb.data());
                gather(k, table + static_cast<uint64_t>(r) * cols, hb.data(), sb.data(), cols, static_cast<size_t>(n),
                       acc.data());
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
