#include "finite.h"

#include <algorithm>
#include <atomic>

#include "dispatch.h"
#include "parallel.h"

namespace dprec::cpu {
namespace {

// Elements per work item; below two items the calling thread checks alone.
constexpr uint64_t kItem = uint64_t(1) << 16;

inline bool chunk_finite(const float* x, uint64_t n) { return kernels().all_finite_f32(x, n); }
inline bool chunk_finite(const double* x, uint64_t n) { return kernels().all_finite_f64(x, n); }

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
