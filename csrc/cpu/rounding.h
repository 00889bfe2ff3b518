// Randomized rounding of float64 values to int64 with client-private Philox uniforms (docs/contract.md,
// domain 4; the SecAgg pipeline's conditional randomized rounding, docs/secagg.md). Arguments are
// assumed validated by the binding layer, except the values themselves (see below).
#pragma once

#include <cstdint>

namespace dprec::cpu {

// One randomized rounding of x[0 .. n) into out, n <= 2^33. Element j reads words 2j and 2j+1
// of the stream (seed, substream = attempt, group, domain 4), u = (w[2j] << 32) | w[2j+1].
// With a = |x[j]|, m = floor(a) and f = a - m (exact in float64: Sterbenz), the magnitude is
// m + (u < floor(f * 2^64)) and the sign is x[j]'s, so P(|out| = m + 1) = floor(f 2^64) / 2^64,
// which is f exactly whenever f is a multiple of 2^-64 (always for |x| >= 2^-11) and below f by
// less than 2^-64 otherwise. Rounding the magnitude rather than x keeps f exact for negative x
// (x - floor(x) is not exact for small negative x) and makes the rounding symmetric.
//
// Returns sum_j double(out[j])^2 accumulated in a fixed order, whatever the thread count: the
// elements are cut into chunks of kRoundChunk; within a chunk element i adds its square to lane
// i % 4 in increasing i; a chunk's sum is (lane0 + lane1) + (lane2 + lane3); the chunks' sums
// are added in chunk order starting from 0. The NumPy reference repeats this order exactly.
//
// *ok is set to false (and the corresponding out[j] to 0) when some x[j] is not finite or has
// |x[j]| >= 2^62; the Python layer rejects those first, this only keeps a bad call defined.
double randomized_round(const double* x, uint64_t n, uint64_t seed, uint32_t attempt, uint32_t group, int64_t* out,
                        bool* ok);

// Elements per chunk of randomized_round (part of its summation order).
constexpr uint64_t kRoundChunk = uint64_t(1) << 14;

}  // namespace dprec::cpu
