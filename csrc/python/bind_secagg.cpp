// Secure-aggregation client and server arithmetic: randomized rounding (Philox domain 4) and
// arithmetic modulo 2^bits. Validates and converts only; the kernels are in cpu/rounding.* and
// cpu/modular.*.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../cpu/modular.h"
#include "../cpu/rounding.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

// Elements a rounding may have: two words each, 2^34 words per stream.
constexpr uint64_t kMaxRoundElements = uint64_t(1) << 33;

int check_bits(int64_t bits) {
    if (bits < 1 || bits > 64) throw py::value_error("bits must be in [1, 64], got " + std::to_string(bits));
    return static_cast<int>(bits);
}

// The storage dtype of values mod 2^bits is uint32 for bits <= 32, else uint64.
bool wide(const py::array& a, int bits, const char* name) {
    const bool want_wide = bits > 32;
    const py::dtype want = want_wide ? py::dtype::of<uint64_t>() : py::dtype::of<uint32_t>();
    if (!has_dtype(a, want))
        throw py::type_error(std::string(name) + " must have dtype " + std::string(py::str(want)) + " for bits = " +
                             std::to_string(bits) + ", got " + std::string(py::str(a.dtype())));
    return want_wide;
}

void check_same_size(const py::array& a, const char* a_name, const py::array& b, const char* b_name) {
    if (a.size() != b.size())
        throw py::value_error(std::string(a_name) + " and " + std::string(b_name) +
                              " must have the same size, got " + std::to_string(a.size()) + " and " +
                              std::to_string(b.size()));
}

template <class U>
void reduce(const py::array& x, int bits, py::array& out) {
    const int64_t* xp = input<int64_t>(x, "x");
    U* op = output<U>(out, "out");
    const uint64_t n = static_cast<uint64_t>(x.size());
    py::gil_scoped_release release;
    cpu::mod_reduce<U>(xp, n, bits, op);
}

template <class U>
void sum(const py::array& xs, uint64_t rows, uint64_t cols, int bits, bool accumulate, py::array& out) {
    const U* xp = input<U>(xs, "xs");
    U* op = output<U>(out, "out");
    bool in_range;
    {
        py::gil_scoped_release release;
        in_range = cpu::mod_sum<U>(xp, rows, cols, bits, accumulate, op);
    }
    if (!in_range)
        throw py::value_error("xs has values >= 2**bits = 2**" + std::to_string(bits) +
                              "; they are not values mod 2**bits (out is unchanged)");
}

template <class U, class T>
void lift(const py::array& x, int bits, double scale, py::array& out) {
    const U* xp = input<U>(x, "x");
    T* op = output<T>(out, "out");
    const uint64_t n = static_cast<uint64_t>(x.size());
    py::gil_scoped_release release;
    cpu::mod_lift<U, T>(xp, n, bits, scale, op);
}

template <class U>
void lift_into(const py::array& x, int bits, double scale, py::array& out) {
    if (has_dtype(out, py::dtype::of<int64_t>())) {
        if (scale != 1.0) throw py::value_error("scale must be 1 for an int64 out");
        lift<U, int64_t>(x, bits, scale, out);
    } else if (has_dtype(out, py::dtype::of<float>())) {
        lift<U, float>(x, bits, scale, out);
    } else {
        lift<U, double>(x, bits, scale, out);  // raises TypeError for any other dtype
    }
}

}  // namespace

void bind_secagg(py::module_& m) {
    m.def(
        "randomized_round",
        [](const py::array& x, uint64_t seed, uint32_t attempt, uint32_t group, py::array& out) {
            check_same_size(x, "x", out, "out");
            const uint64_t n = static_cast<uint64_t>(x.size());
            if (n > kMaxRoundElements)
                throw py::value_error("x must have at most 2**33 elements (two Philox words each), got " +
                                      std::to_string(n));
            const double* xp = input<double>(x, "x");
            int64_t* op = output<int64_t>(out, "out");
            bool ok = true;
            double sum_sq;
            {
                py::gil_scoped_release release;
                sum_sq = cpu::randomized_round(xp, n, seed, attempt, group, op, &ok);
            }
            if (!ok) throw py::value_error("x must be finite with |x| < 2**62 (too large to round to int64)");
            return sum_sq;
        },
        py::arg("x"), py::arg("seed"), py::arg("attempt"), py::arg("group"), py::arg("out"),
        "One randomized rounding of the float64 x into the int64 out (Philox (seed, attempt, group, domain 4));"
        " returns the float64 sum of out**2 in a fixed order.");

    m.def(
        "mod_reduce",
        [](const py::array& x, int64_t bits, py::array& out) {
            const int b = check_bits(bits);
            check_same_size(x, "x", out, "out");
            if (wide(out, b, "out"))
                reduce<uint64_t>(x, b, out);
            else
                reduce<uint32_t>(x, b, out);
        },
        py::arg("x"), py::arg("bits"), py::arg("out"), "out = x mod 2**bits for the int64 x (uint32 or uint64 out).");

    m.def(
        "mod_sum",
        [](const py::array& xs, int64_t rows, int64_t cols, int64_t bits, bool accumulate, py::array& out) {
            const int b = check_bits(bits);
            if (rows < 0 || cols < 0)
                throw py::value_error("rows and cols must be >= 0, got " + std::to_string(rows) + " and " +
                                      std::to_string(cols));
            const uint64_t r = static_cast<uint64_t>(rows), c = static_cast<uint64_t>(cols);
            if (c != 0 && r > static_cast<uint64_t>(xs.size()) / c)
                throw py::value_error("xs must have rows * cols elements");
            if (static_cast<uint64_t>(xs.size()) != r * c)
                throw py::value_error("xs must have rows * cols = " + std::to_string(r * c) + " elements, got " +
                                      std::to_string(xs.size()));
            if (static_cast<uint64_t>(out.size()) != c)
                throw py::value_error("out must have cols = " + std::to_string(c) + " elements, got " +
                                      std::to_string(out.size()));
            const bool w = wide(xs, b, "xs");
            wide(out, b, "out");
            if (w)
                sum<uint64_t>(xs, r, c, b, accumulate, out);
            else
                sum<uint32_t>(xs, r, c, b, accumulate, out);
        },
        py::arg("xs"), py::arg("rows"), py::arg("cols"), py::arg("bits"), py::arg("accumulate"), py::arg("out"),
        "out = ((out if accumulate else 0) + the sum of the rows of xs (rows x cols, flat)) mod 2**bits; ValueError "
        "(out unchanged) when a value of xs is >= 2**bits.");

    m.def(
        "mod_lift",
        [](const py::array& x, int64_t bits, double scale, py::array& out) {
            const int b = check_bits(bits);
            check_same_size(x, "x", out, "out");
            if (!std::isfinite(scale)) throw py::value_error("scale must be finite");
            if (wide(x, b, "x"))
                lift_into<uint64_t>(x, b, scale, out);
            else
                lift_into<uint32_t>(x, b, scale, out);
        },
        py::arg("x"), py::arg("bits"), py::arg("scale"), py::arg("out"),
        "The centered lift of x mod 2**bits into [-2**(bits-1), 2**(bits-1)), times scale, into the int64 "
        "(scale 1), float64 or float32 out.");
}

}  // namespace dprec::bind
