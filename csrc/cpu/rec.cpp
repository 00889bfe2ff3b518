#include "rec.h"

#include <algorithm>
#include <type_traits>
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

template <class T>
void rec_dot_products(const T* phi, uint64_t d, uint64_t seed, uint32_t group, uint32_t n_candidates, double* out) {
    const KernelTable& k = kernels();
    const uint64_t lanes = static_cast<uint64_t>(k.lanes);
    const uint64_t n_blocks = ceil_div(d, 4);
    // The segment length depends only on (d, K), never on the thread count.
    const uint64_t max_segments = std::max<uint64_t>(1, kLlrMaxPartials / n_candidates);
    uint64_t seg_blocks = std::max(kLlrSegmentBlocks, ceil_div(n_blocks, max_segments));
    seg_blocks = ceil_div(seg_blocks, kLlrTileBlocks) * kLlrTileBlocks;
    const uint64_t n_segments = ceil_div(n_blocks, seg_blocks);
    const uint64_t n_kblocks = ceil_div(n_candidates, kLlrCandidateBlock);
    std::vector<double> partial(static_cast<size_t>(n_candidates * n_segments));

    parallel_for(static_cast<size_t>(n_kblocks * n_segments), [&](size_t item) {
        const uint64_t seg = item % n_segments;
        const uint32_t k_first = static_cast<uint32_t>((item / n_segments) * kLlrCandidateBlock);
        const uint32_t nk = std::min<uint32_t>(kLlrCandidateBlock, n_candidates - k_first);
        std::vector<double> acc(static_cast<size_t>(nk * lanes), 0.0);
        std::vector<double> phi_t(static_cast<size_t>(4 * kLlrTileBlocks));
        const uint64_t seg_first = seg * seg_blocks;
        const uint64_t seg_end = std::min(n_blocks, seg_first + seg_blocks);
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
            k.llr_tile(seed, group, k_first, nk, static_cast<uint32_t>(tile), static_cast<size_t>(nb), phi_t.data(),
                       acc.data());
        }
        for (uint32_t kk = 0; kk < nk; ++kk) {
            double sum = 0.0;
            for (uint64_t l = 0; l < lanes; ++l) sum += acc[static_cast<size_t>(kk * lanes + l)];
            partial[static_cast<size_t>((k_first + kk) * n_segments + seg)] = sum;
        }
    });
    for (uint32_t kk = 0; kk < n_candidates; ++kk) {
        double sum = 0.0;
        for (uint64_t seg = 0; seg < n_segments; ++seg) sum += partial[static_cast<size_t>(kk * n_segments + seg)];
        out[kk] = sum;
    }
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

int64_t gumbel_argmax(const double* logits, const double* gumbel, size_t n) {
    int64_t best = 0;
    double best_value = logits[0] + gumbel[0];
    for (size_t i = 1; i < n; ++i) {
        const double v = logits[i] + gumbel[i];
        if (v > best_value) {
            best_value = v;
            best = static_cast<int64_t>(i);
        }
    }
    return best;
}

template void rec_dot_products<float>(const float*, uint64_t, uint64_t, uint32_t, uint32_t, double*);
template void rec_dot_products<double>(const double*, uint64_t, uint64_t, uint32_t, uint32_t, double*);
template void rec_accumulate<float>(float*, uint64_t, uint32_t, const uint64_t*, const uint32_t*, const double*, size_t);
template void rec_accumulate<double>(double*, uint64_t, uint32_t, const uint64_t*, const uint32_t*, const double*,
                                     size_t);

}  // namespace dprec::cpu
