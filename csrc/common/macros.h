// Portability macros for headers that compile under both g++/clang/MSVC and nvcc.
#pragma once

#if defined(__CUDACC__)
#define DPREC_HD __host__ __device__
#else
#define DPREC_HD
#endif

// Internal linkage on purpose: these headers are included by translation units built
// with different ISA flags (baseline, AVX2, AVX-512; NEON on AArch64). With external inline linkage the
// linker could keep an AVX-512 copy of a helper and call it from baseline code.
#define DPREC_INLINE DPREC_HD static inline

// Correctly rounded float sqrt without a libm call (with -fno-math-errno it is one instruction).
#if defined(__CUDA_ARCH__)
#define DPREC_SQRTF(x) __fsqrt_rn(x)
#elif defined(__GNUC__) || defined(__clang__)
#define DPREC_SQRTF(x) __builtin_sqrtf(x)
#else
#include <cmath>
#define DPREC_SQRTF(x) std::sqrt(x)
#endif
