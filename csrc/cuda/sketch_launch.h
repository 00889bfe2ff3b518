// Count-sketch launchers: plain C++ declarations (no CUDA headers), like launch.h. They
// run on `stream` of `device`, enqueue their work and return without synchronising.
// Pointers are device pointers the binding layer has checked; sizes are within the CPU's
// caps (1 <= rows <= 2^16, 1 <= cols < 2^32, rows * cols <= 2^34, 1 <= dim <= 2^34).
#pragma once

#include <cstdint>

#include "launch.h"

namespace dprec::cuda {

// table[r * cols + h_r(j)] += s_r(j) * T(x[j]) * T(scale), r < rows, j < dim, bit-identical
// to cpu::count_sketch_encode (same additions in the same order; see sketch_bodies.h).
// X (input) and T (table) are float or double. Scratch memory (stream-ordered) is bounded
// by gpu::kSketchMaxPairs pairs, whatever the sizes.
template <class X, class T>
void count_sketch_encode(int device, Stream stream, const X* x, uint64_t dim, uint64_t seed, uint32_t group,
                         uint32_t rows, uint64_t cols, double scale, T* table);

// out[j], j < dim, bit-identical to cpu::count_sketch_decode. The median needs
// rows <= gpu::kSketchMedianMaxRows (32).
template <class T>
void count_sketch_decode(int device, Stream stream, const T* table, uint64_t dim, uint64_t seed, uint32_t group,
                         uint32_t rows, uint64_t cols, bool median, double median_scale, T* out);

}  // namespace dprec::cuda
