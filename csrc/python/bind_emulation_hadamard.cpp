// dprec._gpu_emulation.fwht / randomized_hadamard: the GPU FWHT pass kernel
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
    const uint32_t threads = gpu::fwht_threads<T>(p.p);
    // As sized on the GPU (fwht_smem_bytes), so an index past the padded buffer is caught
    // by the vector's bounds in a debug build rather than passing silently.
    std::vector<T> buf(gpu::fwht_smem_bytes<T>(p.p) / sizeof(T));
    for (uint64_t block = 0; block < p.n_blocks; ++block) {
        for (uint32_t t = 0; t < threads; ++t) gpu::fwht_load_phase<T>(p, block, t, src, buf.data());
        for (int r = 0; r < p.n_rounds; ++r)
            for (uint32_t t = 0; t < threads; ++t) gpu::fwht_round_phase<T>(p, r, t, buf.data());
        for (uint32_t t = 0; t < threads; ++t) gpu::fwht_store_phase<T>(p, block, t, buf.data(), dst);
    }
}

template <class T>
void run(gpu::FwhtJob job, const T* src, T* dst, uint64_t rows, uint64_t dim, int log2n, int buf_log2, bool normalize,
         uint64_t seed, uint32_t group, uint64_t repeats) {
    std::vector<T> work;
    if (gpu::fwht_needs_work<T>(job, log2n, buf_log2, dim, repeats)) work.resize(static_cast<size_t>(rows << log2n));
    auto pointer = [&](gpu::FwhtBuffer b) -> T* {
        if (b == gpu::FwhtBuffer::kInput) return const_cast<T*>(src);  // only ever read
        return b == gpu::FwhtBuffer::kOutput ? dst : work.data();
    };
    gpu::fwht_schedule<T>(job, rows, log2n, buf_log2, dim, normalize, seed, group, repeats,
                          [&](const gpu::FwhtPass& p, gpu::FwhtBuffer from, gpu::FwhtBuffer to) {
                              run_pass<T>(p, pointer(from), pointer(to));
                          });
}

// The buffer limit of the plan (the device's, on a GPU): -1 for the largest (what sm_80 and
// sm_90 get), else kMinBufLog2 .. kMaxBufLog2 of the dtype.
template <class T>
int checked_buf_log2(int max_buf_log2) {
    constexpr int lo = gpu::FwhtTraits<T>::kMinBufLog2, hi = gpu::FwhtTraits<T>::kMaxBufLog2;
    if (max_buf_log2 == -1) return hi;
    if (max_buf_log2 < lo || max_buf_log2 > hi)
        throw py::value_error("max_buf_log2 must be -1 or in " + std::to_string(lo) + " .. " + std::to_string(hi) +
                              " for this dtype, got " + std::to_string(max_buf_log2));
    return max_buf_log2;
}

// The passes of a plan as dicts (the emulation's and the launcher's schedule, for tests
// and the benchmark's report).
template <class T>
py::list plan_typed(uint64_t n, uint64_t rows, int max_buf_log2) {
    const int log2n = fwht_log2(n);
    const int buf_log2 = checked_buf_log2<T>(max_buf_log2);
    py::list passes;
    gpu::fwht_schedule<T>(gpu::FwhtJob::kTransform, rows, log2n, buf_log2, n, true, 0, 0, 1,
                          [&](const gpu::FwhtPass& p, gpu::FwhtBuffer, gpu::FwhtBuffer) {
                              py::dict d;
                              d["buf_log2"] = p.p;
                              d["threads"] = gpu::fwht_threads<T>(p.p);
                              d["smem_bytes"] = gpu::fwht_smem_bytes<T>(p.p);
                              d["lo"] = p.lo;
                              d["m"] = p.m;
                              d["h0"] = p.h0;
                              d["load_stages"] = p.load_stages;
                              d["store_stages"] = p.lo + p.m - p.store_first;
                              d["rounds"] = p.n_rounds;
                              d["blocks"] = p.n_blocks;
                              passes.append(d);
                          });
    return passes;
}

uint64_t rows_of(const py::array& a, uint64_t cols, const char* name) {
    const auto size = static_cast<uint64_t>(a.size());
    if (size == 0 || size % cols != 0)
        throw py::value_error(std::string(name) + " must hold a positive multiple of " + std::to_string(cols) +
                              " elements, got " + std::to_string(size));
    return size / cols;
}

template <class T>
void fwht_typed(const py::array& src, py::array& out, uint64_t n, bool normalize, int max_buf_log2) {
    const int log2n = fwht_log2(n);
    const int buf_log2 = checked_buf_log2<T>(max_buf_log2);
    const uint64_t rows = rows_of(src, n, "src");
    const T* s = input<T>(src, "src");
    T* o = output<T>(out, "out");
    if (static_cast<uint64_t>(out.size()) != rows * n) throw py::value_error("out must have the size of src");
    py::gil_scoped_release release;
    run<T>(gpu::FwhtJob::kTransform, s, o, rows, n, log2n, buf_log2, normalize, 0, 0, 1);
}

template <class T>
void rotation_typed(const py::array& src, py::array& out, uint64_t dim, uint64_t n, uint64_t seed, uint32_t group,
                    uint64_t repeats, bool inverse, int max_buf_log2) {
    const int log2n = fwht_log2(n);
    const int buf_log2 = checked_buf_log2<T>(max_buf_log2);
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
    run<T>(inverse ? gpu::FwhtJob::kInverse : gpu::FwhtJob::kForward, s, o, rows, dim, log2n, buf_log2, true, seed,
           group, repeats);
}

}  // namespace

void bind_emulation_hadamard(py::module_& e) {
    e.def(
        "fwht",
        [](const py::array& src, py::array& out, uint64_t n, bool normalize, int max_buf_log2) {
            if (has_dtype(src, py::dtype::of<float>()))
                fwht_typed<float>(src, out, n, normalize, max_buf_log2);
            else
                fwht_typed<double>(src, out, n, normalize, max_buf_log2);
        },
        py::arg("src"), py::arg("out"), py::arg("n"), py::arg("normalize"), py::arg("max_buf_log2") = -1,
        "out <- H_n src per row of n (1-D float32/float64 arrays; out may be src), as the GPU computes it with "
        "buffers of at most 2**max_buf_log2 elements (-1: the largest, as on sm_80/sm_90).");
    e.def(
        "randomized_hadamard",
        [](const py::array& src, py::array& out, uint64_t dim, uint64_t n, uint64_t seed, uint32_t group,
           uint64_t repeats, bool inverse, int max_buf_log2) {
            if (has_dtype(src, py::dtype::of<float>()))
                rotation_typed<float>(src, out, dim, n, seed, group, repeats, inverse, max_buf_log2);
            else
                rotation_typed<double>(src, out, dim, n, seed, group, repeats, inverse, max_buf_log2);
        },
        py::arg("src"), py::arg("out"), py::arg("dim"), py::arg("n"), py::arg("seed"), py::arg("group"),
        py::arg("repeats"), py::arg("inverse"), py::arg("max_buf_log2") = -1,
        "The randomized Hadamard rotation (forward: rows of dim -> n; inverse: n -> dim), as the GPU computes it.");
    e.def(
        "fwht_plan",
        [](uint64_t n, uint64_t rows, const std::string& dtype, int max_buf_log2) {
            if (dtype == "float32") return plan_typed<float>(n, rows, max_buf_log2);
            if (dtype == "float64") return plan_typed<double>(n, rows, max_buf_log2);
            throw py::value_error("dtype must be 'float32' or 'float64', got '" + dtype + "'");
        },
        py::arg("n"), py::arg("rows") = 1, py::arg("dtype") = "float32", py::arg("max_buf_log2") = -1,
        "The GPU FWHT's passes for rows x n (buffer log2, threads, shared memory, column bits lo, stage bits m, "
        "first stride h0, stages in load/store, shared-memory rounds, blocks).");
}

}  // namespace dprec::bind
