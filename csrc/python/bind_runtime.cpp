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
    // Long kernels run with the GIL released; between work items the calling thread takes
    // the GIL briefly to run Python's signal handlers, so Ctrl-C stops a kernel.
    cpu::set_interrupt_check([]() -> bool {
        py::gil_scoped_acquire gil;
        return PyErr_CheckSignals() != 0;
    });
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const std::invalid_argument& e) {
            PyErr_SetString(PyExc_ValueError, e.what());
        } catch (const cpu::Interrupted&) {
            // The signal handler's exception (KeyboardInterrupt for Ctrl-C) is already set.
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyboardInterrupt, "interrupted");
        }
    });
}

}  // namespace dprec::bind
