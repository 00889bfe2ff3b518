#include "hadamard.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

// Long rows are transformed in L2-sized blocks, each staged through L1-sized blocks, and the
// stages that couple blocks run radix 8 in place (fwht_long).
//
// Elements per L1 block: 16 KiB of data, so that the in-L1 stages take three passes
// (4 in-register stages, then 4 + 4 on AVX-512).
template <class T>
constexpr uint64_t kL1Block = uint64_t(16384) / sizeof(T);
// Elements per L2 block: 512 KiB of data, half of a 1 MiB L2 slice, leaving room for the
// next block, which is prefetched while this one is transformed.
template <class T>
constexpr uint64_t kL2Block = uint64_t(524288) / sizeof(T);
// Columns per work item of a pass across blocks.
constexpr uint64_t kAcrossItemBytes = 16384;
// Rows of small transforms per work item: about this many elements.
constexpr uint64_t kSmallRowsItem = uint64_t(1) << 16;

// The in-cache work goes through the run-time ISA table (hadamard_kernels_generic.h).
inline void stages(float* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
    kernels().fwht_stages_f32(x, len, h_begin, h_end);
}
inline void stages(double* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
    kernels().fwht_stages_f64(x, len, h_begin, h_end);
}
inline void across_rows(float* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, float s) {
    kernels().fwht_rows_f32(x, stride, m, ncols, scaled, s);
}
inline void across_rows(double* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, double s) {
    kernels().fwht_rows_f64(x, stride, m, ncols, scaled, s);
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

// Below this many elements a call runs on the calling thread alone: handing items to the
// pool costs a few microseconds (tens when its threads sleep), more than such a transform.
// Items are computed identically either way, so the result does not depend on this choice.
constexpr uint64_t kParallelMinElements = uint64_t(1) << 17;

template <class Body>
void run_items(uint64_t n_items, uint64_t elements, const Body& body) {
    if (elements < kParallelMinElements) {
        for (uint64_t i = 0; i < n_items; ++i) body(static_cast<size_t>(i));
    } else {
        parallel_for(static_cast<size_t>(n_items), body);
    }
}

// All stages of one row of n <= kL2Block elements, on the calling thread: every stage
// inside L1 blocks, then the stages that couple them, in place while the row is in L2.
template <class T>
void fwht_in_cache(T* x, uint64_t n, bool normalize, T s) {
    const uint64_t B = std::min(n, kL1Block<T>);
    for (uint64_t i = 0; i < n; i += B) stages(x + i, B, 1, B);
    if (B < n) {
        across_rows(x, B, n / B, B, normalize, s);
    } else if (normalize) {
        scale_all(x, n, s);
    }
}

// One long row (n > kL2Block), split top-down into up to 8 sub-rows, recursively, down to
// L2 blocks transformed in cache; after its sub-rows, each level runs the (up to 3) stages
// that couple them in place, over column chunks. Radix 8 keeps those passes to 8 streams,
// which the hardware prefetchers follow and which fit the ways of every cache set (more
// power-of-two-strided streams would evict each other), and it makes the levels few: only
// the top level and the first touch of each L2 block cross DRAM when the row does not fit
// in the L3.
template <class T>
void fwht_long(T* x, uint64_t n, bool normalize, T s) {
    const uint64_t B = kL2Block<T>;
    const uint64_t child = std::max(B, n / 8);
    const uint64_t m = n / child;
    if (child == B) {
        run_items(m, n, [&](size_t item) { fwht_in_cache<T>(x + item * B, B, false, s); });
    } else {
        for (uint64_t c = 0; c < m; ++c) fwht_long(x + c * child, child, false, s);
    }
    const uint64_t W = kAcrossItemBytes / sizeof(T);
    run_items(child / W, n, [&](size_t item) { across_rows(x + item * W, child, m, W, normalize, s); });
}

}  // namespace

template <class T>
void fwht(T* x, uint64_t batch, uint64_t n, bool normalize) {
    if (batch == 0 || n == 0) return;
    const T s = norm_scale<T>(n);
    if (n <= kL2Block<T>) {
        const uint64_t rows_per_item = std::max<uint64_t>(1, kSmallRowsItem / n);
        const uint64_t n_items = (batch + rows_per_item - 1) / rows_per_item;
        run_items(n_items, batch * n, [&](size_t item) {
            const uint64_t r0 = item * rows_per_item;
            const uint64_t r1 = std::min(batch, r0 + rows_per_item);
            // Rows are contiguous and the stages never cross a row: one call per in-cache
            // group of rows.
            const uint64_t rows_per_call = std::max<uint64_t>(1, kL1Block<T> / n);
            if (n > kL1Block<T>) {
                for (uint64_t r = r0; r < r1; ++r) fwht_in_cache<T>(x + r * n, n, normalize, s);
                return;
            }
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
