// Fast Walsh-Hadamard transform (in place, natural order).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "../cpu/hadamard.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {

void bind_hadamard(py::module_& m) {
    m.def(
        "fwht",
        [](py::array& x, int64_t n, bool normalize) {
            if (n < 1 || n > (int64_t(1) << 30) || (n & (n - 1)) != 0)
                throw py::value_error("n must be a power of two in 1 .. 2**30, got " + std::to_string(n));
            const uint64_t un = static_cast<uint64_t>(n);
            if (has_dtype(x, py::dtype::of<float>())) {
                float* p = output<float>(x, "x");
                const uint64_t size = static_cast<uint64_t>(x.size());
                if (size % un != 0)
                    throw py::value_error("x size (" + std::to_string(size) + ") must be a multiple of n (" +
                                          std::to_string(n) + ")");
                py::gil_scoped_release release;
                cpu::fwht(p, size / un, un, normalize);
            } else {
                double* p = output<double>(x, "x");  // raises TypeError for any other dtype
                const uint64_t size = static_cast<uint64_t>(x.size());
                if (size % un != 0)
                    throw py::value_error("x size (" + std::to_string(size) + ") must be a multiple of n (" +
                                          std::to_string(n) + ")");
                py::gil_scoped_release release;
                cpu::fwht(p, size / un, un, normalize);
            }
        },
        py::arg("x"), py::arg("n"), py::arg("normalize"));
}

}  // namespace dprec::bind
