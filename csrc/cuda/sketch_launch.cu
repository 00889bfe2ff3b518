// Count-sketch launchers: the encode's pairs -> stable radix sort (CUB) -> fold pipeline,
// batched by gpu::make_sketch_encode_plan, and the decode kernels. Nothing synchronises.
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
    // (and needs far less temporary storage than the copying variant).
    Scratch keys(2 * cap * sizeof(uint32_t), s);
    Scratch values(2 * cap * sizeof(T), s);
    uint32_t* const key_buf[2] = {keys.as<uint32_t>(), keys.as<uint32_t>() + cap};
    T* const value_buf[2] = {values.as<T>(), values.as<T>() + cap};
    std::unique_ptr<Scratch> temp;
    size_t temp_have = 0;
    const T scale_t = static_cast<T>(scale);

    for (uint32_t row0 = 0; row0 < rows; row0 += plan.row_batch) {
        const uint32_t n_rows = rows - row0 < plan.row_batch ? rows - row0 : plan.row_batch;
        const int bits = gpu::sketch_key_bits(static_cast<uint64_t>(n_rows) * cols);
        T* const table_batch = table + static_cast<uint64_t>(row0) * cols;
        // Chunks in increasing j: each cell keeps receiving its additions in the CPU's order.
        for (uint64_t j0 = 0; j0 < dim; j0 += plan.chunk) {
            const uint64_t n_elems = dim - j0 < plan.chunk ? dim - j0 : plan.chunk;
            const uint64_t n_pairs = static_cast<uint64_t>(n_rows) * n_elems;  // <= cap < 2^31
            const uint64_t n_threads = gpu::sketch_pairs_threads(n_rows, n_elems);
            sketch_kernels::pairs<X, T><<<grid_for(n_threads, kThreads), kThreads, 0, s>>>(
                n_threads, x, j0, n_elems, row0, seed, group, cols, scale_t, key_buf[0], value_buf[0]);
            check_launch("count_sketch pairs");

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

            sketch_kernels::fold<T><<<grid_for(n_pairs, kThreads), kThreads, 0, s>>>(n_pairs, k.Current(),
                                                                                     v.Current(), table_batch);
            check_launch("count_sketch fold");
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

}  // namespace dprec::cuda
