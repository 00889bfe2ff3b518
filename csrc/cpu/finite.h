// Scans of float buffers: finiteness, for the input checks of the public API (docs/bad-input.md), and
// the float64 sum of squares the codecs clip by.
#pragma once

#include <cstdint>

namespace dprec::cpu {

// Whether every x[i], i < n, is finite (neither NaN nor infinite). Multi-threaded for
// large n; reads x once.
template <class T>
bool all_finite(const T* x, uint64_t n);

// Whether every |x[i]|, i < n, is at most `limit` (a finite positive value): false for NaN
// and infinity too. One read of x, multi-threaded for large n. The public FWHT checks its
// input against FLT_MAX / (2 n) so, which rules out overflow, instead of scanning its output.
template <class T>
bool abs_at_most(const T* x, uint64_t n, T limit);

// Elements per chunk of sum_of_squares, and its lanes.
constexpr uint64_t kSumSquaresChunk = uint64_t(1) << 16;
constexpr uint64_t kSumSquaresLanes = 8;

// sum_i (x[i] / divisor)^2 in float64 (the division skipped when divisor == 1), in an order
// that the NumPy reference (dprec.reference.rec.sum_of_squares) reproduces bit for bit and that
// no thread count changes: chunks of kSumSquaresChunk elements; within a chunk element j goes to
// lane j % 8, each lane summed in element order from +0; the lanes combined as
// ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)); the chunk sums added in chunk order. NaN or
// infinity in x, or overflow, gives a non-finite result.
template <class T>
double sum_of_squares(const T* x, uint64_t n, double divisor);

}  // namespace dprec::cpu
