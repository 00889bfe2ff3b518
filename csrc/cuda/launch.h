// CUDA launchers: plain C++ declarations (no CUDA headers), so that the pybind11 layer
// compiles with the host compiler alone. Every launcher runs on `stream` of `device`
// (a cudaStream_t passed as an integer; 0 is the legacy default stream), enqueues its
// work asynchronously and returns, unless it says it synchronises. Pointers are device
// pointers unless named *_host; the binding layer has checked that they are on `device`.
// Errors throw CudaError (OutOfMemory for allocations) with the CUDA message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace dprec::cuda {

using Stream = uintptr_t;

// -- errors -------------------------------------------------------------------------------
// Every CUDA failure throws CudaError with the runtime's message; a failed allocation
// throws OutOfMemory, which the binding layer turns into Python's MemoryError.
class CudaError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};
class OutOfMemory : public CudaError {
  public:
    using CudaError::CudaError;
};

// -- scratch memory (memory.cpp) ----------------------------------------------------------
// Where the launchers' temporary device memory comes from. The binding layer installs the
// caller framework's allocator (PyTorch's or CuPy's caching allocator) for one call with
// ScopedScratchAllocator, so dprec shares the caller's memory pool instead of competing
// with it; without one, scratch comes from dprec's own stream-ordered pool (below).
// Scratch is always used on `stream` and returned on it, in stream order: the kernels
// that use it are already queued there, so the host never waits to free it.
class ScratchAllocator {
  public:
    virtual ~ScratchAllocator() = default;
    // Throws OutOfMemory (or whatever the framework raises) when it cannot.
    virtual uintptr_t allocate(int device, Stream stream, size_t bytes) = 0;
    virtual void deallocate(int device, Stream stream, uintptr_t ptr, size_t bytes) noexcept = 0;
};

// Makes `allocator` this thread's scratch source for the scope (nullptr: dprec's pool).
class ScopedScratchAllocator {
  public:
    explicit ScopedScratchAllocator(ScratchAllocator* allocator);
    ~ScopedScratchAllocator();
    ScopedScratchAllocator(const ScopedScratchAllocator&) = delete;
    ScopedScratchAllocator& operator=(const ScopedScratchAllocator&) = delete;

  private:
    ScratchAllocator* previous_;
};

// Scratch from the thread's current source (used by the launchers through Scratch).
uintptr_t scratch_allocate(int device, Stream stream, size_t bytes);
void scratch_deallocate(int device, Stream stream, uintptr_t ptr, size_t bytes) noexcept;

// dprec's own pool, one per device (cudaMemPoolCreate): memory freed in stream order is
// kept for reuse up to the release threshold and returned to the driver above it at the
// next synchronisation. The default threshold is min(1 GiB, device memory / 16).
uintptr_t pool_allocate(int device, Stream stream, size_t bytes);
void pool_deallocate(int device, Stream stream, uintptr_t ptr) noexcept;
uint64_t pool_release_threshold(int device);
void set_pool_release_threshold(int device, uint64_t bytes);
uint64_t pool_reserved_bytes(int device);  // held by the pool, in use or not
void pool_trim(int device);                // return every unused byte to the driver now

// -- runtime (device.cpp) -----------------------------------------------------------------
int device_count();                 // 0 when there is no usable device
std::string unavailable_reason();   // "" when at least one device is usable
std::string device_name(int device);
int runtime_version();
int driver_version();               // 0 without a driver
// The device that owns `ptr` (device or managed memory), or -1 for host / unknown memory.
int pointer_device(uintptr_t ptr);
// Device memory for dprec's own arrays (dprec.cuda.DeviceArray): from dprec's pool, in
// stream order on `stream`, so that freeing never synchronises the device.
uintptr_t device_malloc(int device, Stream stream, size_t bytes);
void device_free(int device, Stream stream, uintptr_t ptr) noexcept;
// Why a CUDA toolkit / driver pair cannot work, naming the driver needed ("" if it can).
std::string driver_mismatch_message(int driver_version, int runtime_version);
// Loads every dprec kernel on `device` now. Under lazy module loading (CUDA's default) a
// kernel's first launch loads it, and loading can wait for work already queued on the
// device; doing it for all kernels at a device's first use confines that wait to the
// first call. Thread-safe; runs once per device.
void preload_kernels(int device);
// The device a stream belongs to; -1 for the special handles (0 legacy default, 1, 2
// per-thread default), which belong to whichever device is current, or when unknown.
int stream_device(Stream stream);
void copy_to_host(int device, Stream stream, uintptr_t src, void* dst_host, size_t bytes);  // synchronises
void copy_to_device(int device, Stream stream, const void* src_host, uintptr_t dst, size_t bytes);
void memset_zero(int device, Stream stream, uintptr_t dst, size_t bytes);
void synchronize(int device, Stream stream);

// -- kernels (launch.cu) ------------------------------------------------------------------
void stream_normals(int device, Stream stream, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                    uint64_t offset, uint64_t count, float scale, float* out);
void stream_words(int device, Stream stream, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
                  uint64_t offset, uint64_t count, uint32_t* out);

// out[k] = factor * sum_i z_{group,k}[i] phi[i], k < n_candidates (float64 on the device).
template <class T>
void rec_dot_products(int device, Stream stream, const T* phi, uint64_t d, uint64_t seed, uint32_t group,
                      uint32_t n_candidates, double factor, double* out);

// The generate-only speed limit of rec_dot_products (benchmarks): same normals, no phi.
void generate_only(int device, Stream stream, uint64_t d, uint64_t seed, uint32_t group, uint32_t n_candidates);

// Gumbel-max for n_groups groups at once: group g's logits are logits[offsets[g] ..
// offsets[g+1]); the noise is uploaded from the host. Synchronises; indices to out_host.
void gumbel_argmax(int device, Stream stream, const double* logits, const double* gumbel_host,
                   const int64_t* offsets_host, uint64_t n_groups, int64_t* out_host);

// out[i] += coef[c] * z_{seeds[c], group, indices[c]}[i], clients in order (see kernel_bodies.h).
void accumulate_f32(int device, Stream stream, float* out, uint64_t d, uint32_t group, const uint64_t* seeds_host,
                    const uint32_t* indices_host, const double* coefs_host, uint64_t n_clients);
void accumulate_f64(int device, Stream stream, double* out, uint64_t d, uint32_t group, const uint64_t* seeds_host,
                    const uint32_t* indices_host, const double* coefs_host, uint64_t n_clients);
// out_f32[i] = float(sum_c coef[c] * double(z_c[i])): a float64 sum from zero, stored rounded.
void aggregate_f32(int device, Stream stream, float* out_f32, uint64_t d, uint32_t group, const uint64_t* seeds_host,
                   const uint32_t* indices_host, const double* coefs_host, uint64_t n_clients);

// For each input: the sum of (x / divisor)^2 in float64 and max |x| (NaN if any element is
// NaN), into out_host[2i], out_host[2i+1]. One synchronisation for all inputs.
struct NormInput {
    const void* x;
    bool is_double;  // float64, else float32
    uint64_t n;
};
void norm_stats(int device, Stream stream, const NormInput* inputs, size_t count, double divisor, double* out_host);

// dst[i] = src[i] * factor for float64 arrays (dst may be src).
void scale_f64(int device, Stream stream, const double* src, uint64_t n, double factor, double* dst);

enum class SourceType { kFloat16, kBFloat16, kFloat64 };
void to_float32(int device, Stream stream, const void* src, SourceType type, uint64_t n, float* dst);

}  // namespace dprec::cuda
