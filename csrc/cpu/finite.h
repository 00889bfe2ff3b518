// Finiteness of a float buffer, for the input checks of the public API (SPEC §7).
#pragma once

#include <cstdint>

namespace dprec::cpu {

// Whether every x[i], i < n, is finite (neither NaN nor infinite). Multi-threaded for
// large n; reads x once.
template <class T>
bool all_finite(const T* x, uint64_t n);

}  // namespace dprec::cpu
