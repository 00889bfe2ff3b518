#include "hadamard.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dispatch.h"
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

// The in-cache work goes through the run-time ISA table (hadamard_kernels_generic.h).
inline void stages(float* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
    kernels().fwht_stages_f32(x, len, h_begin, h_end);
}
inline void stages(double* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
    kernels().fwht_stages_f64(x, len, h_begin, h_end);
}
inline void scale_all(float* x, uint64_t len, float s) { kernels().fwht_scale_f32(x, len, s); }
inline void scale_all(double* x, uint64_t len, double s) { kernels().fwht_scale_f64(x, len, s); }

template <class T>
T norm_scale(uint64_t n) {
    int log2n = 0;
    while ((uint64_t(1) << log2n) < n) ++log2n;
    if (log2n % 2 == 0) return static_cast<T>(std::ldexp(1.0, -log2n / 2));
    return static_cast<T>(1.0 / std::sqrt(static_cast<double>(n)));
}

// Below this many elements a call runs on the calling thread alone: waking the pool costs
// tens of microseconds, more than the whole transform. Items are computed identically
// either way, so the result does not depend on this choice.
constexpr uint64_t kParallelMinElements = uint64_t(1) << 19;

template <class Body>
void run_items(uint64_t n_items, uint64_t elements, const Body& body) {
    if (elements < kParallelMinElements) {
        for (uint64_t i = 0; i < n_items; ++i) body(static_cast<size_t>(i));
    } else {
        parallel_for(static_cast<size_t>(n_items), body);
    }
}

// One long row (n > kBlock): all stages inside blocks, then the remaining stages in passes
// of up to kMaxPassStages stages, each pass over (group, column chunk) items that gather
// 2^k strided segments into a contiguous buffer (no power-of-two-stride cache conflicts).
template <class T>
void fwht_long(T* x, uint64_t n, bool normalize, T s) {
    const uint64_t B = kBlock<T>;
    const uint64_t W = kColumn<T>;
    run_items(n / B, n, [&](size_t item) { stages(x + item * B, B, 1, B); });

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
        run_items(n_items, n, [&](size_t item) {
            const uint64_t g = item / chunks;
            const uint64_t lo = (item % chunks) * W;
            T* base = x + g * group + lo;
            // One buffer per thread, kept: a fresh 64-128 KiB allocation per item would be
            // mmap'ed and page-faulted every time.
            thread_local std::vector<T> buf;
            if (buf.size() < m * W) buf.resize(static_cast<size_t>(m * W));
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
        run_items(n_items, batch * n, [&](size_t item) {
            const uint64_t r0 = item * rows_per_item;
            const uint64_t r1 = std::min(batch, r0 + rows_per_item);
            // Rows are contiguous and the stages never cross a row: one call per in-cache
            // group of rows.
            const uint64_t rows_per_call = std::max<uint64_t>(1, kBlock<T> / n);
            for (uint64_t r = r0; r < r1; r += rows_per_call) {
                T* rows = x + r * n;
                const uint64_t len = (std::min(r1, r + rows_per_call) - r) * n;
                if (n > 1) stages(rows, len, 1, n);
                if (normalize && n > 1) scale_all(rows, len, s);
            }
        });
        return;
    }
    for (uint64_t r = 0; r < batch; ++r) fwht_long(x + r * n, n, normalize, s);
}

template void fwht<float>(float*, uint64_t, uint64_t, bool);
template void fwht<double>(double*, uint64_t, uint64_t, bool);

}  // namespace dprec::cpu
