// Fast Walsh-Hadamard transform (natural order; in place, or from src with the copy fused).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "../cpu/hadamard.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {

namespace {

// x <- H_n src (src None: in place) over the rows of n of x. src, when given, has x's dtype
// and size and is x itself or lies wholly apart from it (a partial overlap would be read
// after it was written).
template <class T>
void fwht_rows(py::array& x, const py::object& src, uint64_t n, bool normalize) {
    T* p = output<T>(x, "x");
    const uint64_t size = static_cast<uint64_t>(x.size());
    if (size % n != 0)
        throw py::value_error("x size (" + std::to_string(size) + ") must be a multiple of n (" + std::to_string(n) +
                              ")");
    const T* from = p;
    if (!src.is_none()) {
        if (!py::isinstance<py::array>(src)) throw py::type_error("src must be a NumPy array or None");
        const py::array s = py::reinterpret_borrow<py::array>(src);
        from = input<T>(s, "src");  // x's dtype, 1-D, C-contiguous
        if (static_cast<uint64_t>(s.size()) != size)
            throw py::value_error("src must have the size of x (" + std::to_string(size) + "), got " +
                                  std::to_string(s.size()));
        const auto a = reinterpret_cast<uintptr_t>(from), b = reinterpret_cast<uintptr_t>(p);
        const uintptr_t bytes = static_cast<uintptr_t>(size) * sizeof(T);
        if (a != b && a < b + bytes && b < a + bytes)
            throw py::value_error("src and x overlap without being the same array");
    }
    py::gil_scoped_release release;
    cpu::fwht(from, p, size / n, n, normalize);
}

}  // namespace

void bind_hadamard(py::module_& m) {
    m.def(
        "fwht",
        [](py::array& x, int64_t n, bool normalize, const py::object& src) {
            if (n < 1 || n > (int64_t(1) << 30) || (n & (n - 1)) != 0)
                throw py::value_error("n must be a power of two in 1 .. 2**30, got " + std::to_string(n));
            if (has_dtype(x, py::dtype::of<float>())) fwht_rows<float>(x, src, static_cast<uint64_t>(n), normalize);
            else fwht_rows<double>(x, src, static_cast<uint64_t>(n), normalize);  // TypeError for other dtypes
        },
        py::arg("x"), py::arg("n"), py::arg("normalize"), py::arg("src") = py::none());
}

}  // namespace dprec::bind
