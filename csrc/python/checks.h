// Range checks shared by the bindings: what Python cannot see (overflow of the counter).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace dprec::bind {

// Elements per stream: 2^32 blocks of four words.
constexpr uint64_t kMaxStreamElements = uint64_t(1) << 34;

inline void check_stream_range(uint64_t offset, uint64_t count) {
    if (offset > kMaxStreamElements || count > kMaxStreamElements - offset)
        throw pybind11::value_error("offset + size must be <= 2**34 (the Philox counter holds 2**32 blocks of 4), got " +
                                    std::to_string(offset) + " + " + std::to_string(count));
}

}  // namespace dprec::bind
