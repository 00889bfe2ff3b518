// The Walsh-Hadamard transform and randomized Hadamard rotation on the GPU. Arrays arrive
// as (pointer, device) with the caller's stream from the Python layer (dprec.transforms.hadamard);
// this layer checks what Python cannot (the pointers' owner and alignment, sizes) and calls
// the launchers of csrc/cuda/hadamard_launch.cu.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "../cuda/hadamard_launch.h"
#include "device_pointers.h"
#include "scratch.h"
#include "hadamard_checks.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

bool is_double(const std::string& dtype) {
    if (dtype == "float32") return false;
    if (dtype == "float64") return true;
    throw py::type_error("x must be float32 or float64 on the GPU, got " + dtype);
}

// rows * cols elements of T must be addressable (bytes fit in 64 bits, with room to spare).
void check_rows(uint64_t rows, uint64_t cols, size_t item) {
    if (rows == 0) throw py::value_error("rows must be at least 1");
    if (rows > (uint64_t(1) << 62) / (cols * item))
        throw py::value_error("rows x n is too large: " + std::to_string(rows) + " x " + std::to_string(cols));
}

}  // namespace

void bind_cuda_hadamard(py::module_& m) {
    m.def(
        "fwht",
        [](int device, uintptr_t stream, uintptr_t src, uintptr_t dst, const std::string& dtype, uint64_t rows,
           uint64_t n, bool normalize, const py::object& scratch) {
            checked_launch(device, stream);
            const int log2n = fwht_log2(n);
            if (is_double(dtype)) {
                check_rows(rows, n, sizeof(double));
                const double* s = device_pointer<double>(src, device, "src");
                double* d = device_pointer<double>(dst, device, "dst");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::fwht(device, stream, s, d, rows, log2n, normalize);
            } else {
                check_rows(rows, n, sizeof(float));
                const float* s = device_pointer<float>(src, device, "src");
                float* d = device_pointer<float>(dst, device, "dst");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::fwht(device, stream, s, d, rows, log2n, normalize);
            }
        },
        py::arg("device"), py::arg("stream"), py::arg("src"), py::arg("dst"), py::arg("dtype"), py::arg("rows"),
        py::arg("n"), py::arg("normalize"), py::arg("scratch") = py::none(),
        "dst <- H_n src for rows x n elements (dst may be src), asynchronous on `stream`.");

    m.def(
        "randomized_hadamard",
        [](int device, uintptr_t stream, uintptr_t src, uintptr_t dst, const std::string& dtype, uint64_t rows,
           uint64_t dim, uint64_t n, uint64_t seed, uint32_t group, uint64_t repeats, bool inverse,
           const py::object& scratch) {
            checked_launch(device, stream);
            const int log2n = fwht_log2(n);
            check_rotation(dim, log2n, repeats);
            if (src == dst) throw py::value_error("src and dst must be different arrays");
            if (is_double(dtype)) {
                check_rows(rows, n, sizeof(double));
                const double* s = device_pointer<double>(src, device, "src");
                double* d = device_pointer<double>(dst, device, "dst");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::randomized_hadamard(device, stream, s, d, rows, dim, log2n, seed, group, repeats, inverse);
            } else {
                check_rows(rows, n, sizeof(float));
                const float* s = device_pointer<float>(src, device, "src");
                float* d = device_pointer<float>(dst, device, "dst");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::randomized_hadamard(device, stream, s, d, rows, dim, log2n, seed, group, repeats, inverse);
            }
        },
        py::arg("device"), py::arg("stream"), py::arg("src"), py::arg("dst"), py::arg("dtype"), py::arg("rows"),
        py::arg("dim"), py::arg("n"), py::arg("seed"), py::arg("group"), py::arg("repeats"), py::arg("inverse"), py::arg("scratch") = py::none(),
        "Randomized Hadamard rotation: forward rows x dim -> rows x n, inverse rows x n -> rows x dim; asynchronous.");
}

}  // namespace dprec::bind
