// The FWHT pass kernel: one block per buffer of hadamard_bodies.h, its phases separated by
// barriers. Included by hadamard_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include "hadamard_bodies.h"

namespace dprec::cuda::kernels {

template <class T>
__global__ void __launch_bounds__(gpu::fwht_threads<T>()) fwht_pass(gpu::FwhtPass p, const T* src, T* dst) {
    // Dynamic shared memory: the padded buffer of T, then one sign mask per thread.
    extern __shared__ __align__(16) unsigned char fwht_smem[];
    T* buf = reinterpret_cast<T*>(fwht_smem);
    uint32_t* mask = reinterpret_cast<uint32_t*>(fwht_smem + (gpu::fwht_smem_bytes<T>() -
                                                              gpu::fwht_threads<T>() * sizeof(uint32_t)));
    const uint64_t block = blockIdx.x;
    const uint32_t t = threadIdx.x;
    constexpr uint32_t n_threads = gpu::fwht_threads<T>();
    if (p.sign != static_cast<int>(gpu::FwhtSign::kNone)) {
        gpu::fwht_signs_phase(p, block, t, mask);
        __syncthreads();
    }
    gpu::fwht_load_phase<T>(p, block, t, n_threads, mask, src, buf);
    __syncthreads();
    const int rounds = p.n_rounds();
    for (int r = 0; r < rounds; ++r) {
        gpu::fwht_round_phase<T>(p, r, t, buf);
        __syncthreads();
    }
    gpu::fwht_store_phase<T>(p, block, t, n_threads, mask, buf, dst);
}

}  // namespace dprec::cuda::kernels
