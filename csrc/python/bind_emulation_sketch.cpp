// dprec._core.gpu_emulation, count-sketch part: the CUDA count-sketch kernels' per-thread
// bodies (csrc/cuda/sketch_bodies.h) run on the host, thread by thread, with the batch plan
// of csrc/cuda/sketch_launch.cu. The radix sort of the GPU encode is CUB's stable
// DeviceRadixSort on the key's low bits; every key is below 2^bits (checked here), so it
// orders exactly as a stable sort by key, which is what std::stable_sort does below.
//
// Keep it in step with sketch_launch.cu (see bind_emulation.cpp for why this exists).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/sketch_bodies.h"
#include "arrays.h"
#include "sketch_checks.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

template <class X, class T>
void encode(const X* x, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols, double scale,
            T* table, uint64_t max_pairs) {
    const gpu::SketchEncodePlan plan = gpu::make_sketch_encode_plan(dim, rows, cols, max_pairs);
    const uint64_t cap = plan.max_pairs();
    std::vector<uint32_t> keys(static_cast<size_t>(cap)), sorted_keys(keys.size());
    std::vector<T> values(keys.size()), sorted_values(keys.size());
    std::vector<uint64_t> order(keys.size());
    const T scale_t = static_cast<T>(scale);
    for (uint32_t row0 = 0; row0 < rows; row0 += plan.row_batch) {
        const uint32_t n_rows = rows - row0 < plan.row_batch ? rows - row0 : plan.row_batch;
        const int bits = gpu::sketch_key_bits(static_cast<uint64_t>(n_rows) * cols);
        T* const table_batch = table + static_cast<uint64_t>(row0) * cols;
        for (uint64_t j0 = 0; j0 < dim; j0 += plan.chunk) {
            const uint64_t n_elems = dim - j0 < plan.chunk ? dim - j0 : plan.chunk;
            const uint64_t n_pairs = static_cast<uint64_t>(n_rows) * n_elems;
            if (n_pairs > cap || n_pairs > 0x7fffffffu) throw std::logic_error("count_sketch plan: batch too large");
            const uint64_t n_threads = gpu::sketch_pairs_threads(n_rows, n_elems);
            for (uint64_t t = 0; t < n_threads; ++t)
                gpu::sketch_pairs_thread(t, x, j0, n_elems, row0, seed, group, cols, scale_t, keys.data(),
                                         values.data());
            for (uint64_t p = 0; p < n_pairs; ++p)
                if (bits < 32 && (keys[p] >> bits) != 0) throw std::logic_error("count_sketch plan: key beyond its bits");
            std::iota(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_pairs), uint64_t(0));
            std::stable_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_pairs),
                             [&](uint64_t a, uint64_t b) { return keys[a] < keys[b]; });
            for (uint64_t p = 0; p < n_pairs; ++p) {
                sorted_keys[p] = keys[order[p]];
                sorted_values[p] = values[order[p]];
            }
            for (uint64_t i = 0; i < n_pairs; ++i)
                gpu::sketch_fold_thread(i, sorted_keys.data(), sorted_values.data(), n_pairs, table_batch);
        }
    }
}

template <class T>
void decode(const T* table, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols, bool median,
            double median_scale, T* out) {
    if (median) {
        for (uint64_t j = 0; j < dim; ++j)
            gpu::sketch_decode_median_thread(j, table, seed, group, rows, cols, median_scale, out);
        return;
    }
    const uint64_t n = gpu::sketch_mean_threads(dim);
    for (uint64_t t = 0; t < n; ++t) gpu::sketch_decode_mean_thread(t, table, dim, seed, group, rows, cols, out);
}

template <class X>
void encode_into(const py::array& x, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols, double scale,
                 py::array& table, uint64_t max_pairs) {
    const X* xp = input<X>(x, "x");
    const uint64_t dim = static_cast<uint64_t>(x.size());
    if (has_dtype(table, py::dtype::of<float>())) {
        float* tp = output<float>(table, "table");
        py::gil_scoped_release release;
        encode(xp, dim, seed, group, rows, cols, scale, tp, max_pairs);
    } else {
        double* tp = output<double>(table, "table");  // TypeError for other dtypes
        py::gil_scoped_release release;
        encode(xp, dim, seed, group, rows, cols, scale, tp, max_pairs);
    }
}

template <class T>
void decode_into(const py::array& table, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols, bool median,
                 double median_scale, py::array& out) {
    const T* tp = input<T>(table, "table");
    T* op = output<T>(out, "out");
    const uint64_t dim = static_cast<uint64_t>(out.size());
    py::gil_scoped_release release;
    decode(tp, dim, seed, group, rows, cols, median, median_scale, op);
}

void check_table_size(const py::array& table, uint64_t cells) {
    if (static_cast<uint64_t>(table.size()) != cells)
        throw py::value_error("table must have rows * cols = " + std::to_string(cells) + " elements, got " +
                              std::to_string(table.size()));
}

}  // namespace

void bind_emulation_sketch(py::module_& m) {
    py::module_ e = m.attr("gpu_emulation").cast<py::module_>();

    e.def(
        "count_sketch_encode",
        [](const py::array& x, uint64_t seed, uint32_t group, int64_t rows, int64_t cols, double scale,
           py::array& table, uint64_t max_pairs) {
            check_table_size(table, check_sketch_shape(rows, cols));
            check_sketch_dim(static_cast<uint64_t>(x.size()), "x");
            check_sketch_finite(scale, "scale");
            if (max_pairs == 0) throw py::value_error("max_pairs must be at least 1");
            const auto r = static_cast<uint32_t>(rows);
            const auto c = static_cast<uint64_t>(cols);
            if (has_dtype(x, py::dtype::of<float>()))
                encode_into<float>(x, seed, group, r, c, scale, table, max_pairs);
            else
                encode_into<double>(x, seed, group, r, c, scale, table, max_pairs);  // TypeError for others
        },
        py::arg("x"), py::arg("seed"), py::arg("group"), py::arg("rows"), py::arg("cols"), py::arg("scale"),
        py::arg("table"), py::arg("max_pairs") = gpu::kSketchMaxPairs,
        "The GPU count-sketch encode on the host: pairs, stable sort, fold, in batches of at most max_pairs pairs "
        "(the GPU uses the default). x (float32/float64) may differ in dtype from table (float32/float64).");

    e.def(
        "count_sketch_decode",
        [](const py::array& table, uint64_t seed, uint32_t group, int64_t rows, int64_t cols, bool median,
           double median_scale, py::array& out) {
            check_table_size(table, check_sketch_shape(rows, cols));
            check_sketch_dim(static_cast<uint64_t>(out.size()), "out");
            check_sketch_finite(median_scale, "median_scale");
            if (median) check_sketch_median_rows(rows);
            if (!table.dtype().is(out.dtype()))
                throw py::type_error("table and out must have the same dtype, got " +
                                     std::string(py::str(table.dtype())) + " and " + std::string(py::str(out.dtype())));
            const auto r = static_cast<uint32_t>(rows);
            const auto c = static_cast<uint64_t>(cols);
            if (has_dtype(table, py::dtype::of<float>()))
                decode_into<float>(table, seed, group, r, c, median, median_scale, out);
            else
                decode_into<double>(table, seed, group, r, c, median, median_scale, out);
        },
        py::arg("table"), py::arg("seed"), py::arg("group"), py::arg("rows"), py::arg("cols"), py::arg("median"),
        py::arg("median_scale"), py::arg("out"));

    e.def(
        "count_sketch_encode_plan",
        [](uint64_t dim, int64_t rows, int64_t cols, uint64_t max_pairs) {
            check_sketch_shape(rows, cols);
            check_sketch_dim(dim, "dim");
            const gpu::SketchEncodePlan p =
                gpu::make_sketch_encode_plan(dim, static_cast<uint32_t>(rows), static_cast<uint64_t>(cols), max_pairs);
            py::dict d;
            d["chunk"] = p.chunk;
            d["row_batch"] = p.row_batch;
            d["max_pairs"] = p.max_pairs();
            return d;
        },
        py::arg("dim"), py::arg("rows"), py::arg("cols"), py::arg("max_pairs") = gpu::kSketchMaxPairs,
        "The batch plan of the GPU encode: elements per chunk, rows per batch, pairs per sort (scratch bound).");
}

}  // namespace dprec::bind
