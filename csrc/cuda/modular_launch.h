// Launchers of the SecAgg server-side kernels: plain C++ declarations (no CUDA headers), in
// the conventions of launch.h (device pointers of `device`, the caller's stream as an
// integer, asynchronous, CudaError with the CUDA message). Arguments are assumed validated
// by the binding layer (csrc/python/bind_cuda_modular.cpp): 1 <= bits <= 64 with T uint32
// for bits <= 32 and uint64 above, n >= 1, m >= 1, n * m elements addressable.
#pragma once

#include <cstdint>

#include "launch.h"

namespace dprec::cuda {

// out[j] <- ((accumulate ? out[j] : 0) + sum_{i < n} xs[i * m + j]) mod 2^bits, j < m: xs is
// the row-major (n, m) matrix of n clients' vectors. Exact (integer arithmetic), so equal to
// the CPU's result whatever the order. T is uint32_t or uint64_t.
template <class T>
void mod_sum(int device, Stream stream, const T* xs, uint64_t n, uint64_t m, int bits, bool accumulate, T* out);

// out[k] <- the centered lift of x[k] mod 2^bits into [-2^(bits-1), 2^(bits-1)), k < count:
// as is into int64 out, times `scale` (in float64, then rounded to O) into float64 / float32
// out, bit-identical to the CPU. T is uint32_t or uint64_t; O is int64_t, double or float.
template <class T, class O>
void mod_lift(int device, Stream stream, const T* x, uint64_t count, int bits, double scale, O* out);

}  // namespace dprec::cuda
