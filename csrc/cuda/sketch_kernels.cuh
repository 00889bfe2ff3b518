// The count-sketch CUDA kernels: each thread computes its flat id and runs its body from
// sketch_bodies.h (the cell fold: each warp runs the phases of its cell). Included by
// sketch_launch.cu only.
#pragma once

#include <cuda_runtime.h>

#include "sketch_bodies.h"

namespace dprec::cuda::sketch_kernels {

__device__ __forceinline__ uint64_t thread_id() {
    return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

template <class X, class T>
__global__ void pairs(uint64_t n_threads, const X* __restrict__ x, uint64_t j0, uint64_t n_elems, uint32_t row0,
                      uint64_t seed, uint32_t group, uint64_t cols, int bucket_bits, T scale,
                      uint32_t* __restrict__ keys, T* __restrict__ values) {
    const uint64_t t = thread_id();
    if (t < n_threads)
        gpu::sketch_pairs_thread(t, x, j0, n_elems, row0, seed, group, cols, bucket_bits, scale, keys, values);
}

template <class T>
__global__ void fold(uint64_t n_pairs, const uint32_t* __restrict__ keys, const T* __restrict__ values,
                     int bucket_bits, uint64_t cols, T* __restrict__ table_batch) {
    const uint64_t i = thread_id();
    if (i < n_pairs) gpu::sketch_fold_thread(i, keys, values, n_pairs, bucket_bits, cols, table_batch);
}

__global__ void cell_bounds(uint64_t n_pairs, const uint32_t* __restrict__ keys, int bucket_bits, uint64_t cols,
                            uint32_t* __restrict__ run_begin, uint32_t* __restrict__ run_end) {
    const uint64_t i = thread_id();
    if (i < n_pairs) gpu::sketch_cell_bounds_thread(i, keys, n_pairs, bucket_bits, cols, run_begin, run_end);
}

// One warp per cell (kCellFoldThreads / 32 cells per block). n_cells * 32 threads in all, so
// a warp is either wholly past the end or wholly in, and the early returns below never
// split one before its __syncwarp().
constexpr unsigned kCellFoldThreads = 256;

template <class T>
__global__ void __launch_bounds__(kCellFoldThreads)
    fold_cells(uint64_t n_cells, const uint32_t* __restrict__ run_begin, const uint32_t* __restrict__ run_end,
               const T* __restrict__ values, T* __restrict__ table_batch) {
    __shared__ __align__(16) T tiles[kCellFoldThreads / gpu::kSketchFoldLanes][gpu::kSketchFoldTile];
    const uint64_t cell = thread_id() / gpu::kSketchFoldLanes;
    if (cell >= n_cells) return;
    const uint32_t lane = threadIdx.x % gpu::kSketchFoldLanes;
    T* const tile = tiles[threadIdx.x / gpu::kSketchFoldLanes];
    const uint32_t begin = run_begin[cell], end = run_end[cell];
    if (begin == end) return;  // no pair for this cell in this batch
    T acc = table_batch[cell];
    T regs[gpu::kSketchFoldPerLane];
    gpu::sketch_fold_load(lane, begin, end, values, regs);
    for (uint32_t tile_begin = begin; tile_begin < end; tile_begin += gpu::kSketchFoldTile) {
        __syncwarp();  // every lane has added the previous tile
        gpu::sketch_fold_stage(lane, regs, tile);
        __syncwarp();
        const uint32_t next = tile_begin + gpu::kSketchFoldTile;
        if (next < end) gpu::sketch_fold_load(lane, next, end, values, regs);
        acc = gpu::sketch_fold_add(tile, gpu::sketch_fold_tile_length(tile_begin, end), acc);
    }
    if (lane == 0) table_batch[cell] = acc;
}

template <class T>
__global__ void decode_mean(uint64_t n_threads, const T* __restrict__ table, uint64_t dim, uint64_t seed,
                            uint32_t group, uint32_t rows, uint64_t cols, T* __restrict__ out) {
    const uint64_t t = thread_id();
    if (t < n_threads) gpu::sketch_decode_mean_thread(t, table, dim, seed, group, rows, cols, out);
}

template <class T>
__global__ void decode_median(uint64_t dim, const T* __restrict__ table, uint64_t seed, uint32_t group,
                              uint32_t rows, uint64_t cols, double median_scale, T* __restrict__ out) {
    const uint64_t j = thread_id();
    if (j < dim) gpu::sketch_decode_median_thread(j, table, seed, group, rows, cols, median_scale, out);
}

}  // namespace dprec::cuda::sketch_kernels
