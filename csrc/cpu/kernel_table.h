// The per-ISA kernel entry points. Each ISA translation unit (kernels_baseline.cpp,
// kernels_avx2.cpp, kernels_avx512.cpp on x86-64, kernels_neon.cpp on AArch64) fills one
// table; dispatch.cpp picks one at run time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common/philox.h"

// CMake defines DPREC_HAVE_X86_KERNELS (x86-64 targets) or DPREC_HAVE_NEON_KERNELS (AArch64
// targets). Each is dropped here when the compiler's own target disagrees (a misconfigured
// build; one slice of a macOS universal binary, where every file is compiled for both
// architectures): the per-ISA files then compile to nothing and dispatch.cpp offers the
// baseline alone, rather than failing to compile or to link. MSVC's arm_neon.h gives all
// 128-bit vector types one type (__n128), which the overloads of the generic kernels cannot
// tell apart, so MSVC (not clang-cl) on ARM64 gets the baseline too.
#if defined(DPREC_HAVE_X86_KERNELS) && !(defined(__x86_64__) || defined(_M_X64))
#undef DPREC_HAVE_X86_KERNELS
#endif
#if defined(DPREC_HAVE_NEON_KERNELS) && \
    (!(defined(__aarch64__) || defined(_M_ARM64)) || (defined(_MSC_VER) && !defined(__clang__)))
#undef DPREC_HAVE_NEON_KERNELS
#endif

namespace dprec::cpu {

// The most Philox blocks per vector (KernelTable::lanes) of any ISA: AVX-512's 16. Callers of
// llr_tile size their per-lane accumulators with it.
constexpr int kMaxLanes = 16;

// What every element of a QMGeo quantization shares (cpu/qmgeo.h has the rule; qmgeo.cpp
// computes these once per call).
struct QmgeoParams {
    double w_max;
    double step;      // 2 w_max / (R - 1)
    double top;       // R - 2, the largest lower level r
    double levels_1;  // R - 1: the up branch's count is R - 1 - r
    double log_q;     // log(1 - p) (unused when plain)
    bool plain;       // p = 1: no geometric offset (mass and the offset words are not read)
    const double* mass;  // mass[c] = 1 - q^c for c = 1 .. R - 1
};

struct KernelTable {
    const char* name;
    int lanes;  // Philox blocks per vector; llr_tile wants phi in this lane order
    // Words of blocks [block0, block0 + nblocks) of stream `id`, in stream order.
    void (*philox_words)(const StreamId& id, uint32_t block0, size_t nblocks, uint32_t* out);
    // scale * normal for elements 4*block0 .. 4*(block0 + nblocks) - 1 of stream `id`.
    void (*normals)(const StreamId& id, uint32_t block0, size_t nblocks, float scale, float* out);
    // The normal transform alone, for testing it on chosen words: for i < n,
    // (cos_out[i], sin_out[i]) = Box-Muller of (radius_words[i], angle_words[i]).
    void (*transform)(const uint32_t* radius_words, const uint32_t* angle_words, size_t n, float* cos_out,
                      float* sin_out);
    // out[i] = out[i] + coef * z[i], in out's precision, with no fused multiply-add (so
    // that it matches the NumPy reference bit for bit). Plain loops, vectorised per ISA.
    void (*add_scaled_f32)(float* out, const float* z, float coef, size_t n);
    void (*add_scaled_f64)(double* out, const float* z, double coef, size_t n);
    // For candidates k_first .. k_first+nk-1 of (seed, group), over blocks
    // [block0, block0 + nblocks), nblocks a multiple of `lanes`:
    //   acc[k * lanes + l] += sum over the tile of z_k[i] * phi[i] (double),
    // with phi_t holding the tile in lane order: phi_t[c*4L + j*L + l] = phi[c*4L + 4l + j].
    void (*llr_tile)(uint64_t seed, uint32_t group, uint32_t k_first, uint32_t nk, uint32_t block0, size_t nblocks,
                     const double* phi_t, double* acc);
    // FWHT stages h = h_begin, 2 h_begin, ... < h_end over x[0, len) (powers of two, len a
    // multiple of h_end), each butterfly (a, b) -> (a + b, a - b) in increasing h: the same
    // bits on every ISA (hadamard_kernels_generic.h). And x[i] *= s for i < len.
    void (*fwht_stages_f32)(float* x, uint64_t len, uint64_t h_begin, uint64_t h_end);
    void (*fwht_stages_f64)(double* x, uint64_t len, uint64_t h_begin, uint64_t h_end);
    void (*fwht_scale_f32)(float* x, uint64_t len, float s);
    void (*fwht_scale_f64)(double* x, uint64_t len, double s);
    // The stages that couple m rows (row r at x + r * stride), on the first ncols elements
    // of each row: element stages stride, 2 stride, ..., m/2 stride. Then, if `scaled`,
    // x *= s on those elements (the same bits as fwht_scale after them).
    void (*fwht_rows_f32)(float* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, float s);
    void (*fwht_rows_f64)(double* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, double s);
    // Count-sketch, given the bucket words hw and sign words sw of n elements (sketch.cpp):
    // encode's bucket idx[i] = (uint64(hw[i]) * cols) >> 32 and addend val[i] = x[i] * s,
    // negated when sw[i] >= 2^31; decode's acc[i] += row[idx[i]] (as double), negated likewise.
    void (*sketch_addends_f32)(const uint32_t* hw, const uint32_t* sw, const float* x, float s, uint64_t cols,
                               size_t n, uint32_t* idx, float* val);
    void (*sketch_addends_f64)(const uint32_t* hw, const uint32_t* sw, const double* x, double s, uint64_t cols,
                               size_t n, uint32_t* idx, double* val);
    void (*sketch_gather_f32)(const float* row, const uint32_t* hw, const uint32_t* sw, uint64_t cols, size_t n,
                              double* acc);
    void (*sketch_gather_f64)(const double* row, const uint32_t* hw, const uint32_t* sw, uint64_t cols, size_t n,
                              double* acc);
    // The encode's bucket and addend (as sketch_addends) of row r of (seed, group) with its
    // words computed in place, or null where the ISA has no such kernel: x points at element
    // 4 * block0, nblocks is a multiple of `lanes`, and idx and val are written in lane order
    // (the element at x[c*4L + 4l + j] goes to [c*4L + j*L + l]).
    void (*sketch_addends_philox_f32)(const float* x, float s, uint64_t cols, uint64_t seed, uint32_t r,
                                      uint32_t group, uint32_t block0, size_t nblocks, uint32_t* idx, float* val);
    void (*sketch_addends_philox_f64)(const double* x, double s, uint64_t cols, uint64_t seed, uint32_t r,
                                      uint32_t group, uint32_t block0, size_t nblocks, uint32_t* idx, double* val);
    // The mean decode of row r of (seed, group) with its words computed in place, or null
    // where the ISA has no such kernel: for the elements of blocks [block0, block0 + nblocks)
    // (nblocks a multiple of `lanes`), in lane order (L = lanes, element 4 * block0 + e with
    // e = c*4L + 4l + j kept at acc[c*4L + j*L + l]), acc += row[bucket], negated by the sign,
    // as double: the same bits as sketch_gather on the same words. Only for cols <= 2^31
    // (buckets are gathered with 32-bit indices); wider rows go through the words.
    void (*sketch_gather_philox_f32)(const float* row, uint64_t cols, uint64_t seed, uint32_t r, uint32_t group,
                                     uint32_t block0, size_t nblocks, double* acc);
    void (*sketch_gather_philox_f64)(const double* row, uint64_t cols, uint64_t seed, uint32_t r, uint32_t group,
                                     uint32_t block0, size_t nblocks, double* acc);
    // The whole encode of those blocks into row r, or null where the ISA has no such kernel:
    // sketch_addends_philox's buckets and addends, added to row[bucket] in increasing
    // element order (the same bits as the scatter of sketch_addends' output).
    void (*sketch_scatter_philox_f32)(const float* x, float s, uint64_t cols, uint64_t seed, uint32_t r,
                                      uint32_t group, uint32_t block0, size_t nblocks, float* row);
    void (*sketch_scatter_philox_f64)(const double* x, double s, uint64_t cols, uint64_t seed, uint32_t r,
                                      uint32_t group, uint32_t block0, size_t nblocks, double* row);
    // Sorts each column of the rows x n row-major `values` (rows small), ascending: an
    // odd-even transposition network of compare-exchanges lo = q < p ? q : p,
    // hi = q < p ? p : q, which keeps both signed zeros.
    void (*sort_columns_f64)(double* values, uint32_t rows, uint64_t n);
    // Whether none of x[0, n) is NaN or infinite (finite.cpp).
    bool (*all_finite_f32)(const float* x, uint64_t n);
    bool (*all_finite_f64)(const double* x, uint64_t n);
    // Discrete noise (discrete_noise.cpp, ../common/discrete_noise.h): out[j] <- the sample of
    // element begin + j for j < n, N_Z(0, sigma^2) (0 < sigma <= 2^24) and Poisson(variance/2) -
    // Poisson(variance/2) (0 < variance <= 2^48). The same bits on every ISA and for any split
    // of [0, total) into calls.
    // block0, when not null, holds block 0 of the elements' streams as noise_block0 writes it
    // (a speed choice only: the samplers compute it themselves otherwise).
    void (*discrete_gaussian)(uint64_t seed, double sigma, uint64_t begin, uint64_t n, const uint32_t* block0,
                              int64_t* out);
    void (*skellam)(uint64_t seed, double variance, uint64_t begin, uint64_t n, int64_t* out);
    // Block 0 of the noise streams (domain 5) of elements first .. first + n - 1: out[4j .. 4j + 3]
    // are element first + j's four words.
    void (*noise_block0)(uint64_t seed, uint64_t first, uint64_t n, uint32_t* out);
    // QMGeo (cpu/qmgeo.h): out[i] <- the level index of w[i] for i < n, with branch word
    // (w0[2i] << 32) | w0[2i + 1] and offset word (w1[2i] << 32) | w1[2i + 1] (w1 is not read
    // when p.plain). Returns whether every w[i] is finite; out[i] = 0 for those that are not.
    // float32 input is widened exactly, so it gives the float64 path's bits.
    bool (*qmgeo_tile_f32)(const float* w, const uint32_t* w0, const uint32_t* w1, size_t n, const QmgeoParams& p,
                           uint16_t* out);
    bool (*qmgeo_tile_f64)(const double* w, const uint32_t* w0, const uint32_t* w1, size_t n, const QmgeoParams& p,
                           uint16_t* out);
};

const KernelTable* kernel_table_baseline();
#if defined(DPREC_HAVE_X86_KERNELS)
const KernelTable* kernel_table_avx2();
const KernelTable* kernel_table_avx512();
#endif
#if defined(DPREC_HAVE_NEON_KERNELS)
const KernelTable* kernel_table_neon();
#endif

}  // namespace dprec::cpu
