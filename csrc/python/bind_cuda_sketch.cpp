// Count-sketch kernels on the GPU. Arrays arrive as (pointer, dtype) with the device and
// the caller's stream from the Python layer (python/dprec/transforms/sketch.py); this layer checks
// sizes, dtypes and that every pointer is device memory of `device`, then calls the
// launchers of csrc/cuda/sketch_launch.h.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "../cuda/sketch_launch.h"
#include "device_pointers.h"
#include "scratch.h"
#include "sketch_checks.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

bool is_float64(const std::string& dtype, const char* name) {
    if (dtype == "float32") return false;
    if (dtype == "float64") return true;
    throw py::type_error(std::string(name) + " must be float32 or float64 on the GPU, got " + dtype);
}

template <class X, class T>
void encode(int device, uintptr_t stream, uintptr_t x, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows,
            uint64_t cols, double scale, uintptr_t table) {
    const X* xp = device_pointer<X>(x, device, "x");
    T* tp = device_pointer<T>(table, device, "table");
    py::gil_scoped_release release;
    cuda::count_sketch_encode(device, stream, xp, dim, seed, group, rows, cols, scale, tp);
}

template <class T>
void decode(int device, uintptr_t stream, uintptr_t table, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows,
            uint64_t cols, bool median, double median_scale, uintptr_t out) {
    const T* tp = device_pointer<T>(table, device, "table");
    T* op = device_pointer<T>(out, device, "out");
    py::gil_scoped_release release;
    cuda::count_sketch_decode(device, stream, tp, dim, seed, group, rows, cols, median, median_scale, op);
}

}  // namespace

void bind_cuda_sketch(py::module_& m) {
    m.def(
        "count_sketch_encode",
        [](int device, uintptr_t stream, uintptr_t x, const std::string& x_dtype, uint64_t dim, uint64_t seed,
           uint32_t group, int64_t rows, int64_t cols, double scale, uintptr_t table, const std::string& table_dtype,
           const py::object& scratch) {
            checked_launch(device, stream);
            check_sketch_shape(rows, cols);
            check_sketch_dim(dim, "x");
            check_sketch_finite(scale, "scale");
            const bool x64 = is_float64(x_dtype, "x");
            const bool t64 = is_float64(table_dtype, "table");
            const auto r = static_cast<uint32_t>(rows);
            const auto c = static_cast<uint64_t>(cols);
            ScratchScope scope(scratch);  // the encode releases the GIL inside encode<>()
            if (!x64 && !t64)
                encode<float, float>(device, stream, x, dim, seed, group, r, c, scale, table);
            else if (x64 && !t64)
                encode<double, float>(device, stream, x, dim, seed, group, r, c, scale, table);
            else if (!x64)
                encode<float, double>(device, stream, x, dim, seed, group, r, c, scale, table);
            else
                encode<double, double>(device, stream, x, dim, seed, group, r, c, scale, table);
        },
        py::arg("device"), py::arg("stream"), py::arg("x"), py::arg("x_dtype"), py::arg("dim"), py::arg("seed"),
        py::arg("group"), py::arg("rows"), py::arg("cols"), py::arg("scale"), py::arg("table"),
        py::arg("table_dtype"), py::arg("scratch") = py::none(),
        "table[r, h_r(j)] += s_r(j) * x[j] * scale (x converted to the table's dtype), bit-identical to the CPU; "
        "asynchronous on `stream`.");

    m.def(
        "count_sketch_decode",
        [](int device, uintptr_t stream, uintptr_t table, const std::string& dtype, uint64_t dim, uint64_t seed,
           uint32_t group, int64_t rows, int64_t cols, bool median, double median_scale, uintptr_t out) {
            checked_launch(device, stream);
            check_sketch_shape(rows, cols);
            check_sketch_dim(dim, "out");
            check_sketch_finite(median_scale, "median_scale");
            if (median) check_sketch_median_rows(rows);
            const auto r = static_cast<uint32_t>(rows);
            const auto c = static_cast<uint64_t>(cols);
            if (is_float64(dtype, "table"))
                decode<double>(device, stream, table, dim, seed, group, r, c, median, median_scale, out);
            else
                decode<float>(device, stream, table, dim, seed, group, r, c, median, median_scale, out);
        },
        py::arg("device"), py::arg("stream"), py::arg("table"), py::arg("dtype"), py::arg("dim"), py::arg("seed"),
        py::arg("group"), py::arg("rows"), py::arg("cols"), py::arg("median"), py::arg("median_scale"),
        py::arg("out"),
        "out[j] = mean or median estimate of x[j] (out in the table's dtype), bit-identical to the CPU; asynchronous.");
}

}  // namespace dprec::bind
