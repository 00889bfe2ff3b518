#include "dispatch.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

namespace dprec::cpu {
namespace {

std::vector<const KernelTable*> supported_tables() {
    std::vector<const KernelTable*> tables;
#if defined(DPREC_HAVE_X86_KERNELS) && (defined(__GNUC__) || defined(__clang__))
    // __builtin_cpu_supports also checks that the OS saves the wide registers.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) tables.push_back(kernel_table_avx512());
    if (__builtin_cpu_supports("avx2")) tables.push_back(kernel_table_avx2());
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

const KernelTable* initial_table() {
    const char* env = std::getenv("DPREC_ISA");
    try {
        return find_table(env ? env : "auto");
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

void set_isa(const std::string& name) { g_table.store(find_table(name), std::memory_order_release); }

}  // namespace dprec::cpu
