// The QMGeo quantizer (SPEC §5; Philox domain 4). Validates and converts only; the kernel is in
// cpu/qmgeo.*.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../cpu/qmgeo.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {

void bind_qmgeo(py::module_& m) {
    m.def(
        "qmgeo_quantize",
        [](const py::array& w, uint64_t seed, uint32_t group, double w_max, int64_t levels, double p,
           py::array& out) {
            if (w.size() != out.size())
                throw py::value_error("w and out must have the same size, got " + std::to_string(w.size()) + " and " +
                                      std::to_string(out.size()));
            const uint64_t n = static_cast<uint64_t>(w.size());
            if (n > cpu::kQmgeoMaxElements)
                throw py::value_error("w must have at most 2**33 elements (two Philox words each), got " +
                                      std::to_string(n));
            if (!(std::isfinite(w_max) && w_max > 0.0))
                throw py::value_error("w_max must be finite and > 0, got " + std::to_string(w_max));
            if (levels < 2 || levels > static_cast<int64_t>(cpu::kQmgeoMaxLevels))
                throw py::value_error("levels must be in [2, 2**16], got " + std::to_string(levels));
            if (!(p >= cpu::kQmgeoMinP && p <= 1.0))
                throw py::value_error("p must be in [2**-512, 1], got " + std::to_string(p));
            const double* wp = input<double>(w, "w");
            uint16_t* op = output<uint16_t>(out, "out");
            bool ok;
            {
                py::gil_scoped_release release;
                ok = cpu::qmgeo_quantize(wp, n, seed, group, w_max, static_cast<uint32_t>(levels), p, op);
            }
            if (!ok) throw py::value_error("w must be finite (it contains NaN or infinite values)");
        },
        py::arg("w"), py::arg("seed"), py::arg("group"), py::arg("w_max"), py::arg("levels"), py::arg("p"),
        py::arg("out"),
        "QMGeo level indices of the float64 w into the uint16 out (SPEC §5 corrected pmf; Philox (seed, substream "
        "0 and 1, group, domain 4)).");
}

}  // namespace dprec::bind
