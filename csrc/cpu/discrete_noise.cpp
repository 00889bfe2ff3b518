#include "discrete_noise.h"

#include <algorithm>

#include "../common/discrete_noise.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements per work item: a Gaussian sample costs about a microsecond, so a chunk is long
// enough to amortise the pool's hand-off and short enough for Ctrl-C and load balance.
constexpr uint64_t kChunk = 4096;

template <class Sample>
void fill(int64_t* out, uint64_t n, const Sample& sample) {
    const uint64_t items = (n + kChunk - 1) / kChunk;
    parallel_for(static_cast<size_t>(items), [&](size_t item) {
        const uint64_t begin = static_cast<uint64_t>(item) * kChunk;
        const uint64_t end = std::min(n, begin + kChunk);
        for (uint64_t i = begin; i < end; ++i) out[i] = sample(i);
    });
}

}  // namespace

void discrete_gaussian(uint64_t seed, double sigma, int64_t* out, uint64_t n) {
    const noise::GaussianParams<U128> p = noise::gaussian_params<U128>(sigma);
    fill(out, n, [&](uint64_t i) {
        noise::BitReader r(seed, i);
        return noise::discrete_gaussian(r, p);
    });
}

void skellam(uint64_t seed, double variance, int64_t* out, uint64_t n) {
    const noise::PoissonParams p(variance * 0.5);
    fill(out, n, [&](uint64_t i) {
        noise::BitReader r(seed, i);
        return noise::skellam(r, p);
    });
}

}  // namespace dprec::cpu
