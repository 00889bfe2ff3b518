// Discrete noise for secure aggregation: exact discrete Gaussian and Skellam samplers (Philox
// domain 5, element i from substream i mod 2^32, group i >> 32).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "../cpu/discrete_noise.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

constexpr uint64_t kMaxNoiseSamples = uint64_t(1) << 40;  // dprec.constants.MAX_NOISE_SAMPLES

std::string repr(double v) {
    std::ostringstream s;
    s.precision(17);
    s << v;
    return s.str();
}

// 0 < value <= limit, finite (NaN fails every comparison).
void check_scale(double value, double limit, const char* name, const char* limit_text) {
    if (!(value > 0.0 && value <= limit))
        throw py::value_error(std::string(name) + " must be finite, > 0 and <= " + limit_text + ", got " + repr(value));
}

int64_t* noise_output(py::array& out) {
    int64_t* p = output<int64_t>(out, "out");
    if (static_cast<uint64_t>(out.size()) > kMaxNoiseSamples)
        throw py::value_error("out must have at most 2**40 elements, got " + std::to_string(out.size()));
    return p;
}

}  // namespace

void bind_noise(py::module_& m) {
    m.def(
        "discrete_gaussian",
        [](uint64_t seed, double sigma, py::array& out) {
            check_scale(sigma, cpu::kMaxDiscreteGaussianSigma, "sigma", "2**24");
            int64_t* p = noise_output(out);
            const uint64_t n = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            cpu::discrete_gaussian(seed, sigma, p, n);
        },
        py::arg("seed"), py::arg("sigma"), py::arg("out"),
        "out[i] <- N_Z(0, sigma**2), exact (Canonne-Kamath-Steinke); out 1-D C-contiguous int64.");

    m.def(
        "skellam",
        [](uint64_t seed, double variance, py::array& out) {
            check_scale(variance, cpu::kMaxSkellamVariance, "variance", "2**48");
            int64_t* p = noise_output(out);
            const uint64_t n = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            cpu::skellam(seed, variance, p, n);
        },
        py::arg("seed"), py::arg("variance"), py::arg("out"),
        "out[i] <- Poisson(variance/2) - Poisson(variance/2); out 1-D C-contiguous int64.");
}

}  // namespace dprec::bind
