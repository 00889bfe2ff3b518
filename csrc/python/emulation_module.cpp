// dprec._gpu_emulation: the CUDA kernels run on the host (see bind_emulation.cpp for why). A
// module of its own, not part of _core, because only the tests use it: source builds have it
// (DPREC_GPU_EMULATION, default ON), the wheels leave it out, and the tests that need it skip
// without it. This file only registers the areas.
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace dprec::bind {
void bind_emulation(py::module_& m);
void bind_emulation_sketch(py::module_& m);
void bind_emulation_hadamard(py::module_& m);
void bind_emulation_runtime(py::module_& m);
void bind_emulation_modular(py::module_& m);
void bind_emulation_noise(py::module_& m);
}  // namespace dprec::bind

PYBIND11_MODULE(_gpu_emulation, m) {
    m.doc() =
        "The CUDA kernels' per-thread bodies (csrc/cuda/*_bodies.h) run on the host, thread by thread, with the "
        "launchers' plans and reductions: a GPU-free check of the GPU kernels, and the bit-exact reference the GPU "
        "tests compare against; also the test hooks of the discrete-noise samplers (128-bit arithmetic, own "
        "float64 math). Private; for tests (not in the wheels).";
    dprec::bind::bind_emulation(m);
    dprec::bind::bind_emulation_sketch(m);
    dprec::bind::bind_emulation_hadamard(m);
    dprec::bind::bind_emulation_runtime(m);
    dprec::bind::bind_emulation_modular(m);
    dprec::bind::bind_emulation_noise(m);
}
