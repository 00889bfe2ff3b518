// Scratch memory: the thread's scratch source and dprec's own stream-ordered pool.
//
// Why a pool of our own rather than the device's default pool: the default pool's release
// threshold is 0, so every synchronisation hands all freed memory back to the driver and
// the next call pays cudaMalloc again; raising that threshold would change the behaviour of
// every other library that uses the default pool. dprec's pool keeps up to its own
// threshold for reuse. Callers on PyTorch or CuPy do not use it at all: the binding layer
// installs their framework's caching allocator (launch.h, ScratchAllocator).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "cuda_check.h"
#include "launch.h"

namespace dprec::cuda {
namespace {

thread_local ScratchAllocator* t_scratch_allocator = nullptr;

cudaStream_t as_stream(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

constexpr uint64_t kMaxDefaultReleaseThreshold = uint64_t(1) << 30;

struct Pools {
    std::mutex mutex;
    std::vector<cudaMemPool_t> by_device;  // nullptr until a device's first use
};

Pools& pools() {
    static Pools* p = new Pools();  // never destroyed: frees may run during interpreter exit
    return *p;
}

cudaMemPool_t pool_of(int device) {
    Pools& p = pools();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.by_device.size() <= static_cast<size_t>(device)) p.by_device.resize(static_cast<size_t>(device) + 1, nullptr);
    cudaMemPool_t& pool = p.by_device[static_cast<size_t>(device)];
    if (pool != nullptr) return pool;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t created = nullptr;
    check(cudaMemPoolCreate(&created, &props), "cudaMemPoolCreate");
    size_t free_bytes = 0, total_bytes = 0;
    {
        DeviceGuard guard(device);
        check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    }
    uint64_t threshold = std::min<uint64_t>(kMaxDefaultReleaseThreshold, total_bytes / 16);
    check(cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &threshold),
          "cudaMemPoolSetAttribute (release threshold)");
    pool = created;
    return pool;
}

}  // namespace

ScopedScratchAllocator::ScopedScratchAllocator(ScratchAllocator* allocator) : previous_(t_scratch_allocator) {
    t_scratch_allocator = allocator;
}

ScopedScratchAllocator::~ScopedScratchAllocator() { t_scratch_allocator = previous_; }

uintptr_t scratch_allocate(int device, Stream stream, size_t bytes) {
    if (t_scratch_allocator != nullptr) return t_scratch_allocator->allocate(device, stream, bytes);
    return pool_allocate(device, stream, bytes);
}

void scratch_deallocate(int device, Stream stream, uintptr_t ptr, size_t bytes) noexcept {
    if (t_scratch_allocator != nullptr)
        t_scratch_allocator->deallocate(device, stream, ptr, bytes);
    else
        pool_deallocate(device, stream, ptr);
}

uintptr_t pool_allocate(int device, Stream stream, size_t bytes) {
    cudaMemPool_t pool = pool_of(device);
    void* p = nullptr;
    check(cudaMallocFromPoolAsync(&p, bytes ? bytes : 1, pool, as_stream(stream)), "cudaMallocFromPoolAsync");
    return reinterpret_cast<uintptr_t>(p);
}

void pool_deallocate(int device, Stream stream, uintptr_t ptr) noexcept {
    (void)device;  // stream-ordered frees find their pool from the pointer
    if (cudaFreeAsync(reinterpret_cast<void*>(ptr), as_stream(stream)) != cudaSuccess) cudaGetLastError();
}

uint64_t pool_release_threshold(int device) {
    uint64_t value = 0;
    check(cudaMemPoolGetAttribute(pool_of(device), cudaMemPoolAttrReleaseThreshold, &value),
          "cudaMemPoolGetAttribute (release threshold)");
    return value;
}

void set_pool_release_threshold(int device, uint64_t bytes) {
    check(cudaMemPoolSetAttribute(pool_of(device), cudaMemPoolAttrReleaseThreshold, &bytes),
          "cudaMemPoolSetAttribute (release threshold)");
}

uint64_t pool_reserved_bytes(int device) {
    uint64_t value = 0;
    check(cudaMemPoolGetAttribute(pool_of(device), cudaMemPoolAttrReservedMemCurrent, &value),
          "cudaMemPoolGetAttribute (reserved)");
    return value;
}

void pool_trim(int device) {
    DeviceGuard guard(device);
    // Pending stream-ordered frees only reach the pool once their streams get there.
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemPoolTrimTo(pool_of(device), 0), "cudaMemPoolTrimTo");
}

}  // namespace dprec::cuda
