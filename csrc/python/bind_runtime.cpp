// Threads, ISA selection and build facts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../common/normal_transform.h"
#include "../cpu/dispatch.h"
#include "../cpu/parallel.h"

namespace py = pybind11;

namespace dprec::bind {

void bind_runtime(py::module_& m) {
    m.def(
        "set_num_threads",
        [](int n) {
            if (n < 0) throw py::value_error("n must be >= 0 (0 restores the default), got " + std::to_string(n));
            cpu::set_num_threads(n);
        },
        py::arg("n"));
    m.def("get_num_threads", &cpu::get_num_threads);
    m.def("available_isas", &cpu::available_isas);
    m.def(
        "set_isa", [](const std::string& name) { cpu::set_isa(name); }, py::arg("name"));
    m.def("get_isa", [] { return std::string(cpu::kernels().name); });
    m.attr("NORMAL_TRANSFORM_VERSION") = kNormalTransformVersion;
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const std::invalid_argument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        }
    });
}

}  // namespace dprec::bind
