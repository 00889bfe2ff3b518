// Threads, ISA selection and build facts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../common/normal_transform.h"
#include "../cpu/cache_info.h"
#include "../cpu/dispatch.h"
#include "../cpu/hadamard.h"
#include "../cpu/parallel.h"

namespace py = pybind11;

namespace dprec::bind {

void bind_runtime(py::module_& m) {
    // Every function here that touches the thread pool's state (cpu/parallel.cpp) releases the
    // GIL first: a kernel running in another Python thread holds the pool's run lock and takes
    // the GIL between work items to check for signals, so waiting for one of its locks with the
    // GIL held is a deadlock (issue 12: set_num_threads used to wait for the run lock). Now
    // set_num_threads and get_num_threads take only the short config lock, and the ISA table is
    // a lock-free atomic; the ISA functions release the GIL too so that none of these can
    // deadlock should it come to wait.
    m.def(
        "set_num_threads",
        [](int n) {
            if (n < 0 || n > cpu::kMaxThreads)
                throw py::value_error("n must be in [0, " + std::to_string(cpu::kMaxThreads) +
                                      "] (0 restores the default), got " + std::to_string(n));
            py::gil_scoped_release release;
            cpu::set_num_threads(n);
        },
        py::arg("n"));
    m.def(
        "get_num_threads",
        [] {
            py::gil_scoped_release release;
            return cpu::get_num_threads();
        });
    m.def("num_threads_env_problem", &cpu::num_threads_env_problem);
    m.attr("MAX_THREADS") = cpu::kMaxThreads;
    m.def(
        "available_isas",
        [] {
            py::gil_scoped_release release;
            return cpu::available_isas();
        });
    m.def(
        "set_isa",
        [](const std::string& name) {
            py::gil_scoped_release release;
            cpu::set_isa(name);
        },
        py::arg("name"));
    m.def("get_isa", [] {
        py::gil_scoped_release release;
        return std::string(cpu::kernels().name);
    });
    m.def("isa_is_auto", [] {
        py::gil_scoped_release release;
        return cpu::isa_is_auto();
    });
    m.def(
        "fwht_isa",
        [](bool float64) {
            py::gil_scoped_release release;  // the first call times the tables
            return std::string(float64 ? cpu::fwht_isa<double>() : cpu::fwht_isa<float>());
        },
        py::arg("float64") = false);
    m.def("cache_sizes", [] {
        const cpu::CacheSizes& c = cpu::cache_sizes();
        py::dict d;
        d["l1d"] = c.l1d;
        d["l2"] = c.l2;
        d["l3"] = c.l3;
        d["source"] = c.source;
        return d;
    });
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
