// dprec._gpu_emulation, count-sketch part: the CUDA count-sketch kernels' per-thread
// bodies (csrc/cuda/sketch_bodies.h) run on the host, thread by thread, with the batch plan
// of csrc/cuda/sketch_launch.cu. The radix sort of the GPU encode is CUB's stable
// DeviceRadixSort on the key's low (bucket) bits only, which orders exactly as a stable sort
// by those bits: that is what std::stable_sort does below. The cell fold is a warp's job on
// the GPU; here each of its phases runs for all 32 lanes before the next, in the kernel's
// order, with the same phase bodies, so its tile indexing is checked too.
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

// sketch_kernels::fold_cells for one warp (one cell), phase by phase and lane by lane.
template <class T>
void fold_cell_warp(uint32_t begin, uint32_t end, const T* values, T& cell) {
    if (begin == end) return;
    T acc = cell;
    T regs[gpu::kSketchFoldLanes][gpu::kSketchFoldPerLane];
    T tile[gpu::kSketchFoldTile];
    for (uint32_t lane = 0; lane < gpu::kSketchFoldLanes; ++lane)
        gpu::sketch_fold_load(lane, begin, end, values, regs[lane]);
    for (uint32_t tile_begin = begin; tile_begin < end; tile_begin += gpu::kSketchFoldTile) {
        for (uint32_t lane = 0; lane < gpu::kSketchFoldLanes; ++lane) gpu::sketch_fold_stage(lane, regs[lane], tile);
        const uint32_t next = tile_begin + gpu::kSketchFoldTile;
        if (next < end)
            for (uint32_t lane = 0; lane < gpu::kSketchFoldLanes; ++lane)
                gpu::sketch_fold_load(lane, next, end, values, regs[lane]);
        acc = gpu::sketch_fold_add(tile, gpu::sketch_fold_tile_length(tile_begin, end), acc);  // every lane alike
    }
    cell = acc;
}

template <class X, class T>
void encode(const X* x, uint64_t dim, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols, double scale,
            T* table, uint64_t max_pairs, uint64_t cell_fold_min_run) {
    const gpu::SketchEncodePlan plan = gpu::make_sketch_encode_plan(dim, rows, cols, max_pairs, cell_fold_min_run);
    const uint64_t cap = plan.max_pairs();
    if (cap > 0x7fffffffu) throw std::logic_error("count_sketch plan: batch too large");
    std::vector<uint32_t> keys(static_cast<size_t>(cap)), sorted_keys(keys.size());
    std::vector<T> values(keys.size()), sorted_values(keys.size());
    std::vector<uint64_t> order(keys.size());
    const uint64_t max_cells = plan.max_fold_cells();
    std::vector<uint32_t> bounds(static_cast<size_t>(2 * max_cells));
    const T scale_t = static_cast<T>(scale);
    const int bits = plan.bucket_bits;
    const uint64_t bucket_mask = (uint64_t(1) << bits) - 1;
    for (uint32_t row0 = 0; row0 < rows; row0 += plan.row_batch) {
        const uint32_t n_rows = rows - row0 < plan.row_batch ? rows - row0 : plan.row_batch;
        if ((static_cast<uint64_t>(n_rows - 1) << bits) >> 32 != 0)
            throw std::logic_error("count_sketch plan: rows beyond the key");
        T* const table_batch = table + static_cast<uint64_t>(row0) * cols;
        for (uint64_t j0 = 0; j0 < dim; j0 += plan.chunk) {
            const uint64_t n_elems = dim - j0 < plan.chunk ? dim - j0 : plan.chunk;
            const uint64_t n_pairs = static_cast<uint64_t>(n_rows) * n_elems;
            if (n_pairs > cap) throw std::logic_error("count_sketch plan: batch too large");
            const uint64_t n_threads = gpu::sketch_pairs_threads(n_rows, n_elems);
            for (uint64_t t = 0; t < n_threads; ++t)
                gpu::sketch_pairs_thread(t, x, j0, n_elems, row0, seed, group, cols, bits, scale_t, keys.data(),
                                         values.data());
            const uint32_t* sk = keys.data();
            const T* sv = values.data();
            if (plan.sorts()) {
                std::iota(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_pairs), uint64_t(0));
                // CUB reads the bucket bits only: the local row above them keeps the input order.
                std::stable_sort(
                    order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_pairs),
                    [&](uint64_t a, uint64_t b) { return (keys[a] & bucket_mask) < (keys[b] & bucket_mask); });
                for (uint64_t p = 0; p < n_pairs; ++p) {
                    sorted_keys[p] = keys[order[p]];
                    sorted_values[p] = values[order[p]];
                }
                sk = sorted_keys.data();
                sv = sorted_values.data();
            } else {
                for (uint64_t p = 1; p < n_pairs; ++p)
                    if (keys[p] < keys[p - 1]) throw std::logic_error("count_sketch plan: unsorted keys, sort skipped");
            }
            if (plan.fold_by_cells(n_elems)) {
                const uint64_t n_cells = static_cast<uint64_t>(n_rows) * cols;
                if (n_cells > max_cells) throw std::logic_error("count_sketch plan: too many cells to fold");
                uint32_t* const run_begin = bounds.data();
                uint32_t* const run_end = run_begin + n_cells;
                std::fill(run_begin, run_end + n_cells, 0u);
                for (uint64_t i = 0; i < n_pairs; ++i)
                    gpu::sketch_cell_bounds_thread(i, sk, n_pairs, bits, cols, run_begin, run_end);
                for (uint64_t c = 0; c < n_cells; ++c) fold_cell_warp(run_begin[c], run_end[c], sv, table_batch[c]);
            } else {
                for (uint64_t i = 0; i < n_pairs; ++i)
                    gpu::sketch_fold_thread(i, sk, sv, n_pairs, bits, cols, table_batch);
            }
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
                 py::array& table, uint64_t max_pairs, uint64_t cell_fold_min_run) {
    const X* xp = input<X>(x, "x");
    const uint64_t dim = static_cast<uint64_t>(x.size());
    if (has_dtype(table, py::dtype::of<float>())) {
        float* tp = output<float>(table, "table");
        py::gil_scoped_release release;
        encode(xp, dim, seed, group, rows, cols, scale, tp, max_pairs, cell_fold_min_run);
    } else {
        double* tp = output<double>(table, "table");  // TypeError for other dtypes
        py::gil_scoped_release release;
        encode(xp, dim, seed, group, rows, cols, scale, tp, max_pairs, cell_fold_min_run);
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

void check_plan_args(uint64_t max_pairs, uint64_t cell_fold_min_run) {
    if (max_pairs == 0) throw py::value_error("max_pairs must be at least 1");
    if (cell_fold_min_run == 0 || cell_fold_min_run > (uint64_t(1) << 31))
        throw py::value_error("cell_fold_min_run must be in 1 .. 2**31");
}

void check_table_size(const py::array& table, uint64_t cells) {
    if (static_cast<uint64_t>(table.size()) != cells)
        throw py::value_error("table must have rows * cols = " + std::to_string(cells) + " elements, got " +
                              std::to_string(table.size()));
}

}  // namespace

void bind_emulation_sketch(py::module_& e) {
    e.def(
        "count_sketch_encode",
        [](const py::array& x, uint64_t seed, uint32_t group, int64_t rows, int64_t cols, double scale,
           py::array& table, uint64_t max_pairs, uint64_t cell_fold_min_run) {
            check_table_size(table, check_sketch_shape(rows, cols));
            check_sketch_dim(static_cast<uint64_t>(x.size()), "x");
            check_sketch_finite(scale, "scale");
            check_plan_args(max_pairs, cell_fold_min_run);
            const auto r = static_cast<uint32_t>(rows);
            const auto c = static_cast<uint64_t>(cols);
            if (has_dtype(x, py::dtype::of<float>()))
                encode_into<float>(x, seed, group, r, c, scale, table, max_pairs, cell_fold_min_run);
            else
                encode_into<double>(x, seed, group, r, c, scale, table, max_pairs,
                                    cell_fold_min_run);  // TypeError for others
        },
        py::arg("x"), py::arg("seed"), py::arg("group"), py::arg("rows"), py::arg("cols"), py::arg("scale"),
        py::arg("table"), py::arg("max_pairs") = gpu::kSketchMaxPairs,
        py::arg("cell_fold_min_run") = gpu::kSketchCellFoldMinRun,
        "The GPU count-sketch encode on the host: pairs, stable sort, fold, in batches of at most max_pairs pairs; "
        "batches whose mean run is at least cell_fold_min_run pairs fold one warp per cell (the GPU uses the "
        "defaults). x (float32/float64) may differ in dtype from table (float32/float64).");

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
        [](uint64_t dim, int64_t rows, int64_t cols, uint64_t max_pairs, uint64_t cell_fold_min_run) {
            check_sketch_shape(rows, cols);
            check_sketch_dim(dim, "dim");
            check_plan_args(max_pairs, cell_fold_min_run);
            const gpu::SketchEncodePlan p = gpu::make_sketch_encode_plan(
                dim, static_cast<uint32_t>(rows), static_cast<uint64_t>(cols), max_pairs, cell_fold_min_run);
            const uint64_t row_groups = (static_cast<uint64_t>(rows) + p.row_batch - 1) / p.row_batch;
            py::dict d;
            d["chunk"] = p.chunk;
            d["row_batch"] = p.row_batch;
            d["max_pairs"] = p.max_pairs();
            d["sort_bits"] = p.sorts() ? p.bucket_bits : 0;
            d["batches"] = row_groups * ((dim + p.chunk - 1) / p.chunk);
            d["cell_fold"] = p.fold_by_cells(dim < p.chunk ? dim : p.chunk);  // of a full chunk
            d["max_fold_cells"] = p.max_fold_cells();
            return d;
        },
        py::arg("dim"), py::arg("rows"), py::arg("cols"), py::arg("max_pairs") = gpu::kSketchMaxPairs,
        py::arg("cell_fold_min_run") = gpu::kSketchCellFoldMinRun,
        "The batch plan of the GPU encode: elements per chunk, rows per batch, pairs per sort (scratch bound), "
        "radix bits sorted (0: no sort), number of sorts, whether a full chunk folds one warp per cell, and the "
        "cell fold's run-bound entries.");
}

}  // namespace dprec::bind
