// Error checks and the device guard shared by the CUDA translation units.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "device_guard.h"
#include "launch.h"

namespace dprec::cuda {

// Errors that mean "this build cannot run on this driver / GPU": the message says what to do.
inline bool is_build_mismatch(cudaError_t err) {
    return err == cudaErrorInsufficientDriver || err == cudaErrorUnsupportedPtxVersion ||
           err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidKernelImage;
}

std::string build_mismatch_hint();  // device.cpp: the driver dprec's runtime needs

inline void check(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return;
    // The failed call also recorded itself as the thread's last error; clear it, or the next
    // check_launch (which reads cudaGetLastError) would report this old error as its own.
    // Sticky errors (a corrupted context) survive this, as they must.
    cudaGetLastError();
    std::string message = std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")";
    if (err == cudaErrorMemoryAllocation) throw OutOfMemory(message);
    if (is_build_mismatch(err)) message += "; " + build_mismatch_hint();
    throw CudaError(message);
}

// The CUDA runtime as DeviceGuard needs it (device_guard.h has the logic and its reasons).
struct CudaRuntimeForGuard {
    static int current_device() {
        int d = 0;
        check(cudaGetDevice(&d), "cudaGetDevice");
        return d;
    }
    static void set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }
    static void restore_device(int device) noexcept {
        if (cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
    }
    static bool thread_has_context() noexcept;  // device.cpp
    static void clear_thread_context() noexcept;  // device.cpp
};

using DeviceGuard = BasicDeviceGuard<CudaRuntimeForGuard>;

}  // namespace dprec::cuda
