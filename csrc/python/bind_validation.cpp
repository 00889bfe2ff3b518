// Scans that are worth native speed: finiteness of large arrays (input checks) and the sums of
// squares of an update's tensors (the codecs' clip norm).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../cpu/finite.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {

namespace {
template <class T>
bool all_finite_of(const py::array& x) {
    const T* p = input<T>(x, "x");
    const uint64_t n = static_cast<uint64_t>(x.size());
    py::gil_scoped_release release;
    return cpu::all_finite(p, n);
}
template <class T>
bool abs_at_most_of(const py::array& x, double limit) {
    const T* p = input<T>(x, "x");
    const T lim = static_cast<T>(limit);
    if (!(lim > 0) || !std::isfinite(lim))
        throw py::value_error("limit must be positive and finite in the dtype of x, got " + std::to_string(limit));
    const uint64_t n = static_cast<uint64_t>(x.size());
    py::gil_scoped_release release;
    return cpu::abs_at_most(p, n, lim);
}
}  // namespace

void bind_validation(py::module_& m) {
    m.def(
        "abs_at_most",
        [](const py::array& x, double limit) {
            if (has_dtype(x, py::dtype::of<float>())) return abs_at_most_of<float>(x, limit);
            return abs_at_most_of<double>(x, limit);  // raises TypeError for any other dtype
        },
        py::arg("x"), py::arg("limit"),
        "Whether every |x| of the 1-D, C-contiguous float32/float64 array x is at most limit (False for NaN).");

    m.def(
        "all_finite",
        [](const py::array& x) {
            if (has_dtype(x, py::dtype::of<float>())) return all_finite_of<float>(x);
            return all_finite_of<double>(x);  // raises TypeError for any other dtype
        },
        py::arg("x"), "Whether every element of the 1-D, C-contiguous float32/float64 array x is finite.");

    m.def(
        "sum_of_squares",
        [](const py::list& tensors, double divisor) {
            if (!(divisor > 0.0) || !std::isfinite(divisor))
                throw py::value_error("divisor must be positive and finite, got " + std::to_string(divisor));
            struct Span {
                const void* data;
                bool f64;
                uint64_t n;
            };
            std::vector<Span> spans;
            spans.reserve(tensors.size());
            for (size_t t = 0; t < tensors.size(); ++t) {
                const std::string name = "tensors[" + std::to_string(t) + "]";
                if (!py::isinstance<py::array>(tensors[t])) throw py::type_error(name + " must be a numpy.ndarray");
                const py::array a = py::reinterpret_borrow<py::array>(tensors[t]);
                const bool f32 = has_dtype(a, py::dtype::of<float>());
                const void* p = f32 ? static_cast<const void*>(input<float>(a, name.c_str()))
                                    : static_cast<const void*>(input<double>(a, name.c_str()));
                spans.push_back(Span{p, !f32, static_cast<uint64_t>(a.size())});
            }
            std::vector<double> sums(spans.size());
            {
                py::gil_scoped_release release;
                for (size_t t = 0; t < spans.size(); ++t)
                    sums[t] = spans[t].f64 ? cpu::sum_of_squares(static_cast<const double*>(spans[t].data), spans[t].n, divisor)
                                           : cpu::sum_of_squares(static_cast<const float*>(spans[t].data), spans[t].n, divisor);
            }
            return sums;
        },
        py::arg("tensors"), py::arg("divisor"),
        "sum((x / divisor)**2) in float64 of each 1-D, C-contiguous float32/float64 array, in the order of "
        "dprec.reference.rec.sum_of_squares (bit-identical to it).");
}

}  // namespace dprec::bind
