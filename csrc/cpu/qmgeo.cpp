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

constexpr double kTwo32 = 4294967296.0;

// What every element shares, computed once per call.
struct Params {
    double w_max;
    double step;   // 2 w_max / (R - 1)
    double top;    // R - 2, the largest lower level r
    double log_q;  // log(1 - p) by det_math's log1p (unused when plain)
    uint32_t levels;
    bool plain;                // p = 1: no geometric offset
    std::vector<double> mass;  // mass[c] = 1 - q^c for c = 1 .. R - 1 (the truncated geometric's normaliser)
};

// 1 - q^c from x = c log q <= 0: the series for |x| <= 1/4 (no cancellation), 1 - exp(x) down to
// x = -40, and 1 below (q^c < 5e-18 < 2^-54 would round away anyway). reference/qmgeo.py: _mass.
double one_minus_power(double x) {
    if (x >= -0.25) return -detmath::expm1_small(x);
    if (x > -40.0) return 1.0 - detmath::exp(x);
    return 1.0;
}

Params make_params(double w_max, uint32_t levels, double p) {
    Params P;
    P.w_max = w_max;
    P.step = 2.0 * w_max / static_cast<double>(levels - 1);
    P.top = static_cast<double>(levels - 2);
    P.levels = levels;
    P.plain = p == 1.0;
    P.log_q = P.plain ? 0.0 : detmath::log1p(-p);
    if (!P.plain) {
        P.mass.assign(levels, 0.0);
        for (uint32_t c = 1; c < levels; ++c) P.mass[c] = one_minus_power(static_cast<double>(c) * P.log_q);
    }
    return P;
}

// The level index of w with branch word u0 and offset word u1 (see qmgeo.h); sets bad for a
// non-finite w.
inline uint16_t quantize_one(double w, uint64_t u0, uint64_t u1, const Params& P, bool& bad) {
    if (!std::isfinite(w)) {
        bad = true;
        return 0;
    }
    const double c = std::min(std::max(w, -P.w_max), P.w_max);
    const double r = std::min(std::floor((c + P.w_max) / P.step), P.top);
    const double theta = std::min(std::max((c - (-P.w_max + r * P.step)) / P.step, 0.0), 1.0);
    bool up = true;
    if (theta < 1.0) {
        // floor(theta 2^64) = hi 2^32 + lo, every step exact (as in rounding.cpp).
        const double scaled = theta * kTwo32;
        const uint64_t hi = static_cast<uint64_t>(scaled);
        const uint64_t lo = static_cast<uint64_t>((scaled - static_cast<double>(hi)) * kTwo32);
        up = u0 < ((hi << 32) | lo);
    }
    const uint32_t ri = static_cast<uint32_t>(r);
    const uint32_t count = up ? P.levels - ri - 1 : ri + 1;
    uint32_t k = 0;
    if (!P.plain && count > 1) {
        // v in (0, 1): 52 random bits and a final 1, exact in float64.
        const double v = static_cast<double>(((u1 >> 12) << 1) | 1u) * 0x1p-53;
        const double ratio = detmath::log1p(-(v * P.mass[count])) / P.log_q;  // >= 0 (or -0)
        k = static_cast<uint32_t>(std::min(ratio, static_cast<double>(count - 1)));  // truncation = floor
    }
    return static_cast<uint16_t>(up ? ri + 1 + k : ri - k);
}

inline uint64_t word_pair(const uint32_t* w, uint64_t i) {
    return (static_cast<uint64_t>(w[2 * i]) << 32) | w[2 * i + 1];
}

}  // namespace

bool qmgeo_quantize(const double* w, uint64_t n, uint64_t seed, uint32_t group, double w_max, uint32_t levels,
                    double p, uint16_t* out) {
    const KernelTable& k = kernels();
    const Params P = make_params(w_max, levels, p);
    const StreamId branch{seed, 0, group, kDomainRounding};
    const StreamId offset{seed, 1, group, kDomainRounding};
    const uint64_t n_items = (n + kQmgeoChunk - 1) / kQmgeoChunk;
    std::atomic<bool> any_bad{false};
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t j0 = static_cast<uint64_t>(item) * kQmgeoChunk;
        const uint64_t len = std::min(kQmgeoChunk, n - j0);
        bool bad = false;
        alignas(64) uint32_t w0[2 * kTile];
        alignas(64) uint32_t w1[2 * kTile] = {};  // stays zero when p = 1 (no offset words needed)
        for (uint64_t t0 = 0; t0 < len; t0 += kTile) {
            const uint64_t m = std::min(kTile, len - t0);
            const uint64_t e0 = j0 + t0;  // even: element e0 starts block e0 / 2
            const uint32_t block0 = static_cast<uint32_t>(e0 >> 1);
            const size_t nblocks = static_cast<size_t>((m + 1) >> 1);
            k.philox_words(branch, block0, nblocks, w0);
            if (!P.plain) k.philox_words(offset, block0, nblocks, w1);
            for (uint64_t i = 0; i < m; ++i)
                out[e0 + i] = quantize_one(w[e0 + i], word_pair(w0, i), word_pair(w1, i), P, bad);
        }
        if (bad) any_bad.store(true, std::memory_order_relaxed);
    });
    return !any_bad.load();
}

}  // namespace dprec::cpu
