#include "modular.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>
#include <vector>

#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements per work item of the element-wise kernels (reduce, lift): large enough that the
// pool's hand-off is negligible, small enough to spread a few million elements over cores.
constexpr uint64_t kChunk = uint64_t(1) << 16;
// Columns per work item of mod_sum: the block's accumulators (16 KiB for uint64) stay in L1
// while every row's segment streams past them.
constexpr uint64_t kSumColumns = 2048;

template <class U>
U mask_of(int bits) {
    return bits >= std::numeric_limits<U>::digits ? static_cast<U>(~U(0)) : static_cast<U>((U(1) << bits) - 1);
}

// The centered lift of v in [0, 2^bits) (see modular.h), without implementation-defined
// conversions: a negative result is -(M - v), and M - v = (0 - v) & mask lies in [1, 2^(bits-1)],
// so -((M - v) - 1) - 1 never overflows int64, also for bits = 64.
template <class U>
inline int64_t lift_one(U v, U mask, U half) {
    if (v < half) return static_cast<int64_t>(v);
    const U distance = static_cast<U>(static_cast<U>(U(0) - v) & mask);
    return -static_cast<int64_t>(distance - 1) - 1;
}

template <class Body>
void over_chunks(uint64_t n, Body body) {
    const uint64_t items = (n + kChunk - 1) / kChunk;
    parallel_for(static_cast<size_t>(items), [&](size_t item) {
        const uint64_t begin = static_cast<uint64_t>(item) * kChunk;
        body(begin, std::min(n, begin + kChunk));
    });
}

}  // namespace

template <class U>
void mod_reduce(const int64_t* x, uint64_t n, int bits, U* out) {
    const uint64_t mask = mask_of<uint64_t>(bits);
    over_chunks(n, [&](uint64_t begin, uint64_t end) {
        for (uint64_t j = begin; j < end; ++j) out[j] = static_cast<U>(static_cast<uint64_t>(x[j]) & mask);
    });
}

template <class U>
bool mod_sum(const U* xs, uint64_t rows, uint64_t cols, int bits, bool accumulate, U* out) {
    const U mask = mask_of<U>(bits);
    const uint64_t items = (cols + kSumColumns - 1) / kSumColumns;
    // The sums go to a scratch vector first, so that out is untouched when a value is out of
    // range (out may be a running total). It costs a pass over cols elements, not rows * cols.
    std::vector<U> sums(static_cast<size_t>(cols));
    std::atomic<bool> in_range{true};
    parallel_for(static_cast<size_t>(items), [&](size_t item) {
        const uint64_t c0 = static_cast<uint64_t>(item) * kSumColumns;
        const uint64_t len = std::min(kSumColumns, cols - c0);
        alignas(64) U acc[kSumColumns];
        for (uint64_t i = 0; i < len; ++i) acc[i] = accumulate ? out[c0 + i] : U(0);
        U seen = 0;  // the OR of every value: at or above 2^bits exactly when it has a bit outside mask
        uint64_t r = 0;
        // Four rows per pass over the accumulators: a quarter of their loads and stores. The
        // adds wrap mod 2^digits(U), a multiple of 2^bits, so the order does not matter.
        for (; r + 4 <= rows; r += 4) {
            const U* a = xs + r * cols + c0;
            const U* b = a + cols;
            const U* c = b + cols;
            const U* d = c + cols;
            for (uint64_t i = 0; i < len; ++i) {
                acc[i] = static_cast<U>(acc[i] + a[i] + b[i] + c[i] + d[i]);
                seen |= static_cast<U>(a[i] | b[i] | c[i] | d[i]);
            }
        }
        for (; r < rows; ++r) {
            const U* a = xs + r * cols + c0;
            for (uint64_t i = 0; i < len; ++i) {
                acc[i] = static_cast<U>(acc[i] + a[i]);
                seen |= a[i];
            }
        }
        if (seen & static_cast<U>(~mask)) in_range.store(false, std::memory_order_relaxed);
        for (uint64_t i = 0; i < len; ++i) sums[c0 + i] = static_cast<U>(acc[i] & mask);
    });
    if (!in_range.load()) return false;
    std::copy(sums.begin(), sums.end(), out);
    return true;
}

template <class U, class T>
void mod_lift(const U* x, uint64_t n, int bits, double scale, T* out) {
    const U mask = mask_of<U>(bits);
    const U half = static_cast<U>(U(1) << (bits - 1));
    over_chunks(n, [&](uint64_t begin, uint64_t end) {
        for (uint64_t j = begin; j < end; ++j) {
            const int64_t v = lift_one<U>(static_cast<U>(x[j] & mask), mask, half);
            if constexpr (std::is_same_v<T, int64_t>) {
                out[j] = v;
            } else {
                out[j] = static_cast<T>(scale * static_cast<double>(v));
            }
        }
    });
}

template void mod_reduce<uint32_t>(const int64_t*, uint64_t, int, uint32_t*);
template void mod_reduce<uint64_t>(const int64_t*, uint64_t, int, uint64_t*);
template bool mod_sum<uint32_t>(const uint32_t*, uint64_t, uint64_t, int, bool, uint32_t*);
template bool mod_sum<uint64_t>(const uint64_t*, uint64_t, uint64_t, int, bool, uint64_t*);
template void mod_lift<uint32_t, int64_t>(const uint32_t*, uint64_t, int, double, int64_t*);
template void mod_lift<uint32_t, double>(const uint32_t*, uint64_t, int, double, double*);
template void mod_lift<uint32_t, float>(const uint32_t*, uint64_t, int, double, float*);
template void mod_lift<uint64_t, int64_t>(const uint64_t*, uint64_t, int, double, int64_t*);
template void mod_lift<uint64_t, double>(const uint64_t*, uint64_t, int, double, double*);
template void mod_lift<uint64_t, float>(const uint64_t*, uint64_t, int, double, float*);

}  // namespace dprec::cpu
