// Run-time choice of the kernel table (baseline, AVX2, AVX-512 on x86-64; baseline, NEON on AArch64).
#pragma once

#include <string>
#include <vector>

#include "kernel_table.h"

namespace dprec::cpu {

// The table in use: the best the CPU supports, unless DPREC_ISA or set_isa chose another.
const KernelTable& kernels();

// Names of the tables this CPU can run, best first: ("avx512", "avx2", "baseline") on x86-64,
// ("neon", "baseline") on AArch64, ("baseline") elsewhere.
std::vector<std::string> available_isas();

// Selects a table by name, or "auto" for the best. Throws std::invalid_argument for a
// name this build or CPU does not offer.
void set_isa(const std::string& name);

// Whether the table in use is the automatic choice (DPREC_ISA unset, unusable or "auto", and
// no set_isa since but "auto"). Only then may a kernel family run another supported table's
// kernels where they prove faster on this machine (hadamard.cpp): a chosen ISA is kept.
bool isa_is_auto();

// The tables this CPU can run, best first (the tables behind available_isas).
std::vector<const KernelTable*> supported_kernel_tables();

}  // namespace dprec::cpu
