#include "hadamard.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <vector>

#include "cache_info.h"
#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

// Long rows are transformed in L2-sized blocks, each staged through L1-sized blocks, and the
// stages that couple blocks run radix 8 in place (fwht_long). The sizes come from the caches
// of the machine (cache_info.h); blocking never changes the result (hadamard.h).
struct Blocking {
    // Bytes per L1 block: half the L1d (the other half holds the stack and the lines that
    // the prefetchers bring in), so the in-L1 stages of 16 KiB on a 32 KiB L1d take three
    // passes (4 in-register stages, then 4 + 4 on AVX-512).
    uint64_t l1;
    // Bytes per L2 block: half the L2, for the same reason and because a non-inclusive L2
    // still shares its sets with the L1 victims.
    uint64_t l2;
    // Rows up to this many bytes are taken to fit in the L3 and are transformed level by
    // level, with every thread busy at each level; larger ones sub-row by sub-row. A quarter
    // of the reported L3: it is shared with the other cores (and, in a VM, other tenants).
    uint64_t l3_tree;
};

const Blocking& blocking() {
    static const Blocking b = [] {
        const CacheSizes& c = cache_sizes();
        Blocking r{};
        // Bounds keep the pass structure sane on odd reports: at least 4 KiB (one page) per
        // L1 block and 16 L1 blocks per L2 block.
        r.l1 = std::min<uint64_t>(std::max<uint64_t>(pow2_floor(c.l1d / 2), 4096), uint64_t(1) << 20);
        r.l2 = std::max(pow2_floor(c.l2 / 2), 16 * r.l1);
        r.l3_tree = std::max(pow2_floor(c.l3 / 4), r.l2);
        return r;
    }();
    return b;
}

// Rows of small transforms per work item: about this many elements.
constexpr uint64_t kSmallRowsItem = uint64_t(1) << 16;

// One representative in-cache transform with table t's FWHT kernels on x (64-byte aligned,
// as a fresh large NumPy array or the pool's buffers are not always, but as the kernels are
// fastest): a row of 8 L1 blocks of 16 KiB (float32 2^15, float64 2^14), all its stages.
template <class T>
constexpr uint64_t kProbeBlock = 16384 / sizeof(T);
constexpr uint64_t kProbeRows = 8;
template <class T>
double fwht_probe_once(const KernelTable& t, const T* start, T* x) {
    constexpr uint64_t B = kProbeBlock<T>;
    std::copy(start, start + B * kProbeRows, x);  // fresh values: no overflow to inf
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t r = 0; r < kProbeRows; ++r) {
        if constexpr (sizeof(T) == 4) t.fwht_stages_f32(x + r * B, B, 1, B);
        else t.fwht_stages_f64(x + r * B, B, 1, B);
    }
    if constexpr (sizeof(T) == 4) t.fwht_rows_f32(x, B, kProbeRows, B, false, 1.0f);
    else t.fwht_rows_f64(x, B, kProbeRows, B, false, 1.0);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The table whose FWHT kernels run: the one in use, except under the automatic ISA choice,
// where on first use the supported SIMD tables are timed, runs interleaved, fastest run of
// each, and a narrower one replaces the best only when at least 5% faster (against timing
// noise). Every ISA gives the same bits (hadamard.h), so this changes speed only: on a
// Zen 4 EPYC, which splits 512-bit operations in two halves, the AVX2 kernels ran the
// in-cache stages about 20% faster than the AVX-512 ones before the butterflies used the FMA
// units too; now they time within 5% of each other there.
template <class T>
const KernelTable& fwht_table() {
    if (!isa_is_auto()) return kernels();
    static const KernelTable* const chosen = [] {
        std::vector<const KernelTable*> tables;
        for (const KernelTable* t : supported_kernel_tables())
            if (t->lanes > 1) tables.push_back(t);  // the SIMD tables; the baseline is never faster
        if (tables.size() < 2) return &kernels();
        const size_t n = kProbeBlock<T> * kProbeRows;
        std::vector<T> start(n), storage(n + 64 / sizeof(T));
        T* x = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 / sizeof(T);
        for (size_t i = 0; i < n; ++i) start[i] = static_cast<T>((i * 2654435761u % 1000) * 1e-3);
        std::vector<double> best(tables.size(), 0.0);
        for (int run = 0; run < 8; ++run)
            for (size_t i = 0; i < tables.size(); ++i) {
                const double dt = fwht_probe_once<T>(*tables[i], start.data(), x);
                if (run > 0 && (best[i] == 0.0 || dt < best[i])) best[i] = dt;  // run 0 warms up
            }
        size_t pick = 0;
        for (size_t i = 1; i < tables.size(); ++i)
            if (best[i] < 0.95 * best[pick]) pick = i;
        return tables[pick];
    }();
    return *chosen;
}

// The in-cache work goes through the table's kernels (hadamard_kernels_generic.h).
inline void stages(float* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
    fwht_table<float>().fwht_stages_f32(x, len, h_begin, h_end);
}
inline void stages(double* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
    fwht_table<double>().fwht_stages_f64(x, len, h_begin, h_end);
}
inline void across_rows(float* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, float s) {
    fwht_table<float>().fwht_rows_f32(x, stride, m, ncols, scaled, s);
}
inline void across_rows(double* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, double s) {
    fwht_table<double>().fwht_rows_f64(x, stride, m, ncols, scaled, s);
}
inline void scale_all(float* x, uint64_t len, float s) { fwht_table<float>().fwht_scale_f32(x, len, s); }
inline void scale_all(double* x, uint64_t len, double s) { fwht_table<double>().fwht_scale_f64(x, len, s); }

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

// All stages of one row of n <= (L2 block) elements, on the calling thread: every stage
// inside L1 blocks of l1 elements, then the stages that couple them, in place while the row
// is in L2.
template <class T>
void fwht_in_cache(const T* src, T* x, uint64_t n, uint64_t l1, bool normalize, T s) {
    const uint64_t B = std::min(n, l1);
    for (uint64_t i = 0; i < n; i += B) {
        if (src != x) std::copy(src + i, src + i + B, x + i);  // into the L1, for the stages
        stages(x + i, B, 1, B);
    }
    if (B < n) {
        across_rows(x, B, n / B, B, normalize, s);
    } else if (normalize) {
        scale_all(x, n, s);
    }
}

// A long row (n > its block size B) is split top-down into up to 8 sub-rows, recursively,
// down to blocks of B elements transformed in cache; after its sub-rows, each level runs the
// (up to 3) stages that couple them in place, over column chunks. Radix 8 keeps those passes
// to 8 streams, which the hardware prefetchers follow and which fit the ways of every cache
// set (more power-of-two-strided streams would evict each other), and it keeps the levels few.
struct LongPlan {
    uint64_t l1;       // elements per L1 block
    uint64_t block;    // elements per in-cache block (B)
    uint64_t l3_tree;  // elements up to which a row is done level by level
    uint64_t across;   // columns per work item of a pass across blocks: an L1 block's worth
    uint64_t sub_row(uint64_t n) const { return std::max(block, n / 8); }
};

// The stages that couple the sub-rows of every node of `size` elements in x[0, n).
template <class T>
void across_level(const LongPlan& p, T* x, uint64_t n, uint64_t size, bool normalize, T s) {
    const uint64_t child = p.sub_row(size);
    const uint64_t m = size / child;
    const uint64_t W = std::min(p.across, child);
    const uint64_t chunks = child / W;
    run_items((n / size) * chunks, n, [&](size_t item) {
        const uint64_t node = item / chunks, chunk = item % chunks;
        across_rows(x + node * size + chunk * W, child, m, W, normalize, s);
    });
}

template <class T>
void fwht_long(const LongPlan& p, const T* src, T* x, uint64_t n, bool normalize, T s) {
    const uint64_t B = p.block;
    if (n <= p.l3_tree || p.sub_row(n) == B) {
        // The row fits in the L3: every block at once, then each level at once (all the
        // threads busy at every step), from the smallest nodes up.
        run_items(n / B, n, [&](size_t item) { fwht_in_cache<T>(src + item * B, x + item * B, B, p.l1, false, s); });
        std::vector<uint64_t> sizes;  // node sizes, top-down
        for (uint64_t size = n; size > B; size = p.sub_row(size)) sizes.push_back(size);
        for (size_t i = sizes.size(); i-- > 0;) across_level(p, x, n, sizes[i], normalize && i == 0, s);
        return;
    }
    // Larger: one sub-row after another (each one then stays in the L3 while it is done),
    // then the stages across them, in a pass over memory.
    const uint64_t child = p.sub_row(n);
    for (uint64_t c = 0; c < n / child; ++c) fwht_long(p, src + c * child, x + c * child, child, false, s);
    across_level(p, x, n, n, normalize, s);
}

int log2_of(uint64_t v) {
    int k = 0;
    while ((uint64_t(1) << k) < v) ++k;
    return k;
}

// The in-cache block B for a row of n > max_block elements. Every stage beyond an L1 block
// costs a pass over more than the L1, and a pass runs at most 3 of them (radix 8): the
// stages inside B across its L1 blocks, then the levels across blocks. So of the powers of
// two from l1 to max_block, B is one that needs the fewest such passes, the largest of those
// (more of the work inside the L2): with B = max_block = 2^17 floats, 2^18, 2^21 and 2^24
// took one pass more than they need (a radix-2 or radix-4 pass inside B and another across).
uint64_t fewest_pass_block(uint64_t n, uint64_t l1, uint64_t max_block) {
    const int s_n = log2_of(n), s_l1 = log2_of(l1);
    uint64_t best = max_block;
    int best_passes = s_n;  // more than any choice needs
    for (uint64_t b = max_block; b >= l1; b /= 2) {
        const int s_b = log2_of(b);
        const int passes = (s_b - s_l1 + 2) / 3 + (s_n - s_b + 2) / 3;
        if (passes < best_passes) best_passes = passes, best = b;
        if (b == l1) break;
    }
    return best;
}

}  // namespace

template <class T>
void fwht(T* x, uint64_t batch, uint64_t n, bool normalize) {
    fwht<T>(x, x, batch, n, normalize);
}

template <class T>
void fwht(const T* src, T* x, uint64_t batch, uint64_t n, bool normalize) {
    if (batch == 0 || n == 0) return;
    // Settles the FWHT's table here, on the calling thread, before any pool work: its first
    // use times the ISAs, which should neither run on a pool thread nor beside other work.
    fwht_table<T>();
    const T s = norm_scale<T>(n);
    const Blocking& bk = blocking();
    const uint64_t l1 = bk.l1 / sizeof(T), l2 = bk.l2 / sizeof(T);
    // A batch of fewer rows than threads would leave threads idle on rows that fit one L2
    // block (and, with a large L2, on most rows): such rows are split into one block per
    // thread (at least an L1 block each), whose in-cache work and cross-block passes then
    // run in parallel. The arithmetic is the same either way (hadamard.h).
    uint64_t block = l2;
    if (n >= 2 * kParallelMinElements) {
        const uint64_t nt = static_cast<uint64_t>(std::max(1, get_num_threads()));
        if (nt > 1 && batch < nt) block = std::min(block, std::max(l1, pow2_floor(n / nt)));
    }
    if (n <= block) {
        const uint64_t rows_per_item = std::max<uint64_t>(1, kSmallRowsItem / n);
        const uint64_t n_items = (batch + rows_per_item - 1) / rows_per_item;
        run_items(n_items, batch * n, [&](size_t item) {
            const uint64_t r0 = item * rows_per_item;
            const uint64_t r1 = std::min(batch, r0 + rows_per_item);
            if (n > l1) {
                for (uint64_t r = r0; r < r1; ++r) fwht_in_cache<T>(src + r * n, x + r * n, n, l1, normalize, s);
                return;
            }
            // Rows are contiguous and the stages never cross a row: one call per in-cache
            // group of rows.
            const uint64_t rows_per_call = std::max<uint64_t>(1, l1 / n);
            for (uint64_t r = r0; r < r1; r += rows_per_call) {
                T* rows = x + r * n;
                const uint64_t len = (std::min(r1, r + rows_per_call) - r) * n;
                if (src != x) std::copy(src + r * n, src + r * n + len, rows);  // into the L1
                if (n > 1) stages(rows, len, 1, n);
                if (normalize && n > 1) scale_all(rows, len, s);
            }
        });
        return;
    }
    block = fewest_pass_block(n, l1, block);
    const LongPlan plan{l1, block, bk.l3_tree / sizeof(T), l1};
    for (uint64_t r = 0; r < batch; ++r) fwht_long(plan, src + r * n, x + r * n, n, normalize, s);
}

template <class T>
const char* fwht_isa() {
    return fwht_table<T>().name;
}

template void fwht<float>(float*, uint64_t, uint64_t, bool);
template void fwht<float>(const float*, float*, uint64_t, uint64_t, bool);
template void fwht<double>(const double*, double*, uint64_t, uint64_t, bool);
template const char* fwht_isa<float>();
template const char* fwht_isa<double>();
template void fwht<double>(double*, uint64_t, uint64_t, bool);

}  // namespace dprec::cpu
