// Count-sketch encode / decode on the CPU (docs/contract.md, docs/secagg.md). Buckets from Philox domain 1 and
// signs from domain 2 (substream = row, element j = word j), generated on the fly in tiles:
// no rows x dim tables. Arguments are assumed validated by the binding layer.
#pragma once

#include <cstdint>

namespace dprec::cpu {

// table[r * cols + h_r(j)] += s_r(j) * v_j for r < rows, j < dim (accumulates into table),
// with v_j = x[j] * T(scale) computed in T, added (s = +1) or subtracted (s = -1) in T.
// Each row is done by one thread and adds its elements in increasing j: bitwise deterministic
// for any thread count and cache-derived grouping of rows into work items. (The NumPy reference's bincount of signs * x * scale agrees to rounding.)
template <class T>
void count_sketch_encode(const T* x, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols,
                         double scale, T* table);

// out[j] for j < dim: mean: T(sum over r = 0.. rows-1 in order of s_r(j) * table[r, h_r(j)]),
// accumulated in double; median: T(median_r(s_r(j) * table[r, h_r(j)]) * median_scale), the
// median of an even count being the mean of the two middle values (in double).
template <class T>
void count_sketch_decode(const T* table, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols,
                         bool median, double median_scale, T* out);

}  // namespace dprec::cpu
