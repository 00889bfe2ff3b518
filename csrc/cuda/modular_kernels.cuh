// The SecAgg server-side CUDA kernels (modular sum, centered lift): each thread computes its
// flat id and the grid's stride and runs its body from modular_bodies.h. Included by
// modular_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include "modular_bodies.h"

namespace dprec::cuda::modular_kernels {

__device__ __forceinline__ uint64_t thread_id() {
    return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ uint64_t grid_stride() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

// xs and out are not __restrict__: out may be a row of xs (see mod_sum_thread).
template <class T>
__global__ void __launch_bounds__(gpu::kModThreads)
    mod_sum(const T* xs, uint64_t n, uint64_t m, T mask, bool accumulate, T* out) {
    gpu::mod_sum_thread(thread_id(), grid_stride(), xs, n, m, mask, accumulate, out);
}

// x and out may alias (an in-place lift of uint64 into int64).
template <class T, class O>
__global__ void __launch_bounds__(gpu::kModThreads)
    mod_lift(const T* x, uint64_t count, int bits, T mask, double scale, O* out) {
    gpu::mod_lift_thread(thread_id(), grid_stride(), x, count, bits, mask, scale, out);
}

}  // namespace dprec::cuda::modular_kernels
