#include "rounding.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "../common/philox.h"
#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

constexpr uint64_t kTile = 1024;  // elements whose words (2 each) are generated at once; a multiple of 4
static_assert(kRoundChunk % kTile == 0, "a chunk is whole tiles, so lanes follow the element index");

constexpr double kTwo62 = 4611686018427387904.0;  // 2^62: the largest magnitude accepted
constexpr double kTwo32 = 4294967296.0;

// The rounded value of x with uniform u (see rounding.h); sets bad for an unusable x. Written
// without data-dependent branches: for random data a branch on the sign, or the one compilers
// emit for a double -> uint64 conversion at 2^63 (i.e. f >= 1/2), mispredicts half the time.
inline int64_t round_one(double x, uint64_t u, bool& bad) {
    const double a = std::fabs(x);
    if (!(a < kTwo62)) {  // NaN compares false too; never taken for validated input
        bad = true;
        return 0;
    }
    // Truncation to int64 is floor for 0 <= a < 2^62, exact, and one instruction (std::floor
    // without SSE4.1 is a branchy sequence).
    const int64_t whole = static_cast<int64_t>(a);
    const double f = a - static_cast<double>(whole);  // exact, in [0, 1)
    // floor(f * 2^64) = hi * 2^32 + lo with hi, lo < 2^32: every product and difference here is
    // exact, and the conversions go through int64 (one instruction, no branch).
    const double scaled = f * kTwo32;
    const int64_t hi = static_cast<int64_t>(scaled);
    const int64_t lo = static_cast<int64_t>((scaled - static_cast<double>(hi)) * kTwo32);
    const uint64_t threshold = (static_cast<uint64_t>(hi) << 32) | static_cast<uint64_t>(lo);
    const int64_t magnitude = whole + static_cast<int64_t>(u < threshold);
    const int64_t negative = -static_cast<int64_t>(x < 0.0);  // 0 or -1 (all bits set)
    return (magnitude ^ negative) - negative;                  // -magnitude when x < 0
}

inline uint64_t word_pair(const uint32_t* w, uint64_t i) {
    return (static_cast<uint64_t>(w[2 * i]) << 32) | w[2 * i + 1];
}

}  // namespace

double randomized_round(const double* x, uint64_t n, uint64_t seed, uint32_t attempt, uint32_t group, int64_t* out,
                        bool* ok) {
    const KernelTable& k = kernels();
    const StreamId id{seed, attempt, group, kDomainRounding};
    const uint64_t n_items = (n + kRoundChunk - 1) / kRoundChunk;
    std::vector<double> partial(static_cast<size_t>(n_items), 0.0);
    std::atomic<bool> any_bad{false};
    parallel_for(static_cast<size_t>(n_items), [&](size_t item) {
        const uint64_t j0 = static_cast<uint64_t>(item) * kRoundChunk;
        const uint64_t len = std::min(kRoundChunk, n - j0);
        double lane[4] = {0.0, 0.0, 0.0, 0.0};
        bool bad = false;
        alignas(64) uint32_t w[2 * kTile];
        for (uint64_t t0 = 0; t0 < len; t0 += kTile) {
            const uint64_t m = std::min(kTile, len - t0);
            const uint64_t e0 = j0 + t0;  // even: element e0 starts block e0 / 2
            k.philox_words(id, static_cast<uint32_t>(e0 >> 1), static_cast<size_t>((m + 1) >> 1), w);
            const double* xs = x + e0;
            int64_t* os = out + e0;
            uint64_t i = 0;
            for (; i + 4 <= m; i += 4) {
                for (uint64_t l = 0; l < 4; ++l) {
                    const int64_t v = round_one(xs[i + l], word_pair(w, i + l), bad);
                    os[i + l] = v;
                    const double d = static_cast<double>(v);
                    lane[l] += d * d;
                }
            }
            for (; i < m; ++i) {  // the tail of the last tile: lane i % 4 as above (t0 % 4 == 0)
                const int64_t v = round_one(xs[i], word_pair(w, i), bad);
                os[i] = v;
                const double d = static_cast<double>(v);
                lane[i & 3] += d * d;
            }
        }
        partial[item] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
        if (bad) any_bad.store(true, std::memory_order_relaxed);
    });
    double total = 0.0;
    for (double p : partial) total += p;
    *ok = !any_bad.load();
    return total;
}

}  // namespace dprec::cpu
