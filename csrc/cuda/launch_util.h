// Helpers shared by the CUDA launchers (launch.cu, sketch_launch.cu): the stream cast, grid
// sizes, launch checks and stream-ordered scratch memory. CUDA translation units only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "cuda_check.h"
#include "launch.h"

namespace dprec::cuda {

inline cudaStream_t as_stream(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

inline unsigned grid_for(uint64_t n_threads, unsigned block) {
    const uint64_t g = (n_threads + block - 1) / block;
    if (g > 0x7fffffffu) throw std::invalid_argument("problem too large for one CUDA grid");
    return static_cast<unsigned>(g);
}

inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// Loads one kernel on the current device now (see preload_kernels in launch.h).
template <class Kernel>
void preload_kernel(Kernel* kernel, const char* what) {
    cudaFuncAttributes attributes{};
    check(cudaFuncGetAttributes(&attributes, kernel), what);
}

// Each launcher file loads its own kernels (called by preload_kernels, device.cpp).
void preload_rec_kernels();
void preload_hadamard_kernels();
void preload_sketch_kernels();
void preload_modular_kernels();

// Scratch memory for one launcher call, from the thread's scratch source (launch.h: the
// caller framework's allocator, or dprec's pool), returned in stream order when it goes out
// of scope: the kernels that use it are already queued on the same stream, so the host
// never waits for them. Constructed on the device the DeviceGuard made current.
class Scratch {
  public:
    Scratch(size_t bytes, cudaStream_t stream) : stream_(stream), bytes_(bytes ? bytes : 1) {
        check(cudaGetDevice(&device_), "cudaGetDevice");
        ptr_ = reinterpret_cast<void*>(scratch_allocate(device_, reinterpret_cast<Stream>(stream), bytes_));
    }
    Scratch(Scratch&& other) noexcept
        : ptr_(other.ptr_), stream_(other.stream_), bytes_(other.bytes_), device_(other.device_) {
        other.ptr_ = nullptr;
    }
    ~Scratch() {
        if (ptr_)
            scratch_deallocate(device_, reinterpret_cast<Stream>(stream_), reinterpret_cast<uintptr_t>(ptr_), bytes_);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    Scratch& operator=(Scratch&&) = delete;
    template <class T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }

  private:
    void* ptr_ = nullptr;
    cudaStream_t stream_;
    size_t bytes_;
    int device_ = 0;
};

}  // namespace dprec::cuda
