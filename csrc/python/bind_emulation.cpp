// dprec._gpu_emulation: the CUDA kernels' per-thread bodies, run on the host.
//
// Why this exists: CI machines have no GPU, yet the CUDA backend must produce what the
// CPU backend produces. Every CUDA kernel (csrc/cuda/kernels.cuh) is a one-line wrapper
// that computes its flat thread id t and calls a body in csrc/cuda/kernel_bodies.h; the
// bodies use no shared memory, warp intrinsics or synchronisation, so a thread's result
// depends on t alone. This file compiles the very same bodies with the host compiler
// (-ffp-contract=off, matching nvcc -fmad=false) and runs them for t = 0, 1, 2, ... in a
// plain loop, with the launch plans and the multi-level column reduction of
// csrc/cuda/launch.cu mirrored step for step. The tests then check, without a GPU, the
// GPU kernels' indexing, edge blocks and reduction order against the CPU kernels, and the
// GPU tests compare the device results bit for bit against this emulation.
//
// Keep it in step with launch.cu: when a launcher changes its plan or its reduction, the
// matching function here must change with it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../cuda/kernel_bodies.h"
#include "arrays.h"
#include "checks.h"

namespace py = pybind11;

namespace dprec::bind {

namespace {

constexpr uint64_t kMaxCandidates = uint64_t(1) << 24;

// launch.cu's reduce_columns on the host: column sums of partial (rows x cols, row-major)
// level by level, kReduceRows rows per thread, each level into a fresh buffer, the last
// level (one row left) written to out and multiplied by factor.
void reduce_columns(const double* partial, uint64_t rows, uint64_t cols, double factor, double* out) {
    // launch.cu would launch an empty grid for rows == 0 (and never reach one row):
    // callers here reject empty inputs, so this is an internal error.
    if (rows == 0 || cols == 0) throw std::logic_error("reduce_columns: empty matrix");
    std::vector<std::vector<double>> levels;
    const double* in = partial;
    for (;;) {
        const uint64_t out_rows = gpu::ceil_div(rows, gpu::kReduceRows);
        double* dst = out;
        if (out_rows > 1) {
            levels.emplace_back(static_cast<size_t>(out_rows * cols));
            dst = levels.back().data();
        }
        const uint64_t n = out_rows * cols;
        for (uint64_t t = 0; t < n; ++t) gpu::reduce_rows_thread(t, in, rows, cols, factor, dst);
        if (out_rows == 1) break;
        in = dst;
        rows = out_rows;
    }
}

template <class T>
void rec_dot_products(const T* phi, uint64_t d, uint64_t seed, uint32_t group, uint32_t n_candidates, double factor,
                      double* out) {
    const gpu::LlrPlan plan = gpu::make_llr_plan(d, n_candidates);
    std::vector<double> partial(static_cast<size_t>(plan.n_threads()));
    for (uint64_t t = 0; t < plan.n_threads(); ++t) gpu::llr_thread(t, plan, phi, seed, group, partial.data());
    reduce_columns(partial.data(), plan.n_segments, n_candidates, factor, out);
}

// launch.cu's reduce_norm_stats on the host: (sum, max) pairs level by level.
void reduce_norm_stats(const double* stats, uint64_t rows, double* out) {
    if (rows == 0) throw std::logic_error("reduce_norm_stats: no partial statistics");
    std::vector<std::vector<double>> levels;
    const double* in = stats;
    for (;;) {
        const uint64_t out_rows = gpu::ceil_div(rows, gpu::kReduceRows);
        double* dst = out;
        if (out_rows > 1) {
            levels.emplace_back(static_cast<size_t>(2 * out_rows));
            dst = levels.back().data();
        }
        for (uint64_t t = 0; t < out_rows; ++t) gpu::reduce_norm_rows_thread(t, in, rows, dst);
        if (out_rows == 1) break;
        in = dst;
        rows = out_rows;
    }
}

template <class T>
std::pair<double, double> norm_stats(const T* x, uint64_t n, double divisor) {
    const uint64_t threads = gpu::norm_threads(n);
    std::vector<double> stats(static_cast<size_t>(2 * threads));
    double result[2];
    for (uint64_t t = 0; t < threads; ++t) gpu::norm_stats_thread(t, threads, x, n, divisor, stats.data());
    reduce_norm_stats(stats.data(), threads, result);
    return {result[0], result[1]};
}

// launch.cu's gumbel_argmax on the host: the same plan, level by level, then the flat
// winners made group-local.
void gumbel_argmax(const double* logits, const double* gumbel, const int64_t* offsets, uint64_t n_groups,
                   int64_t* out) {
    const gpu::ArgmaxPlan plan = gpu::make_argmax_plan(offsets, n_groups);
    std::vector<std::vector<double>> values;
    std::vector<std::vector<int64_t>> indices;
    for (uint64_t level = 0; level < plan.n_levels(); ++level) {
        const uint64_t threads = plan.n_threads(level);
        const bool last = level + 1 == plan.n_levels();
        const int64_t* items = plan.item_offsets(level);
        const int64_t* thread_offsets = plan.thread_offsets(level);
        if (!last) values.emplace_back(static_cast<size_t>(threads));
        indices.emplace_back(static_cast<size_t>(threads));
        double* best_values = last ? nullptr : values.back().data();
        int64_t* best_indices = indices.back().data();
        if (level == 0) {
            for (uint64_t t = 0; t < threads; ++t)
                gpu::gumbel_argmax_first_level_thread(t, logits, gumbel, items, thread_offsets, n_groups, best_values,
                                                      best_indices);
        } else {
            for (uint64_t t = 0; t < threads; ++t)
                gpu::gumbel_argmax_next_level_thread(t, values[level - 1].data(), indices[level - 1].data(), items,
                                                     thread_offsets, n_groups, best_values, best_indices);
        }
    }
    for (uint64_t g = 0; g < n_groups; ++g) out[g] = indices.back()[g] - offsets[g];
}

void check_size_nonzero(uint64_t n, const char* name) {
    if (n == 0) throw py::value_error(std::string(name) + " must not be empty");
    check_stream_range(0, n);
}

struct Clients {
    const uint64_t* seeds;
    const uint32_t* indices;
    const double* coefs;
    uint64_t n;
};

Clients clients(const py::array& seeds, const py::array& indices, const py::array& coefs) {
    Clients c{input<uint64_t>(seeds, "seeds"), input<uint32_t>(indices, "indices"), input<double>(coefs, "coefs"),
              static_cast<uint64_t>(seeds.size())};
    if (indices.size() != seeds.size())
        throw py::value_error("indices must have the length of seeds (" + std::to_string(seeds.size()) + "), got " +
                              std::to_string(indices.size()));
    if (coefs.size() != seeds.size())
        throw py::value_error("coefs must have the length of seeds (" + std::to_string(seeds.size()) + "), got " +
                              std::to_string(coefs.size()));
    return c;
}

// 16-bit source of to_float32: float16 values, or their raw bits / bfloat16 bits as uint16.
const uint16_t* half_input(const py::array& a, bool bfloat16) {
    const py::dtype f16("float16");
    const bool is_u16 = a.dtype().is(py::dtype::of<uint16_t>());
    const bool is_f16 = a.dtype().is(f16);
    if (bfloat16 ? !is_u16 : !(is_u16 || is_f16))
        throw py::type_error(std::string("src must have dtype ") + (bfloat16 ? "uint16 (bfloat16 bits)" : "float16 or uint16") +
                             ", got " + std::string(py::str(a.dtype())));
    if (a.ndim() != 1) throw py::value_error("src must be 1-D, got " + std::to_string(a.ndim()) + "-D");
    if (!(a.flags() & py::array::c_style)) throw py::value_error("src must be C-contiguous");
    return static_cast<const uint16_t*>(a.data());
}

}  // namespace

void bind_emulation(py::module_& e) {
    e.def(
        "stream_normals",
        [](uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain, uint64_t offset, float scale,
           py::array& out) {
            float* o = output<float>(out, "out");
            const uint64_t count = static_cast<uint64_t>(out.size());
            check_stream_range(offset, count);
            py::gil_scoped_release release;
            const uint64_t n = gpu::stream_threads(offset, count);
            for (uint64_t t = 0; t < n; ++t)
                gpu::stream_normals_thread(t, seed, substream, group, domain, offset, count, scale, o);
        },
        py::arg("seed"), py::arg("substream"), py::arg("group"), py::arg("domain"), py::arg("offset"),
        py::arg("scale"), py::arg("out"));

    e.def(
        "stream_words",
        [](uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain, uint64_t offset, py::array& out) {
            uint32_t* o = output<uint32_t>(out, "out");
            const uint64_t count = static_cast<uint64_t>(out.size());
            check_stream_range(offset, count);
            py::gil_scoped_release release;
            const uint64_t n = gpu::stream_threads(offset, count);
            for (uint64_t t = 0; t < n; ++t) gpu::stream_words_thread(t, seed, substream, group, domain, offset, count, o);
        },
        py::arg("seed"), py::arg("substream"), py::arg("group"), py::arg("domain"), py::arg("offset"),
        py::arg("out"));

    e.def(
        "rec_dot_products",
        [](const py::array& phi, uint64_t seed, uint32_t group, double factor, py::array& out) {
            double* o = output<double>(out, "out");
            const uint64_t d = static_cast<uint64_t>(phi.size());
            const uint64_t k = static_cast<uint64_t>(out.size());
            check_size_nonzero(d, "phi");
            if (k == 0 || k > kMaxCandidates)
                throw py::value_error("out (one slot per candidate) must have 1 .. 2**24 elements, got " +
                                      std::to_string(k));
            if (has_dtype(phi, py::dtype::of<float>())) {
                const float* p = input<float>(phi, "phi");
                py::gil_scoped_release release;
                rec_dot_products(p, d, seed, group, static_cast<uint32_t>(k), factor, o);
            } else {
                const double* p = input<double>(phi, "phi");
                py::gil_scoped_release release;
                rec_dot_products(p, d, seed, group, static_cast<uint32_t>(k), factor, o);
            }
        },
        py::arg("phi"), py::arg("seed"), py::arg("group"), py::arg("factor"), py::arg("out"));

    e.def(
        "gumbel_argmax",
        [](const py::array& logits, const py::array& gumbel, const py::array& offsets) {
            const double* l = input<double>(logits, "logits");
            const double* g = input<double>(gumbel, "gumbel");
            const int64_t* off = input<int64_t>(offsets, "offsets");
            if (logits.size() == 0) throw py::value_error("logits must not be empty");
            if (gumbel.size() != logits.size())
                throw py::value_error("gumbel must have the length of logits (" + std::to_string(logits.size()) +
                                      "), got " + std::to_string(gumbel.size()));
            if (offsets.size() < 2)
                throw py::value_error("offsets must hold at least 2 entries (groups + 1), got " +
                                      std::to_string(offsets.size()));
            const uint64_t n_groups = static_cast<uint64_t>(offsets.size()) - 1;
            if (off[0] != 0) throw py::value_error("offsets[0] must be 0, got " + std::to_string(off[0]));
            for (uint64_t i = 0; i < n_groups; ++i)
                if (off[i + 1] <= off[i])
                    throw py::value_error("offsets must be strictly increasing (no empty group), got offsets[" +
                                          std::to_string(i) + "] = " + std::to_string(off[i]) + " >= offsets[" +
                                          std::to_string(i + 1) + "] = " + std::to_string(off[i + 1]));
            if (off[n_groups] != static_cast<int64_t>(logits.size()))
                throw py::value_error("offsets[-1] must be len(logits) = " + std::to_string(logits.size()) +
                                      ", got " + std::to_string(off[n_groups]));
            py::array_t<int64_t> result(static_cast<py::ssize_t>(n_groups));
            int64_t* r = result.mutable_data();
            {
                py::gil_scoped_release release;
                gumbel_argmax(l, g, off, n_groups, r);
            }
            return result;
        },
        py::arg("logits"), py::arg("gumbel"), py::arg("offsets"));

    e.def(
        "gumbel_argmax_plan",
        [](const py::array& offsets) {
            const int64_t* off = input<int64_t>(offsets, "offsets");
            if (offsets.size() < 2) throw py::value_error("offsets must hold at least 2 entries (groups + 1)");
            const uint64_t n_groups = static_cast<uint64_t>(offsets.size()) - 1;
            if (off[0] != 0) throw py::value_error("offsets[0] must be 0");
            for (uint64_t i = 0; i < n_groups; ++i)
                if (off[i + 1] <= off[i]) throw py::value_error("offsets must be strictly increasing");
            const gpu::ArgmaxPlan plan = gpu::make_argmax_plan(off, n_groups);
            py::array_t<int64_t> rows({static_cast<py::ssize_t>(plan.n_levels() + 1),
                                       static_cast<py::ssize_t>(n_groups + 1)});
            std::copy(plan.offsets.begin(), plan.offsets.end(), rows.mutable_data());
            return rows;
        },
        py::arg("offsets"),
        "The level offsets of gumbel_argmax's plan: row 0 the groups, row l + 1 the threads of level l "
        "(the items of level l + 1).");

    e.def(
        "accumulate",
        [](py::array& out, uint32_t group, const py::array& seeds, const py::array& indices, const py::array& coefs) {
            const Clients c = clients(seeds, indices, coefs);
            const uint64_t d = static_cast<uint64_t>(out.size());
            check_size_nonzero(d, "out");
            const uint64_t n = gpu::ceil_div(d, 4);
            if (has_dtype(out, py::dtype::of<float>())) {
                float* o = output<float>(out, "out");
                py::gil_scoped_release release;
                for (uint64_t t = 0; t < n; ++t)
                    gpu::accumulate_f32_thread(t, o, d, group, c.seeds, c.indices, c.coefs, c.n);
            } else {
                double* o = output<double>(out, "out");
                py::gil_scoped_release release;
                for (uint64_t t = 0; t < n; ++t)
                    gpu::accumulate_f64_thread(t, o, nullptr, d, group, c.seeds, c.indices, c.coefs, c.n);
            }
        },
        py::arg("out"), py::arg("group"), py::arg("seeds"), py::arg("indices"), py::arg("coefs"));

    e.def(
        "aggregate_f32",
        [](py::array& out, uint32_t group, const py::array& seeds, const py::array& indices, const py::array& coefs) {
            const Clients c = clients(seeds, indices, coefs);
            float* o = output<float>(out, "out");
            const uint64_t d = static_cast<uint64_t>(out.size());
            check_size_nonzero(d, "out");
            const uint64_t n = gpu::ceil_div(d, 4);
            py::gil_scoped_release release;
            for (uint64_t t = 0; t < n; ++t)
                gpu::accumulate_f64_thread(t, nullptr, o, d, group, c.seeds, c.indices, c.coefs, c.n);
        },
        py::arg("out"), py::arg("group"), py::arg("seeds"), py::arg("indices"), py::arg("coefs"));

    e.def(
        "norm_stats",
        [](const py::array& x, double divisor) {
            const uint64_t n = static_cast<uint64_t>(x.size());
            const bool f32 = has_dtype(x, py::dtype::of<float>());
            const void* p = f32 ? static_cast<const void*>(input<float>(x, "x"))
                                : static_cast<const void*>(input<double>(x, "x"));
            if (n == 0) throw py::value_error("x must not be empty");
            if (!(divisor > 0.0) || divisor == HUGE_VAL) throw py::value_error("divisor must be finite and > 0");
            py::gil_scoped_release release;
            return f32 ? norm_stats(static_cast<const float*>(p), n, divisor)
                       : norm_stats(static_cast<const double*>(p), n, divisor);
        },
        py::arg("x"), py::arg("divisor"));

    e.def(
        "to_float32",
        [](const py::array& src, const std::string& kind, py::array& out) {
            if (kind != "float16" && kind != "bfloat16")
                throw py::value_error("kind must be 'float16' or 'bfloat16', got '" + kind + "'");
            const bool bf16 = kind == "bfloat16";
            const uint16_t* s = half_input(src, bf16);
            float* o = output<float>(out, "out");
            if (out.size() != src.size())
                throw py::value_error("out must have the length of src (" + std::to_string(src.size()) + "), got " +
                                      std::to_string(out.size()));
            const uint64_t n = static_cast<uint64_t>(src.size());
            py::gil_scoped_release release;
            if (bf16)
                for (uint64_t i = 0; i < n; ++i) o[i] = gpu::bfloat16_bits_to_float(s[i]);
            else
                for (uint64_t i = 0; i < n; ++i) o[i] = gpu::half_bits_to_float(s[i]);
        },
        py::arg("src"), py::arg("kind"), py::arg("out"));
}

}  // namespace dprec::bind
