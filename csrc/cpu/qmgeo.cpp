#include "qmgeo.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "../common/det_math.h"
#include "../common/philox.h"
#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

constexpr uint64_t kTile = 1024;  // elements whose words (2 per sub-stream) are generated at once; even
static_assert(kQmgeoChunk % kTile == 0, "a chunk is whole tiles");

// The table's tile entry for the input type.
bool k_tile(const KernelTable& k, const float* w, const uint32_t* w0, const uint32_t* w1, size_t n,
            const QmgeoParams& p, uint16_t* out) {
    return k.qmgeo_tile_f32(w, w0, w1, n, p, out);
}

bool k_tile(const KernelTable& k, const double* w, const uint32_t* w0, const uint32_t* w1, size_t n,
            const QmgeoParams& p, uint16_t* out) {
    return k.qmgeo_tile_f64(w, w0, w1, n, p, out);
}

// 1 - q^c from x = c log q <= 0: the series for |x| <= 1/4 (no cancellation), 1 - exp(x) down to
// x = -40, and 1 below (q^c < 5e-18 < 2^-54 would round away anyway). reference/qmgeo.py: _mass.
double one_minus_power(double x) {
    if (x >= -0.25) return -detmath::expm1_small(x);
    if (x > -40.0) return 1.0 - detmath::exp(x);
    return 1.0;
}

// The per-element loop is the kernel table's qmgeo_tile (kernels_generic.h), compiled for each
// ISA; this file draws the words and splits the work.
template <class T>
bool quantize_all(const T* w, uint64_t n, uint64_t seed, uint32_t group, double w_max, uint32_t levels, double p,
                  uint16_t* out) {
    const KernelTable& k = kernels();
    const bool plain = p == 1.0;
    const double log_q = plain ? 0.0 : detmath::log1p(-p);
    std::vector<double> mass;  // mass[c] = 1 - q^c for c = 1 .. R - 1 (the truncated geometric's normaliser)
    if (!plain) {
        mass.assign(levels, 0.0);
        for (uint32_t c = 1; c < levels; ++c) mass[c] = one_minus_power(static_cast<double>(c) * log_q);
    }
    const QmgeoParams P{w_max,
                        2.0 * w_max / static_cast<double>(levels - 1),
                        static_cast<double>(levels - 2),
                        static_cast<double>(levels - 1),
                        log_q,
                        plain,
                        plain ? nullptr : mass.data()};
    const StreamId branch{seed, 0, group, kDomainRounding};
    const StreamId offset{seed, 1, group, kDomainRounding};
    const uint64_t n_items = (n + kQmgeoChunk - 1) / kQmgeoChunk;
    std::atomic<bool> any_bad{false};
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t j0 = static_cast<uint64_t>(item) * kQmgeoChunk;
        const uint64_t len = std::min(kQmgeoChunk, n - j0);
        bool ok = true;
        alignas(64) uint32_t w0[2 * kTile];
        alignas(64) uint32_t w1[2 * kTile];  // not read when plain
        for (uint64_t t0 = 0; t0 < len; t0 += kTile) {
            const uint64_t m = std::min(kTile, len - t0);
            const uint64_t e0 = j0 + t0;  // even: element e0 starts block e0 / 2
            const uint32_t block0 = static_cast<uint32_t>(e0 >> 1);
            const size_t nblocks = static_cast<size_t>((m + 1) >> 1);
            k.philox_words(branch, block0, nblocks, w0);
            if (!plain) k.philox_words(offset, block0, nblocks, w1);
            ok &= k_tile(k, w + e0, w0, w1, static_cast<size_t>(m), P, out + e0);
        }
        if (!ok) any_bad.store(true, std::memory_order_relaxed);
    });
    return !any_bad.load();
}

}  // namespace

bool qmgeo_quantize(const double* w, uint64_t n, uint64_t seed, uint32_t group, double w_max, uint32_t levels,
                    double p, uint16_t* out) {
    return quantize_all(w, n, seed, group, w_max, levels, p, out);
}

bool qmgeo_quantize(const float* w, uint64_t n, uint64_t seed, uint32_t group, double w_max, uint32_t levels,
                    double p, uint16_t* out) {
    return quantize_all(w, n, seed, group, w_max, levels, p, out);
}

}  // namespace dprec::cpu
