// Test hooks of the discrete-noise samplers (csrc/common/discrete_noise.h), registered in
// dprec._gpu_emulation, the test-only module: the 128-bit arithmetic of both implementations
// (the portable two-limb one and unsigned __int128) against Python ints, the deterministic
// float64 math, the primitives' draws, and the whole Gaussian sampler on either 128-bit type.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "../common/discrete_noise.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

using Pair = std::pair<uint64_t, uint64_t>;  // (hi, lo) of a 128-bit value

template <class U>
Pair pair_of(U x) {
    return {x.hi(), x.lo()};
}

template <class U>
Pair u128_op(const std::string& op, Pair a_, Pair b_) {
    const U a = U::make(a_.first, a_.second), b = U::make(b_.first, b_.second);
    const U zero = U::make(0, 0);
    if (op == "add") return pair_of(a + b);
    if (op == "sub") return pair_of(a - b);
    if (op == "mul") return pair_of(a * b_.second);
    if (op == "mul64") return pair_of(U::mul64(a_.second, b_.second));
    if (op == "shl" || op == "shr") {
        if (b_.second > 127) throw py::value_error("shift must be < 128");
        const int s = static_cast<int>(b_.second);
        return pair_of(op == "shl" ? a << s : a >> s);
    }
    if (op == "div" || op == "mod") {
        if (b == zero) throw py::value_error("division by zero");
        U q, r;
        divmod(a, b, &q, &r);
        return pair_of(op == "div" ? q : r);
    }
    if (op == "lt") return {0, a < b};
    if (op == "le") return {0, a <= b};
    if (op == "gt") return {0, a > b};
    if (op == "ge") return {0, a >= b};
    if (op == "eq") return {0, a == b};
    if (op == "ne") return {0, a != b};
    if (op == "bit_length") return {0, static_cast<uint64_t>(bit_length(a))};
    throw py::value_error("unknown op " + op);
}

bool has_builtin() {
#if defined(DPREC_HAVE_BUILTIN_INT128)
    return true;
#else
    return false;
#endif
}

// `count` successive draws of one primitive from element `index`'s stream, as (hi, lo) pairs.
template <class U>
void draws(const std::string& kind, uint64_t seed, uint64_t index, Pair num_, Pair den_, uint64_t* out,
           uint64_t count) {
    const U num = U::make(num_.first, num_.second), den = U::make(den_.first, den_.second);
    if (kind != "bernoulli_half" && kind != "uniform01" && den == U::make(0, 0))
        throw py::value_error("den must be >= 1");
    if ((kind == "bernoulli" || kind == "bernoulli_exp") && bit_length(den) > 112)
        throw py::value_error("den must be < 2**112");  // the 128-bit bernoulli's bound
    noise::BitReader r(seed, index);
    for (uint64_t j = 0; j < count; ++j) {
        Pair v{0, 0};
        if (kind == "uniform_below") {
            v = pair_of(noise::uniform_below(r, den));
        } else if (kind == "uniform_below64") {
            if (den_.first) throw py::value_error("den must be < 2**64");
            v.second = noise::uniform_below(r, den_.second);
        } else if (kind == "bernoulli_half") {
            v.second = noise::bernoulli_half(r);
        } else if (kind == "bernoulli") {
            if (den < num) throw py::value_error("num must be <= den");
            v.second = noise::bernoulli(r, num, den);
        } else if (kind == "bernoulli64") {
            if (den_.first || num_.first) throw py::value_error("num and den must be < 2**64");
            if (den_.second < num_.second) throw py::value_error("num must be <= den");
            v.second = noise::bernoulli(r, num_.second, den_.second);
        } else if (kind == "uniform01") {
            const double u = noise::uniform01(r);
            std::memcpy(&v.second, &u, sizeof u);
        } else if (kind == "bernoulli_exp") {
            v.second = noise::bernoulli_exp(r, num, den);
        } else if (kind == "discrete_laplace") {
            if (den_.first || den_.second > (uint64_t(1) << 32)) throw py::value_error("t must be <= 2**32");
            U mag;
            bool neg;
            noise::discrete_laplace(r, den_.second, &mag, &neg);
            v = {neg, mag.lo()};
        } else {
            throw py::value_error("unknown kind " + kind);
        }
        out[2 * j] = v.first;
        out[2 * j + 1] = v.second;
    }
}

template <class U>
void gaussian(uint64_t seed, double sigma, int64_t* out, uint64_t n) {
    const noise::GaussianParams<U> p = noise::gaussian_params<U>(sigma);
    for (uint64_t i = 0; i < n; ++i) {
        noise::BitReader r(seed, i);
        out[i] = noise::discrete_gaussian(r, p);
    }
}

}  // namespace

void bind_emulation_noise(py::module_& m) {
    m.attr("HAVE_BUILTIN_INT128") = has_builtin();

    m.def(
        "uint128_op",
        [](const std::string& op, Pair a, Pair b, bool portable) -> Pair {
#if defined(DPREC_HAVE_BUILTIN_INT128)
            if (!portable) return u128_op<U128Builtin>(op, a, b);
#else
            if (!portable) throw py::value_error("this compiler has no unsigned __int128");
#endif
            return u128_op<U128Portable>(op, a, b);
        },
        py::arg("op"), py::arg("a"), py::arg("b"), py::arg("portable"),
        "op(a, b) on (hi, lo) pairs with the portable or the builtin 128-bit type; comparisons and "
        "bit_length give (0, value); mul takes b's low word, shl/shr shift by it.");

    m.def(
        "det_math",
        [](const std::string& op, const py::array& x, py::array& out) {
            const double* xp = input<double>(x, "x");
            double* op_ = output<double>(out, "out");
            if (x.size() != out.size()) throw py::value_error("x and out must have the same size");
            const detmath::LogFactorialTable table;
            for (py::ssize_t i = 0; i < x.size(); ++i) {
                if (op == "log") op_[i] = detmath::log(xp[i]);
                else if (op == "log1p") op_[i] = detmath::log1p(xp[i]);
                else if (op == "exp") op_[i] = detmath::exp(xp[i]);
                else if (op == "log_factorial") op_[i] = detmath::log_factorial(xp[i], table);
                else throw py::value_error("unknown op " + op);
            }
        },
        py::arg("op"), py::arg("x"), py::arg("out"),
        "The samplers' own log, log1p, exp and log k! (k integral, 0 <= k < 2**53) of float64 x.");

    m.def(
        "noise_draws",
        [](const std::string& kind, uint64_t seed, uint64_t index, Pair num, Pair den, bool portable, py::array& out) {
            uint64_t* p = output<uint64_t>(out, "out");
            if (out.size() % 2) throw py::value_error("out must have an even size");
            const uint64_t count = static_cast<uint64_t>(out.size()) / 2;
#if defined(DPREC_HAVE_BUILTIN_INT128)
            if (!portable) return draws<U128Builtin>(kind, seed, index, num, den, p, count);
#else
            if (!portable) throw py::value_error("this compiler has no unsigned __int128");
#endif
            draws<U128Portable>(kind, seed, index, num, den, p, count);
        },
        py::arg("kind"), py::arg("seed"), py::arg("index"), py::arg("num"), py::arg("den"), py::arg("portable"),
        py::arg("out"),
        "Successive draws of one primitive (uniform_below, uniform_below64, bernoulli, bernoulli64, "
        "bernoulli_half, bernoulli_exp, uniform01 (its float64 bits), discrete_laplace with t = den) from element "
        "index's stream, as (hi, lo) pairs into uint64 out.");

    m.def(
        "discrete_gaussian",
        [](uint64_t seed, double sigma, py::array& out, bool portable) {
            if (!(sigma > 0.0 && sigma <= 16777216.0)) throw py::value_error("sigma must be in (0, 2**24]");
            int64_t* p = output<int64_t>(out, "out");
            const uint64_t n = static_cast<uint64_t>(out.size());
#if !defined(DPREC_HAVE_BUILTIN_INT128)
            if (!portable) throw py::value_error("this compiler has no unsigned __int128");
#endif
            py::gil_scoped_release release;
#if defined(DPREC_HAVE_BUILTIN_INT128)
            if (!portable) return gaussian<U128Builtin>(seed, sigma, p, n);
#endif
            gaussian<U128Portable>(seed, sigma, p, n);
        },
        py::arg("seed"), py::arg("sigma"), py::arg("out"), py::arg("portable"),
        "The discrete Gaussian sampler, single-threaded, on the portable or the builtin 128-bit type.");
}

}  // namespace dprec::bind
