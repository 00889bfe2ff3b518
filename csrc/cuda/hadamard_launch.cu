// Launchers of the FWHT passes: the schedule of hadamard_bodies.h (shared with the host
// emulation), one kernel launch per pass on the caller's stream, scratch memory in stream
// order. Nothing here synchronises.
#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "cuda_check.h"
#include "hadamard_kernels.cuh"
#include "hadamard_launch.h"
#include "launch_util.h"

namespace dprec::cuda {
namespace {

// The largest buffer (log2 of its elements) this device gives a block: the biggest of
// kMinBufLog2 .. kMaxBufLog2 whose shared memory fits the per-block opt-in limit, with the
// kernel's dynamic shared memory limit raised to it (needed above the 48 KiB default).
// The plan is a pure function of this number (fwht_geometry), so an older GPU (sm_75: 64
// KiB, sm_86/89: ~100 KiB) runs the smaller-buffer plan that the emulation reproduces with
// the same limit. Done once per device and type.
template <class T>
int max_buf_log2(int device) {
    constexpr int kMaxDevices = 64;
    static std::mutex mutex;
    static int known[kMaxDevices] = {};  // 0: not yet
    std::lock_guard<std::mutex> lock(mutex);
    if (device >= 0 && device < kMaxDevices && known[device] != 0) return known[device];
    int optin = 0;
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "cudaDeviceGetAttribute (opt-in shared memory)");
    int best = gpu::FwhtTraits<T>::kMinBufLog2;
    int largest = gpu::FwhtTraits<T>::kMaxBufLog2;
    // A benchmarking knob: DPREC_CUDA_FWHT_MAX_BUF_LOG2 caps the float32 buffer (float64
    // one less), to compare the schedules of smaller buffers on the same GPU.
    if (const char* cap = std::getenv("DPREC_CUDA_FWHT_MAX_BUF_LOG2")) {
        const int v = std::atoi(cap) - (sizeof(T) == 8 ? 1 : 0);
        if (v >= best && v < largest) largest = v;
    }
    for (int p = largest; p > best; --p) {
        if (gpu::fwht_smem_bytes<T>(p) <= static_cast<uint32_t>(optin)) {
            best = p;
            break;
        }
    }
    const uint32_t bytes = gpu::fwht_smem_bytes<T>(best);
    if (bytes > 48u * 1024u)
        check(cudaFuncSetAttribute(kernels::fwht_pass<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)),
              "cudaFuncSetAttribute (fwht shared memory)");
    if (device >= 0 && device < kMaxDevices) known[device] = best;
    return best;
}

template <class T>
void run(gpu::FwhtJob job, int device, Stream stream, const T* src, T* dst, uint64_t rows, uint64_t dim, int log2n,
         bool normalize, uint64_t seed, uint32_t group, uint64_t repeats) {
    if (rows == 0) return;
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    const int buf_log2 = max_buf_log2<T>(device);
    const uint64_t n = uint64_t(1) << log2n;
    std::unique_ptr<Scratch> work;
    if (gpu::fwht_needs_work<T>(job, log2n, buf_log2, dim, repeats))
        work = std::make_unique<Scratch>(rows * n * sizeof(T), s);
    auto pointer = [&](gpu::FwhtBuffer b) -> T* {
        if (b == gpu::FwhtBuffer::kInput) return const_cast<T*>(src);  // only ever read
        return b == gpu::FwhtBuffer::kOutput ? dst : work->as<T>();
    };
    gpu::fwht_schedule<T>(job, rows, log2n, buf_log2, dim, normalize, seed, group, repeats,
                          [&](const gpu::FwhtPass& p, gpu::FwhtBuffer from, gpu::FwhtBuffer to) {
                              if (p.n_blocks > 0x7fffffffu)
                                  throw std::invalid_argument("fwht: too many rows for one CUDA grid");
                              kernels::fwht_pass<T><<<static_cast<unsigned>(p.n_blocks), gpu::fwht_threads<T>(p.p),
                                                      gpu::fwht_smem_bytes<T>(p.p), s>>>(p, pointer(from),
                                                                                         pointer(to));
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
