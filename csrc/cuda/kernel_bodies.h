// Per-thread bodies of the CUDA kernels, and the launch plans that shape their grids.
//
// Every CUDA kernel in kernels.cuh is a one-line wrapper: it computes its flat thread id
// and calls one of these functions. They use no shared memory, no warp intrinsics and no
// synchronisation, so thread t's result depends on t alone. That makes two things true:
//
// * the reductions are deterministic: each partial sum covers a fixed range in a fixed
//   order, and the plans depend only on the problem size (d, K), never on the GPU;
// * the host can run the very same code thread by thread (csrc/python/bind_emulation.cpp),
//   so CI machines without a GPU still check the indexing, the edge blocks and the
//   reduction order of the GPU kernels, and a GPU run can be compared bit for bit.
//
// Arithmetic follows common/normal_transform.h: build with nvcc -fmad=false (and g++
// -ffp-contract=off); products that must be fused say so with fma().
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "../common/macros.h"
#include "../common/normal_transform.h"
#include "../common/philox.h"

namespace dprec::gpu {

// ---------------------------------------------------------------------------------------
// Plans
// ---------------------------------------------------------------------------------------

DPREC_INLINE uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Log-likelihood ratios: thread t handles candidate t % K over segment t / K of the
// Philox blocks. Consecutive threads take consecutive candidates of the same segment,
// so a warp reads the same phi elements (one broadcast load) and never diverges.
constexpr uint64_t kLlrTargetThreads = uint64_t(1) << 20;  // ~4 waves of a full H100
constexpr uint64_t kLlrMinSegmentBlocks = 16;              // 64 elements

struct LlrPlan {
    uint64_t d;
    uint64_t n_blocks;      // ceil(d / 4)
    uint64_t seg_blocks;    // Philox blocks per segment
    uint64_t n_segments;
    uint32_t n_candidates;  // K
    DPREC_HD uint64_t n_threads() const { return n_segments * n_candidates; }
};

DPREC_INLINE LlrPlan make_llr_plan(uint64_t d, uint32_t n_candidates) {
    LlrPlan p{};
    p.d = d;
    p.n_candidates = n_candidates;
    p.n_blocks = ceil_div(d, 4);
    const uint64_t want = ceil_div(p.n_blocks * n_candidates, kLlrTargetThreads);
    p.seg_blocks = want > kLlrMinSegmentBlocks ? want : kLlrMinSegmentBlocks;
    p.n_segments = ceil_div(p.n_blocks, p.seg_blocks);
    return p;
}

// Deterministic column sums of a rows x cols row-major matrix, kReduceRows rows per
// thread and level, until one row is left (at most a few levels).
constexpr uint64_t kReduceRows = 32;

// ---------------------------------------------------------------------------------------
// Normals of one Philox block
// ---------------------------------------------------------------------------------------

DPREC_INLINE void block_normals(uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain, uint32_t block,
                                float (&z)[4]) {
    const Block4 w = philox4x32_10(block, substream, group, domain, static_cast<uint32_t>(seed),
                                   static_cast<uint32_t>(seed >> 32));
    nt_words_to_normals(w.w[0], w.w[1], &z[0], &z[1]);
    nt_words_to_normals(w.w[2], w.w[3], &z[2], &z[3]);
}

// ---------------------------------------------------------------------------------------
// Streams: thread t writes the elements of Philox block (offset / 4 + t) that lie in
// [offset, offset + count).
// ---------------------------------------------------------------------------------------

DPREC_INLINE uint64_t stream_threads(uint64_t offset, uint64_t count) {
    return count == 0 ? 0 : ((offset + count - 1) >> 2) - (offset >> 2) + 1;
}

DPREC_INLINE void stream_normals_thread(uint64_t t, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                                        uint64_t offset, uint64_t count, float scale, float* out) {
    const uint64_t block = (offset >> 2) + t;
    float z[4];
    block_normals(seed, substream, group, domain, static_cast<uint32_t>(block), z);
    const uint64_t end = offset + count;
    for (int j = 0; j < 4; ++j) {
        const uint64_t e = 4 * block + static_cast<uint64_t>(j);
        if (e >= offset && e < end) out[e - offset] = z[j] * scale;
    }
}

DPREC_INLINE void stream_words_thread(uint64_t t, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                                      uint64_t offset, uint64_t count, uint32_t* out) {
    const uint64_t block = (offset >> 2) + t;
    const Block4 w = philox4x32_10(static_cast<uint32_t>(block), substream, group, domain, static_cast<uint32_t>(seed),
                                   static_cast<uint32_t>(seed >> 32));
    const uint64_t end = offset + count;
    for (int j = 0; j < 4; ++j) {
        const uint64_t e = 4 * block + static_cast<uint64_t>(j);
        if (e >= offset && e < end) out[e - offset] = w.w[j];
    }
}

// ---------------------------------------------------------------------------------------
// Log-likelihood ratios: partial[seg * K + k] = sum over the segment of z_k[i] phi[i].
// Each float32 product is exact in float64, so fma() adds it with a single rounding;
// for float64 phi the fused product is the more accurate one.
// ---------------------------------------------------------------------------------------

template <class T>
DPREC_INLINE void llr_thread(uint64_t t, const LlrPlan& plan, const T* phi, uint64_t seed, uint32_t group,
                                double* partial) {
    const uint32_t k = static_cast<uint32_t>(t % plan.n_candidates);
    const uint64_t seg = t / plan.n_candidates;
    const uint64_t b0 = seg * plan.seg_blocks;
    const uint64_t b1 = b0 + plan.seg_blocks < plan.n_blocks ? b0 + plan.seg_blocks : plan.n_blocks;
    const uint64_t whole = plan.d >> 2;  // blocks whose four elements all exist
    const uint64_t b_whole = b1 < whole ? b1 : whole;
    double acc = 0.0;
    uint64_t b = b0;
    for (; b < b_whole; ++b) {
        float z[4];
        block_normals(seed, k, group, kDomainRec, static_cast<uint32_t>(b), z);
        const T* p = phi + 4 * b;
        acc = fma(static_cast<double>(z[0]), static_cast<double>(p[0]), acc);
        acc = fma(static_cast<double>(z[1]), static_cast<double>(p[1]), acc);
        acc = fma(static_cast<double>(z[2]), static_cast<double>(p[2]), acc);
        acc = fma(static_cast<double>(z[3]), static_cast<double>(p[3]), acc);
    }
    if (b < b1) {  // the last, partial block
        float z[4];
        block_normals(seed, k, group, kDomainRec, static_cast<uint32_t>(b), z);
        for (uint64_t e = 4 * b; e < plan.d; ++e)
            acc = fma(static_cast<double>(z[e - 4 * b]), static_cast<double>(phi[e]), acc);
    }
    partial[t] = acc;
}

// The speed limit of llr_thread: the same normals, summed (float32) and discarded into
// one scratch word per thread, with no phi.
DPREC_INLINE void generate_only_thread(uint64_t t, const LlrPlan& plan, uint64_t seed, uint32_t group,
                                          float* scratch) {
    const uint32_t k = static_cast<uint32_t>(t % plan.n_candidates);
    const uint64_t seg = t / plan.n_candidates;
    const uint64_t b0 = seg * plan.seg_blocks;
    const uint64_t b1 = b0 + plan.seg_blocks < plan.n_blocks ? b0 + plan.seg_blocks : plan.n_blocks;
    float acc = 0.0f;
    for (uint64_t b = b0; b < b1; ++b) {
        float z[4];
        block_normals(seed, k, group, kDomainRec, static_cast<uint32_t>(b), z);
        acc += (z[0] + z[1]) + (z[2] + z[3]);
    }
    scratch[t] = acc;
}

// out[r' * cols + c] = sum of in[r * cols + c] for r in [r' R, min(rows, r' R + R)),
// in order; the last level (rows <= R) multiplies the total by `factor`.
DPREC_INLINE void reduce_rows_thread(uint64_t t, const double* in, uint64_t rows, uint64_t cols, double factor,
                                        double* out) {
    const uint64_t c = t % cols;
    const uint64_t r0 = (t / cols) * kReduceRows;
    const uint64_t r1 = r0 + kReduceRows < rows ? r0 + kReduceRows : rows;
    double sum = 0.0;
    for (uint64_t r = r0; r < r1; ++r) sum += in[r * cols + c];
    out[t] = rows <= kReduceRows ? sum * factor : sum;
}

// ---------------------------------------------------------------------------------------
// Categorical sampling: argmax_k (logits[k] + gumbel[k]) of group g, whose K_g entries are
// [offsets[g], offsets[g+1]), with the CPU's answer (cpu::gumbel_argmax, a scan from the
// group's first element that moves on strictly greater values): the largest value, the
// first index on ties; NaN sums are never chosen, except a NaN first element, which the
// scan never leaves. That rule is a maximum under a total order on (value, index), so any
// fixed split of the work gives the CPU's index.
//
// The reduction runs in levels. A group's items at level 0 are its elements; at level
// l + 1 they are the (value, index) winners of its level-l threads. At every level group
// g with n items gets ceil(n / kArgmaxItemsPerThread) threads, and thread j of the group
// takes items j, j + T, j + 2T, ... (T = the group's thread count): consecutive threads
// read consecutive addresses, and no thread straddles a group boundary. Levels continue
// until every group has one thread, so hundreds of small groups take one level and one
// group of K = 2^24 takes three (2^16, 2^8 and 1 threads).
// ---------------------------------------------------------------------------------------

constexpr uint64_t kArgmaxItemsPerThread = 256;

// Level l reads group g's items [item_offsets(l)[g], item_offsets(l)[g + 1]) and runs its
// threads [thread_offsets(l)[g], thread_offsets(l)[g + 1]); thread_offsets(l) is
// item_offsets(l + 1). Built on the host from the group offsets alone.
struct ArgmaxPlan {
    uint64_t n_groups = 0;
    std::vector<int64_t> offsets;  // n_levels() + 1 rows of n_groups + 1 offsets; row 0 = the groups

    uint64_t n_levels() const { return offsets.size() / (n_groups + 1) - 1; }
    const int64_t* item_offsets(uint64_t level) const { return offsets.data() + level * (n_groups + 1); }
    const int64_t* thread_offsets(uint64_t level) const { return item_offsets(level + 1); }
    uint64_t n_threads(uint64_t level) const { return static_cast<uint64_t>(thread_offsets(level)[n_groups]); }
};

// `group_offsets` (n_groups + 1 entries) must start at 0 and increase strictly. Host only
// (internal linkage, like DPREC_INLINE: see common/macros.h).
static inline ArgmaxPlan make_argmax_plan(const int64_t* group_offsets, uint64_t n_groups) {
    ArgmaxPlan plan;
    plan.n_groups = n_groups;
    plan.offsets.assign(group_offsets, group_offsets + n_groups + 1);
    std::vector<int64_t> next(static_cast<size_t>(n_groups + 1));
    for (;;) {
        const int64_t* items = plan.offsets.data() + (plan.offsets.size() - (n_groups + 1));
        bool one_each = true;
        next[0] = 0;
        for (uint64_t g = 0; g < n_groups; ++g) {
            const uint64_t threads = ceil_div(static_cast<uint64_t>(items[g + 1] - items[g]), kArgmaxItemsPerThread);
            one_each = one_each && threads == 1;
            next[g + 1] = next[g] + static_cast<int64_t>(threads);
        }
        plan.offsets.insert(plan.offsets.end(), next.begin(), next.end());
        if (one_each) return plan;
    }
}

// The group that thread t of a level belongs to: the g with offsets[g] <= t < offsets[g + 1]
// (every group has at least one thread, so the g is unique).
DPREC_INLINE uint64_t argmax_group_of(uint64_t t, const int64_t* thread_offsets, uint64_t n_groups) {
    uint64_t lo = 0;
    uint64_t hi = n_groups;  // thread_offsets[lo] <= t < thread_offsets[hi]
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (static_cast<uint64_t>(thread_offsets[mid]) <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

// Thread t's items: group `group`'s items first, first + stride, ... below end.
struct ArgmaxSlice {
    uint64_t group;
    int64_t stride, first, end;
};

DPREC_INLINE ArgmaxSlice argmax_slice(uint64_t t, const int64_t* item_offsets, const int64_t* thread_offsets,
                                      uint64_t n_groups) {
    const uint64_t g = argmax_group_of(t, thread_offsets, n_groups);
    return ArgmaxSlice{g, thread_offsets[g + 1] - thread_offsets[g],
                       item_offsets[g] + (static_cast<int64_t>(t) - thread_offsets[g]), item_offsets[g + 1]};
}

// Level 0: the winner among the thread's elements, as a flat index into logits.
// `best_values` may be null on the last level (every group has at most 256 elements).
DPREC_INLINE void gumbel_argmax_first_level_thread(uint64_t t, const double* logits, const double* gumbel,
                                                   const int64_t* item_offsets, const int64_t* thread_offsets,
                                                   uint64_t n_groups, double* best_values, int64_t* best_indices) {
    const ArgmaxSlice s = argmax_slice(t, item_offsets, thread_offsets, n_groups);
    const uint64_t g = s.group;
    const int64_t stride = s.stride, first = s.first, end = s.end;
    int64_t best = first;
    double best_value = logits[first] + gumbel[first];
    // Only the group's first element may stay a NaN winner (the CPU's scan starts there).
    // Elsewhere a NaN start becomes -inf at its own index: it is never chosen, because it
    // could only win a tie at -inf, which the group's first element (-inf or larger, index
    // smaller) wins.
    if (best_value != best_value && first != item_offsets[g]) best_value = -HUGE_VAL;
    for (int64_t i = first + stride; i < end; i += stride) {
        const double v = logits[i] + gumbel[i];
        if (v > best_value) {  // increasing indices: on a tie the earlier one stays
            best_value = v;
            best = i;
        }
    }
    if (best_values != nullptr) best_values[t] = best_value;
    best_indices[t] = best;
}

// Levels 1, 2, ...: the winner among the thread's (value, index) items. Item indices no
// longer increase along the stride, so ties compare indices. Only a group's item 0 can
// hold a NaN (its first element's), and it is the first item of the group's thread 0,
// which nothing replaces (comparisons with NaN are false). `best_values` may be null on
// the last level.
DPREC_INLINE void gumbel_argmax_next_level_thread(uint64_t t, const double* values, const int64_t* indices,
                                                  const int64_t* item_offsets, const int64_t* thread_offsets,
                                                  uint64_t n_groups, double* best_values, int64_t* best_indices) {
    const ArgmaxSlice s = argmax_slice(t, item_offsets, thread_offsets, n_groups);
    const int64_t stride = s.stride, first = s.first, end = s.end;
    int64_t best = indices[first];
    double best_value = values[first];
    for (int64_t p = first + stride; p < end; p += stride) {
        const double v = values[p];
        const int64_t i = indices[p];
        if (v > best_value || (v == best_value && i < best)) {
            best_value = v;
            best = i;
        }
    }
    if (best_values != nullptr) best_values[t] = best_value;
    best_indices[t] = best;
}

// ---------------------------------------------------------------------------------------
// Server aggregation: thread t owns Philox block t (elements 4t .. 4t+3) of the group and
// adds every client in order, exactly as cpu::rec_accumulate does per element:
//   float32: out + float(coef) * z        float64: out + coef * double(z)
// With `from_zero` the float64 sum starts at 0 and is stored rounded to float32 (the
// codec's aggregate: no float64 buffer in memory).
// ---------------------------------------------------------------------------------------

DPREC_INLINE void accumulate_f32_thread(uint64_t t, float* out, uint64_t d, uint32_t group, const uint64_t* seeds,
                                           const uint32_t* indices, const double* coefs, uint64_t n_clients) {
    const uint64_t e0 = 4 * t;
    const int n = d - e0 < 4 ? static_cast<int>(d - e0) : 4;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < n; ++j) v[j] = out[e0 + j];
    for (uint64_t c = 0; c < n_clients; ++c) {
        float z[4];
        block_normals(seeds[c], indices[c], group, kDomainRec, static_cast<uint32_t>(t), z);
        const float coef = static_cast<float>(coefs[c]);
        for (int j = 0; j < 4; ++j) v[j] = v[j] + coef * z[j];
    }
    for (int j = 0; j < n; ++j) out[e0 + j] = v[j];
}

DPREC_INLINE void accumulate_f64_thread(uint64_t t, double* out, float* out_f32, uint64_t d, uint32_t group,
                                           const uint64_t* seeds, const uint32_t* indices, const double* coefs,
                                           uint64_t n_clients) {
    const uint64_t e0 = 4 * t;
    const int n = d - e0 < 4 ? static_cast<int>(d - e0) : 4;
    double v[4] = {0.0, 0.0, 0.0, 0.0};
    if (out != nullptr)
        for (int j = 0; j < n; ++j) v[j] = out[e0 + j];
    for (uint64_t c = 0; c < n_clients; ++c) {
        float z[4];
        block_normals(seeds[c], indices[c], group, kDomainRec, static_cast<uint32_t>(t), z);
        for (int j = 0; j < 4; ++j) v[j] = v[j] + coefs[c] * static_cast<double>(z[j]);
    }
    if (out != nullptr)
        for (int j = 0; j < n; ++j) out[e0 + j] = v[j];
    else
        for (int j = 0; j < n; ++j) out_f32[e0 + j] = static_cast<float>(v[j]);
}

// ---------------------------------------------------------------------------------------
// Norm statistics for the codec's global clip: thread t of T sums (x[i] / divisor)^2
// over i = t, t + T, t + 2T, ... (coalesced) in float64 and takes max |x[i]|, with NaN
// winning over everything so that a NaN anywhere is reported. The per-thread pairs are
// stored interleaved, stats[2t] = sum, stats[2t + 1] = max, and reduced in levels of
// kReduceRows pairs per thread (reduce_norm_rows_thread) until one pair is left.
// ---------------------------------------------------------------------------------------

constexpr uint64_t kNormThreadsMax = uint64_t(1) << 16;
constexpr uint64_t kNormMinPerThread = 256;

DPREC_INLINE uint64_t norm_threads(uint64_t n) {
    const uint64_t t = ceil_div(n, kNormMinPerThread);
    return t < kNormThreadsMax ? t : kNormThreadsMax;
}

template <class T>
DPREC_INLINE void norm_stats_thread(uint64_t t, uint64_t n_threads, const T* x, uint64_t n, double divisor,
                                    double* stats) {
    double s = 0.0;
    double m = 0.0;
    for (uint64_t i = t; i < n; i += n_threads) {
        const double v = static_cast<double>(x[i]);
        const double a = v < 0 ? -v : v;
        if (a != a || m != m)
            m = a != a ? a : m;  // NaN sticks
        else if (a > m)
            m = a;
        const double w = v / divisor;  // divisor = max |x| when rescaling: exact for powers of two, no overflow
        s += w * w;
    }
    stats[2 * t] = s;
    stats[2 * t + 1] = m;
}

// One reduction level of the (sum, max) pairs: out pair t combines in pairs
// [t R, min(rows, t R + R)) in order, R = kReduceRows. The sums add in the order of
// reduce_rows_thread; the maxima keep the first NaN met, so a NaN anywhere is the result.
DPREC_INLINE void reduce_norm_rows_thread(uint64_t t, const double* in, uint64_t rows, double* out) {
    const uint64_t r0 = t * kReduceRows;
    const uint64_t r1 = r0 + kReduceRows < rows ? r0 + kReduceRows : rows;
    double sum = 0.0;
    double max = 0.0;
    for (uint64_t r = r0; r < r1; ++r) {
        sum += in[2 * r];
        const double m = in[2 * r + 1];
        if (max == max && (m != m || m > max)) max = m;  // once a NaN, always that NaN
    }
    out[2 * t] = sum;
    out[2 * t + 1] = max;
}

// ---------------------------------------------------------------------------------------
// Conversions to float32 (exact for float16 and bfloat16; round to nearest from float64).
// ---------------------------------------------------------------------------------------

DPREC_INLINE float half_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13);  // inf / NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        int e = -1;
        do {
            man <<= 1;
            ++e;
        } while ((man & 0x400u) == 0);
        bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    return nt_bits_to_float(bits);
}

DPREC_INLINE float bfloat16_bits_to_float(uint16_t h) { return nt_bits_to_float(static_cast<uint32_t>(h) << 16); }

// dst[i] = src[i] * factor (the codec's prescaling of extreme float64 updates).
DPREC_INLINE void scale_f64_thread(uint64_t i, const double* src, double factor, double* dst) {
    dst[i] = src[i] * factor;
}

}  // namespace dprec::gpu
