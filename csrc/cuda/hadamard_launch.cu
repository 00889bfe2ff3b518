// Launchers of the FWHT passes: the schedule of hadamard_bodies.h (shared with the host
// emulation), one kernel launch per pass on the caller's stream, scratch memory in stream
// order. Nothing here synchronises.
#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>

#include "cuda_check.h"
#include "hadamard_kernels.cuh"
#include "hadamard_launch.h"
#include "launch_util.h"

namespace dprec::cuda {
namespace {

// Dynamic shared memory above the 48 KiB default would need an opt-in; the buffers are
// sized to stay below it on every architecture built.
template <class T>
constexpr bool kFitsDefaultSmem = gpu::fwht_smem_bytes<T>() <= 48u * 1024u;
static_assert(kFitsDefaultSmem<float> && kFitsDefaultSmem<double>, "FWHT buffer above 48 KiB");

template <class T>
void run(gpu::FwhtJob job, int device, Stream stream, const T* src, T* dst, uint64_t rows, uint64_t dim, int log2n,
         bool normalize, uint64_t seed, uint32_t group, uint64_t repeats) {
    if (rows == 0) return;
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    const uint64_t n = uint64_t(1) << log2n;
    std::unique_ptr<Scratch> work;
    if (gpu::fwht_needs_work<T>(job, log2n, dim, repeats)) work = std::make_unique<Scratch>(rows * n * sizeof(T), s);
    auto pointer = [&](gpu::FwhtBuffer b) -> T* {
        if (b == gpu::FwhtBuffer::kInput) return const_cast<T*>(src);  // only ever read
        return b == gpu::FwhtBuffer::kOutput ? dst : work->as<T>();
    };
    gpu::fwht_schedule<T>(job, rows, log2n, dim, normalize, seed, group, repeats,
                          [&](const gpu::FwhtPass& p, gpu::FwhtBuffer from, gpu::FwhtBuffer to) {
                              if (p.n_blocks > 0x7fffffffu)
                                  throw std::invalid_argument("fwht: too many rows for one CUDA grid");
                              kernels::fwht_pass<T><<<static_cast<unsigned>(p.n_blocks), gpu::fwht_threads<T>(),
                                                      gpu::fwht_smem_bytes<T>(), s>>>(p, pointer(from), pointer(to));
                              check_launch("fwht_pass");
                          });
}

}  // namespace

template <class T>
void fwht(int device, Stream stream, const T* src, T* dst, uint64_t rows, int log2n, bool normalize) {
    run<T>(gpu::FwhtJob::kTransform, device, stream, src, dst, rows, uint64_t(1) << log2n, log2n, normalize, 0, 0, 1);
}

template <class T>
void randomized_hadamard(int device, Stream stream, const T* src, T* dst, uint64_t rows, uint64_t dim, int log2n,
                         uint64_t seed, uint32_t group, uint64_t repeats, bool inverse) {
    run<T>(inverse ? gpu::FwhtJob::kInverse : gpu::FwhtJob::kForward, device, stream, src, dst, rows, dim, log2n,
           true, seed, group, repeats);
}

template void fwht<float>(int, Stream, const float*, float*, uint64_t, int, bool);
template void fwht<double>(int, Stream, const double*, double*, uint64_t, int, bool);
template void randomized_hadamard<float>(int, Stream, const float*, float*, uint64_t, uint64_t, int, uint64_t,
                                         uint32_t, uint64_t, bool);
template void randomized_hadamard<double>(int, Stream, const double*, double*, uint64_t, uint64_t, int, uint64_t,
                                          uint32_t, uint64_t, bool);

void preload_hadamard_kernels() {
    preload_kernel(kernels::fwht_pass<float>, "fwht_pass<float>");
    preload_kernel(kernels::fwht_pass<double>, "fwht_pass<double>");
}

}  // namespace dprec::cuda
