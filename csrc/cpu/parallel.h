// A small persistent thread pool. Kernels split their work into a fixed list of items
// that does not depend on the thread count, so results are identical for any count.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <intrin.h>
#endif

namespace dprec::cpu {

// The most threads set_num_threads and DPREC_NUM_THREADS accept.
constexpr int kMaxThreads = 4096;

// Threads used by parallel_for (the calling thread included), 0 <= n <= kMaxThreads (else
// std::invalid_argument). 0 restores the default: DPREC_NUM_THREADS if it is set to a valid
// count, else the hardware concurrency. Never waits for a running parallel_for (that call
// finishes with the threads it started with); the next call uses the new count.
void set_num_threads(int n);
int get_num_threads();

// Why the DPREC_NUM_THREADS environment variable is unusable ("" when it is unset, blank or
// valid). Valid: a decimal integer in [0, kMaxThreads], surrounding whitespace allowed (0 means
// the default). An unusable value is ignored (the hardware concurrency is used instead); the
// Python package turns this text into a warning.
std::string num_threads_env_problem();

// One step of a spin-wait: tells the core (and a hyperthread sibling) that this thread is
// polling, without giving up its time slice.
inline void cpu_relax() {
#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
    _mm_pause();
#elif (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
    asm volatile("yield");
#else
    std::this_thread::yield();
#endif
}

// Runs body(item) for item in [0, n_items), spread over the pool. Blocks until done.
// Safe to call from several threads at once (a second caller runs its items inline).
// Throws Interrupted, after the running items finish, when the interrupt check fires.
// Throws std::runtime_error naming the count when the pool's threads cannot be started
// (the threads already started are joined; a later call tries again, e.g. after a smaller
// set_num_threads).
void parallel_for(size_t n_items, const std::function<void(size_t)>& body);

// As above, on at most max_threads threads (the calling thread included; values below 1
// count as 1). For work too small to repay waking the pool: with max_threads 1 the items
// run inline, on the calling thread, and no pool thread is woken.
void parallel_for(size_t n_items, const std::function<void(size_t)>& body, int max_threads);

// Polled by the thread that called parallel_for (never by a pool worker), between items
// and at most every few tens of milliseconds; returning true abandons the call. The
// Python bindings install one that runs the interpreter's signal handlers (Ctrl-C), so it
// takes the GIL while this thread holds the pool's run lock: a binding must never wait for
// a lock of this file (run or config) while it holds the GIL (release it first).
using InterruptCheck = bool (*)();
void set_interrupt_check(InterruptCheck check);

// parallel_for was abandoned by the interrupt check; its outputs are incomplete.
struct Interrupted : std::exception {
    const char* what() const noexcept override { return "interrupted"; }
};

}  // namespace dprec::cpu
