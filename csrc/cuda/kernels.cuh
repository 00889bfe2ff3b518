// The CUDA kernels: each thread computes its flat id and runs its body from
// kernel_bodies.h. Included by launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include "kernel_bodies.h"

namespace dprec::cuda::kernels {

__device__ __forceinline__ uint64_t thread_id() {
    return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__global__ void stream_normals(uint64_t n_threads, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                               uint64_t offset, uint64_t count, float scale, float* out) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::stream_normals_thread(t, seed, substream, group, domain, offset, count, scale, out);
}

__global__ void stream_words(uint64_t n_threads, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                             uint64_t offset, uint64_t count, uint32_t* out) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::stream_words_thread(t, seed, substream, group, domain, offset, count, out);
}

template <class T>
__global__ void llr(gpu::LlrPlan plan, const T* __restrict__ phi, uint64_t seed, uint32_t group,
                    double* __restrict__ partial) {
    const uint64_t t = thread_id();
    if (t < plan.n_threads()) gpu::llr_thread(t, plan, phi, seed, group, partial);
}

__global__ void generate_only(gpu::LlrPlan plan, uint64_t seed, uint32_t group, float* scratch) {
    const uint64_t t = thread_id();
    if (t < plan.n_threads()) gpu::generate_only_thread(t, plan, seed, group, scratch);
}

__global__ void reduce_rows(uint64_t n_threads, const double* __restrict__ in, uint64_t rows, uint64_t cols,
                            double factor, double* __restrict__ out) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::reduce_rows_thread(t, in, rows, cols, factor, out);
}

__global__ void gumbel_argmax_first_level(uint64_t n_threads, const double* __restrict__ logits,
                                          const double* __restrict__ gumbel, const int64_t* __restrict__ item_offsets,
                                          const int64_t* __restrict__ thread_offsets, uint64_t n_groups,
                                          double* __restrict__ best_values, int64_t* __restrict__ best_indices) {
    const uint64_t t = thread_id();
    if (t < n_threads)
        gpu::gumbel_argmax_first_level_thread(t, logits, gumbel, item_offsets, thread_offsets, n_groups, best_values,
                                              best_indices);
}

__global__ void gumbel_argmax_next_level(uint64_t n_threads, const double* __restrict__ values,
                                         const int64_t* __restrict__ indices,
                                         const int64_t* __restrict__ item_offsets,
                                         const int64_t* __restrict__ thread_offsets, uint64_t n_groups,
                                         double* __restrict__ best_values, int64_t* __restrict__ best_indices) {
    const uint64_t t = thread_id();
    if (t < n_threads)
        gpu::gumbel_argmax_next_level_thread(t, values, indices, item_offsets, thread_offsets, n_groups, best_values,
                                             best_indices);
}

__global__ void accumulate_f32(uint64_t n_threads, float* out, uint64_t d, uint32_t group, const uint64_t* seeds,
                               const uint32_t* indices, const double* coefs, uint64_t n_clients) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::accumulate_f32_thread(t, out, d, group, seeds, indices, coefs, n_clients);
}

__global__ void accumulate_f64(uint64_t n_threads, double* out, float* out_f32, uint64_t d, uint32_t group,
                               const uint64_t* seeds, const uint32_t* indices, const double* coefs,
                               uint64_t n_clients) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::accumulate_f64_thread(t, out, out_f32, d, group, seeds, indices, coefs, n_clients);
}

template <class T>
__global__ void norm_stats(uint64_t n_threads, const T* __restrict__ x, uint64_t n, double divisor,
                           double* __restrict__ stats) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::norm_stats_thread(t, n_threads, x, n, divisor, stats);
}

__global__ void reduce_norm_rows(uint64_t n_threads, const double* __restrict__ in, uint64_t rows,
                                 double* __restrict__ out) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::reduce_norm_rows_thread(t, in, rows, out);
}

__global__ void scale_f64(uint64_t n, const double* src, double factor, double* dst) {
    const uint64_t i = thread_id();
    if (i < n) gpu::scale_f64_thread(i, src, factor, dst);
}

__global__ void to_float32(uint64_t n, const void* src, int type, float* dst) {
    const uint64_t i = thread_id();
    if (i >= n) return;
    if (type == 0)
        dst[i] = gpu::half_bits_to_float(static_cast<const uint16_t*>(src)[i]);
    else if (type == 1)
        dst[i] = gpu::bfloat16_bits_to_float(static_cast<const uint16_t*>(src)[i]);
    else
        dst[i] = __double2float_rn(static_cast<const double*>(src)[i]);
}

}  // namespace dprec::cuda::kernels
