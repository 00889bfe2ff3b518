// CUDA runtime queries and plain memory operations. The runtime is linked statically and
// loads the driver on first use, so importing dprec._cuda never needs a GPU: without a
// driver or device these functions report it instead of failing.
#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "launch.h"
#include "launch_util.h"

namespace dprec::cuda {
namespace {
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
        const std::string mismatch = driver_mismatch_message(driver, runtime_version());
        if (!mismatch.empty()) return mismatch;
        return std::string("no usable CUDA device: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    }
    if (n == 0) return "no CUDA device is visible";
    return "";
}

namespace {
// The oldest driver branch each CUDA major version runs on (NVIDIA's CUDA compatibility
// tables; within a major version, minor-version compatibility lets a newer toolkit run on
// the older driver of the same major version).
const char* driver_needed_for(int cuda_major) {
    switch (cuda_major) {
        case 11: return "R450 or newer (Linux >= 450.80.02)";
        case 12: return "R525 or newer (Linux >= 525.60.13)";
        case 13: return "R580 or newer (Linux >= 580.65.06)";
        default: return nullptr;
    }
}
}  // namespace

std::string driver_mismatch_message(int driver, int runtime) {
    if (driver <= 0 || runtime <= 0 || driver / 1000 >= runtime / 1000) return "";
    const char* needed = driver_needed_for(runtime / 1000);
    std::string message = "dprec was built with CUDA " + version_string(runtime) + ", which needs an NVIDIA driver " +
                          (needed ? std::string(needed) : "for CUDA " + version_string(runtime) + " or newer") +
                          ", but this driver supports CUDA " + version_string(driver) + " only. Update the driver, " +
                          "or rebuild dprec with a CUDA " + std::to_string(driver / 1000) + ".x toolkit";
    const char* older = driver_needed_for(driver / 1000);
    if (older) message += " (which runs on drivers " + std::string(older) + ")";
    return message;
}

std::string build_mismatch_hint() {
    const std::string mismatch = driver_mismatch_message(driver_version(), runtime_version());
    if (!mismatch.empty()) return mismatch;
    return "dprec was built with CUDA " + version_string(runtime_version()) +
           " for other GPU architectures than this one, or its PTX is newer than this driver (which supports CUDA " +
           version_string(driver_version()) + "); update the driver or rebuild dprec for this GPU " +
           "(CMAKE_CUDA_ARCHITECTURES)";
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

uintptr_t device_malloc(int device, Stream stream, size_t bytes) {
    DeviceGuard guard(device);
    return pool_allocate(device, stream, bytes);
}

void device_free(int device, Stream stream, uintptr_t ptr) noexcept {
    try {
        DeviceGuard guard(device);
        pool_deallocate(device, stream, ptr);
    } catch (...) {
        // Freeing during interpreter shutdown after the driver is gone: nothing to do.
    }
}

// -- the thread's context, for DeviceGuard (cuda_check.h) ---------------------------------
// The runtime API cannot tell "device 0 is current" from "no context yet"; the driver can.
// Its functions are reached through the runtime's entry-point query, so dprec still links
// no libcuda and imports without a driver.
namespace {
using CuCtxGetCurrent = int (*)(void** context);
using CuCtxSetCurrent = int (*)(void* context);

void* driver_function(const char* name) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status);
#else
    const cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &status);
#endif
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return fn;
}
}  // namespace

bool CudaRuntimeForGuard::thread_has_context() noexcept {
    static const auto get_current = reinterpret_cast<CuCtxGetCurrent>(driver_function("cuCtxGetCurrent"));
    if (get_current == nullptr) return true;  // unknown: restore as before
    void* context = nullptr;
    return get_current(&context) != 0 || context != nullptr;
}

void CudaRuntimeForGuard::clear_thread_context() noexcept {
    static const auto set_current = reinterpret_cast<CuCtxSetCurrent>(driver_function("cuCtxSetCurrent"));
    if (set_current != nullptr) set_current(nullptr);
}

int stream_device(Stream stream) {
    if (stream <= 2) return -1;  // cudaStreamLegacy / cudaStreamPerThread / 0: the current device's
#if CUDART_VERSION >= 12080
    int device = -1;
    if (cudaStreamGetDevice(as_stream(stream), &device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return device;
#else
    return -1;
#endif
}

// -- kernels loaded up front -----------------------------------------------------------------
void preload_kernels(int device) {
    static std::mutex mutex;
    static std::vector<bool> loaded;
    std::lock_guard<std::mutex> lock(mutex);
    if (loaded.size() <= static_cast<size_t>(device)) loaded.resize(static_cast<size_t>(device) + 1, false);
    if (loaded[static_cast<size_t>(device)]) return;
    DeviceGuard guard(device);
    preload_rec_kernels();
    preload_hadamard_kernels();
    preload_sketch_kernels();
    preload_modular_kernels();
    loaded[static_cast<size_t>(device)] = true;
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
