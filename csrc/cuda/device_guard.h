// The device guard's logic, apart from the CUDA runtime so that it can be tested without a
// GPU (csrc/python/bind_emulation_runtime.cpp runs it against a recording fake runtime).
#pragma once

namespace dprec::cuda {

// Makes `device` current for the scope and afterwards leaves the thread as it found it.
//
// A thread that never used CUDA still reports device 0 as current. Restoring "device 0"
// with cudaSetDevice would then create GPU 0's primary context (hundreds of MB on GPU 0)
// for a thread that only ever worked on cuda:1; so when the thread had no context, the
// guard clears the context it made current instead of switching back.
//
// Runtime provides: int current_device(); void set_device(int); void restore_device(int)
// noexcept; bool thread_has_context() noexcept; void clear_thread_context() noexcept.
template <class Runtime>
class BasicDeviceGuard {
  public:
    explicit BasicDeviceGuard(int device) {
        previous_ = Runtime::current_device();
        if (previous_ == device) return;
        had_context_ = Runtime::thread_has_context();
        Runtime::set_device(device);
        switched_ = true;
    }
    ~BasicDeviceGuard() {
        if (!switched_) return;
        if (had_context_)
            Runtime::restore_device(previous_);
        else
            Runtime::clear_thread_context();
    }
    BasicDeviceGuard(const BasicDeviceGuard&) = delete;
    BasicDeviceGuard& operator=(const BasicDeviceGuard&) = delete;

  private:
    int previous_ = 0;
    bool had_context_ = true;
    bool switched_ = false;
};

}  // namespace dprec::cuda
