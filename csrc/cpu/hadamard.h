// Fast Walsh-Hadamard transform on the CPU: natural (Sylvester) order, in place.
#pragma once

#include <cstdint>

namespace dprec::cpu {

// Transforms each of the `batch` contiguous rows of length n (a power of two, 1 .. 2^30) of x
// in place: x <- H_n x, or H_n x / sqrt(n) when `normalize`. Arguments are assumed validated.
//
// Arithmetic contract: stages run in increasing stride h = 1, 2, 4, ..., n/2, each butterfly
// being (a, b) -> (a + b, a - b) in T, each rounded once (no product of data is fused into a
// sum; a kernel may run a - b as fma(a, 1, -b), which rounds exactly like a - b), then, if
// normalize, one multiply by T(1/sqrt(n)) (exactly 2^-m for n = 4^m). So the result equals, bit for bit, the textbook
// radix-2 loop in T, whatever the thread count, cache blocking or radix grouping.
template <class T>
void fwht(T* x, uint64_t batch, uint64_t n, bool normalize);

// The same transform out of place: x <- H_n src (batch rows of n each), with the copy done
// in the transform's first pass over each block (one pass over memory less than copying
// first). src and x are the same array (in place) or do not overlap; src is not written.
template <class T>
void fwht(const T* src, T* x, uint64_t batch, uint64_t n, bool normalize);

// The kernel table whose FWHT kernels fwht<T> runs: the ISA in use, except under the
// automatic choice, where the fastest SIMD table on a probe transform (timed on first use).
template <class T>
const char* fwht_isa();

}  // namespace dprec::cpu
