// Error checks and the device guard shared by the CUDA translation units.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace dprec::cuda {

inline void check(cudaError_t err, const char* what) {
    if (err != cudaSuccess)
        throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                                 cudaGetErrorString(err) + ")");
}

// Makes `device` current for the scope and restores the caller's device afterwards.
class DeviceGuard {
  public:
    explicit DeviceGuard(int device) {
        check(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    }
    ~DeviceGuard() {
        int now = previous_;
        if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    int previous_ = 0;
};

}  // namespace dprec::cuda
