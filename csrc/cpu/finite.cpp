#include "finite.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements per work item; below two items the calling thread checks alone.
constexpr uint64_t kItem = uint64_t(1) << 16;

inline bool chunk_finite(const float* x, uint64_t n) { return kernels().all_finite_f32(x, n); }
inline bool chunk_finite(const double* x, uint64_t n) { return kernels().all_finite_f64(x, n); }

// |v| <= limit on the bits: with the sign bit cleared, the order of the bit patterns as
// integers is that of the magnitudes, with infinity above every finite value and NaN above
// infinity, so one signed integer compare per element (the compiler vectorises it).
template <class T>
bool chunk_abs_at_most(const T* x, uint64_t n, T limit) {
    using Bits = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    constexpr Bits kMagnitude = std::numeric_limits<Bits>::max();  // every bit but the sign
    Bits lim;
    std::memcpy(&lim, &limit, sizeof(T));
    Bits over = 0;
    for (uint64_t i = 0; i < n; ++i) {
        Bits b;
        std::memcpy(&b, x + i, sizeof(T));
        over |= static_cast<Bits>((b & kMagnitude) > lim);
    }
    return over == 0;
}

// One chunk of sum_of_squares. The lanes are independent sums, so the compiler vectorises
// them without reassociating anything (-ffp-contract=off keeps v * v and + apart, as NumPy
// computes them).
template <class T, bool kDivide>
double chunk_sum_of_squares(const T* x, uint64_t n, double divisor) {
    constexpr uint64_t L = kSumSquaresLanes;
    double acc[L] = {};
    const auto term = [divisor](T value) {
        const double v = kDivide ? static_cast<double>(value) / divisor : static_cast<double>(value);
        return v * v;
    };
    uint64_t i = 0;
    for (; i + L <= n; i += L)
        for (uint64_t j = 0; j < L; ++j) acc[j] += term(x[i + j]);
    for (uint64_t j = 0; i < n; ++i, ++j) acc[j] += term(x[i]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <class T>
double chunk_sum_of_squares(const T* x, uint64_t n, double divisor) {
    return divisor == 1.0 ? chunk_sum_of_squares<T, false>(x, n, divisor) : chunk_sum_of_squares<T, true>(x, n, divisor);
}

// Below this many chunks the calling thread sums alone (waking the pool costs more).
constexpr uint64_t kMinParallelChunks = 8;

}  // namespace

template <class T>
double sum_of_squares(const T* x, uint64_t n, double divisor) {
    const uint64_t n_chunks = (n + kSumSquaresChunk - 1) / kSumSquaresChunk;
    double total = 0.0;
    if (n_chunks < kMinParallelChunks) {
        for (uint64_t c = 0; c < n_chunks; ++c) {
            const uint64_t i0 = c * kSumSquaresChunk;
            total += chunk_sum_of_squares(x + i0, std::min(kSumSquaresChunk, n - i0), divisor);
        }
        return total;
    }
    std::vector<double> sums(static_cast<size_t>(n_chunks));
    parallel_for(static_cast<size_t>(n_chunks), [&](size_t c) {
        const uint64_t i0 = c * kSumSquaresChunk;
        sums[c] = chunk_sum_of_squares(x + i0, std::min(kSumSquaresChunk, n - i0), divisor);
    });
    for (double s : sums) total += s;  // in chunk order, whatever thread computed each
    return total;
}

template double sum_of_squares<float>(const float*, uint64_t, double);
template double sum_of_squares<double>(const double*, uint64_t, double);

// Whether pass(x + i0, m) holds for every chunk of x[0, n): one read of x, on the pool for
// large n, the remaining chunks skipped once one fails.
template <class T, class Pass>
bool every_chunk(const T* x, uint64_t n, const Pass& pass) {
    if (n < 2 * kItem) return pass(x, n);
    std::atomic<bool> ok{true};
    parallel_for(static_cast<size_t>((n + kItem - 1) / kItem), [&](size_t item) {
        if (!ok.load(std::memory_order_relaxed)) return;
        const uint64_t i0 = item * kItem;
        if (!pass(x + i0, std::min(kItem, n - i0))) ok.store(false, std::memory_order_relaxed);
    });
    return ok.load();
}

template <class T>
bool all_finite(const T* x, uint64_t n) {
    return every_chunk(x, n, [](const T* c, uint64_t m) { return chunk_finite(c, m); });
}

template <class T>
bool abs_at_most(const T* x, uint64_t n, T limit) {
    return every_chunk(x, n, [limit](const T* c, uint64_t m) { return chunk_abs_at_most(c, m, limit); });
}

template bool abs_at_most<float>(const float*, uint64_t, float);
template bool abs_at_most<double>(const double*, uint64_t, double);
template bool all_finite<float>(const float*, uint64_t);
template bool all_finite<double>(const double*, uint64_t);

}  // namespace dprec::cpu
