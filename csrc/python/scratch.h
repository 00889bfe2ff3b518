// The caller framework's allocator as the launchers' scratch source (launch.h).
//
// The Python layer passes an object with allocate(device, stream, nbytes) -> int and
// free(ptr) (dprec._runtime.frameworks picks PyTorch's or CuPy's caching allocator from the arrays of
// the call) or None for dprec's own pool. A launcher runs with the GIL released, so each
// allocation takes the GIL back for the Python call.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>

#include "../cuda/launch.h"

namespace dprec::bind {

namespace py = pybind11;

class PythonScratchAllocator final : public cuda::ScratchAllocator {
  public:
    explicit PythonScratchAllocator(py::object owner) : owner_(std::move(owner)) {}
    uintptr_t allocate(int device, cuda::Stream stream, size_t bytes) override {
        py::gil_scoped_acquire gil;
        return owner_.attr("allocate")(device, stream, bytes).cast<uintptr_t>();
    }
    void deallocate(int, cuda::Stream, uintptr_t ptr, size_t) noexcept override {
        py::gil_scoped_acquire gil;
        try {
            owner_.attr("free")(ptr);
        } catch (py::error_already_set& e) {
            e.discard_as_unraisable("dprec: returning scratch memory to the caller's allocator");
        } catch (...) {
        }
    }

  private:
    py::object owner_;
};

// Installs `scratch` (None: dprec's pool) as this thread's scratch source for the scope.
// Declare it before the py::gil_scoped_release of a binding: it is built and destroyed
// with the GIL held.
class ScratchScope {
  public:
    explicit ScratchScope(const py::object& scratch) {
        if (!scratch.is_none()) allocator_.emplace(scratch);
        scope_.emplace(allocator_ ? &*allocator_ : nullptr);
    }

  private:
    std::optional<PythonScratchAllocator> allocator_;
    std::optional<cuda::ScopedScratchAllocator> scope_;
};

}  // namespace dprec::bind
