// Arithmetic modulo M = 2^bits, 1 <= bits <= 64, for secure aggregation (docs/secagg.md): the client's
// reduction, the server's sum of many clients and the centered lift back to signed values.
// Values mod M are stored as U = uint32_t (bits <= 32) or uint64_t (bits > 32). All of it is
// integer arithmetic (wrapping unsigned adds, then a mask), so results are exact and the same
// whatever the thread count or the order of the additions. Arguments are assumed validated by
// the binding layer.
#pragma once

#include <cstdint>

namespace dprec::cpu {

// out[j] = x[j] mod 2^bits (x's two's complement bits, masked).
template <class U>
void mod_reduce(const int64_t* x, uint64_t n, int bits, U* out);

// out[c] = ((accumulate ? out[c] : 0) + sum_r xs[r * cols + c]) mod 2^bits for c < cols, and
// true; or false, with out unchanged, when some value of xs is 2^bits or more (that check is
// fused into the sum: a separate pass would double the time for a memory-bound kernel).
// Parallel over blocks of columns, rows inner.
template <class U>
bool mod_sum(const U* xs, uint64_t rows, uint64_t cols, int bits, bool accumulate, U* out);

// The centered lift of v = x[j] mod 2^bits: v - 2^bits if v >= 2^(bits-1), else v, written as
// int64 (T = int64_t; scale ignored), or as T(scale * double(lifted)) for T = double / float
// (computed in double, then rounded once to float). For bits = 64 the lift is the int64 with
// v's bits.
template <class U, class T>
void mod_lift(const U* x, uint64_t n, int bits, double scale, T* out);

}  // namespace dprec::cpu
