// dprec._cuda: the private CUDA extension. This file only registers the areas.
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace dprec::bind {
void bind_cuda_runtime(py::module_& m);
void bind_cuda_rec(py::module_& m);
void bind_cuda_sketch(py::module_& m);
void bind_dlpack(py::module_& m);
void bind_cuda_hadamard(py::module_& m);
void bind_cuda_modular(py::module_& m);
}  // namespace dprec::bind

PYBIND11_MODULE(_cuda, m) {
    m.doc() = "dprec CUDA kernels (private; use the dprec Python API with GPU arrays).";
    dprec::bind::bind_cuda_runtime(m);
    dprec::bind::bind_cuda_rec(m);
    dprec::bind::bind_cuda_sketch(m);
    dprec::bind::bind_dlpack(m);
    dprec::bind::bind_cuda_hadamard(m);
    dprec::bind::bind_cuda_modular(m);
}
