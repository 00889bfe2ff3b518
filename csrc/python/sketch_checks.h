// Size checks shared by the GPU count-sketch bindings (bind_cuda_sketch.cpp) and their host
// emulation (bind_emulation_sketch.cpp): the caps of the CPU path (python/dprec/transforms/sketch.py).
#pragma once

#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../cuda/sketch_bodies.h"
#include "checks.h"

namespace dprec::bind {

constexpr int64_t kSketchMaxRows = int64_t(1) << 16;

// 1 <= rows <= 2^16, 1 <= cols < 2^32, rows * cols <= 2^34; returns rows * cols.
inline uint64_t check_sketch_shape(int64_t rows, int64_t cols) {
    if (rows < 1 || rows > kSketchMaxRows)
        throw pybind11::value_error("rows must be in 1 .. 2**16, got " + std::to_string(rows));
    if (cols < 1 || cols > int64_t(0xffffffff))
        throw pybind11::value_error("cols must be in 1 .. 2**32 - 1, got " + std::to_string(cols));
    const uint64_t cells = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
    if (cells > kMaxStreamElements)
        throw pybind11::value_error("rows * cols must be at most 2**34, got " + std::to_string(rows) + " * " +
                                    std::to_string(cols));
    return cells;
}

inline void check_sketch_dim(uint64_t dim, const char* name) {
    if (dim == 0) throw pybind11::value_error(std::string(name) + " must not be empty");
    if (dim > kMaxStreamElements)
        throw pybind11::value_error(std::string(name) + " must have at most 2**34 elements (the Philox counter), got " +
                                    std::to_string(dim));
}

inline void check_sketch_median_rows(int64_t rows) {
    if (rows > static_cast<int64_t>(gpu::kSketchMedianMaxRows))
        throw pybind11::value_error("rows must be at most 32 for the median decode on the GPU, got " +
                                    std::to_string(rows) + " (use method='mean', or decode on the CPU)");
}

inline void check_sketch_finite(double v, const char* name) {
    if (!std::isfinite(v)) throw pybind11::value_error(std::string(name) + " must be finite");
}

}  // namespace dprec::bind
