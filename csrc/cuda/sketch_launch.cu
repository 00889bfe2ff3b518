// Count-sketch launchers: the encode's pairs -> stable radix sort (CUB) -> fold pipeline,
// batched by gpu::make_sketch_encode_plan (short runs folded one thread per run, long ones
// one warp per cell: see sketch_bodies.h), and the decode kernels. Nothing synchronises.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda_check.h"
#include "launch_util.h"
#include "sketch_kernels.cuh"
#include "sketch_launch.h"

namespace dprec::cuda {
namespace {

constexpr unsigned kThreads = 256;

}  // namespace

template <class X, class T>
void count_sketch_encode(int device, Stream stream, const X* x, uint64_t dim, uint64_t seed, uint32_t group,
                         uint32_t rows, uint64_t cols, double scale, T* table) {
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    const gpu::SketchEncodePlan plan = gpu::make_sketch_encode_plan(dim, rows, cols, gpu::kSketchMaxPairs);
    const uint64_t cap = plan.max_pairs();
    // Two buffers each for keys and values: CUB's DoubleBuffer sort ping-pongs between them
    // (and needs far less temporary storage than the copying variant). Without a sort, one.
    const uint64_t n_buffers = plan.sorts() ? 2 : 1;
    Scratch keys(n_buffers * cap * sizeof(uint32_t), s);
    Scratch values(n_buffers * cap * sizeof(T), s);
    uint32_t* const key_buf[2] = {keys.as<uint32_t>(), keys.as<uint32_t>() + (n_buffers - 1) * cap};
    T* const value_buf[2] = {values.as<T>(), values.as<T>() + (n_buffers - 1) * cap};
    // The cell fold's run bounds: begin then end, max_fold_cells() each (cap / 1024).
    const uint64_t max_cells = plan.max_fold_cells();
    Scratch bounds(2 * max_cells * sizeof(uint32_t), s);
    std::unique_ptr<Scratch> temp;
    size_t temp_have = 0;
    const T scale_t = static_cast<T>(scale);
    const int bits = plan.bucket_bits;

    for (uint32_t row0 = 0; row0 < rows; row0 += plan.row_batch) {
        const uint32_t n_rows = rows - row0 < plan.row_batch ? rows - row0 : plan.row_batch;
        T* const table_batch = table + static_cast<uint64_t>(row0) * cols;
        // Chunks in increasing j: each cell keeps receiving its additions in the CPU's order.
        for (uint64_t j0 = 0; j0 < dim; j0 += plan.chunk) {
            const uint64_t n_elems = dim - j0 < plan.chunk ? dim - j0 : plan.chunk;
            const uint64_t n_pairs = static_cast<uint64_t>(n_rows) * n_elems;  // <= cap < 2^31
            const uint64_t n_threads = gpu::sketch_pairs_threads(n_rows, n_elems);
            sketch_kernels::pairs<X, T><<<grid_for(n_threads, kThreads), kThreads, 0, s>>>(
                n_threads, x, j0, n_elems, row0, seed, group, cols, bits, scale_t, key_buf[0], value_buf[0]);
            check_launch("count_sketch pairs");

            const uint32_t* sorted_keys = key_buf[0];
            const T* sorted_values = value_buf[0];
            if (plan.sorts()) {
                cub::DoubleBuffer<uint32_t> k(key_buf[0], key_buf[1]);
                cub::DoubleBuffer<T> v(value_buf[0], value_buf[1]);
                const int n = static_cast<int>(n_pairs);
                size_t temp_need = 0;
                check(cub::DeviceRadixSort::SortPairs(nullptr, temp_need, k, v, n, 0, bits, s),
                      "cub::DeviceRadixSort::SortPairs (size query)");
                if (!temp || temp_need > temp_have) {
                    temp.reset();  // freed in stream order, after the previous batch's sort
                    temp = std::make_unique<Scratch>(temp_need, s);
                    temp_have = temp_need;
                }
                check(cub::DeviceRadixSort::SortPairs(temp->as<void>(), temp_need, k, v, n, 0, bits, s),
                      "cub::DeviceRadixSort::SortPairs");
                sorted_keys = k.Current();
                sorted_values = v.Current();
            }

            if (plan.fold_by_cells(n_elems)) {
                const uint64_t n_cells = static_cast<uint64_t>(n_rows) * cols;  // <= max_cells
                uint32_t* const run_begin = bounds.as<uint32_t>();
                uint32_t* const run_end = run_begin + n_cells;
                check(cudaMemsetAsync(run_begin, 0, 2 * n_cells * sizeof(uint32_t), s), "cudaMemsetAsync (run bounds)");
                sketch_kernels::cell_bounds<<<grid_for(n_pairs, kThreads), kThreads, 0, s>>>(
                    n_pairs, sorted_keys, bits, cols, run_begin, run_end);
                check_launch("count_sketch cell_bounds");
                const uint64_t fold_threads = n_cells * gpu::kSketchFoldLanes;
                sketch_kernels::fold_cells<T>
                    <<<grid_for(fold_threads, sketch_kernels::kCellFoldThreads), sketch_kernels::kCellFoldThreads, 0,
                       s>>>(n_cells, run_begin, run_end, sorted_values, table_batch);
                check_launch("count_sketch fold_cells");
            } else {
                sketch_kernels::fold<T><<<grid_for(n_pairs, kThreads), kThreads, 0, s>>>(
                    n_pairs, sorted_keys, sorted_values, bits, cols, table_batch);
                check_launch("count_sketch fold");
            }
        }
    }
}

template <class T>
void count_sketch_decode(int device, Stream stream, const T* table, uint64_t dim, uint64_t seed, uint32_t group,
                         uint32_t rows, uint64_t cols, bool median, double median_scale, T* out) {
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    if (median) {
        if (rows > gpu::kSketchMedianMaxRows)
            throw std::invalid_argument("count_sketch_decode: the GPU median supports at most 32 rows");
        sketch_kernels::decode_median<T><<<grid_for(dim, kThreads), kThreads, 0, s>>>(dim, table, seed, group, rows,
                                                                                     cols, median_scale, out);
        check_launch("count_sketch decode_median");
        return;
    }
    const uint64_t n = gpu::sketch_mean_threads(dim);
    sketch_kernels::decode_mean<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(n, table, dim, seed, group, rows, cols,
                                                                             out);
    check_launch("count_sketch decode_mean");
}

template void count_sketch_encode<float, float>(int, Stream, const float*, uint64_t, uint64_t, uint32_t, uint32_t,
                                                uint64_t, double, float*);
template void count_sketch_encode<double, float>(int, Stream, const double*, uint64_t, uint64_t, uint32_t, uint32_t,
                                                 uint64_t, double, float*);
template void count_sketch_encode<float, double>(int, Stream, const float*, uint64_t, uint64_t, uint32_t, uint32_t,
                                                 uint64_t, double, double*);
template void count_sketch_encode<double, double>(int, Stream, const double*, uint64_t, uint64_t, uint32_t, uint32_t,
                                                  uint64_t, double, double*);
template void count_sketch_decode<float>(int, Stream, const float*, uint64_t, uint64_t, uint32_t, uint32_t, uint64_t,
                                         bool, double, float*);
template void count_sketch_decode<double>(int, Stream, const double*, uint64_t, uint64_t, uint32_t, uint32_t,
                                          uint64_t, bool, double, double*);

void preload_sketch_kernels() {
    preload_kernel(sketch_kernels::pairs<float, float>, "count_sketch pairs");
    preload_kernel(sketch_kernels::pairs<double, float>, "count_sketch pairs");
    preload_kernel(sketch_kernels::pairs<float, double>, "count_sketch pairs");
    preload_kernel(sketch_kernels::pairs<double, double>, "count_sketch pairs");
    preload_kernel(sketch_kernels::fold<float>, "count_sketch fold");
    preload_kernel(sketch_kernels::fold<double>, "count_sketch fold");
    preload_kernel(sketch_kernels::cell_bounds, "count_sketch cell_bounds");
    preload_kernel(sketch_kernels::fold_cells<float>, "count_sketch fold_cells");
    preload_kernel(sketch_kernels::fold_cells<double>, "count_sketch fold_cells");
    preload_kernel(sketch_kernels::decode_mean<float>, "count_sketch decode_mean");
    preload_kernel(sketch_kernels::decode_mean<double>, "count_sketch decode_mean");
    preload_kernel(sketch_kernels::decode_median<float>, "count_sketch decode_median");
    preload_kernel(sketch_kernels::decode_median<double>, "count_sketch decode_median");
}

}  // namespace dprec::cuda
