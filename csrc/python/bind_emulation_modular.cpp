// dprec._gpu_emulation, SecAgg part: the CUDA modular-sum and centered-lift kernels' bodies
// (csrc/cuda/modular_bodies.h) run on the host, thread by thread, with the grid of
// csrc/cuda/modular_launch.cu (mod_grid_blocks x kModThreads threads, each looping with the
// grid's stride). `max_blocks` shrinks the grid so that the tests reach the grid-stride loop
// with small arrays; the GPU uses the default.
//
// Keep it in step with modular_launch.cu (see bind_emulation.cpp for why this exists).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "../cuda/modular_bodies.h"
#include "arrays.h"
#include "modular_checks.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

std::string dtype_name(const py::array& a) { return std::string(py::str(a.dtype())); }

void check_max_blocks(int64_t max_blocks) {
    if (max_blocks < 1 || static_cast<uint64_t>(max_blocks) > gpu::kModMaxBlocks)
        throw py::value_error("max_blocks must be in 1 .. 2**16, got " + std::to_string(max_blocks));
}

template <class T>
void sum(const py::array& xs, uint64_t n, uint64_t m, int bits, py::array& out, bool accumulate,
         uint64_t max_blocks) {
    const T* xp = input<T>(xs, "xs");
    T* op = output<T>(out, "out");
    const T mask = gpu::mod_mask<T>(bits);
    py::gil_scoped_release release;
    const uint64_t threads = gpu::mod_grid_blocks(m, max_blocks) * gpu::kModThreads;
    for (uint64_t t = 0; t < threads; ++t) gpu::mod_sum_thread(t, threads, xp, n, m, mask, accumulate, op);
}

template <class T, class O>
void lift(const py::array& x, int bits, double scale, py::array& out, uint64_t max_blocks) {
    const T* xp = input<T>(x, "x");
    O* op = output<O>(out, "out");
    const uint64_t count = static_cast<uint64_t>(x.size());
    const T mask = gpu::mod_mask<T>(bits);
    py::gil_scoped_release release;
    const uint64_t threads = gpu::mod_grid_blocks(count, max_blocks) * gpu::kModThreads;
    for (uint64_t t = 0; t < threads; ++t) gpu::mod_lift_thread(t, threads, xp, count, bits, mask, scale, op);
}

template <class T>
void lift_into(const py::array& x, int bits, double scale, py::array& out, LiftOut kind, uint64_t max_blocks) {
    switch (kind) {
        case LiftOut::kInt64:
            lift<T, int64_t>(x, bits, scale, out, max_blocks);
            break;
        case LiftOut::kFloat64:
            lift<T, double>(x, bits, scale, out, max_blocks);
            break;
        case LiftOut::kFloat32:
            lift<T, float>(x, bits, scale, out, max_blocks);
            break;
    }
}

}  // namespace

void bind_emulation_modular(py::module_& e) {
    e.def(
        "mod_sum",
        [](const py::array& xs, int64_t n, int64_t m, int64_t bits, py::array& out, bool accumulate,
           int64_t max_blocks) {
            const int b = check_mod_bits(bits);
            const bool wide = check_mod_storage(dtype_name(xs), b, "xs");
            check_mod_storage(dtype_name(out), b, "out");
            check_mod_sum_shape(n, m);
            check_max_blocks(max_blocks);
            const auto rows = static_cast<uint64_t>(n);
            const auto cols = static_cast<uint64_t>(m);
            if (static_cast<uint64_t>(xs.size()) != rows * cols)
                throw py::value_error("xs must have n * m = " + std::to_string(rows * cols) + " elements, got " +
                                      std::to_string(xs.size()));
            if (static_cast<uint64_t>(out.size()) != cols)
                throw py::value_error("out must have m = " + std::to_string(cols) + " elements, got " +
                                      std::to_string(out.size()));
            const auto mb = static_cast<uint64_t>(max_blocks);
            if (wide)
                sum<uint64_t>(xs, rows, cols, b, out, accumulate, mb);
            else
                sum<uint32_t>(xs, rows, cols, b, out, accumulate, mb);
        },
        py::arg("xs"), py::arg("n"), py::arg("m"), py::arg("bits"), py::arg("out"), py::arg("accumulate"),
        py::arg("max_blocks") = static_cast<int64_t>(gpu::kModMaxBlocks),
        "The GPU modular sum on the host: xs (flat, row-major n x m, uint32 for bits <= 32 else uint64), "
        "out (m,) <- ((out if accumulate else 0) + column sums) mod 2**bits, on a grid of at most max_blocks "
        "blocks.");

    e.def(
        "mod_lift",
        [](const py::array& x, int64_t bits, double scale, py::array& out, int64_t max_blocks) {
            const int b = check_mod_bits(bits);
            const bool wide = check_mod_storage(dtype_name(x), b, "x");
            const LiftOut kind = check_lift_out(dtype_name(out), scale);
            check_mod_count(static_cast<int64_t>(x.size()), "x");
            check_max_blocks(max_blocks);
            if (out.size() != x.size())
                throw py::value_error("out must have the size of x (" + std::to_string(x.size()) + "), got " +
                                      std::to_string(out.size()));
            const auto mb = static_cast<uint64_t>(max_blocks);
            if (wide)
                lift_into<uint64_t>(x, b, scale, out, kind, mb);
            else
                lift_into<uint32_t>(x, b, scale, out, kind, mb);
        },
        py::arg("x"), py::arg("bits"), py::arg("scale"), py::arg("out"),
        py::arg("max_blocks") = static_cast<int64_t>(gpu::kModMaxBlocks),
        "The GPU centered lift on the host: out <- lift(x mod 2**bits) into [-2**(bits-1), 2**(bits-1)), int64 "
        "(scale 1) or float64 / float32 scale * lifted computed in float64, on a grid of at most max_blocks "
        "blocks.");

    e.def(
        "mod_grid",
        [](int64_t count, int64_t max_blocks) {
            check_mod_count(count, "count");
            check_max_blocks(max_blocks);
            py::dict d;
            d["blocks"] = gpu::mod_grid_blocks(static_cast<uint64_t>(count), static_cast<uint64_t>(max_blocks));
            d["threads_per_block"] = gpu::kModThreads;
            d["sum_unroll"] = gpu::kModSumUnroll;
            return d;
        },
        py::arg("count"), py::arg("max_blocks") = static_cast<int64_t>(gpu::kModMaxBlocks),
        "The launch grid of both kernels over count columns (elements): blocks, threads per block, and the rows "
        "each thread of the sum keeps in flight.");
}

}  // namespace dprec::bind
