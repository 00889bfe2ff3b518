// The FWHT pass kernel: one block per buffer of hadamard_bodies.h, its phases separated by
// barriers. Included by hadamard_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include "hadamard_bodies.h"

namespace dprec::cuda::kernels {

// One kernel for every buffer size of a type: the block has 2^(p.p - kPerThreadLog2)
// threads (256 .. 1024) and fwht_smem_bytes<T>(p.p) of dynamic shared memory. The bound of
// 1024 threads caps registers at 64 per thread, which the 128 bytes of values per thread
// and the index arithmetic fit.
template <class T>
__global__ void __launch_bounds__(gpu::kFwhtMaxThreads) fwht_pass(gpu::FwhtPass p, const T* src, T* dst) {
    extern __shared__ __align__(16) unsigned char fwht_smem[];
    T* buf = reinterpret_cast<T*>(fwht_smem);
    const uint64_t block = blockIdx.x;
    const uint32_t t = threadIdx.x;
    gpu::fwht_load_phase<T>(p, block, t, src, buf);
    __syncthreads();
#pragma unroll 1
    for (int r = 0; r < p.n_rounds; ++r) {
        gpu::fwht_round_phase<T>(p, r, t, buf);
        __syncthreads();
    }
    // An opaque block number: the store's addresses are recomputed here, not kept in
    // registers through the rounds from the load phase.
    gpu::fwht_store_phase<T>(p, gpu::fwht_opaque(block), t, buf, dst);
}

}  // namespace dprec::cuda::kernels
