// Consuming DLPack capsules (the `__dlpack__` protocol) without any framework headers.
//
// The structs below are the DLPack ABI (dlpack.h, v0.x "dltensor" capsules) declared
// from its specification. Following the protocol, the consumer renames the capsule to
// "used_dltensor" and owns the DLManagedTensor from then on: DLPackTensor calls its
// deleter when the Python object goes away, which keeps the producer's memory alive
// for as long as dprec uses the pointer.
//
// For GPU memory "uses" includes kernels still queued: the deleter hands the memory back
// to the producer, whose allocator may not be stream-aware (it may reuse the memory at
// once, on any stream). So a GPU import first waits for the stream dprec ran on (with
// the GIL released); DLPack offers no stream-ordered way to return memory.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../cuda/launch.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

struct DLDevice {
    int32_t device_type;
    int32_t device_id;
};
struct DLDataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};
struct DLTensor {
    void* data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;
    int64_t* strides;
    uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor* self);
};

enum : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 };

std::string dtype_name(DLDataType t) {
    if (t.lanes != 1) return "vector" + std::to_string(t.lanes) + "x" + std::to_string(t.bits);
    const std::string bits = std::to_string(t.bits);
    switch (t.code) {
        case kDLInt: return "int" + bits;
        case kDLUInt: return "uint" + bits;
        case kDLFloat: return "float" + bits;
        case kDLBfloat: return "bfloat" + bits;
        case kDLComplex: return "complex" + bits;
        case kDLBool: return "bool";
        default: return "dlpack-code" + std::to_string(t.code) + "-" + bits;
    }
}

constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLCUDAManaged = 13;

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
}

class DLPackTensor {
  public:
    explicit DLPackTensor(DLManagedTensor* managed) : managed_(managed) {}
    ~DLPackTensor() {
        if (managed_ == nullptr) return;
        if (on_gpu()) wait_for_stream();
        if (managed_->deleter) managed_->deleter(managed_);
    }
    DLPackTensor(const DLPackTensor&) = delete;
    DLPackTensor& operator=(const DLPackTensor&) = delete;

    const DLTensor& t() const { return managed_->dl_tensor; }
    uintptr_t ptr() const { return reinterpret_cast<uintptr_t>(t().data) + t().byte_offset; }
    py::tuple shape() const {
        py::tuple s(t().ndim);
        for (int i = 0; i < t().ndim; ++i) s[i] = t().shape[i];
        return s;
    }
    // Strides in elements, or None for a compact row-major tensor.
    py::object strides() const {
        if (t().strides == nullptr) return py::none();
        py::tuple s(t().ndim);
        for (int i = 0; i < t().ndim; ++i) s[i] = t().strides[i];
        return std::move(s);
    }

    bool on_gpu() const { return t().device.device_type == kDLCUDA || t().device.device_type == kDLCUDAManaged; }
    // The stream dprec queues its work on for this tensor (0: the legacy default stream).
    uintptr_t stream = 0;

  private:
    void wait_for_stream() noexcept {
        try {
            if (!interpreter_finalizing() && PyGILState_Check()) {
                py::gil_scoped_release release;
                cuda::synchronize(t().device.device_id, stream);
            } else {
                cuda::synchronize(t().device.device_id, stream);
            }
        } catch (...) {
            // No device any more (shutdown): nothing is running that could read the memory.
        }
    }

    DLManagedTensor* managed_;
};

}  // namespace

void bind_dlpack(py::module_& m) {
    py::class_<DLPackTensor>(m, "DLPackTensor", "A consumed DLPack tensor; frees the producer's handle when deleted.")
        .def_property_readonly("ptr", &DLPackTensor::ptr, "data + byte_offset")
        .def_property_readonly("device_type", [](const DLPackTensor& x) { return x.t().device.device_type; })
        .def_property_readonly("device_id", [](const DLPackTensor& x) { return x.t().device.device_id; })
        .def_property_readonly("dtype", [](const DLPackTensor& x) { return dtype_name(x.t().dtype); })
        .def_property_readonly("itemsize", [](const DLPackTensor& x) { return (x.t().dtype.bits * x.t().dtype.lanes + 7) / 8; })
        .def_property_readonly("shape", &DLPackTensor::shape)
        .def_property_readonly("strides", &DLPackTensor::strides)
        .def_property_readonly("on_gpu", &DLPackTensor::on_gpu)
        .def_readwrite("stream", &DLPackTensor::stream,
                       "The stream dprec's work on this tensor runs on; a GPU import waits for it when deleted.");

    m.def(
        "dlpack_import",
        [](py::capsule capsule) {
            PyObject* cap = capsule.ptr();
            if (!PyCapsule_IsValid(cap, "dltensor")) {
                PyErr_Clear();
                throw py::value_error(
                    "expected an unused DLPack capsule named 'dltensor' (was it consumed already?)");
            }
            auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
            if (managed == nullptr) throw py::error_already_set();
            if (managed->dl_tensor.ndim < 0 || (managed->dl_tensor.ndim > 0 && managed->dl_tensor.shape == nullptr))
                throw py::value_error("malformed DLPack tensor (negative ndim or missing shape)");
            // Ownership moves to us: the capsule must no longer free the tensor.
            if (PyCapsule_SetName(cap, "used_dltensor") != 0) throw py::error_already_set();
            if (PyCapsule_SetDestructor(cap, nullptr) != 0) throw py::error_already_set();
            return new DLPackTensor(managed);
        },
        py::arg("capsule"), "Consume a DLPack capsule (renamed 'used_dltensor'); returns a DLPackTensor.");
}

}  // namespace dprec::bind
