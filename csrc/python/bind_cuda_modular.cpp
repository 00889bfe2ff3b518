// SecAgg server-side kernels on the GPU: the modular sum of the clients' vectors and the
// centered lift. Arrays arrive as (pointer, dtype) with the device and the caller's stream
// from the Python layer (python/dprec/_runtime/backends/cuda.py); this layer checks bits against the
// storage dtypes, the sizes, and that every pointer is device memory of `device`, then calls
// the launchers of csrc/cuda/modular_launch.h.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "../cuda/modular_launch.h"
#include "device_pointers.h"
#include "modular_checks.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

template <class T>
void sum(int device, uintptr_t stream, uintptr_t xs, uint64_t n, uint64_t m, int bits, uintptr_t out,
         bool accumulate) {
    const T* xp = device_pointer<T>(xs, device, "xs");
    T* op = device_pointer<T>(out, device, "out");
    py::gil_scoped_release release;
    cuda::mod_sum(device, stream, xp, n, m, bits, accumulate, op);
}

template <class T, class O>
void lift(int device, uintptr_t stream, uintptr_t x, uint64_t count, int bits, double scale, uintptr_t out) {
    const T* xp = device_pointer<T>(x, device, "x");
    O* op = device_pointer<O>(out, device, "out");
    py::gil_scoped_release release;
    cuda::mod_lift(device, stream, xp, count, bits, scale, op);
}

template <class T>
void lift_into(int device, uintptr_t stream, uintptr_t x, uint64_t count, int bits, double scale, uintptr_t out,
               LiftOut kind) {
    switch (kind) {
        case LiftOut::kInt64:
            lift<T, int64_t>(device, stream, x, count, bits, scale, out);
            break;
        case LiftOut::kFloat64:
            lift<T, double>(device, stream, x, count, bits, scale, out);
            break;
        case LiftOut::kFloat32:
            lift<T, float>(device, stream, x, count, bits, scale, out);
            break;
    }
}

}  // namespace

void bind_cuda_modular(py::module_& m) {
    m.def(
        "mod_sum",
        [](int device, uintptr_t stream, uintptr_t xs, const std::string& xs_dtype, int64_t n, int64_t cols,
           int64_t bits, uintptr_t out, const std::string& out_dtype, bool accumulate) {
            // Arguments first (cheap, and they name the caller's mistake), then the device.
            const int b = check_mod_bits(bits);
            const bool wide = check_mod_storage(xs_dtype, b, "xs");
            check_mod_storage(out_dtype, b, "out");
            check_mod_sum_shape(n, cols);
            checked_launch(device, stream);
            const auto rows = static_cast<uint64_t>(n);
            const auto c = static_cast<uint64_t>(cols);
            if (wide)
                sum<uint64_t>(device, stream, xs, rows, c, b, out, accumulate);
            else
                sum<uint32_t>(device, stream, xs, rows, c, b, out, accumulate);
        },
        py::arg("device"), py::arg("stream"), py::arg("xs"), py::arg("xs_dtype"), py::arg("n"), py::arg("m"),
        py::arg("bits"), py::arg("out"), py::arg("out_dtype"), py::arg("accumulate"),
        "out[j] <- ((out[j] if accumulate else 0) + sum_i xs[i, j]) mod 2**bits for the row-major (n, m) xs; "
        "uint32 for bits <= 32, uint64 above; exact; asynchronous on `stream`.");

    m.def(
        "mod_lift",
        [](int device, uintptr_t stream, uintptr_t x, const std::string& x_dtype, int64_t count, int64_t bits,
           double scale, uintptr_t out, const std::string& out_dtype) {
            const int b = check_mod_bits(bits);
            const bool wide = check_mod_storage(x_dtype, b, "x");
            const LiftOut kind = check_lift_out(out_dtype, scale);
            check_mod_count(count, "x");
            checked_launch(device, stream);
            const auto n = static_cast<uint64_t>(count);
            if (wide)
                lift_into<uint64_t>(device, stream, x, n, b, scale, out, kind);
            else
                lift_into<uint32_t>(device, stream, x, n, b, scale, out, kind);
        },
        py::arg("device"), py::arg("stream"), py::arg("x"), py::arg("x_dtype"), py::arg("count"), py::arg("bits"),
        py::arg("scale"), py::arg("out"), py::arg("out_dtype"),
        "out[k] <- the centered lift of x[k] mod 2**bits into [-2**(bits-1), 2**(bits-1)): int64 (scale 1), or "
        "float64 / float32 scale * lifted computed in float64, bit-identical to the CPU; asynchronous on `stream`.");
}

}  // namespace dprec::bind
