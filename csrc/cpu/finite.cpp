#include "finite.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements per work item; below two items the calling thread checks alone.
constexpr uint64_t kItem = uint64_t(1) << 16;

// A value is NaN or infinite exactly when its exponent bits are all ones. Testing the bits
// (rather than x != x or isfinite) keeps the loop a plain and/compare/or that every ISA
// vectorises, with no early exit to break the vector loop.
template <class T>
bool chunk_finite(const T* x, uint64_t n) {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    constexpr Bits kExp = sizeof(T) == 4 ? Bits(0x7f800000u) : Bits(0x7ff0000000000000ull);
    Bits bad = 0;
    for (uint64_t i = 0; i < n; ++i) {
        Bits b;
        std::memcpy(&b, x + i, sizeof(T));
        bad |= static_cast<Bits>((b & kExp) == kExp);
    }
    return bad == 0;
}

}  // namespace

template <class T>
bool all_finite(const T* x, uint64_t n) {
    if (n < 2 * kItem) return chunk_finite(x, n);
    std::atomic<bool> finite{true};
    parallel_for(static_cast<size_t>((n + kItem - 1) / kItem), [&](size_t item) {
        if (!finite.load(std::memory_order_relaxed)) return;
        const uint64_t i0 = item * kItem;
        if (!chunk_finite(x + i0, std::min(kItem, n - i0))) finite.store(false, std::memory_order_relaxed);
    });
    return finite.load();
}

template bool all_finite<float>(const float*, uint64_t);
template bool all_finite<double>(const double*, uint64_t);

}  // namespace dprec::cpu
