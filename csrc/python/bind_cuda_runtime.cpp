// Devices, device memory owned by dprec, copies and stream synchronisation.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <exception>
#include <string>

#include "../cuda/launch.h"
#include "device_pointers.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

// A device allocation that dprec returns when the caller's framework is unknown (the
// Python class dprec.cuda.DeviceArray wraps it with __cuda_array_interface__). It comes
// from dprec's pool in stream order on the stream its contents are produced on, and goes
// back the same way: freeing never synchronises the device (cudaFree would, with the GIL
// held), and a consumer on another stream keeps the array alive until its work is done,
// as with any CUDA framework's arrays.
class DeviceBuffer {
  public:
    DeviceBuffer(int device, cuda::Stream stream, size_t nbytes)
        : device_(device), stream_(stream), nbytes_(nbytes), ptr_(cuda::device_malloc(device, stream, nbytes)) {}
    ~DeviceBuffer() { cuda::device_free(device_, stream_, ptr_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    int device() const { return device_; }
    cuda::Stream stream() const { return stream_; }
    size_t nbytes() const { return nbytes_; }
    uintptr_t ptr() const { return ptr_; }

  private:
    int device_;
    cuda::Stream stream_;
    size_t nbytes_;
    uintptr_t ptr_;
};

}  // namespace

void bind_cuda_runtime(py::module_& m) {
    m.def("device_count", &cuda::device_count, "Number of usable CUDA devices (0 without a driver or GPU).");
    m.def("unavailable_reason", &cuda::unavailable_reason, "Why no device is usable; '' when one is.");
    m.def("device_name", [](int device) { return cuda::device_name(checked_device(device)); }, py::arg("device"));
    m.def("runtime_version", &cuda::runtime_version);
#ifndef DPREC_CUDA_ARCHITECTURES
#define DPREC_CUDA_ARCHITECTURES ""
#endif
    m.def("build_architectures", [] { return std::string(DPREC_CUDA_ARCHITECTURES); },
          "The CMake CUDA architectures the kernels were compiled for, comma-separated.");
    m.def("driver_version", &cuda::driver_version);
    m.def("pointer_device", &cuda::pointer_device, py::arg("ptr"),
          "The device owning a device/managed pointer, or -1 for host or unknown memory.");

    // Out of memory is Python's MemoryError, whatever the allocation (scratch, arrays).
    py::register_exception_translator([](std::exception_ptr error) {
        try {
            if (error) std::rethrow_exception(error);
        } catch (const cuda::OutOfMemory& e) {
            PyErr_SetString(PyExc_MemoryError, e.what());
        }
    });

    py::class_<DeviceBuffer>(m, "DeviceBuffer")
        .def(py::init([](int device, uintptr_t stream, size_t nbytes) {
                 return new DeviceBuffer(checked_launch(device, stream), stream, nbytes);
             }),
             py::arg("device"), py::arg("stream"), py::arg("nbytes"))
        .def_property_readonly("device", &DeviceBuffer::device)
        .def_property_readonly("stream", &DeviceBuffer::stream)
        .def_property_readonly("nbytes", &DeviceBuffer::nbytes)
        .def_property_readonly("ptr", &DeviceBuffer::ptr);

    m.def(
        "copy_to_host",
        [](int device, uintptr_t stream, uintptr_t src, py::array& out) {
            if (!out.writeable() || !(out.flags() & py::array::c_style))
                throw py::value_error("out must be a writeable C-contiguous array");
            device_pointer<uint8_t>(src, device, "src");
            void* dst = out.mutable_data();
            const size_t n = static_cast<size_t>(out.nbytes());
            py::gil_scoped_release release;
            cuda::copy_to_host(device, stream, src, dst, n);
        },
        py::arg("device"), py::arg("stream"), py::arg("src"), py::arg("out"),
        "Copy out.nbytes bytes from device memory into a NumPy array; synchronises the stream.");
    m.def(
        "copy_to_device",
        [](int device, uintptr_t stream, const py::array& src, uintptr_t dst) {
            if (!(src.flags() & py::array::c_style)) throw py::value_error("src must be C-contiguous");
            device_pointer<uint8_t>(dst, device, "dst");
            const void* s = src.data();
            const size_t n = static_cast<size_t>(src.nbytes());
            py::gil_scoped_release release;
            cuda::copy_to_device(device, stream, s, dst, n);
        },
        py::arg("device"), py::arg("stream"), py::arg("src"), py::arg("dst"));
    m.def(
        "memset_zero",
        [](int device, uintptr_t stream, uintptr_t dst, size_t nbytes) {
            device_pointer<uint8_t>(dst, device, "dst");
            cuda::memset_zero(device, stream, dst, nbytes);
        },
        py::arg("device"), py::arg("stream"), py::arg("dst"), py::arg("nbytes"));
    m.def(
        "memory_pool_release_threshold",
        [](int device) { return cuda::pool_release_threshold(checked_device(device)); }, py::arg("device"),
        "Bytes of freed memory dprec's pool on `device` keeps for reuse.");
    m.def(
        "set_memory_pool_release_threshold",
        [](int device, uint64_t bytes) { cuda::set_pool_release_threshold(checked_device(device), bytes); },
        py::arg("device"), py::arg("bytes"));
    m.def(
        "memory_pool_reserved",
        [](int device) { return cuda::pool_reserved_bytes(checked_device(device)); }, py::arg("device"),
        "Bytes dprec's pool on `device` holds, in use or kept for reuse.");
    m.def(
        "empty_cache",
        [](int device) {
            checked_device(device);
            py::gil_scoped_release release;
            cuda::pool_trim(device);
        },
        py::arg("device"), "Wait for the device, then return every unused byte of dprec's pool to the driver.");
    m.def("driver_mismatch_message", &cuda::driver_mismatch_message, py::arg("driver_version"),
          py::arg("runtime_version"),
          "Why a driver (CUDA version as 1000*major + 10*minor) cannot run this runtime; '' when it can.");
    m.def(
        "synchronize",
        [](int device, uintptr_t stream) {
            checked_device(device);
            py::gil_scoped_release release;
            cuda::synchronize(device, stream);
        },
        py::arg("device"), py::arg("stream"));
}

}  // namespace dprec::bind
