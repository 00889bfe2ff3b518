// Count-sketch encode / decode (buckets and signs from Philox domains 1 and 2).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../cpu/sketch.h"
#include "arrays.h"
#include "checks.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

// rows >= 1 (and < 2^32, the substream), 1 <= cols < 2^32; returns rows * cols.
uint64_t check_shape(int64_t rows, int64_t cols) {
    if (rows < 1 || rows > int64_t(0xffffffff))
        throw py::value_error("rows must be in 1 .. 2**32 - 1, got " + std::to_string(rows));
    if (cols < 1 || cols > int64_t(0xffffffff))
        throw py::value_error("cols must be in 1 .. 2**32 - 1, got " + std::to_string(cols));
    return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);  // < 2^64
}

void check_table_size(const py::array& table, uint64_t cells) {
    if (static_cast<uint64_t>(table.size()) != cells)
        throw py::value_error("table must have rows * cols = " + std::to_string(cells) + " elements, got " +
                              std::to_string(table.size()));
}

void check_dim(uint64_t dim, const char* name) {
    if (dim == 0) throw py::value_error(std::string(name) + " must not be empty");
    if (dim > kMaxStreamElements)
        throw py::value_error(std::string(name) + " must have at most 2**34 elements (the Philox counter), got " +
                              std::to_string(dim));
}

void check_finite(double v, const char* name) {
    if (!std::isfinite(v)) throw py::value_error(std::string(name) + " must be finite");
}

template <class T>
void encode(const py::array& x, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols, double scale,
            py::array& table) {
    const T* xp = input<T>(x, "x");
    T* tp = output<T>(table, "table");
    const uint64_t dim = static_cast<uint64_t>(x.size());
    py::gil_scoped_release release;
    cpu::count_sketch_encode(xp, dim, seed, group, rows, cols, scale, tp);
}

template <class T>
void decode(const py::array& table, uint64_t seed, uint32_t group, uint32_t rows, uint64_t cols, bool median,
            double median_scale, py::array& out) {
    const T* tp = input<T>(table, "table");
    T* op = output<T>(out, "out");
    const uint64_t dim = static_cast<uint64_t>(out.size());
    py::gil_scoped_release release;
    cpu::count_sketch_decode(tp, dim, seed, group, rows, cols, median, median_scale, op);
}

}  // namespace

void bind_sketch(py::module_& m) {
    m.def(
        "count_sketch_encode",
        [](const py::array& x, uint64_t seed, uint32_t group, int64_t rows, int64_t cols, double scale,
           py::array& table) {
            const uint64_t cells = check_shape(rows, cols);
            check_table_size(table, cells);
            check_dim(static_cast<uint64_t>(x.size()), "x");
            check_finite(scale, "scale");
            if (!table.dtype().is(x.dtype()))
                throw py::type_error("x and table must have the same dtype, got " + std::string(py::str(x.dtype())) +
                                     " and " + std::string(py::str(table.dtype())));
            const uint32_t r = static_cast<uint32_t>(rows);
            const uint64_t c = static_cast<uint64_t>(cols);
            if (has_dtype(x, py::dtype::of<float>()))
                encode<float>(x, seed, group, r, c, scale, table);
            else
                encode<double>(x, seed, group, r, c, scale, table);  // raises TypeError for other dtypes
        },
        py::arg("x"), py::arg("seed"), py::arg("group"), py::arg("rows"), py::arg("cols"), py::arg("scale"),
        py::arg("table"));

    m.def(
        "count_sketch_decode",
        [](const py::array& table, uint64_t seed, uint32_t group, int64_t rows, int64_t cols, bool median,
           double median_scale, py::array& out) {
            const uint64_t cells = check_shape(rows, cols);
            check_table_size(table, cells);
            check_dim(static_cast<uint64_t>(out.size()), "out");
            check_finite(median_scale, "median_scale");
            if (!table.dtype().is(out.dtype()))
                throw py::type_error("table and out must have the same dtype, got " +
                                     std::string(py::str(table.dtype())) + " and " + std::string(py::str(out.dtype())));
            const uint32_t r = static_cast<uint32_t>(rows);
            const uint64_t c = static_cast<uint64_t>(cols);
            if (has_dtype(table, py::dtype::of<float>()))
                decode<float>(table, seed, group, r, c, median, median_scale, out);
            else
                decode<double>(table, seed, group, r, c, median, median_scale, out);
        },
        py::arg("table"), py::arg("seed"), py::arg("group"), py::arg("rows"), py::arg("cols"), py::arg("median"),
        py::arg("median_scale"), py::arg("out"));
}

}  // namespace dprec::bind
