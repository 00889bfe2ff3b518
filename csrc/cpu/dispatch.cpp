#include "dispatch.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#if defined(DPREC_HAVE_X86_KERNELS) && defined(_MSC_VER) && !defined(__clang__)
#include <immintrin.h>
#include <intrin.h>
#endif

namespace dprec::cpu {
namespace {

#if defined(DPREC_HAVE_X86_KERNELS) && defined(_MSC_VER) && !defined(__clang__)
// CPUID feature bits, and XGETBV to check that the OS saves the YMM / ZMM state.
bool msvc_cpu_supports(bool avx512) {
    int r[4];
    __cpuid(r, 0);
    if (r[0] < 7) return false;
    __cpuid(r, 1);
    const bool osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1, fma = (r[2] >> 12) & 1;
    if (!osxsave || !avx || !fma) return false;
    const unsigned long long xcr0 = _xgetbv(0);
    if ((xcr0 & 0x6) != 0x6) return false;  // XMM and YMM state
    __cpuidex(r, 7, 0);
    if (!avx512) return (r[1] >> 5) & 1;                   // AVX2
    return ((r[1] >> 16) & 1) && (xcr0 & 0xE6) == 0xE6;  // AVX-512F, opmask and ZMM state
}
#endif

std::vector<const KernelTable*> supported_tables() {
    std::vector<const KernelTable*> tables;
#if defined(DPREC_HAVE_X86_KERNELS) && (defined(__GNUC__) || defined(__clang__))
    // __builtin_cpu_supports also checks that the OS saves the wide registers.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) tables.push_back(kernel_table_avx512());
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) tables.push_back(kernel_table_avx2());
#elif defined(DPREC_HAVE_X86_KERNELS) && defined(_MSC_VER)
    if (msvc_cpu_supports(true)) tables.push_back(kernel_table_avx512());
    if (msvc_cpu_supports(false)) tables.push_back(kernel_table_avx2());
#endif
#if defined(DPREC_HAVE_NEON_KERNELS)
    // Advanced SIMD is part of the AArch64 base architecture: nothing to detect.
    tables.push_back(kernel_table_neon());
#endif
    tables.push_back(kernel_table_baseline());
    return tables;
}

const KernelTable* find_table(const std::string& name) {
    const auto tables = supported_tables();
    if (name.empty() || name == "auto") return tables.front();
    for (const KernelTable* t : tables)
        if (name == t->name) return t;
    std::string names;
    for (const KernelTable* t : tables) names += std::string(names.empty() ? "" : ", ") + t->name;
    throw std::invalid_argument("isa '" + name + "' is not available on this CPU or build (available: " + names +
                                ", auto)");
}

bool names_auto(const std::string& name) { return name.empty() || name == "auto"; }

std::atomic<bool> g_auto{true};

const KernelTable* initial_table() {
    const char* env = std::getenv("DPREC_ISA");
    try {
        const KernelTable* t = find_table(env ? env : "auto");
        g_auto.store(!env || names_auto(env), std::memory_order_relaxed);
        return t;
    } catch (const std::invalid_argument&) {
        return find_table("auto");  // an unusable DPREC_ISA falls back rather than failing import
    }
}

std::atomic<const KernelTable*> g_table{nullptr};

}  // namespace

const KernelTable& kernels() {
    const KernelTable* t = g_table.load(std::memory_order_acquire);
    if (!t) {
        t = initial_table();
        g_table.store(t, std::memory_order_release);
    }
    return *t;
}

std::vector<std::string> available_isas() {
    std::vector<std::string> names;
    for (const KernelTable* t : supported_tables()) names.emplace_back(t->name);
    return names;
}

void set_isa(const std::string& name) {
    const KernelTable* t = find_table(name);
    g_auto.store(names_auto(name), std::memory_order_relaxed);
    g_table.store(t, std::memory_order_release);
}

bool isa_is_auto() {
    kernels();  // DPREC_ISA is read on first use
    return g_auto.load(std::memory_order_relaxed);
}

std::vector<const KernelTable*> supported_kernel_tables() { return supported_tables(); }

}  // namespace dprec::cpu
