// Checks on device pointers for the CUDA bindings: what Python cannot see for itself
// (which device owns a pointer, its alignment, whether a size overflows).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "../cuda/launch.h"

namespace dprec::bind {

namespace py = pybind11;

// `ptr` must be device memory of `device` (or managed memory), aligned for T.
template <class T>
T* device_pointer(uintptr_t ptr, int device, const char* name) {
    if (ptr == 0) throw py::value_error(std::string(name) + " is a null pointer");
    const int owner = cuda::pointer_device(ptr);
    if (owner < 0)
        throw py::value_error(std::string(name) + " is not CUDA device memory (a host pointer or unknown memory)");
    if (owner != device)
        throw py::value_error(std::string(name) + " is on cuda:" + std::to_string(owner) + ", not on cuda:" +
                              std::to_string(device) + " like the rest of the call");
    if (ptr % alignof(T) != 0)
        throw py::value_error(std::string(name) + " is not aligned to its element size (" +
                              std::to_string(alignof(T)) + " bytes)");
    return reinterpret_cast<T*>(ptr);
}

inline int checked_device(int device) {
    const int n = cuda::device_count();
    if (device < 0 || device >= n)
        throw py::value_error("device must be in [0, " + std::to_string(n) + "), got " + std::to_string(device));
    return device;
}

// The checks before a kernel launch: the device exists, its kernels are loaded (so that
// lazy loading never waits in the middle of the caller's work), and `stream` belongs to
// it (a stream of another device would fail to launch, or worse, order nothing).
inline int checked_launch(int device, uintptr_t stream) {
    checked_device(device);
    cuda::preload_kernels(device);
    const int owner = cuda::stream_device(stream);
    if (owner >= 0 && owner != device)
        throw py::value_error("stream belongs to cuda:" + std::to_string(owner) + ", but the arrays are on cuda:" +
                              std::to_string(device) + "; make a stream of cuda:" + std::to_string(device) +
                              " current (e.g. `with torch.cuda.device(" + std::to_string(device) + "):`)");
    return device;
}

}  // namespace dprec::bind
