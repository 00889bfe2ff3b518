#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if !defined(_WIN32)
#include <pthread.h>
#endif
#if defined(_MSC_VER)
#include <intrin.h>
#endif

namespace dprec::cpu {
namespace {

std::atomic<InterruptCheck> g_interrupt_check{nullptr};
thread_local bool t_is_pool_worker = false;

// Rate-limits the interrupt check for the calling thread of one parallel_for.
class InterruptPoll {
  public:
    InterruptPoll() : check_(t_is_pool_worker ? nullptr : g_interrupt_check.load()), next_(clock::now() + kEvery) {}
    bool fired() {
        if (!check_ || clock::now() < next_) return false;
        next_ = clock::now() + kEvery;
        return check_();
    }

  private:
    using clock = std::chrono::steady_clock;
    static constexpr std::chrono::milliseconds kEvery{50};
    InterruptCheck check_;
    clock::time_point next_;
};

// Parses DPREC_NUM_THREADS: -1 when unset or blank, the count when valid (0 included),
// -2 with *problem set when unusable.
int parse_env_threads(std::string* problem) {
    const char* env = std::getenv("DPREC_NUM_THREADS");
    if (!env) return -1;
    const std::string text(env);
    const char* space = " \t\n\r\f\v";
    const size_t first = text.find_first_not_of(space);
    if (first == std::string::npos) return -1;  // empty or blank: as if unset
    const std::string digits = text.substr(first, text.find_last_not_of(space) - first + 1);
    long value = 0;
    bool ok = digits.size() <= 9;
    for (char c : digits) {
        ok = ok && c >= '0' && c <= '9';
        if (ok) value = value * 10 + (c - '0');
    }
    if (ok && value <= kMaxThreads) return static_cast<int>(value);
    if (problem)
        *problem = "DPREC_NUM_THREADS='" + text + "' is not an integer in [0, " + std::to_string(kMaxThreads) +
                   "]; it is ignored and the default is used";
    return -2;
}

int hardware_threads() {
    const unsigned hw = std::thread::hardware_concurrency();
    if (hw == 0) return 1;
    return hw > static_cast<unsigned>(kMaxThreads) ? kMaxThreads : static_cast<int>(hw);
}

int default_threads() {
    const int n = parse_env_threads(nullptr);
    return n > 0 ? n : hardware_threads();
}

// Spin-waiting: a kernel often makes several parallel_for calls back to back (the passes of
// an FWHT, a benchmark loop), and waking a sleeping thread through the OS costs tens of
// microseconds, more than many whole calls. So a worker that has finished polls for the next
// call for a short while before it sleeps, and the caller polls for the workers' last items
// before it sleeps. Nothing waits for a worker that has not joined a call: the caller closes
// the call once every item is taken, and a worker that wakes after that skips it.
constexpr std::chrono::microseconds kSpin{200};

// Polls pred() until it holds or kSpin has passed; returns whether it held.
template <class Pred>
bool spin_until(const Pred& pred) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (pred()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() >= deadline) return pred();
    }
}

class Pool {
  public:
    // Throws std::runtime_error naming the count when a thread cannot be started (std::thread
    // throws std::system_error, e.g. EAGAIN at a process or memory limit); the threads already
    // started are stopped and joined first, so nothing is left running or unjoined.
    explicit Pool(int n_threads) {
        try {
            workers_.reserve(static_cast<size_t>(n_threads > 1 ? n_threads - 1 : 0));
            for (int i = 1; i < n_threads; ++i)
                workers_.emplace_back([this] {
                    t_is_pool_worker = true;
                    worker_loop();
                });
        } catch (const std::exception& e) {
            const size_t started = workers_.size();
            stop_and_join();
            throw std::runtime_error("dprec could not start " + std::to_string(n_threads) +
                                     " threads for its native kernels (" + std::to_string(started + 1) +
                                     " running when starting one more failed: " + e.what() +
                                     "); lower DPREC_NUM_THREADS or call dprec.set_num_threads() with a smaller count");
        }
    }
    ~Pool() { stop_and_join(); }
    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // At most max_workers pool threads join the caller.
    void run(size_t n_items, const std::function<void(size_t)>& body, int max_workers) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            body_ = &body;
            n_items_ = n_items;
            seats_ = max_workers;
            next_.store(0);
            open_ = true;
            error_ = nullptr;
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        InterruptPoll poll;
        bool interrupted = false;
        drain(body, n_items, [&] {
            interrupted = interrupted || poll.fired();
            return interrupted;
        });
        {
            // Every item is taken: no worker may join from now on, so only those that joined
            // are waited for.
            std::lock_guard<std::mutex> lock(mutex_);
            open_ = false;
        }
        const auto all_left = [this] { return participants_.load(std::memory_order_acquire) == 0; };
        if (!spin_until(all_left)) {
            std::unique_lock<std::mutex> lock(mutex_);
            done_.wait(lock, all_left);
        }
        std::lock_guard<std::mutex> lock(mutex_);
        body_ = nullptr;
        if (error_) std::rethrow_exception(error_);
        if (interrupted) throw Interrupted();
    }

  private:
    void stop_and_join() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_.store(true);
        }
        wake_.notify_all();
        for (auto& t : workers_) t.join();
        workers_.clear();
    }

    // An exception in any item (e.g. std::bad_alloc) stops the remaining items and is
    // rethrown to the caller, never left to terminate a worker thread.
    // `stop` is asked after each item; true ends the whole call (no new items start).
    template <class Stop>
    void drain(const std::function<void(size_t)>& body, size_t n_items, const Stop& stop) {
        try {
            for (size_t i = next_.fetch_add(1); i < n_items; i = next_.fetch_add(1)) {
                body(i);
                if (stop()) {
                    next_.store(n_items);
                    break;
                }
            }
        } catch (...) {
            next_.store(n_items);
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = std::current_exception();
        }
    }
    void worker_loop() {
        unsigned long seen = generation_.load();
        for (;;) {
            const auto news = [&] {
                return stopping_.load(std::memory_order_relaxed) ||
                       generation_.load(std::memory_order_acquire) != seen;
            };
            const std::function<void(size_t)>* body;
            size_t n_items;
            {
                const bool woke = spin_until(news);
                std::unique_lock<std::mutex> lock(mutex_);
                if (!woke) wake_.wait(lock, news);
                if (stopping_.load()) return;
                seen = generation_.load();
                if (!open_ || seats_ <= 0) continue;  // every item taken, or enough threads joined
                --seats_;
                participants_.fetch_add(1, std::memory_order_relaxed);
                body = body_;
                n_items = n_items_;
            }
            drain(*body, n_items, [] { return false; });
            if (participants_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                // Taking the lock orders this notify after the caller's check of the
                // predicate, so a caller that went to sleep is woken.
                { std::lock_guard<std::mutex> lock(mutex_); }
                done_.notify_one();
            }
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    // Written under mutex_; read by spinning workers without it.
    std::atomic<unsigned long> generation_{0};
    std::atomic<bool> stopping_{false};
    // Guarded by mutex_.
    const std::function<void(size_t)>* body_ = nullptr;
    size_t n_items_ = 0;
    int seats_ = 0;  // pool threads that may still join the open call
    bool open_ = false;
    std::exception_ptr error_;
    std::atomic<size_t> next_{0};
    std::atomic<int> participants_{0};
};

std::mutex g_config_mutex;  // guards g_pool and g_threads
std::mutex g_run_mutex;     // one parallel_for at a time on the pool
std::unique_ptr<Pool> g_pool;
int g_threads = 0;

#if !defined(_WIN32)
// A forked child has no worker threads: drop the pool without joining and rebuild lazily.
void forget_pool_in_child() {
    (void)g_pool.release();
    new (&g_run_mutex) std::mutex();
    new (&g_config_mutex) std::mutex();
}
#endif

Pool* acquire_pool() {
    std::lock_guard<std::mutex> lock(g_config_mutex);
    if (g_threads <= 0) g_threads = default_threads();
    if (!g_pool || g_pool->size() != g_threads) {
#if !defined(_WIN32)
        static bool registered = [] { return pthread_atfork(nullptr, nullptr, forget_pool_in_child) == 0; }();
        (void)registered;
#endif
        g_pool.reset();
        g_pool = std::make_unique<Pool>(g_threads);  // on failure g_pool stays empty: retried next call
    }
    return g_pool.get();
}

}  // namespace

// Takes only the config lock, never the run lock: the running parallel_for keeps the pool it
// has (it is swapped only by acquire_pool, under the run lock), and waiting for it here would
// wait for a kernel whose calling thread may need the GIL that our caller holds.
void set_num_threads(int n) {
    if (n < 0 || n > kMaxThreads)
        throw std::invalid_argument("n must be in [0, " + std::to_string(kMaxThreads) + "] (0 restores the default), got " +
                                    std::to_string(n));
    std::lock_guard<std::mutex> lock(g_config_mutex);
    g_threads = n > 0 ? n : default_threads();
}

std::string num_threads_env_problem() {
    std::string problem;
    parse_env_threads(&problem);
    return problem;
}

int get_num_threads() {
    std::lock_guard<std::mutex> lock(g_config_mutex);
    if (g_threads <= 0) g_threads = default_threads();
    return g_threads;
}

void set_interrupt_check(InterruptCheck check) { g_interrupt_check.store(check); }

void parallel_for(size_t n_items, const std::function<void(size_t)>& body) {
    parallel_for(n_items, body, kMaxThreads);
}

void parallel_for(size_t n_items, const std::function<void(size_t)>& body, int max_threads) {
    if (n_items == 0) return;
    const bool inline_only = max_threads <= 1 || n_items == 1;
    std::unique_lock<std::mutex> run_lock(g_run_mutex, std::defer_lock);
    if (!inline_only) run_lock.try_lock();
    if (!run_lock.owns_lock() || get_num_threads() == 1) {
        InterruptPoll poll;
        for (size_t i = 0; i < n_items; ++i) {
            body(i);
            if (i + 1 < n_items && poll.fired()) throw Interrupted();
        }
        return;
    }
    // No more threads than items: a thread that finds no item only adds a wake-up.
    const size_t useful = std::min<size_t>(n_items, static_cast<size_t>(max_threads));
    acquire_pool()->run(n_items, body, static_cast<int>(useful) - 1);
}

}  // namespace dprec::cpu
