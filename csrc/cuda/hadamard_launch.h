// Launchers of the GPU Walsh-Hadamard transform and randomized Hadamard rotation: plain C++
// declarations (no CUDA headers), in the conventions of launch.h (device pointers, the
// caller's stream as an integer, asynchronous, std::runtime_error with the CUDA message).
// Arguments are assumed validated by the binding layer.
#pragma once

#include <cstdint>

#include "launch.h"

namespace dprec::cuda {

// dst <- H_n src for each of `rows` rows of n = 2^log2n elements (divided by sqrt(n) when
// `normalize`); dst may equal src (in place). Bit-identical to cpu::fwht.
template <class T>
void fwht(int device, Stream stream, const T* src, T* dst, uint64_t rows, int log2n, bool normalize);

// The randomized Hadamard rotation of rows of `dim` elements, padded to n = 2^log2n:
// forward: src (rows x dim) -> dst (rows x n), x <- H D_s x / sqrt(n) for s = 0 .. repeats-1;
// inverse: src (rows x n) -> dst (rows x dim), y <- D_s H y / sqrt(n) for s = repeats-1 .. 0,
// then the first dim columns. src and dst must not overlap. Bit-identical to the CPU path
// of dprec.transforms.RandomizedHadamard.
template <class T>
void randomized_hadamard(int device, Stream stream, const T* src, T* dst, uint64_t rows, uint64_t dim, int log2n,
                         uint64_t seed, uint32_t group, uint64_t repeats, bool inverse);

}  // namespace dprec::cuda
