// A small persistent thread pool. Kernels split their work into a fixed list of items
// that does not depend on the thread count, so results are identical for any count.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>

namespace dprec::cpu {

// Threads used by parallel_for (the calling thread included). 0 restores the default:
// DPREC_NUM_THREADS if set, else the hardware concurrency.
void set_num_threads(int n);
int get_num_threads();

// Runs body(item) for item in [0, n_items), spread over the pool. Blocks until done.
// Safe to call from several threads at once (a second caller runs its items inline).
// Throws Interrupted, after the running items finish, when the interrupt check fires.
void parallel_for(size_t n_items, const std::function<void(size_t)>& body);

// Polled by the thread that called parallel_for (never by a pool worker), between items
// and at most every few tens of milliseconds; returning true abandons the call. The
// Python bindings install one that runs the interpreter's signal handlers (Ctrl-C).
using InterruptCheck = bool (*)();
void set_interrupt_check(InterruptCheck check);

// parallel_for was abandoned by the interrupt check; its outputs are incomplete.
struct Interrupted : std::exception {
    const char* what() const noexcept override { return "interrupted"; }
};

}  // namespace dprec::cpu
