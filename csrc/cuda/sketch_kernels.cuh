// The count-sketch CUDA kernels: each thread computes its flat id and runs its body from
// sketch_bodies.h. Included by sketch_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include "sketch_bodies.h"

namespace dprec::cuda::sketch_kernels {

__device__ __forceinline__ uint64_t thread_id() {
    return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

template <class X, class T>
__global__ void pairs(uint64_t n_threads, const X* __restrict__ x, uint64_t j0, uint64_t n_elems, uint32_t row0,
                      uint64_t seed, uint32_t group, uint64_t cols, T scale, uint32_t* __restrict__ keys,
                      T* __restrict__ values) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::sketch_pairs_thread(t, x, j0, n_elems, row0, seed, group, cols, scale, keys, values);
}

template <class T>
__global__ void fold(uint64_t n_pairs, const uint32_t* __restrict__ keys, const T* __restrict__ values,
                     T* __restrict__ table_batch) {
    const uint64_t i = thread_id();
    if (i < n_pairs) gpu::sketch_fold_thread(i, keys, values, n_pairs, table_batch);
}

template <class T>
__global__ void decode_mean(uint64_t n_threads, const T* __restrict__ table, uint64_t dim, uint64_t seed,
                            uint32_t group, uint32_t rows, uint64_t cols, T* __restrict__ out) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::sketch_decode_mean_thread(t, table, dim, seed, group, rows, cols, out);
}

template <class T>
__global__ void decode_median(uint64_t dim, const T* __restrict__ table, uint64_t seed, uint32_t group,
                              uint32_t rows, uint64_t cols, double median_scale, T* __restrict__ out) {
    const uint64_t j = thread_id();
    if (j < dim) gpu::sketch_decode_median_thread(j, table, seed, group, rows, cols, median_scale, out);
}

}  // namespace dprec::cuda::sketch_kernels
