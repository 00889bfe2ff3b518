// dprec._core.gpu_emulation.fwht / randomized_hadamard: the GPU FWHT pass kernel
// (csrc/cuda/hadamard_kernels.cuh) run on the host, block by block and, inside a block,
// phase by phase over all its threads -- the order the kernel's barriers impose -- with the
// very schedule and bodies of csrc/cuda/hadamard_bodies.h. See bind_emulation.cpp for why.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../cuda/hadamard_bodies.h"
#include "arrays.h"
#include "hadamard_checks.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

// One pass of the kernel: every block, each phase for all threads before the next phase.
template <class T>
void run_pass(const gpu::FwhtPass& p, const T* src, T* dst) {
    constexpr uint32_t threads = gpu::fwht_threads<T>();
    const uint32_t buf_size = uint32_t(1) << p.p;
    std::vector<T> buf(gpu::fwht_pad(buf_size));
    std::vector<uint32_t> mask(threads);
    for (uint64_t block = 0; block < p.n_blocks; ++block) {
        if (p.sign != static_cast<int>(gpu::FwhtSign::kNone))
            for (uint32_t t = 0; t < threads; ++t) gpu::fwht_signs_phase(p, block, t, mask.data());
        for (uint32_t t = 0; t < threads; ++t) gpu::fwht_load_phase<T>(p, block, t, threads, mask.data(), src, buf.data());
        for (int r = 0; r < p.n_rounds(); ++r)
            for (uint32_t t = 0; t < threads; ++t) gpu::fwht_round_phase<T>(p, r, t, buf.data());
        for (uint32_t t = 0; t < threads; ++t) gpu::fwht_store_phase<T>(p, block, t, threads, mask.data(), buf.data(), dst);
    }
}

template <class T>
void run(gpu::FwhtJob job, const T* src, T* dst, uint64_t rows, uint64_t dim, int log2n, bool normalize, uint64_t seed,
         uint32_t group, uint64_t repeats) {
    std::vector<T> work;
    if (gpu::fwht_needs_work<T>(job, log2n, dim, repeats)) work.resize(static_cast<size_t>(rows << log2n));
    auto pointer = [&](gpu::FwhtBuffer b) -> T* {
        if (b == gpu::FwhtBuffer::kInput) return const_cast<T*>(src);  // only ever read
        return b == gpu::FwhtBuffer::kOutput ? dst : work.data();
    };
    gpu::fwht_schedule<T>(job, rows, log2n, dim, normalize, seed, group, repeats,
                          [&](const gpu::FwhtPass& p, gpu::FwhtBuffer from, gpu::FwhtBuffer to) {
                              run_pass<T>(p, pointer(from), pointer(to));
                          });
}

uint64_t rows_of(const py::array& a, uint64_t cols, const char* name) {
    const auto size = static_cast<uint64_t>(a.size());
    if (size == 0 || size % cols != 0)
        throw py::value_error(std::string(name) + " must hold a positive multiple of " + std::to_string(cols) +
                              " elements, got " + std::to_string(size));
    return size / cols;
}

template <class T>
void fwht_typed(const py::array& src, py::array& out, uint64_t n, bool normalize) {
    const int log2n = fwht_log2(n);
    const uint64_t rows = rows_of(src, n, "src");
    const T* s = input<T>(src, "src");
    T* o = output<T>(out, "out");
    if (static_cast<uint64_t>(out.size()) != rows * n) throw py::value_error("out must have the size of src");
    py::gil_scoped_release release;
    run<T>(gpu::FwhtJob::kTransform, s, o, rows, n, log2n, normalize, 0, 0, 1);
}

template <class T>
void rotation_typed(const py::array& src, py::array& out, uint64_t dim, uint64_t n, uint64_t seed, uint32_t group,
                    uint64_t repeats, bool inverse) {
    const int log2n = fwht_log2(n);
    check_rotation(dim, log2n, repeats);
    const uint64_t in_cols = inverse ? n : dim;
    const uint64_t out_cols = inverse ? dim : n;
    const uint64_t rows = rows_of(src, in_cols, "src");
    const T* s = input<T>(src, "src");
    T* o = output<T>(out, "out");
    if (static_cast<uint64_t>(out.size()) != rows * out_cols)
        throw py::value_error("out must hold " + std::to_string(rows * out_cols) + " elements, got " +
                              std::to_string(out.size()));
    if (src.data() == out.data()) throw py::value_error("src and out must not be the same array");
    py::gil_scoped_release release;
    run<T>(inverse ? gpu::FwhtJob::kInverse : gpu::FwhtJob::kForward, s, o, rows, dim, log2n, true, seed, group,
           repeats);
}

}  // namespace

void bind_emulation_hadamard(py::module_& e) {
    e.def(
        "fwht",
        [](const py::array& src, py::array& out, uint64_t n, bool normalize) {
            if (has_dtype(src, py::dtype::of<float>()))
                fwht_typed<float>(src, out, n, normalize);
            else
                fwht_typed<double>(src, out, n, normalize);
        },
        py::arg("src"), py::arg("out"), py::arg("n"), py::arg("normalize"),
        "out <- H_n src per row of n (1-D float32/float64 arrays; out may be src), as the GPU computes it.");
    e.def(
        "randomized_hadamard",
        [](const py::array& src, py::array& out, uint64_t dim, uint64_t n, uint64_t seed, uint32_t group,
           uint64_t repeats, bool inverse) {
            if (has_dtype(src, py::dtype::of<float>()))
                rotation_typed<float>(src, out, dim, n, seed, group, repeats, inverse);
            else
                rotation_typed<double>(src, out, dim, n, seed, group, repeats, inverse);
        },
        py::arg("src"), py::arg("out"), py::arg("dim"), py::arg("n"), py::arg("seed"), py::arg("group"),
        py::arg("repeats"), py::arg("inverse"),
        "The randomized Hadamard rotation (forward: rows of dim -> n; inverse: n -> dim), as the GPU computes it.");
}

}  // namespace dprec::bind
