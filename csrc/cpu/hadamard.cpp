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
// Elements per L2 block: 512 KiB of data, half of a 1 MiB L2 slice.
template <class T>
constexpr uint64_t kL2Block = uint64_t(524288) / sizeof(T);
// Rows up to this size are taken to fit in the L3 and are transformed level by level, with
// every thread busy at each level; larger ones sub-row by sub-row.
constexpr uint64_t kL3TreeBytes = uint64_t(8) << 20;
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

// A long row (n > kL2Block) is split top-down into up to 8 sub-rows, recursively, down to
// L2 blocks transformed in cache; after its sub-rows, each level runs the (up to 3) stages
// that couple them in place, over column chunks. Radix 8 keeps those passes to 8 streams,
// which the hardware prefetchers follow and which fit the ways of every cache set (more
// power-of-two-strided streams would evict each other), and it keeps the levels few.
template <class T>
uint64_t sub_row(uint64_t n) {
    return std::max(kL2Block<T>, n / 8);
}

// The stages that couple the sub-rows of every node of `size` elements in x[0, n).
template <class T>
void across_level(T* x, uint64_t n, uint64_t size, bool normalize, T s) {
    const uint64_t child = sub_row<T>(size);
    const uint64_t m = size / child;
    const uint64_t W = kAcrossItemBytes / sizeof(T);
    const uint64_t chunks = child / W;
    run_items((n / size) * chunks, n, [&](size_t item) {
        const uint64_t node = item / chunks, chunk = item % chunks;
        across_rows(x + node * size + chunk * W, child, m, W, normalize, s);
    });
}

template <class T>
void fwht_long(T* x, uint64_t n, bool normalize, T s) {
    const uint64_t B = kL2Block<T>;
    if (n * sizeof(T) <= kL3TreeBytes || sub_row<T>(n) == B) {
        // The row fits in the L3: every L2 block at once, then each level at once (all the
        // threads busy at every step), from the smallest nodes up.
        run_items(n / B, n, [&](size_t item) { fwht_in_cache<T>(x + item * B, B, false, s); });
        std::vector<uint64_t> sizes;  // node sizes, top-down
        for (uint64_t size = n; size > B; size = sub_row<T>(size)) sizes.push_back(size);
        for (size_t i = sizes.size(); i-- > 0;) across_level(x, n, sizes[i], normalize && i == 0, s);
        return;
    }
    // Larger: one sub-row after another (each one then stays in the L3 while it is done),
    // then the stages across them, in a pass over memory.
    const uint64_t child = sub_row<T>(n);
    for (uint64_t c = 0; c < n / child; ++c) fwht_long(x + c * child, child, false, s);
    across_level(x, n, n, normalize, s);
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
