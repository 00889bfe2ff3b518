#include "rec.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

constexpr uint64_t kFillTile = 1 << 15;         // elements per work item when filling
constexpr uint64_t kLlrTileBlocks = 256;        // blocks per phi tile (1024 elements, 8 KiB as double)
constexpr uint64_t kLlrSegmentBlocks = 1 << 14; // blocks per reduction segment (65536 elements)
constexpr uint64_t kLlrMaxPartials = 1 << 22;   // cap on candidates x segments partial sums
constexpr uint32_t kLlrCandidateBlock = 16;     // candidates per work item
constexpr uint64_t kAccumulateTile = 1 << 12;   // elements per work item when aggregating
// Lane counts are powers of two up to kMaxLanes, so a tile never rounds up past its buffer.
static_assert(kLlrTileBlocks % kMaxLanes == 0, "a tile must be a whole number of vectors");

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Elements [first, first + count) of a stream into out, via `gen`(block0, nblocks, dst).
// Whole blocks go straight to out; a partial block at either end goes through a buffer.
template <class W, class Gen>
void fill_range(uint64_t first, uint64_t count, W* out, const Gen& gen) {
    W edge[4];
    uint64_t pos = first;
    const uint64_t end = first + count;
    if (pos & 3) {
        gen(static_cast<uint32_t>(pos >> 2), 1, edge);
        const uint64_t take = std::min<uint64_t>(4 - (pos & 3), end - pos);
        std::copy(edge + (pos & 3), edge + (pos & 3) + take, out);
        out += take;
        pos += take;
    }
    const uint64_t whole = (end - pos) >> 2;
    if (whole) {
        gen(static_cast<uint32_t>(pos >> 2), static_cast<size_t>(whole), out);
        out += 4 * whole;
        pos += 4 * whole;
    }
    if (pos < end) {
        gen(static_cast<uint32_t>(pos >> 2), 1, edge);
        std::copy(edge, edge + (end - pos), out);
    }
}

template <class W, class Gen>
void parallel_fill(uint64_t offset, uint64_t count, W* out, const Gen& gen) {
    const uint64_t n_items = ceil_div(count, kFillTile);
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t i0 = item * kFillTile;
        const uint64_t n = std::min(kFillTile, count - i0);
        fill_range(offset + i0, n, out + i0, gen);
    });
}

}  // namespace

void fill_words(const StreamId& id, uint64_t offset, uint64_t count, uint32_t* out) {
    const KernelTable& k = kernels();
    parallel_fill(offset, count, out, [&](uint32_t b0, size_t nb, uint32_t* dst) { k.philox_words(id, b0, nb, dst); });
}

void fill_normals(const StreamId& id, uint64_t offset, uint64_t count, float scale, float* out) {
    const KernelTable& k = kernels();
    parallel_fill(offset, count, out,
                  [&](uint32_t b0, size_t nb, float* dst) { k.normals(id, b0, nb, scale, dst); });
}

namespace {

// The tiling of one group's logits. It depends only on (d, K) and the kernel table's lane
// count, never on the thread count or on the other groups of a call, so that every group's
// sums are the same bits however it is computed.
struct LlrPlan {
    uint64_t n_blocks;    // Philox blocks covering d
    uint64_t seg_blocks;  // blocks per reduction segment (a multiple of kLlrTileBlocks)
    uint64_t n_segments;
    uint64_t n_kblocks;   // candidate blocks of kLlrCandidateBlock
    uint64_t items() const { return n_kblocks * n_segments; }
};

LlrPlan llr_plan(uint64_t d, uint32_t n_candidates) {
    LlrPlan p;
    p.n_blocks = ceil_div(d, 4);
    const uint64_t max_segments = std::max<uint64_t>(1, kLlrMaxPartials / n_candidates);
    p.seg_blocks = std::max(kLlrSegmentBlocks, ceil_div(p.n_blocks, max_segments));
    p.seg_blocks = ceil_div(p.seg_blocks, kLlrTileBlocks) * kLlrTileBlocks;
    p.n_segments = ceil_div(p.n_blocks, p.seg_blocks);
    p.n_kblocks = ceil_div(n_candidates, kLlrCandidateBlock);
    return p;
}

// Candidates k_first .. k_first + nk - 1 of segment `seg` of one group: partial[k * n_segments
// + seg] = the lanes of its accumulator summed in lane order.
template <class T>
void llr_item(const KernelTable& k, const T* phi, uint64_t d, uint64_t seed, uint32_t group, const LlrPlan& plan,
              uint64_t seg, uint32_t k_first, uint32_t nk, double* partial) {
    const uint64_t lanes = static_cast<uint64_t>(k.lanes);
    // On the stack: a small update runs many short items, where a heap allocation per item
    // would show. At most 16 candidates x 16 lanes and 4 x 256 elements: 10 KiB (a tile of
    // kLlrTileBlocks is a whole number of vectors for every lane count, see the assertion).
    double acc[kLlrCandidateBlock * kMaxLanes];
    double phi_t[4 * kLlrTileBlocks];
    std::fill(acc, acc + nk * lanes, 0.0);
    const uint64_t seg_first = seg * plan.seg_blocks;
    const uint64_t seg_end = std::min(plan.n_blocks, seg_first + plan.seg_blocks);
    for (uint64_t tile = seg_first; tile < seg_end; tile += kLlrTileBlocks) {
        const uint64_t nb = ceil_div(std::min(kLlrTileBlocks, seg_end - tile), lanes) * lanes;
        // Lane order: chunk c of `lanes` blocks, word j, lane l <- element 4(c L + l) + j.
        for (uint64_t c = 0; c < nb / lanes; ++c)
            for (uint64_t j = 0; j < 4; ++j)
                for (uint64_t l = 0; l < lanes; ++l) {
                    const uint64_t e = 4 * (tile + c * lanes + l) + j;
                    phi_t[static_cast<size_t>(c * 4 * lanes + j * lanes + l)] =
                        e < d ? static_cast<double>(phi[e]) : 0.0;
                }
        k.llr_tile(seed, group, k_first, nk, static_cast<uint32_t>(tile), static_cast<size_t>(nb), phi_t, acc);
    }
    for (uint32_t kk = 0; kk < nk; ++kk) {
        double sum = 0.0;
        for (uint64_t l = 0; l < lanes; ++l) sum += acc[static_cast<size_t>(kk * lanes + l)];
        partial[static_cast<size_t>((k_first + kk) * plan.n_segments + seg)] = sum;
    }
}

// Below this much single-thread work per thread, another thread is not worth waking: it is a
// few times what waking a sleeping thread and handing it work takes on common operating systems
// (tens of microseconds), so that a split pays for its wake-up. The work's duration comes from
// the kernel's rate measured on this machine (llr_seconds_per_element), not from a constant.
constexpr double kMinSecondsPerThread = 50e-6;

// Seconds per candidate-element of llr_tile on one thread with this kernel table: the fastest
// of a few short runs (about 4096 candidate-elements each), measured on first use of the table,
// so that the thread choice follows the machine (and the ISA) it runs on.
double llr_seconds_per_element(const KernelTable& k) {
    static std::mutex mutex;
    static std::vector<std::pair<const KernelTable*, double>> measured;
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (const auto& m : measured)
            if (m.first == &k) return m.second;
    }
    constexpr uint32_t kNk = 4;
    constexpr size_t kBlocks = kLlrTileBlocks;
    const size_t nb = static_cast<size_t>(ceil_div(kBlocks, static_cast<uint64_t>(k.lanes)) * k.lanes);
    std::vector<double> phi_t(4 * nb, 0.5), acc(kNk * static_cast<size_t>(k.lanes), 0.0);
    double best = 0.0;
    for (int run = 0; run < 6; ++run) {
        const auto t0 = std::chrono::steady_clock::now();
        k.llr_tile(run, 0, 0, kNk, 0, nb, phi_t.data(), acc.data());
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (run > 0 && (best == 0.0 || dt < best)) best = dt;  // run 0 warms the caches up
    }
    const double per_element = std::max(best, 1e-9) / static_cast<double>(kNk * 4 * nb);
    std::lock_guard<std::mutex> lock(mutex);
    measured.emplace_back(&k, per_element);
    return per_element;
}

// Threads for `work` candidate-elements: one per kMinSecondsPerThread of single-thread time.
int llr_threads(const KernelTable& k, double work) {
    const double seconds = work * llr_seconds_per_element(k);
    const double by_work = std::floor(seconds / kMinSecondsPerThread);
    return by_work < 1.0 ? 1 : by_work > kMaxThreads ? kMaxThreads : static_cast<int>(by_work);
}

// The Gumbel noise of one 53-bit word (see gumbel_argmax_words).
inline double gumbel_of_word(uint64_t m) {
    const double u = (static_cast<double>(m) + 0.5) * 0x1p-53;  // in (0, 1): both logs finite
    return -std::log(-std::log(u));
}

// rec_dot_products_groups, with n_extra more items on the pool after the groups' own (the
// work that may run beside them): extra(i) for i < n_extra.
void dot_products_groups_and(const RecGroup* groups, size_t n_groups, uint64_t seed, double* out, size_t n_extra,
                             const std::function<void(size_t)>& extra) {
    if (n_groups == 0) return;
    const KernelTable& k = kernels();
    const uint64_t lanes = static_cast<uint64_t>(k.lanes);
    std::vector<LlrPlan> plans(n_groups);
    // first_item[g]: the first work item of group g; first_partial[g]: its partial sums.
    std::vector<uint64_t> first_item(n_groups + 1), first_partial(n_groups + 1);
    double work = 0.0;  // candidate-elements, padded as llr_tile runs them
    for (size_t g = 0; g < n_groups; ++g) {
        plans[g] = llr_plan(groups[g].d, groups[g].n_candidates);
        first_item[g + 1] = first_item[g] + plans[g].items();
        first_partial[g + 1] = first_partial[g] + groups[g].n_candidates * plans[g].n_segments;
        const uint64_t padded = 4 * ceil_div(plans[g].n_blocks, lanes) * lanes;
        work += static_cast<double>(groups[g].n_candidates) * static_cast<double>(padded);
    }
    std::vector<double> partial(static_cast<size_t>(first_partial[n_groups]));
    const auto item_body = [&](size_t item) {
        const auto after = std::upper_bound(first_item.begin(), first_item.end(), static_cast<uint64_t>(item));
        const size_t g = static_cast<size_t>(after - first_item.begin() - 1);
        const RecGroup& grp = groups[g];
        const LlrPlan& plan = plans[g];
        const uint64_t local = item - first_item[g];
        const uint64_t seg = local % plan.n_segments;
        const uint32_t k_first = static_cast<uint32_t>((local / plan.n_segments) * kLlrCandidateBlock);
        const uint32_t nk = std::min<uint32_t>(kLlrCandidateBlock, grp.n_candidates - k_first);
        double* part = partial.data() + first_partial[g];
        if (grp.f64)
            llr_item(k, static_cast<const double*>(grp.phi), grp.d, seed, grp.group, plan, seg, k_first, nk, part);
        else
            llr_item(k, static_cast<const float*>(grp.phi), grp.d, seed, grp.group, plan, seg, k_first, nk, part);
    };
    const size_t n_items = static_cast<size_t>(first_item[n_groups]);
    const auto body = [&](size_t item) {
        if (item < n_items)
            item_body(item);
        else
            extra(item - n_items);
    };
    parallel_for(n_items + n_extra, body, llr_threads(k, work));
    for (size_t g = 0; g < n_groups; ++g) {
        const double* part = partial.data() + first_partial[g];
        const uint64_t n_segments = plans[g].n_segments;
        double* o = out + groups[g].out_offset;
        for (uint32_t kk = 0; kk < groups[g].n_candidates; ++kk) {
            double sum = 0.0;
            for (uint64_t seg = 0; seg < n_segments; ++seg) sum += part[static_cast<size_t>(kk * n_segments + seg)];
            o[kk] = sum * groups[g].factor;
        }
    }
}

}  // namespace

void rec_dot_products_groups(const RecGroup* groups, size_t n_groups, uint64_t seed, double* out) {
    dot_products_groups_and(groups, n_groups, seed, out, 0, [](size_t) {});
}

int rec_sample_groups(const RecGroup* groups, size_t n_groups, uint64_t seed, const uint64_t* words,
                      uint64_t n_logits, double* logits, int64_t* indices) {
    // The noise in items of this many values, after the dot products' items: short ones that
    // fill the threads' last gaps.
    constexpr uint64_t kNoiseItem = 256;
    std::vector<double> noise(static_cast<size_t>(n_logits));
    dot_products_groups_and(groups, n_groups, seed, logits, static_cast<size_t>(ceil_div(n_logits, kNoiseItem)),
                            [&](size_t item) {
                                const uint64_t end = std::min(n_logits, (item + 1) * kNoiseItem);
                                for (uint64_t i = item * kNoiseItem; i < end; ++i) noise[i] = gumbel_of_word(words[i]);
                            });
    for (size_t g = 0; g < n_groups; ++g) {
        const uint64_t first = groups[g].out_offset;
        indices[g] = gumbel_argmax(logits + first, noise.data() + first, groups[g].n_candidates);
    }
    bool nan = false, inf = false;
    for (uint64_t i = 0; i < n_logits; ++i) {
        nan = nan || std::isnan(logits[i]);
        inf = inf || std::isinf(logits[i]);
    }
    return nan ? 2 : inf ? 1 : 0;
}

template <class T>
void rec_dot_products(const T* phi, uint64_t d, uint64_t seed, uint32_t group, uint32_t n_candidates, double* out) {
    // A factor of 1 leaves every sum as it is (x * 1.0 == x exactly).
    const RecGroup g{phi, std::is_same_v<T, double>, d, group, n_candidates, 0, 1.0};
    rec_dot_products_groups(&g, 1, seed, out);
}

template <class T>
void rec_accumulate(T* out, uint64_t d, uint32_t group, const uint64_t* seeds, const uint32_t* indices,
                    const double* coefs, size_t n_clients) {
    const KernelTable& k = kernels();
    const uint64_t n_items = ceil_div(d, kAccumulateTile);
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t i0 = item * kAccumulateTile;
        const uint64_t n = std::min(kAccumulateTile, d - i0);
        const size_t nb = static_cast<size_t>(ceil_div(n, 4));
        std::vector<float> z(4 * nb);
        T* dst = out + i0;
        for (size_t c = 0; c < n_clients; ++c) {
            const StreamId id{seeds[c], indices[c], group, kDomainRec};
            k.normals(id, static_cast<uint32_t>(i0 >> 2), nb, 1.0f, z.data());
            if constexpr (std::is_same_v<T, float>)
                k.add_scaled_f32(dst, z.data(), static_cast<float>(coefs[c]), static_cast<size_t>(n));
            else
                k.add_scaled_f64(dst, z.data(), coefs[c], static_cast<size_t>(n));
        }
    });
}

namespace {

// argmax_i (logits[i] + noise(i)) over n >= 1 values; the first index on ties.
template <class Noise>
int64_t argmax_plus(const double* logits, size_t n, const Noise& noise) {
    int64_t best = 0;
    double best_value = logits[0] + noise(0);
    for (size_t i = 1; i < n; ++i) {
        const double v = logits[i] + noise(i);
        if (v > best_value) {
            best_value = v;
            best = static_cast<int64_t>(i);
        }
    }
    return best;
}

}  // namespace

int64_t gumbel_argmax(const double* logits, const double* gumbel, size_t n) {
    return argmax_plus(logits, n, [gumbel](size_t i) { return gumbel[i]; });
}

int64_t gumbel_argmax_words(const double* logits, const uint64_t* words, size_t n) {
    return argmax_plus(logits, n, [words](size_t i) { return gumbel_of_word(words[i]); });
}

void gumbel_argmax_groups(const double* logits, const double* gumbel, const int64_t* offsets, size_t n_groups,
                          int64_t* out) {
    for (size_t g = 0; g < n_groups; ++g)
        out[g] = gumbel_argmax(logits + offsets[g], gumbel + offsets[g], static_cast<size_t>(offsets[g + 1] - offsets[g]));
}

void gumbel_argmax_words_groups(const double* logits, const uint64_t* words, const int64_t* offsets, size_t n_groups,
                                int64_t* out) {
    for (size_t g = 0; g < n_groups; ++g)
        out[g] = gumbel_argmax_words(logits + offsets[g], words + offsets[g],
                                     static_cast<size_t>(offsets[g + 1] - offsets[g]));
}

template void rec_dot_products<float>(const float*, uint64_t, uint64_t, uint32_t, uint32_t, double*);
template void rec_dot_products<double>(const double*, uint64_t, uint64_t, uint32_t, uint32_t, double*);
template void rec_accumulate<float>(float*, uint64_t, uint32_t, const uint64_t*, const uint32_t*, const double*, size_t);
template void rec_accumulate<double>(double*, uint64_t, uint32_t, const uint64_t*, const uint32_t*, const double*,
                                     size_t);

}  // namespace dprec::cpu
