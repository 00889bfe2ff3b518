// A small persistent thread pool. Kernels split their work into a fixed list of items
// that does not depend on the thread count, so results are identical for any count.
#pragma once

#include <cstddef>
#include <functional>

namespace dprec::cpu {

// Threads used by parallel_for (the calling thread included). 0 restores the default:
// DPREC_NUM_THREADS if set, else the hardware concurrency.
void set_num_threads(int n);
int get_num_threads();

// Runs body(item) for item in [0, n_items), spread over the pool. Blocks until done.
// Safe to call from several threads at once (a second caller runs its items inline).
void parallel_for(size_t n_items, const std::function<void(size_t)>& body);

}  // namespace dprec::cpu
