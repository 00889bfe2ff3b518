// Data cache sizes of the machine the kernels run on, for their blocking (FWHT blocks,
// count-sketch tiles). Blocking changes speed only: every kernel's results are fixed by its
// arithmetic contract, whatever the block sizes.
#pragma once

#include <cstdint>
#include <string>

namespace dprec::cpu {

struct CacheSizes {
    uint64_t l1d = 0;    // bytes of level-1 data cache per core
    uint64_t l2 = 0;     // bytes of level-2 cache per core
    uint64_t l3 = 0;     // bytes of the last-level (level-3) cache as reported (shared by its cores)
    std::string source;  // where each came from, e.g. "sysfs", "sysfs, default l3"
};

// Defaults for a size the system does not report: small enough for any x86-64 or ARM64
// core of the last decade, so blocking by them never spills out of the real cache.
constexpr uint64_t kDefaultL1d = uint64_t(32) << 10;
constexpr uint64_t kDefaultL2 = uint64_t(1) << 20;
constexpr uint64_t kDefaultL3 = uint64_t(8) << 20;

// The sizes, queried once (Linux: sysfs, then sysconf; macOS: sysctl; Windows:
// GetLogicalProcessorInformation; x86: CPUID leaf 4 / 0x8000001D when the OS has none),
// each one the default above when unknown or implausible. Thread-safe.
const CacheSizes& cache_sizes();

// The largest power of two <= v (v >= 1), as blocking wants power-of-two sizes.
inline uint64_t pow2_floor(uint64_t v) {
    uint64_t p = 1;
    while (p <= v / 2) p *= 2;
    return p;
}

}  // namespace dprec::cpu
