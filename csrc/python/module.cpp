// dprec._core: the private CPU extension. This file only registers the areas.
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace dprec::bind {
void bind_runtime(py::module_& m);
void bind_philox(py::module_& m);
void bind_rec(py::module_& m);
void bind_hadamard(py::module_& m);
void bind_sketch(py::module_& m);
void bind_secagg(py::module_& m);
void bind_validation(py::module_& m);
void bind_noise(py::module_& m);
void bind_qmgeo(py::module_& m);
}  // namespace dprec::bind

PYBIND11_MODULE(_core, m) {
    m.doc() = "dprec native CPU kernels (private; use the dprec Python API).";
    dprec::bind::bind_runtime(m);
    dprec::bind::bind_philox(m);
    dprec::bind::bind_rec(m);
    dprec::bind::bind_hadamard(m);
    dprec::bind::bind_sketch(m);
    dprec::bind::bind_secagg(m);
    dprec::bind::bind_validation(m);
    dprec::bind::bind_noise(m);
    dprec::bind::bind_qmgeo(m);
}
