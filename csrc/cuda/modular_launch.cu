// Launchers of the SecAgg server-side kernels (modular_kernels.cuh): one grid-stride launch
// each, nothing synchronises and nothing allocates.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_check.h"
#include "launch_util.h"
#include "modular_kernels.cuh"
#include "modular_launch.h"

namespace dprec::cuda {

template <class T>
void mod_sum(int device, Stream stream, const T* xs, uint64_t n, uint64_t m, int bits, bool accumulate, T* out) {
    DeviceGuard guard(device);
    const unsigned blocks = static_cast<unsigned>(gpu::mod_grid_blocks(m, gpu::kModMaxBlocks));
    modular_kernels::mod_sum<T><<<blocks, gpu::kModThreads, 0, as_stream(stream)>>>(xs, n, m, gpu::mod_mask<T>(bits),
                                                                                  accumulate, out);
    check_launch("mod_sum");
}

template <class T, class O>
void mod_lift(int device, Stream stream, const T* x, uint64_t count, int bits, double scale, O* out) {
    DeviceGuard guard(device);
    const unsigned blocks = static_cast<unsigned>(gpu::mod_grid_blocks(count, gpu::kModMaxBlocks));
    modular_kernels::mod_lift<T, O><<<blocks, gpu::kModThreads, 0, as_stream(stream)>>>(
        x, count, bits, gpu::mod_mask<T>(bits), scale, out);
    check_launch("mod_lift");
}

template void mod_sum<uint32_t>(int, Stream, const uint32_t*, uint64_t, uint64_t, int, bool, uint32_t*);
template void mod_sum<uint64_t>(int, Stream, const uint64_t*, uint64_t, uint64_t, int, bool, uint64_t*);
template void mod_lift<uint32_t, int64_t>(int, Stream, const uint32_t*, uint64_t, int, double, int64_t*);
template void mod_lift<uint32_t, double>(int, Stream, const uint32_t*, uint64_t, int, double, double*);
template void mod_lift<uint32_t, float>(int, Stream, const uint32_t*, uint64_t, int, double, float*);
template void mod_lift<uint64_t, int64_t>(int, Stream, const uint64_t*, uint64_t, int, double, int64_t*);
template void mod_lift<uint64_t, double>(int, Stream, const uint64_t*, uint64_t, int, double, double*);
template void mod_lift<uint64_t, float>(int, Stream, const uint64_t*, uint64_t, int, double, float*);

void preload_modular_kernels() {
    preload_kernel(modular_kernels::mod_sum<uint32_t>, "mod_sum<uint32>");
    preload_kernel(modular_kernels::mod_sum<uint64_t>, "mod_sum<uint64>");
    preload_kernel(modular_kernels::mod_lift<uint32_t, int64_t>, "mod_lift<uint32, int64>");
    preload_kernel(modular_kernels::mod_lift<uint32_t, double>, "mod_lift<uint32, float64>");
    preload_kernel(modular_kernels::mod_lift<uint32_t, float>, "mod_lift<uint32, float32>");
    preload_kernel(modular_kernels::mod_lift<uint64_t, int64_t>, "mod_lift<uint64, int64>");
    preload_kernel(modular_kernels::mod_lift<uint64_t, double>, "mod_lift<uint64, float64>");
    preload_kernel(modular_kernels::mod_lift<uint64_t, float>, "mod_lift<uint64, float32>");
}

}  // namespace dprec::cuda
