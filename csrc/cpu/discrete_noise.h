// Discrete noise for secure aggregation on the CPU (docs/contract.md, docs/secagg.md): exact discrete Gaussian and
// Skellam samples into an int64 buffer. The per-element samplers are in
// ../common/discrete_noise.h; here they run over fixed chunks of elements on the thread pool.
// Element i depends only on (seed, i), so the result is the same for any thread count.
// Arguments are assumed validated by the binding layer.
#pragma once

#include <cstdint>

namespace dprec::cpu {

// Largest sigma and Skellam variance the samplers accept (the 128-bit and 2^53 bounds of
// ../common/discrete_noise.h).
constexpr double kMaxDiscreteGaussianSigma = 16777216.0;   // 2^24
constexpr double kMaxSkellamVariance = 281474976710656.0;  // 2^48

// out[i] <- N_Z(0, sigma^2) for i < n, 0 < sigma <= 2^24.
void discrete_gaussian(uint64_t seed, double sigma, int64_t* out, uint64_t n);

// out[i] <- Poisson(variance / 2) - Poisson(variance / 2) for i < n, 0 < variance <= 2^48.
void skellam(uint64_t seed, double variance, int64_t* out, uint64_t n);

}  // namespace dprec::cpu
