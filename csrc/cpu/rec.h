// CPU launchers for the Philox stream and DP-REC kernels: they split the work into a
// fixed list of tiles (independent of the thread count), run it on the pool, and reduce
// in a fixed order. Arguments are assumed validated by the binding layer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common/philox.h"

namespace dprec::cpu {

// Elements offset .. offset+count-1 of a stream as raw words / as scale * normals.
void fill_words(const StreamId& id, uint64_t offset, uint64_t count, uint32_t* out);
void fill_normals(const StreamId& id, uint64_t offset, uint64_t count, float scale, float* out);

// out[k] = sum_i z_{group,k}[i] * phi[i] for k < n_candidates, accumulated in double.
template <class T>
void rec_dot_products(const T* phi, uint64_t d, uint64_t seed, uint32_t group, uint32_t n_candidates, double* out);

// One group of rec_dot_products_groups: d >= 1 elements of float (f64 false) or double at phi,
// candidates of group id `group`, logits written to out[out_offset .. out_offset + n_candidates).
struct RecGroup {
    const void* phi;
    bool f64;
    uint64_t d;
    uint32_t group;
    uint32_t n_candidates;
    uint64_t out_offset;
    double factor;
};

// The logits of every group of an update in one call: for each group g and k < n_candidates,
//   out[out_offset + k] = factor * sum_i z_{group,k}[i] * phi[i],
// with the sum the very one rec_dot_products computes (same tiles, same order, bit for bit),
// then one double multiplication. The work of all groups is one list of items, so a small
// update wakes the pool at most once, and the thread count follows the total work.
void rec_dot_products_groups(const RecGroup* groups, size_t n_groups, uint64_t seed, double* out);

// Every group's Gumbel-max draw in one call: rec_dot_products_groups into logits (n_logits
// values), then indices[g] = gumbel_argmax_words of group g's logits and words. The noise is
// computed on the pool beside the dot products. Returns 0 when every logit is finite, else 2
// when one is NaN, 1 when one is infinite (and none NaN); the indices are meaningless then.
int rec_sample_groups(const RecGroup* groups, size_t n_groups, uint64_t seed, const uint64_t* words,
                      uint64_t n_logits, double* logits, int64_t* indices);

// out[i] += coef[c] * z_{seed[c], group, index[c]}[i] for clients c in order, i < d.
// In float32 each step is out + float(coef) * z; in float64 it is out + coef * double(z).
template <class T>
void rec_accumulate(T* out, uint64_t d, uint32_t group, const uint64_t* seeds, const uint32_t* indices,
                    const double* coefs, size_t n_clients);

// argmax_k (logits[k] + gumbel[k]); the first index on ties.
int64_t gumbel_argmax(const double* logits, const double* gumbel, size_t n);

// gumbel_argmax with the noise of 53-bit words m[i] (each < 2**53):
// gumbel[i] = -log(-log((m[i] + 1/2) 2**-53)), the operations of dprec.reference.rec.gumbel_from_words
// with the C library's log (which may differ from NumPy's in the last bit: the noise is private
// randomness, not part of any contract).
int64_t gumbel_argmax_words(const double* logits, const uint64_t* words, size_t n);

// The two above per segment [offsets[g], offsets[g+1]) (non-empty) of the flat logits and noise,
// for g < n_groups: out[g] is relative to its segment.
void gumbel_argmax_groups(const double* logits, const double* gumbel, const int64_t* offsets, size_t n_groups,
                          int64_t* out);
void gumbel_argmax_words_groups(const double* logits, const uint64_t* words, const int64_t* offsets, size_t n_groups,
                                int64_t* out);

}  // namespace dprec::cpu
