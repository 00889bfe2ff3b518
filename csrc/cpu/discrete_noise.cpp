#include "discrete_noise.h"

#include <algorithm>

#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements per work item: a Gaussian sample costs about a microsecond, so a chunk is long
// enough to amortise the pool's hand-off and short enough for Ctrl-C and load balance.
constexpr uint64_t kChunk = 4096;

using ChunkSampler = void (*)(uint64_t seed, double scale, uint64_t begin, uint64_t n, int64_t* out);

// The chunks on the pool, each by the selected ISA's sampler (kernel_table.h): element i
// depends only on (seed, i), so neither the thread count nor the ISA changes the result.
void fill(ChunkSampler sampler, uint64_t seed, double scale, int64_t* out, uint64_t n) {
    const uint64_t items = (n + kChunk - 1) / kChunk;
    parallel_for(static_cast<size_t>(items), [&](size_t item) {
        const uint64_t begin = static_cast<uint64_t>(item) * kChunk;
        sampler(seed, scale, begin, std::min(n, begin + kChunk) - begin, out + begin);
    });
}

}  // namespace

// Which table runs a sampler is a speed choice only (every table gives the same bits). Measured
// on an AVX-512 AMD EPYC (2026-11-24): the scalar Gaussian and Knuth loops ran 5-15% slower
// from the AVX-512 file than from the baseline one, while Skellam by PTRS (lam >= 10) gains
// from the selected table's vector fast path.
//
// The Gaussian: block 0 of every element's stream (the bits of most samples: 40-120 of 128) by
// the selected ISA's vector Philox, kBlock0Batch elements at a time, then the scalar sampler from
// the baseline table with those words at hand: about 10% faster than the baseline alone on that
// machine (2026-11-25, standalone timing with AVX-512), and the same bits.
namespace {

constexpr uint64_t kBlock0Batch = 256;

void discrete_gaussian_chunk(uint64_t seed, double sigma, uint64_t begin, uint64_t n, int64_t* out) {
    const KernelTable* isa = &kernels();
    const KernelTable* scalar = kernel_table_baseline();
    uint32_t words[4 * kBlock0Batch];
    for (uint64_t j = 0; j < n; j += kBlock0Batch) {
        const uint64_t m = std::min(kBlock0Batch, n - j);
        isa->noise_block0(seed, begin + j, m, words);
        scalar->discrete_gaussian(seed, sigma, begin + j, m, words, out + j);
    }
}

}  // namespace

void discrete_gaussian(uint64_t seed, double sigma, int64_t* out, uint64_t n) {
    fill(&discrete_gaussian_chunk, seed, sigma, out, n);
}

void skellam(uint64_t seed, double variance, int64_t* out, uint64_t n) {
    const bool ptrs = variance * 0.5 >= 10.0;  // PoissonParams' choice of PTRS over Knuth
    fill(ptrs ? kernels().skellam : kernel_table_baseline()->skellam, seed, variance, out, n);
}

}  // namespace dprec::cpu
