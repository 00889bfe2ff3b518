#include "cache_info.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <unistd.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#include <sys/types.h>
#elif defined(_WIN32)
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>

#include <vector>
#endif

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64) || defined(_M_IX86)
#define DPREC_CACHE_CPUID 1
#if defined(_MSC_VER)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#endif

namespace dprec::cpu {
namespace {

// One query's findings: 0 = not reported.
struct Found {
    uint64_t l1d = 0, l2 = 0, l3 = 0;
    bool any() const { return l1d || l2 || l3; }
};

void note(Found& f, int level, uint64_t bytes) {
    if (level == 1) f.l1d = bytes;
    if (level == 2) f.l2 = bytes;
    if (level == 3) f.l3 = bytes;
}

#if defined(__linux__)
// /sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}: the kernel's view (it reads
// CPUID or the device tree). Preferred over glibc's sysconf, which on some VMs and AMD
// parts reports the L3 of the whole package times its threads.
bool read_line(const char* path, char* buf, size_t cap) {
    FILE* f = std::fopen(path, "r");
    if (!f) return false;
    const bool ok = std::fgets(buf, static_cast<int>(cap), f) != nullptr;
    std::fclose(f);
    return ok;
}

Found from_sysfs() {
    Found f;
    for (int i = 0; i < 16; ++i) {
        char path[96], level[16], type[32], size[32];
        std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (!read_line(path, level, sizeof level)) continue;
        std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (!read_line(path, type, sizeof type) || std::strncmp(type, "Instruction", 11) == 0) continue;
        std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!read_line(path, size, sizeof size)) continue;
        char* end = nullptr;
        unsigned long long v = std::strtoull(size, &end, 10);
        if (end && (*end == 'K' || *end == 'k')) v <<= 10;
        if (end && (*end == 'M' || *end == 'm')) v <<= 20;
        if (end && (*end == 'G' || *end == 'g')) v <<= 30;
        note(f, std::atoi(level), v);
    }
    return f;
}

Found from_sysconf() {
    Found f;
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE),
               l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    f.l1d = l1 > 0 ? static_cast<uint64_t>(l1) : 0;
    f.l2 = l2 > 0 ? static_cast<uint64_t>(l2) : 0;
    f.l3 = l3 > 0 ? static_cast<uint64_t>(l3) : 0;
#endif
    return f;
}
#endif

#if defined(__APPLE__)
uint64_t sysctl_u64(const char* name) {
    uint64_t v = 0;
    size_t len = sizeof v;
    if (sysctlbyname(name, &v, &len, nullptr, 0) != 0 || len != sizeof v) return 0;
    return v;
}

// Apple silicon reports per-cluster sizes under hw.perflevel0 (the performance cores, which
// the pool's threads mostly run on); Intel Macs only the plain names.
Found from_sysctl() {
    Found f;
    f.l1d = sysctl_u64("hw.perflevel0.l1dcachesize");
    f.l2 = sysctl_u64("hw.perflevel0.l2cachesize");
    f.l3 = sysctl_u64("hw.perflevel0.l3cachesize");
    if (!f.l1d) f.l1d = sysctl_u64("hw.l1dcachesize");
    if (!f.l2) f.l2 = sysctl_u64("hw.l2cachesize");
    if (!f.l3) f.l3 = sysctl_u64("hw.l3cachesize");
    return f;
}
#endif

#if defined(_WIN32)
Found from_windows() {
    Found f;
    DWORD bytes = 0;
    GetLogicalProcessorInformation(nullptr, &bytes);
    if (bytes == 0) return f;
    std::vector<SYSTEM_LOGICAL_PROCESSOR_INFORMATION> info(bytes / sizeof(SYSTEM_LOGICAL_PROCESSOR_INFORMATION) + 1);
    if (!GetLogicalProcessorInformation(info.data(), &bytes)) return f;
    const size_t n = bytes / sizeof(SYSTEM_LOGICAL_PROCESSOR_INFORMATION);
    for (size_t i = 0; i < n; ++i) {
        if (info[i].Relationship != RelationCache) continue;
        const CACHE_DESCRIPTOR& c = info[i].Cache;
        if (c.Type != CacheData && c.Type != CacheUnified) continue;
        Found one;
        note(one, c.Level, c.Size);
        // Every core is listed; keep the first of each level (cores of one kind alike).
        if (one.l1d && !f.l1d) f.l1d = one.l1d;
        if (one.l2 && !f.l2) f.l2 = one.l2;
        if (one.l3 && !f.l3) f.l3 = one.l3;
    }
    return f;
}
#endif

#if defined(DPREC_CACHE_CPUID)
void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
#if defined(_MSC_VER)
    int v[4];
    __cpuidex(v, static_cast<int>(leaf), static_cast<int>(sub));
    for (int i = 0; i < 4; ++i) r[i] = static_cast<uint32_t>(v[i]);
#else
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}

// The deterministic cache parameters: leaf 4 (Intel) or 0x8000001D (AMD, with TOPOEXT);
// both describe one cache per sub-leaf in the same layout.
Found from_cpuid() {
    Found f;
    uint32_t r[4];
    cpuid(0, 0, r);
    const uint32_t max_leaf = r[0];
    uint32_t leaf = 0;
    if (max_leaf >= 4) {
        cpuid(4, 0, r);
        if (r[0] & 0x1f) leaf = 4;
    }
    if (!leaf) {
        cpuid(0x80000000u, 0, r);
        if (r[0] >= 0x8000001Du) {
            cpuid(0x80000001u, 0, r);
            if (r[2] & (1u << 22)) leaf = 0x8000001Du;  // TOPOEXT
        }
    }
    if (!leaf) return f;
    for (uint32_t sub = 0; sub < 16; ++sub) {
        cpuid(leaf, sub, r);
        const uint32_t type = r[0] & 0x1f;  // 0 none (the end), 1 data, 2 instruction, 3 unified
        if (type == 0) break;
        if (type == 2) continue;
        const uint64_t ways = (r[1] >> 22) + 1, parts = ((r[1] >> 12) & 0x3ff) + 1, line = (r[1] & 0xfff) + 1,
                       sets = uint64_t(r[2]) + 1;
        note(f, static_cast<int>((r[0] >> 5) & 7), ways * parts * line * sets);
    }
    return f;
}
#endif

// Takes the sizes that `f` has and `out` lacks, naming `what` for them in `src`.
void fill(CacheSizes& out, const Found& f, const char* what, std::string src[3]) {
    const uint64_t v[3] = {f.l1d, f.l2, f.l3};
    uint64_t* dst[3] = {&out.l1d, &out.l2, &out.l3};
    // Plausible ranges; anything else is treated as unreported.
    const uint64_t lo[3] = {uint64_t(4) << 10, uint64_t(64) << 10, uint64_t(256) << 10};
    const uint64_t hi[3] = {uint64_t(4) << 20, uint64_t(256) << 20, uint64_t(4) << 30};
    for (int i = 0; i < 3; ++i)
        if (*dst[i] == 0 && v[i] >= lo[i] && v[i] <= hi[i]) {
            *dst[i] = v[i];
            src[i] = what;
        }
}

CacheSizes query() {
    CacheSizes c;
    std::string src[3];
#if defined(__linux__)
    fill(c, from_sysfs(), "sysfs", src);
    fill(c, from_sysconf(), "sysconf", src);
#elif defined(__APPLE__)
    fill(c, from_sysctl(), "sysctl", src);
#elif defined(_WIN32)
    fill(c, from_windows(), "GetLogicalProcessorInformation", src);
#endif
#if defined(DPREC_CACHE_CPUID)
    if (c.l1d == 0 || c.l2 == 0 || c.l3 == 0) fill(c, from_cpuid(), "cpuid", src);
#endif
    const uint64_t def[3] = {kDefaultL1d, kDefaultL2, kDefaultL3};
    uint64_t* dst[3] = {&c.l1d, &c.l2, &c.l3};
    for (int i = 0; i < 3; ++i)
        if (*dst[i] == 0) {
            *dst[i] = def[i];
            src[i] = "default";
        }
    // "sysfs" when all three agree, else per level ("l1d sysfs, l2 sysfs, l3 default").
    if (src[0] == src[1] && src[1] == src[2]) {
        c.source = src[0];
    } else {
        c.source = "l1d " + src[0] + ", l2 " + src[1] + ", l3 " + src[2];
    }
    return c;
}

}  // namespace

const CacheSizes& cache_sizes() {
    static const CacheSizes sizes = query();  // thread-safe initialisation (C++11)
    return sizes;
}

}  // namespace dprec::cpu
