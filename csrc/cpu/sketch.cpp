#include "sketch.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
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

namespace {

// Help for the encode's last items (see count_sketch_encode). Each thread owns an item at a
// time and records where it is; a thread with no item left computes buckets and addends of
// blocks ahead of an owner into the owner's ring of kHelpSlots buffers, and the owner only
// scatters them. A slot's state packs (item, block, status): a helper claims a slot with a
// compare-exchange on (item, block, free), so a stale read of another item or block fails.
constexpr uint64_t kHelpSlots = 8;
constexpr uint64_t kSlotFree = 0, kSlotBusy = 1, kSlotReady = 2;
constexpr uint64_t kItemBits = 24, kBlockBits = 38;  // item << 40 | block << 2 | status
inline uint64_t slot_state(uint64_t item, uint64_t block, uint64_t status) {
    return (item << (kBlockBits + 2)) | (block << 2) | status;
}

struct alignas(64) EncodeOwner {
    std::atomic<int64_t> item{-1};    // the item being scattered, -1 between items
    std::atomic<uint64_t> block{0};   // the block its owner works on (helpers take later ones)
    std::atomic<uint64_t> state[kHelpSlots];
};

inline auto fused_addends(const KernelTable& k, const float*) { return k.sketch_addends_philox_f32; }
inline auto fused_addends(const KernelTable& k, const double*) { return k.sketch_addends_philox_f64; }
inline auto fused_scatter(const KernelTable& k, const float*) { return k.sketch_scatter_philox_f32; }
inline auto fused_scatter(const KernelTable& k, const double*) { return k.sketch_scatter_philox_f64; }
inline auto fused_gather(const KernelTable& k, const float*) { return k.sketch_gather_philox_f32; }
inline auto fused_gather(const KernelTable& k, const double*) { return k.sketch_gather_philox_f64; }

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
    // Rows [r0, r1) of item: the first rows % n_items items have one row more.
    const uint64_t base = rows / n_items, extra = rows % n_items;
    auto first_row = [&](uint64_t item) { return item * base + std::min<uint64_t>(item, extra); };
    auto end_row = [&](uint64_t item) { return first_row(item) + base + (item < extra ? 1 : 0); };

    // Buckets and addends of elements [a, a + n) of row r (a % 4 == 0): where the ISA has a
    // fused kernel, its whole vectors of blocks (the first nf elements) in lane order, the
    // rest in element order. Returns nf.
    const auto fused = fused_addends(k, x);
    const uint64_t lanes = static_cast<uint64_t>(k.lanes), group_elements = 4 * lanes;
    // Of n elements starting at a tile or block boundary, those kept in lane order.
    auto lane_order_prefix = [&](uint64_t n) { return fused ? n / group_elements * group_elements : 0; };
    auto row_addends = [&](uint64_t r, uint64_t a, uint64_t n, uint32_t* hb, uint32_t* sb, uint32_t* idx, T* val) {
        const uint64_t nf = lane_order_prefix(n);
        if (nf > 0)
            fused(x + a, s, cols, seed, static_cast<uint32_t>(r), group, static_cast<uint32_t>(a >> 2),
                  static_cast<size_t>(nf / 4), idx, val);
        if (nf < n) {
            words(k, seed, static_cast<uint32_t>(r), group, kDomainSketchBucket, a + nf, n - nf, hb);
            words(k, seed, static_cast<uint32_t>(r), group, kDomainSketchSign, a + nf, n - nf, sb);
            addends(k, hb, sb, x + a + nf, s, cols, static_cast<size_t>(n - nf), idx + nf, val + nf);
        }
        return nf;
    };
    // t[idx] += val for the n elements in element order, the first nf read from lane order.
    auto scatter = [&](T* __restrict t, const uint32_t* __restrict idx, const T* __restrict val, uint64_t nf,
                       uint64_t n) {
        for (uint64_t c = 0; c < nf; c += group_elements)
            for (uint64_t l = 0; l < lanes; ++l)
                for (uint64_t j = 0; j < 4; ++j) t[idx[c + j * lanes + l]] += val[c + j * lanes + l];
        for (uint64_t i = nf; i < n; ++i) t[idx[i]] += val[i];
    };

    // Elements [j0, j1) of rows [r0, r1), tile by tile, scattered as they are computed (the
    // whole vectors of blocks by the ISA's fused kernel where it has one).
    const auto fused_encode = fused_scatter(k, x);
    auto encode_direct = [&](uint64_t r0, uint64_t r1, uint64_t j0, uint64_t j1) {
        alignas(64) uint32_t hb[kMaxWordTile], sb[kMaxWordTile], idx[kMaxWordTile];
        alignas(64) T val[kMaxWordTile];
        // The fused kernel keeps no tile of words, so it takes longer runs of x (fewer restarts
        // of its pipeline); what it leaves is less than a vector of blocks.
        const uint64_t step = fused_encode ? kMaxWordTile : tile;
        for (uint64_t a = j0; a < j1; a += step) {
            const uint64_t n = std::min(step, j1 - a);
            for (uint64_t r = r0; r < r1; ++r) {
                T* t = table + r * cols;
                if (fused_encode) {
                    const uint64_t nf = lane_order_prefix(n);
                    if (nf > 0)
                        fused_encode(x + a, s, cols, seed, static_cast<uint32_t>(r), group,
                                     static_cast<uint32_t>(a >> 2), static_cast<size_t>(nf / 4), t);
                    if (nf < n) {  // less than a vector of blocks: all in element order
                        row_addends(r, a + nf, n - nf, hb, sb, idx, val);
                        scatter(t, idx, val, 0, n - nf);
                    }
                    continue;
                }
                const uint64_t nf = row_addends(r, a, n, hb, sb, idx, val);
                scatter(t, idx, val, nf, n);  // what is left is the scatter, in order
            }
        }
    };

    // Blocks of bk elements (a multiple of the tile) whose buckets and addends for an item's
    // rows fill a sixteenth of the L2, so that an owner's ring of slots stays within half.
    const uint64_t item_rows_max = ceil_div(rows, n_items);
    const uint64_t per_element = item_rows_max * (sizeof(uint32_t) + sizeof(T));
    const uint64_t bk = std::min<uint64_t>(std::max<uint64_t>(pow2_floor(cache_sizes().l2 / 16 / per_element), tile),
                                           uint64_t(1) << 16) / tile * tile;
    const uint64_t n_blocks = ceil_div(dim, bk);
    const uint64_t workers = std::min<uint64_t>(nt, n_items * n_blocks);
    const bool helped = workers > 1 && n_blocks > 1 && n_items < (uint64_t(1) << kItemBits) &&
                        n_blocks + kHelpSlots < (uint64_t(1) << kBlockBits);
    if (!helped) {
        parallel_for(static_cast<size_t>(n_items),
                     [&](size_t item) { encode_direct(first_row(item), end_row(item), 0, dim); });
        return;
    }

    // Rows are split into items whole (a row's cells take its elements in order, on one
    // thread), so with rows not a multiple of the threads, or items of unequal rows, the
    // threads would finish apart: 5 rows on 2 threads, 3 against 2. Instead each thread owns
    // items in turn and, when none is left, computes buckets and addends (about 60% of the
    // work) of blocks ahead of a busy owner, which then only scatters them in order.
    const uint64_t slot_elems = item_rows_max * bk;
    const uint64_t slot_bytes = slot_elems * (sizeof(uint32_t) + sizeof(T));
    std::unique_ptr<EncodeOwner[]> owners(new EncodeOwner[workers]);
    std::unique_ptr<unsigned char[]> slots(new unsigned char[workers * kHelpSlots * slot_bytes + 64]);
    unsigned char* slot_base = slots.get() + (64 - reinterpret_cast<uintptr_t>(slots.get()) % 64) % 64;
    auto slot_idx = [&](uint64_t w, uint64_t slot) {
        return reinterpret_cast<uint32_t*>(slot_base + (w * kHelpSlots + slot) * slot_bytes);
    };
    auto slot_val = [&](uint64_t w, uint64_t slot) {
        return reinterpret_cast<T*>(slot_base + (w * kHelpSlots + slot) * slot_bytes + slot_elems * sizeof(uint32_t));
    };
    std::atomic<uint64_t> next_item{0};

    // Buckets and addends of block b of item's rows into owner w's slot (row-major, bk apart).
    auto produce = [&](uint64_t w, uint64_t item, uint64_t b) {
        alignas(64) uint32_t hb[kMaxWordTile], sb[kMaxWordTile];
        const uint64_t r0 = first_row(item), r1 = end_row(item), j0 = b * bk, n = std::min(bk, dim - j0);
        uint32_t* idx = slot_idx(w, b % kHelpSlots);
        T* val = slot_val(w, b % kHelpSlots);
        for (uint64_t a = 0; a < n; a += tile) {
            const uint64_t m = std::min(tile, n - a);
            for (uint64_t r = r0; r < r1; ++r)
                row_addends(r, j0 + a, m, hb, sb, idx + (r - r0) * bk + a, val + (r - r0) * bk + a);
        }
    };

    auto own = [&](uint64_t w, uint64_t item) {
        EncodeOwner& me = owners[w];
        const uint64_t r0 = first_row(item), r1 = end_row(item);
        for (uint64_t q = 0; q < kHelpSlots; ++q) me.state[q].store(slot_state(item, q, kSlotFree), std::memory_order_relaxed);
        me.block.store(0, std::memory_order_relaxed);
        me.item.store(static_cast<int64_t>(item), std::memory_order_release);
        for (uint64_t b = 0; b < n_blocks; ++b) {
            std::atomic<uint64_t>& state = me.state[b % kHelpSlots];
            const uint64_t j0 = b * bk, n = std::min(bk, dim - j0);
            uint64_t expected = slot_state(item, b, kSlotFree);
            if (state.compare_exchange_strong(expected, slot_state(item, b, kSlotBusy), std::memory_order_acq_rel)) {
                encode_direct(r0, r1, j0, j0 + n);
            } else {
                // A helper has this block: wait for it (at most one block's buckets and addends).
                const uint64_t ready = slot_state(item, b, kSlotReady);
                for (unsigned spins = 0; state.load(std::memory_order_acquire) != ready; ++spins) {
                    if (spins < 256) cpu_relax();
                    else std::this_thread::yield();
                }
                const uint32_t* idx = slot_idx(w, b % kHelpSlots);
                const T* val = slot_val(w, b % kHelpSlots);
                // Tiles are whole vectors of blocks but for the last of x, so the block is in
                // lane order up to its last whole vector, as row_addends left it tile by tile.
                const uint64_t nf = lane_order_prefix(n);
                for (uint64_t r = r0; r < r1; ++r)
                    scatter(table + r * cols, idx + (r - r0) * bk, val + (r - r0) * bk, nf, n);
            }
            state.store(slot_state(item, b + kHelpSlots, kSlotFree), std::memory_order_release);
            me.block.store(b + 1, std::memory_order_release);
        }
        me.item.store(-1, std::memory_order_release);
    };

    // One attempt to help: false when no owner is busy (nothing left to help with).
    auto help = [&]() {
        uint64_t order[2] = {workers, workers};  // the owner with most work left, then any other
        uint64_t most = 0;
        bool busy = false;
        for (uint64_t v = 0; v < workers; ++v) {
            const int64_t item = owners[v].item.load(std::memory_order_acquire);
            if (item < 0) continue;
            busy = true;
            const uint64_t b = owners[v].block.load(std::memory_order_acquire);
            const uint64_t left = b < n_blocks ? (n_blocks - b) * (end_row(item) - first_row(item)) : 0;
            if (left > most) most = left, order[0] = v;
        }
        if (!busy) return false;
        for (uint64_t pass = 0; pass < 2; ++pass) {
            for (uint64_t v = 0; v < workers; ++v) {
                if ((pass == 0) != (v == order[0])) continue;
                const int64_t item = owners[v].item.load(std::memory_order_acquire);
                if (item < 0) continue;
                const uint64_t b = owners[v].block.load(std::memory_order_acquire);
                // The furthest free block first: the owner computes the near ones itself
                // while the helper's wait in its ring.
                for (uint64_t q = std::min(b + kHelpSlots, n_blocks); q-- > b + 1;) {
                    std::atomic<uint64_t>& state = owners[v].state[q % kHelpSlots];
                    uint64_t expected = slot_state(static_cast<uint64_t>(item), q, kSlotFree);
                    if (state.compare_exchange_strong(expected, slot_state(static_cast<uint64_t>(item), q, kSlotBusy),
                                                      std::memory_order_acq_rel)) {
                        produce(v, static_cast<uint64_t>(item), q);
                        state.store(slot_state(static_cast<uint64_t>(item), q, kSlotReady), std::memory_order_release);
                        return true;
                    }
                }
            }
        }
        // Nothing to take now: give the core away, since with more threads than cores a
        // spinning helper would delay the very owners it waits on.
        std::this_thread::yield();
        return true;
    };

    // No thread ever waits for a thread that is not running: an owner waits only for a block
    // a running helper has claimed, so the work finishes even when the pool runs these
    // workers one after another on one thread.
    parallel_for(static_cast<size_t>(workers), [&](size_t w) {
        for (;;) {
            const uint64_t item = next_item.fetch_add(1, std::memory_order_relaxed);
            if (item < n_items) {
                own(w, item);
                continue;
            }
            if (!help()) return;
        }
    });
}

template <class T>
void count_sketch_decode(const T* table, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols,
                         bool median, double median_scale, T* out) {
    const KernelTable& k = kernels();
    uint64_t chunk = mean_decode_chunk(dim);
    if (median) {
        // Whole groups of the fused kernel where rows allow (64 elements on AVX-512).
        const uint64_t by_values = kDecodeMaxValues / rows;
        chunk = std::max<uint64_t>(4, std::min(kDecodeChunk, by_values & ~uint64_t(by_values >= 64 ? 63 : 3)));
    }
    const uint64_t n_items = ceil_div(dim, chunk);
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t j0 = item * chunk;
        const uint64_t n = std::min(chunk, dim - j0);
        const uint64_t tile = std::min(n, kDecodeChunk);
        std::vector<uint32_t> hb(static_cast<size_t>(ceil_div(tile, 4) * 4)), sb(hb.size());
        // Where the ISA has a fused kernel, the whole vectors of blocks go through it (in lane
        // order), the rest through words.
        const auto fused = cols <= (uint64_t(1) << 31) ? fused_gather(k, table) : nullptr;
        const uint64_t lanes = static_cast<uint64_t>(k.lanes), group_elements = 4 * lanes;
        const uint64_t n_fused = fused ? n / group_elements * group_elements : 0;
        if (!median) {
            // Row by row, each row's elements tile by tile: every element still adds its rows
            // in increasing order, whatever the chunk.
            std::vector<double> acc(static_cast<size_t>(n), 0.0);
            for (uint32_t r = 0; r < rows; ++r) {
                const T* row = table + static_cast<uint64_t>(r) * cols;
                if (n_fused > 0)
                    fused(row, cols, seed, r, group, static_cast<uint32_t>(j0 >> 2), static_cast<size_t>(n_fused / 4),
                          acc.data());
                for (uint64_t s0 = n_fused; s0 < n; s0 += tile) {
                    const uint64_t m = std::min(tile, n - s0);
                    words(k, seed, r, group, kDomainSketchBucket, j0 + s0, m, hb.data());
                    words(k, seed, r, group, kDomainSketchSign, j0 + s0, m, sb.data());
                    gather(k, row, hb.data(), sb.data(), cols, static_cast<size_t>(m), acc.data() + s0);
                }
            }
            for (uint64_t c = 0; c < n_fused; c += group_elements)
                for (uint64_t l = 0; l < lanes; ++l)
                    for (uint64_t j = 0; j < 4; ++j) out[j0 + c + 4 * l + j] = static_cast<T>(acc[c + j * lanes + l]);
            for (uint64_t i = n_fused; i < n; ++i) out[j0 + i] = static_cast<T>(acc[i]);
            return;
        }
        // values[r * n + i]: row-major, so the small-rows sort runs over contiguous vectors.
        // The fused kernel adds each signed cell to its value, all -0.0 to start with: that
        // gives the cell's own bits (x + -0.0 is x for every x, +0.0 and -0.0 included). Its
        // columns are in lane order, permuted back only when the medians are written.
        std::vector<double> values(static_cast<size_t>(n * rows), -0.0);
        for (uint32_t r = 0; r < rows; ++r) {
            const T* t = table + static_cast<uint64_t>(r) * cols;
            double* dst = values.data() + static_cast<uint64_t>(r) * n;
            if (n_fused > 0) {
                fused(t, cols, seed, r, group, static_cast<uint32_t>(j0 >> 2), static_cast<size_t>(n_fused / 4), dst);
            }
            if (n_fused < n) {
                words(k, seed, r, group, kDomainSketchBucket, j0 + n_fused, n - n_fused, hb.data());
                words(k, seed, r, group, kDomainSketchSign, j0 + n_fused, n - n_fused, sb.data());
                for (uint64_t i = n_fused; i < n; ++i)
                    dst[i] = with_sign(static_cast<double>(t[bucket_of(hb[i - n_fused], cols)]), sb[i - n_fused]);
            }
        }
        // Output element of column i: lane order up to n_fused, element order after.
        auto element_of = [&](uint64_t i) {
            if (i >= n_fused) return i;
            const uint64_t c = i / group_elements * group_elements, e = i - c;
            return c + 4 * (e % lanes) + e / lanes;
        };
        const uint64_t half = rows / 2;
        if (rows <= kSortNetworkRows) {
            // Odd-even transposition sort of every element's rows at once: branch-free
            // min / max over contiguous vectors (random data would mispredict a scalar sort).
            k.sort_columns_f64(values.data(), rows, n);
            const double* mid = values.data() + half * n;
            if (rows % 2) {
                for (uint64_t i = 0; i < n; ++i) out[j0 + element_of(i)] = static_cast<T>(mid[i] * median_scale);
            } else {
                const double* below = mid - n;
                for (uint64_t i = 0; i < n; ++i)
                    out[j0 + element_of(i)] = static_cast<T>(0.5 * (below[i] + mid[i]) * median_scale);
            }
            return;
        }
        std::vector<double> v(rows);
        for (uint64_t i = 0; i < n; ++i) {
            for (uint32_t r = 0; r < rows; ++r) v[r] = values[static_cast<size_t>(static_cast<uint64_t>(r) * n + i)];
            std::nth_element(v.begin(), v.begin() + half, v.end());
            double med = v[half];
            if (rows % 2 == 0) med = 0.5 * (*std::max_element(v.begin(), v.begin() + half) + med);
            out[j0 + element_of(i)] = static_cast<T>(med * median_scale);
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
