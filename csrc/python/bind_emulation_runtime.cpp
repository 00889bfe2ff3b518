// The CUDA backend's device guard (csrc/cuda/device_guard.h) against a recording fake runtime:
// its decisions checked on the host, without a GPU (or with one GPU, where switching devices
// cannot happen). Registered in dprec._gpu_emulation, the test-only module.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "../cuda/device_guard.h"

namespace py = pybind11;

namespace dprec::bind {

namespace {

struct RecordingRuntime {
    static inline int current = 0;
    static inline bool has_context = true;
    static inline std::vector<std::string> calls;
    static int current_device() { return current; }
    static void set_device(int device) {
        calls.push_back("set_device(" + std::to_string(device) + ")");
        current = device;
    }
    static void restore_device(int device) noexcept {
        calls.push_back("restore_device(" + std::to_string(device) + ")");
        current = device;
    }
    static bool thread_has_context() noexcept { return has_context; }
    static void clear_thread_context() noexcept { calls.push_back("clear_thread_context()"); }
};

}  // namespace

void bind_emulation_runtime(py::module_& m) {
    m.def(
        "device_guard_trace",
        [](int current, bool has_context, int target) {
            RecordingRuntime::current = current;
            RecordingRuntime::has_context = has_context;
            RecordingRuntime::calls.clear();
            { cuda::BasicDeviceGuard<RecordingRuntime> guard(target); }
            return RecordingRuntime::calls;
        },
        py::arg("current"), py::arg("has_context"), py::arg("target"),
        "The runtime calls the device guard makes for a thread on `current` (with or without a context) "
        "switching to `target`.");
}

}  // namespace dprec::bind
