#include "hadamard.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements per in-cache block: 32 KiB of data (L1-sized for float32, half of a small L2 slice).
template <class T>
constexpr uint64_t kBlock = uint64_t(32768) / sizeof(T);
// Contiguous elements per column chunk in the across-block passes (512 bytes).
template <class T>
constexpr uint64_t kColumn = uint64_t(512) / sizeof(T);
// At most this many stages per across-block pass: a (2^k x kColumn) buffer of 128 KiB.
constexpr int kMaxPassStages = 8;
// Rows of small transforms per work item: about this many elements.
constexpr uint64_t kSmallRowsItem = uint64_t(1) << 16;

// Radix-2 butterflies at stride h over len elements (len a multiple of 2h).
template <class T>
inline void stage2(T* x, uint64_t len, uint64_t h) {
    for (uint64_t i = 0; i < len; i += 2 * h) {
        T* __restrict a = x + i;
        T* __restrict b = x + i + h;
        for (uint64_t j = 0; j < h; ++j) {
            const T u = a[j], v = b[j];
            a[j] = u + v;
            b[j] = u - v;
        }
    }
}

// Stages h and 2h in one pass (len a multiple of 4h): the same operations as two stage2 calls.
template <class T>
inline void stage4(T* x, uint64_t len, uint64_t h) {
    for (uint64_t i = 0; i < len; i += 4 * h) {
        T* __restrict a = x + i;
        T* __restrict b = x + i + h;
        T* __restrict c = x + i + 2 * h;
        T* __restrict d = x + i + 3 * h;
        for (uint64_t j = 0; j < h; ++j) {
            const T p = a[j] + b[j], q = a[j] - b[j];
            const T r = c[j] + d[j], s = c[j] - d[j];
            a[j] = p + r;
            b[j] = q + s;
            c[j] = p - r;
            d[j] = q - s;
        }
    }
}

// Stages h = 1, 2, 4 on consecutive groups of 8 (len a multiple of 8).
template <class T>
inline void stages_1_2_4(T* x, uint64_t len) {
    for (uint64_t i = 0; i < len; i += 8) {
        T* p = x + i;
        const T a0 = p[0] + p[1], a1 = p[0] - p[1], a2 = p[2] + p[3], a3 = p[2] - p[3];
        const T a4 = p[4] + p[5], a5 = p[4] - p[5], a6 = p[6] + p[7], a7 = p[6] - p[7];
        const T b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
        const T b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
        p[0] = b0 + b4;
        p[4] = b0 - b4;
        p[1] = b1 + b5;
        p[5] = b1 - b5;
        p[2] = b2 + b6;
        p[6] = b2 - b6;
        p[3] = b3 + b7;
        p[7] = b3 - b7;
    }
}

// Stages h = h_begin, 2 h_begin, ... < h_end over x[0, len) (len a multiple of h_end).
template <class T>
void stages(T* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
    uint64_t h = h_begin;
    if (h == 1) {
        if (h_end >= 8) {
            stages_1_2_4(x, len);
            h = 8;
        } else if (h_end == 4) {
            stage4(x, len, 1);
            h = 4;
        }
    }
    for (; 4 * h <= h_end; h *= 4) stage4(x, len, h);
    if (h < h_end) stage2(x, len, h);
}

template <class T>
inline void scale_all(T* x, uint64_t len, T s) {
    for (uint64_t i = 0; i < len; ++i) x[i] *= s;
}

template <class T>
T norm_scale(uint64_t n) {
    int log2n = 0;
    while ((uint64_t(1) << log2n) < n) ++log2n;
    if (log2n % 2 == 0) return static_cast<T>(std::ldexp(1.0, -log2n / 2));
    return static_cast<T>(1.0 / std::sqrt(static_cast<double>(n)));
}

// One long row (n > kBlock): all stages inside blocks, then the remaining stages in passes
// of up to kMaxPassStages stages, each pass over (group, column chunk) items that gather
// 2^k strided segments into a contiguous buffer (no power-of-two-stride cache conflicts).
template <class T>
void fwht_long(T* x, uint64_t n, bool normalize, T s) {
    const uint64_t B = kBlock<T>;
    const uint64_t W = kColumn<T>;
    parallel_for(static_cast<size_t>(n / B), [&](size_t item) { stages(x + item * B, B, 1, B); });

    int remaining = 0;
    while ((B << remaining) < n) ++remaining;
    const int n_passes = (remaining + kMaxPassStages - 1) / kMaxPassStages;
    uint64_t h0 = B;
    for (int pass = 0; pass < n_passes; ++pass) {
        // Balanced: the first passes take the larger share.
        const int k = (remaining + (n_passes - pass) - 1) / (n_passes - pass);
        remaining -= k;
        const bool last = pass == n_passes - 1;
        const uint64_t m = uint64_t(1) << k;  // segments per column
        const uint64_t group = h0 * m;        // elements coupled by this pass
        const uint64_t chunks = h0 / W;
        const uint64_t n_items = (n / group) * chunks;
        parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
            const uint64_t g = item / chunks;
            const uint64_t lo = (item % chunks) * W;
            T* base = x + g * group + lo;
            std::vector<T> buf(static_cast<size_t>(m * W));
            T* __restrict b = buf.data();
            for (uint64_t r = 0; r < m; ++r) std::copy(base + r * h0, base + r * h0 + W, b + r * W);
            stages(b, m * W, W, m * W);
            if (last && normalize) scale_all(b, m * W, s);
            for (uint64_t r = 0; r < m; ++r) std::copy(b + r * W, b + (r + 1) * W, base + r * h0);
        });
        h0 = group;
    }
}

}  // namespace

template <class T>
void fwht(T* x, uint64_t batch, uint64_t n, bool normalize) {
    if (batch == 0 || n == 0) return;
    const T s = norm_scale<T>(n);
    if (n <= kBlock<T>) {
        const uint64_t rows_per_item = std::max<uint64_t>(1, kSmallRowsItem / n);
        const uint64_t n_items = (batch + rows_per_item - 1) / rows_per_item;
        parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
            const uint64_t r0 = item * rows_per_item;
            const uint64_t r1 = std::min(batch, r0 + rows_per_item);
            for (uint64_t r = r0; r < r1; ++r) {
                T* row = x + r * n;
                if (n > 1) stages(row, n, 1, n);
                if (normalize && n > 1) scale_all(row, n, s);
            }
        });
        return;
    }
    for (uint64_t r = 0; r < batch; ++r) fwht_long(x + r * n, n, normalize, s);
}

template void fwht<float>(float*, uint64_t, uint64_t, bool);
template void fwht<double>(double*, uint64_t, uint64_t, bool);

}  // namespace dprec::cpu
