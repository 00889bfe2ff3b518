// Argument checks shared by the FWHT bindings of the CUDA module and of the host emulation.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace dprec::bind {

// log2 of n, which must be a power of two in 1 .. 2^30.
inline int fwht_log2(uint64_t n, const char* name = "n") {
    if (n < 1 || n > (uint64_t(1) << 30) || (n & (n - 1)) != 0)
        throw pybind11::value_error(std::string(name) + " must be a power of two in 1 .. 2**30, got " +
                                    std::to_string(n));
    int k = 0;
    while ((uint64_t(1) << k) < n) ++k;
    return k;
}

// The rotation's dim (1 <= dim <= n, n the next power of two) and repeats (1 .. 2^32 - 1).
inline void check_rotation(uint64_t dim, int log2n, uint64_t repeats) {
    const uint64_t n = uint64_t(1) << log2n;
    if (dim < 1 || dim > n || (log2n > 0 && dim <= n / 2))
        throw pybind11::value_error("dim must satisfy n/2 < dim <= n (n = " + std::to_string(n) +
                                    ", the next power of two), got " + std::to_string(dim));
    if (repeats < 1 || repeats > 0xFFFFFFFFu)
        throw pybind11::value_error("repeats must be in 1 .. 2**32 - 1, got " + std::to_string(repeats));
}

}  // namespace dprec::bind
