// CUDA runtime queries and plain memory operations. The runtime is linked statically and
// loads the driver on first use, so importing dprec._cuda never needs a GPU: without a
// driver or device these functions report it instead of failing.
#include <cuda_runtime.h>

#include <string>

#include "cuda_check.h"
#include "launch.h"

namespace dprec::cuda {
namespace {
cudaStream_t as_stream(Stream s) { return reinterpret_cast<cudaStream_t>(s); }
std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
}  // namespace

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free error so later calls start clean
        return 0;
    }
    return n;
}

std::string unavailable_reason() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        cudaGetLastError();
        const int driver = driver_version();
        if (driver == 0) return "no NVIDIA driver was found (libcuda could not be loaded)";
        if (driver < runtime_version())
            return "the NVIDIA driver supports CUDA " + version_string(driver) + ", but dprec was built with CUDA " +
                   version_string(runtime_version()) + "; update the driver or rebuild dprec with an older toolkit";
        return std::string("no usable CUDA device: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    }
    if (n == 0) return "no CUDA device is visible";
    return "";
}

std::string device_name(int device) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

int runtime_version() {
    int v = 0;
    cudaRuntimeGetVersion(&v);
    return v;
}

int driver_version() {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;
    return v;
}

int pointer_device(uintptr_t ptr) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, reinterpret_cast<const void*>(ptr)) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) return attr.device;
    return -1;
}

uintptr_t device_malloc(int device, size_t bytes) {
    DeviceGuard guard(device);
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return reinterpret_cast<uintptr_t>(p);
}

void device_free(int device, uintptr_t ptr) noexcept {
    try {
        DeviceGuard guard(device);
        cudaFree(reinterpret_cast<void*>(ptr));
    } catch (...) {
        // Freeing during interpreter shutdown after the driver is gone: nothing to do.
    }
}

void copy_to_host(int device, Stream stream, uintptr_t src, void* dst_host, size_t bytes) {
    DeviceGuard guard(device);
    check(cudaMemcpyAsync(dst_host, reinterpret_cast<const void*>(src), bytes, cudaMemcpyDeviceToHost,
                          as_stream(stream)),
          "cudaMemcpyAsync (to host)");
    check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

void copy_to_device(int device, Stream stream, const void* src_host, uintptr_t dst, size_t bytes) {
    DeviceGuard guard(device);
    check(cudaMemcpyAsync(reinterpret_cast<void*>(dst), src_host, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
          "cudaMemcpyAsync (to device)");
}

void memset_zero(int device, Stream stream, uintptr_t dst, size_t bytes) {
    DeviceGuard guard(device);
    check(cudaMemsetAsync(reinterpret_cast<void*>(dst), 0, bytes, as_stream(stream)), "cudaMemsetAsync");
}

void synchronize(int device, Stream stream) {
    DeviceGuard guard(device);
    check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

}  // namespace dprec::cuda
