// The avx2 instantiation of kernels_generic.h. CMake compiles this file with avx2 flags;
// dispatch.cpp calls it only when the CPU and the OS support avx2. On a target that is not
// x86-64 kernel_table.h leaves DPREC_HAVE_X86_KERNELS undefined and this file compiles to nothing.
#include "kernel_table.h"

#if defined(DPREC_HAVE_X86_KERNELS)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <immintrin.h>

#include "../common/discrete_noise.h"
#include "../common/normal_transform.h"
#include "../common/philox.h"

// System headers are included above, so the includes below only add project code.
namespace {
#include "simd_avx2.h"
#include "hadamard_kernels_generic.h"
#include "kernels_generic.h"
}  // namespace

namespace dprec::cpu {
const KernelTable* kernel_table_avx2() { return GenericKernels<SimdAvx2>::table(); }
}  // namespace dprec::cpu
#endif  // DPREC_HAVE_X86_KERNELS
