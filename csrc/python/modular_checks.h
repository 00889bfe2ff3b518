// Checks shared by the GPU SecAgg bindings (bind_cuda_modular.cpp) and their host emulation
// (bind_emulation_modular.cpp): what the Python layer cannot see for itself (bits against the
// storage dtype, sizes that overflow), raised as the Python exceptions the public API raises.
#pragma once

#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace dprec::bind {

// Elements of one modular call: any array that fits memory, with its byte count (8 bytes an
// element at most) still inside a signed 64-bit integer.
constexpr uint64_t kModMaxElements = uint64_t(1) << 60;

// 1 <= bits <= 64 (M = 2^bits).
inline int check_mod_bits(int64_t bits) {
    if (bits < 1 || bits > 64) throw pybind11::value_error("bits must be in 1 .. 64, got " + std::to_string(bits));
    return static_cast<int>(bits);
}

// The storage dtype of values mod 2^bits, "uint32" for bits <= 32 and "uint64" above; true
// for uint64. Any other dtype, or the other width, is a TypeError naming the argument.
inline bool check_mod_storage(const std::string& dtype, int bits, const char* name) {
    const char* want = bits <= 32 ? "uint32" : "uint64";
    if (dtype != "uint32" && dtype != "uint64")
        throw pybind11::type_error(std::string(name) + " must be uint32 or uint64 (values mod 2**bits), got " + dtype);
    if (dtype != want)
        throw pybind11::type_error(std::string(name) + " must have dtype " + want + " for bits = " +
                                   std::to_string(bits) + " (uint32 for bits <= 32, uint64 above), got " + dtype);
    return bits > 32;
}

// n rows (clients) of m columns: n >= 1, m >= 1, n * m <= kModMaxElements.
inline void check_mod_sum_shape(int64_t n, int64_t m) {
    if (m < 1) throw pybind11::value_error("out must not be empty, got m = " + std::to_string(m));
    if (n < 1) throw pybind11::value_error("xs must have at least one row, got n = " + std::to_string(n));
    if (static_cast<uint64_t>(n) > kModMaxElements / static_cast<uint64_t>(m))
        throw pybind11::value_error("xs has too many elements: n * m = " + std::to_string(n) + " * " +
                                    std::to_string(m) + " exceeds 2**60");
}

inline void check_mod_count(int64_t count, const char* name) {
    if (count < 1) throw pybind11::value_error(std::string(name) + " must not be empty");
    if (static_cast<uint64_t>(count) > kModMaxElements)
        throw pybind11::value_error(std::string(name) + " has too many elements: " + std::to_string(count) +
                                    " exceeds 2**60");
}

// The lift's output: int64 (scale must be 1: an integer result is not scaled), float64 or
// float32 (scale finite).
enum class LiftOut { kInt64, kFloat64, kFloat32 };

inline LiftOut check_lift_out(const std::string& dtype, double scale) {
    if (!std::isfinite(scale)) throw pybind11::value_error("scale must be finite");
    if (dtype == "int64") {
        if (scale != 1.0)
            throw pybind11::value_error("scale must be 1 for an int64 out (scale a float32 or float64 out), got " +
                                        std::to_string(scale));
        return LiftOut::kInt64;
    }
    if (dtype == "float64") return LiftOut::kFloat64;
    if (dtype == "float32") return LiftOut::kFloat32;
    throw pybind11::type_error("out must be int64, float64 or float32 for the centered lift, got " + dtype);
}

}  // namespace dprec::bind
