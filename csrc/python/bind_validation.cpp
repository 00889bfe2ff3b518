// Input checks that are worth native speed: finiteness of large arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>

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
}  // namespace

void bind_validation(py::module_& m) {
    m.def(
        "all_finite",
        [](const py::array& x) {
            if (has_dtype(x, py::dtype::of<float>())) return all_finite_of<float>(x);
            return all_finite_of<double>(x);  // raises TypeError for any other dtype
        },
        py::arg("x"), "Whether every element of the 1-D, C-contiguous float32/float64 array x is finite.");
}

}  // namespace dprec::bind
