// The baseline instantiation of kernels_generic.h.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernel_table.h"
#include "../common/discrete_noise.h"
#include "../common/normal_transform.h"
#include "../common/philox.h"

// System headers are included above, so the includes below only add project code.
namespace {
#include "simd_scalar.h"
#include "hadamard_kernels_generic.h"
#include "kernels_generic.h"
}  // namespace

namespace dprec::cpu {
const KernelTable* kernel_table_baseline() { return GenericKernels<SimdScalar>::table(); }
}  // namespace dprec::cpu
