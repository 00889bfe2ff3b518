// Launchers: grid shapes from the plans in kernel_bodies.h, stream-ordered scratch
// memory, and error checks. Nothing here synchronises unless launch.h says so.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "kernels.cuh"
#include "launch.h"
#include "launch_util.h"

namespace dprec::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kLlrThreads = 128;  // K >= 128 keeps a block on one segment

template <class T>
Scratch upload(const T* host, uint64_t n, cudaStream_t stream) {
    Scratch s(n * sizeof(T), stream);
    // From pageable memory the call returns once the data is staged, so `host` may go.
    check(cudaMemcpyAsync(s.as<T>(), host, n * sizeof(T), cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (upload)");
    return s;
}

// Column sums of partial (rows x cols) in fixed order, level by level, into out * factor.
void reduce_columns(const double* partial, uint64_t rows, uint64_t cols, double factor, double* out,
                    cudaStream_t stream) {
    if (rows == 0 || cols == 0) throw std::invalid_argument("reduce_columns: empty partial sums");
    std::vector<Scratch> levels;
    const double* in = partial;
    for (;;) {
        const uint64_t out_rows = gpu::ceil_div(rows, gpu::kReduceRows);
        double* dst = out;
        if (out_rows > 1) {
            levels.emplace_back(out_rows * cols * sizeof(double), stream);
            dst = levels.back().as<double>();
        }
        const uint64_t n = out_rows * cols;
        kernels::reduce_rows<<<grid_for(n, kThreads), kThreads, 0, stream>>>(n, in, rows, cols, factor, dst);
        check_launch("reduce_rows");
        if (out_rows == 1) break;
        in = dst;
        rows = out_rows;
    }
}

}  // namespace

void stream_normals(int device, Stream stream, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                    uint64_t offset, uint64_t count, float scale, float* out) {
    const uint64_t n = gpu::stream_threads(offset, count);
    if (n == 0) return;
    DeviceGuard guard(device);
    kernels::stream_normals<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(n, seed, substream, group,
                                                                                      domain, offset, count, scale, out);
    check_launch("stream_normals");
}

void stream_words(int device, Stream stream, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                  uint64_t offset, uint64_t count, uint32_t* out) {
    const uint64_t n = gpu::stream_threads(offset, count);
    if (n == 0) return;
    DeviceGuard guard(device);
    kernels::stream_words<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(n, seed, substream, group, domain,
                                                                                    offset, count, out);
    check_launch("stream_words");
}

template <class T>
void rec_dot_products(int device, Stream stream, const T* phi, uint64_t d, uint64_t seed, uint32_t group,
                      uint32_t n_candidates, double factor, double* out) {
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    const gpu::LlrPlan plan = gpu::make_llr_plan(d, n_candidates);
    Scratch partial(plan.n_threads() * sizeof(double), s);
    kernels::llr<T><<<grid_for(plan.n_threads(), kLlrThreads), kLlrThreads, 0, s>>>(plan, phi, seed, group,
                                                                                   partial.as<double>());
    check_launch("llr");
    reduce_columns(partial.as<double>(), plan.n_segments, n_candidates, factor, out, s);
}

void generate_only(int device, Stream stream, uint64_t d, uint64_t seed, uint32_t group, uint32_t n_candidates) {
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    const gpu::LlrPlan plan = gpu::make_llr_plan(d, n_candidates);
    Scratch scratch(plan.n_threads() * sizeof(float), s);
    kernels::generate_only<<<grid_for(plan.n_threads(), kLlrThreads), kLlrThreads, 0, s>>>(plan, seed, group,
                                                                                          scratch.as<float>());
    check_launch("generate_only");
}

void gumbel_argmax(int device, Stream stream, const double* logits, const double* gumbel_host,
                   const int64_t* offsets_host, uint64_t n_groups, int64_t* out_host) {
    if (n_groups == 0) return;
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    const uint64_t n = static_cast<uint64_t>(offsets_host[n_groups]);
    const gpu::ArgmaxPlan plan = gpu::make_argmax_plan(offsets_host, n_groups);
    Scratch gumbel = upload(gumbel_host, n, s);
    Scratch plan_offsets = upload(plan.offsets.data(), plan.offsets.size(), s);
    const int64_t* level_offsets = plan_offsets.as<int64_t>();
    // Each level's (value, flat index) winners; the last level's values are not needed.
    std::vector<Scratch> values;
    std::vector<Scratch> indices;
    for (uint64_t level = 0; level < plan.n_levels(); ++level) {
        const uint64_t threads = plan.n_threads(level);
        const bool last = level + 1 == plan.n_levels();
        const int64_t* items = level_offsets + level * (n_groups + 1);
        const int64_t* thread_offsets = items + (n_groups + 1);
        if (!last) values.emplace_back(threads * sizeof(double), s);
        indices.emplace_back(threads * sizeof(int64_t), s);
        double* best_values = last ? nullptr : values.back().as<double>();
        int64_t* best_indices = indices.back().as<int64_t>();
        if (level == 0) {
            kernels::gumbel_argmax_first_level<<<grid_for(threads, kThreads), kThreads, 0, s>>>(
                threads, logits, gumbel.as<double>(), items, thread_offsets, n_groups, best_values, best_indices);
            check_launch("gumbel_argmax_first_level");
        } else {
            kernels::gumbel_argmax_next_level<<<grid_for(threads, kThreads), kThreads, 0, s>>>(
                threads, values[level - 1].as<double>(), indices[level - 1].as<int64_t>(), items, thread_offsets,
                n_groups, best_values, best_indices);
            check_launch("gumbel_argmax_next_level");
        }
    }
    check(cudaMemcpyAsync(out_host, indices.back().as<int64_t>(), n_groups * sizeof(int64_t), cudaMemcpyDeviceToHost,
                          s),
          "cudaMemcpyAsync (indices)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    for (uint64_t g = 0; g < n_groups; ++g) out_host[g] -= offsets_host[g];  // flat index -> index in the group
}

namespace {
struct ClientParams {
    Scratch seeds, indices, coefs;
    ClientParams(const uint64_t* s, const uint32_t* k, const double* c, uint64_t n, cudaStream_t st)
        : seeds(upload(s, n, st)), indices(upload(k, n, st)), coefs(upload(c, n, st)) {}
};
}  // namespace

namespace {
// The three aggregation entry points differ only in the kernel: one thread per Philox
// block of the group, client parameters uploaded in stream order.
template <class Launch>
void launch_per_block(int device, Stream stream, uint64_t d, const uint64_t* seeds_host,
                      const uint32_t* indices_host, const double* coefs_host, uint64_t n_clients, const char* what,
                      const Launch& launch) {
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    ClientParams p(seeds_host, indices_host, coefs_host, n_clients, s);
    const uint64_t n = gpu::ceil_div(d, 4);
    launch(grid_for(n, kThreads), s, n, p.seeds.as<uint64_t>(), p.indices.as<uint32_t>(), p.coefs.as<double>());
    check_launch(what);
}
}  // namespace

void accumulate_f32(int device, Stream stream, float* out, uint64_t d, uint32_t group, const uint64_t* seeds_host,
                    const uint32_t* indices_host, const double* coefs_host, uint64_t n_clients) {
    launch_per_block(device, stream, d, seeds_host, indices_host, coefs_host, n_clients, "accumulate_f32",
                     [&](unsigned grid, cudaStream_t s, uint64_t n, const uint64_t* sd, const uint32_t* ix,
                         const double* cf) {
                         kernels::accumulate_f32<<<grid, kThreads, 0, s>>>(n, out, d, group, sd, ix, cf, n_clients);
                     });
}

void accumulate_f64(int device, Stream stream, double* out, uint64_t d, uint32_t group, const uint64_t* seeds_host,
                    const uint32_t* indices_host, const double* coefs_host, uint64_t n_clients) {
    launch_per_block(device, stream, d, seeds_host, indices_host, coefs_host, n_clients, "accumulate_f64",
                     [&](unsigned grid, cudaStream_t s, uint64_t n, const uint64_t* sd, const uint32_t* ix,
                         const double* cf) {
                         kernels::accumulate_f64<<<grid, kThreads, 0, s>>>(n, out, nullptr, d, group, sd, ix, cf,
                                                                             n_clients);
                     });
}

void aggregate_f32(int device, Stream stream, float* out_f32, uint64_t d, uint32_t group, const uint64_t* seeds_host,
                   const uint32_t* indices_host, const double* coefs_host, uint64_t n_clients) {
    launch_per_block(device, stream, d, seeds_host, indices_host, coefs_host, n_clients, "aggregate_f32",
                     [&](unsigned grid, cudaStream_t s, uint64_t n, const uint64_t* sd, const uint32_t* ix,
                         const double* cf) {
                         kernels::accumulate_f64<<<grid, kThreads, 0, s>>>(n, nullptr, out_f32, d, group, sd, ix,
                                                                             cf, n_clients);
                     });
}

namespace {
// The (sum, max) pairs of stats (rows of 2) reduced level by level into out[0], out[1].
void reduce_norm_stats(const double* stats, uint64_t rows, double* out, cudaStream_t stream) {
    if (rows == 0) throw std::invalid_argument("reduce_norm_stats: no partial statistics");
    std::vector<Scratch> levels;
    const double* in = stats;
    for (;;) {
        const uint64_t out_rows = gpu::ceil_div(rows, gpu::kReduceRows);
        double* dst = out;
        if (out_rows > 1) {
            levels.emplace_back(2 * out_rows * sizeof(double), stream);
            dst = levels.back().as<double>();
        }
        kernels::reduce_norm_rows<<<grid_for(out_rows, kThreads), kThreads, 0, stream>>>(out_rows, in, rows, dst);
        check_launch("reduce_norm_rows");
        if (out_rows == 1) break;
        in = dst;
        rows = out_rows;
    }
}

template <class T>
void norm_stats_one(const T* x, uint64_t n, double divisor, double* result, cudaStream_t s) {
    const uint64_t threads = gpu::norm_threads(n);
    Scratch stats(2 * threads * sizeof(double), s);
    kernels::norm_stats<T><<<grid_for(threads, kThreads), kThreads, 0, s>>>(threads, x, n, divisor,
                                                                           stats.as<double>());
    check_launch("norm_stats");
    reduce_norm_stats(stats.as<double>(), threads, result, s);
}
}  // namespace

void norm_stats(int device, Stream stream, const NormInput* inputs, size_t count, double divisor, double* out_host) {
    if (count == 0) return;
    DeviceGuard guard(device);
    const cudaStream_t s = as_stream(stream);
    Scratch result(2 * count * sizeof(double), s);
    for (size_t i = 0; i < count; ++i) {
        double* r = result.as<double>() + 2 * i;
        if (inputs[i].is_double)
            norm_stats_one(static_cast<const double*>(inputs[i].x), inputs[i].n, divisor, r, s);
        else
            norm_stats_one(static_cast<const float*>(inputs[i].x), inputs[i].n, divisor, r, s);
    }
    check(cudaMemcpyAsync(out_host, result.as<double>(), 2 * count * sizeof(double), cudaMemcpyDeviceToHost, s),
          "cudaMemcpyAsync (norms)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void to_float32(int device, Stream stream, const void* src, SourceType type, uint64_t n, float* dst) {
    if (n == 0) return;
    DeviceGuard guard(device);
    const int code = type == SourceType::kFloat16 ? 0 : type == SourceType::kBFloat16 ? 1 : 2;
    kernels::to_float32<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(n, src, code, dst);
    check_launch("to_float32");
}

void scale_f64(int device, Stream stream, const double* src, uint64_t n, double factor, double* dst) {
    if (n == 0) return;
    DeviceGuard guard(device);
    kernels::scale_f64<<<grid_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(n, src, factor, dst);
    check_launch("scale_f64");
}

template void rec_dot_products<float>(int, Stream, const float*, uint64_t, uint64_t, uint32_t, uint32_t, double,
                                      double*);
template void rec_dot_products<double>(int, Stream, const double*, uint64_t, uint64_t, uint32_t, uint32_t, double,
                                       double*);

void preload_rec_kernels() {
    preload_kernel(kernels::stream_normals, "stream_normals");
    preload_kernel(kernels::stream_words, "stream_words");
    preload_kernel(kernels::llr<float>, "llr<float>");
    preload_kernel(kernels::llr<double>, "llr<double>");
    preload_kernel(kernels::generate_only, "generate_only");
    preload_kernel(kernels::reduce_rows, "reduce_rows");
    preload_kernel(kernels::accumulate_f32, "accumulate_f32");
    preload_kernel(kernels::accumulate_f64, "accumulate_f64");
    preload_kernel(kernels::norm_stats<float>, "norm_stats<float>");
    preload_kernel(kernels::norm_stats<double>, "norm_stats<double>");
    preload_kernel(kernels::scale_f64, "scale_f64");
    preload_kernel(kernels::to_float32, "to_float32");
    preload_kernel(kernels::reduce_norm_rows, "reduce_norm_rows");
    preload_kernel(kernels::gumbel_argmax_first_level, "gumbel_argmax_first_level");
    preload_kernel(kernels::gumbel_argmax_next_level, "gumbel_argmax_next_level");
}

}  // namespace dprec::cuda
