// The QMGeo quantizer (Wang and Gursoy; docs/qmgeo.md, the corrected pmf) with client-private Philox
// uniforms (docs/contract.md, domain 4). Arguments are assumed validated by the binding layer, except
// the values themselves (see below). dprec/reference/qmgeo.py is the executable definition;
// this kernel repeats its float64 operations in the same order, so the two are bit-identical.
// The per-element loop is the kernel table's qmgeo_tile (kernels_generic.h, vectorised per ISA,
// the same bits on every ISA); qmgeo.cpp draws the Philox words and splits the work.
#pragma once

#include <cstdint>

namespace dprec::cpu {

// Most elements of one call: two Philox words per element and sub-stream, 2^34 words per stream.
constexpr uint64_t kQmgeoMaxElements = uint64_t(1) << 33;
// Most levels R (uint16 indices; the accounting's MAX_LEVELS).
constexpr uint32_t kQmgeoMaxLevels = uint32_t(1) << 16;
// Smallest p accepted: keeps every float64 intermediate of the offset sampler normal.
constexpr double kQmgeoMinP = 0x1p-512;

// Quantizes w[0 .. n) to level indices out[j] in [0, levels), n <= 2^33, 2 <= levels <= 2^16,
// w_max > 0 finite, kQmgeoMinP <= p <= 1 (p = 1: plain stochastic rounding).
//
// Per element j (the rule, documented in full in dprec/reference/qmgeo.py):
//   c = clip(w[j], -w_max, w_max); step = 2 w_max / (levels - 1);
//   r = min(floor((c + w_max) / step), levels - 2); theta = clip((c - (-w_max + r step)) / step, 0, 1);
//   branch: up iff theta >= 1 or u0 < floor(theta 2^64), u0 = (s0[2j] << 32) | s0[2j+1];
//   offset k in [0, count), count = r + 1 (down) or levels - r - 1 (up), P(k) ~ q^k (q = 1 - p):
//   k = trunc(min(log1p(-v t_count) / log(q), count - 1)) with v = (2 (u1 >> 12) + 1) 2^-53,
//   u1 = (s1[2j] << 32) | s1[2j+1], t_count = 1 - q^count; k = 0 when p = 1 or count = 1;
//   out[j] = r - k (down) or r + 1 + k (up).
// s0 and s1 are the Philox streams (seed, substream 0 / 1, group, domain 4). Element j's result
// depends only on its own words, so the output does not depend on the thread count.
//
// Returns false (with out[j] = 0 for the offending elements) when some w[j] is NaN or infinite;
// the Python layer rejects those first, this only keeps a bad call defined.
bool qmgeo_quantize(const double* w, uint64_t n, uint64_t seed, uint32_t group, double w_max, uint32_t levels,
                    double p, uint16_t* out);
// The same for float32 w: each value is widened to float64 (exactly), so the indices are those of
// the float64 call on the widened values, without a float64 copy of w.
bool qmgeo_quantize(const float* w, uint64_t n, uint64_t seed, uint32_t group, double w_max, uint32_t levels,
                    double p, uint16_t* out);

// Elements per work item of qmgeo_quantize (a multiple of the Philox tile).
constexpr uint64_t kQmgeoChunk = uint64_t(1) << 14;

}  // namespace dprec::cpu
