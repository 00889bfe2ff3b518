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

// Device memory freed in stream order when it goes out of scope: the kernels that use it
// are already queued on the same stream, so the host never waits for them.
class Scratch {
  public:
    Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
        check(cudaMallocAsync(&ptr_, bytes ? bytes : 1, stream), "cudaMallocAsync (scratch)");
    }
    Scratch(Scratch&& other) noexcept : ptr_(other.ptr_), stream_(other.stream_) { other.ptr_ = nullptr; }
    ~Scratch() {
        if (ptr_) cudaFreeAsync(ptr_, stream_);
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
};

}  // namespace dprec::cuda
