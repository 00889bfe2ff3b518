// The NEON instantiation of kernels_generic.h, for AArch64 (Advanced SIMD is part of the base
// architecture there, so no extra compiler flags and no run-time check). CMake adds this file
// only for a 64-bit ARM target; on any other target (a misconfigured build, one slice of a
// universal binary) kernel_table.h leaves DPREC_HAVE_NEON_KERNELS undefined and this file
// compiles to nothing.
#include "kernel_table.h"

#if defined(DPREC_HAVE_NEON_KERNELS)
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../common/discrete_noise.h"
#include "../common/normal_transform.h"
#include "../common/philox.h"

// System headers are included above, so the includes below only add project code.
namespace {
#include "simd_neon.h"
#include "hadamard_kernels_generic.h"
#include "kernels_generic.h"
}  // namespace

namespace dprec::cpu {
const KernelTable* kernel_table_neon() { return GenericKernels<SimdNeon>::table(); }
}  // namespace dprec::cpu
#endif  // DPREC_HAVE_NEON_KERNELS
