// The QMGeo quantizer (docs/qmgeo.md; Philox domain 4) and the bit packing of its level indices.
// Validates and converts only; the kernels are in cpu/qmgeo.* and cpu/qmgeo_pack.*.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "../cpu/qmgeo.h"
#include "../cpu/qmgeo_pack.h"
#include "arrays.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

// bits in [1, 16]; with levels, also levels in [2, 2**16] and bits = ceil(log2 levels).
unsigned check_bits(int64_t bits) {
    if (bits < 1 || bits > static_cast<int64_t>(cpu::kQmgeoMaxBits))
        throw py::value_error("bits must be in [1, 16], got " + std::to_string(bits));
    return static_cast<unsigned>(bits);
}

uint32_t check_levels(int64_t levels, unsigned bits) {
    if (levels < 2 || levels > static_cast<int64_t>(cpu::kQmgeoMaxLevels))
        throw py::value_error("levels must be in [2, 2**16], got " + std::to_string(levels));
    const uint32_t r = static_cast<uint32_t>(levels);
    if (cpu::qmgeo_index_bits(r) != bits)
        throw py::value_error("bits must be ceil(log2 levels) = " + std::to_string(cpu::qmgeo_index_bits(r)) +
                              " for levels = " + std::to_string(levels) + ", got " + std::to_string(bits));
    return r;
}

uint64_t check_count(py::ssize_t n, const char* name) {
    if (static_cast<uint64_t>(n) >= cpu::kQmgeoMaxPackIndices)
        throw py::value_error(std::string(name) + " must have fewer than 2**40 indices, got " + std::to_string(n));
    return static_cast<uint64_t>(n);
}

void check_payload_size(const py::array& payload, uint64_t n, unsigned bits) {
    const uint64_t want = cpu::qmgeo_payload_bytes(n, bits);
    if (static_cast<uint64_t>(payload.size()) != want)
        throw py::value_error("payload must have ceil(n * bits / 8) = " + std::to_string(want) + " bytes for n = " +
                              std::to_string(n) + " indices of " + std::to_string(bits) + " bits, got " +
                              std::to_string(payload.size()));
}

// The ValueError for a return code of qmgeo_unpack / qmgeo_accumulate other than "fine".
void raise_corrupted(int64_t code, const uint8_t* payload, uint64_t n, unsigned bits, uint32_t levels) {
    if (code == cpu::kQmgeoPayloadOk) return;
    if (code == cpu::kQmgeoPayloadBadPadding)
        throw py::value_error("payload is corrupted: the padding bits after the last index (the top " +
                              std::to_string(8 * cpu::qmgeo_payload_bytes(n, bits) - n * bits) +
                              " bits of the last byte) are not zero");
    const uint64_t i = static_cast<uint64_t>(code);
    throw py::value_error("payload is corrupted: index i = " + std::to_string(i) + " is " +
                          std::to_string(cpu::qmgeo_index_at(payload, i, bits)) + " >= levels = " +
                          std::to_string(levels));
}

}  // namespace

void bind_qmgeo(py::module_& m) {
    m.def(
        "qmgeo_quantize",
        [](const py::array& w, uint64_t seed, uint32_t group, double w_max, int64_t levels, double p,
           py::array& out) {
            if (w.size() != out.size())
                throw py::value_error("w and out must have the same size, got " + std::to_string(w.size()) + " and " +
                                      std::to_string(out.size()));
            const uint64_t n = static_cast<uint64_t>(w.size());
            if (n > cpu::kQmgeoMaxElements)
                throw py::value_error("w must have at most 2**33 elements (two Philox words each), got " +
                                      std::to_string(n));
            if (!(std::isfinite(w_max) && w_max > 0.0))
                throw py::value_error("w_max must be finite and > 0, got " + std::to_string(w_max));
            if (levels < 2 || levels > static_cast<int64_t>(cpu::kQmgeoMaxLevels))
                throw py::value_error("levels must be in [2, 2**16], got " + std::to_string(levels));
            if (!(p >= cpu::kQmgeoMinP && p <= 1.0))
                throw py::value_error("p must be in [2**-512, 1], got " + std::to_string(p));
            const uint32_t r = static_cast<uint32_t>(levels);
            uint16_t* op = output<uint16_t>(out, "out");
            bool ok;
            if (has_dtype(w, py::dtype::of<float>())) {  // widened in the kernel: no float64 copy
                const float* wp = input<float>(w, "w");
                py::gil_scoped_release release;
                ok = cpu::qmgeo_quantize(wp, n, seed, group, w_max, r, p, op);
            } else {
                const double* wp = input<double>(w, "w");
                py::gil_scoped_release release;
                ok = cpu::qmgeo_quantize(wp, n, seed, group, w_max, r, p, op);
            }
            if (!ok) throw py::value_error("w must be finite (it contains NaN or infinite values)");
        },
        py::arg("w"), py::arg("seed"), py::arg("group"), py::arg("w_max"), py::arg("levels"), py::arg("p"),
        py::arg("out"),
        "QMGeo level indices of the float32 or float64 w into the uint16 out (docs/qmgeo.md corrected pmf; Philox (seed, substream "
        "0 and 1, group, domain 4)).");

    m.def(
        "qmgeo_pack",
        [](const py::array& indices, int64_t bits, py::array& out) {
            const unsigned b = check_bits(bits);
            const uint64_t n = check_count(indices.size(), "indices");
            const uint16_t* ip = input<uint16_t>(indices, "indices");
            uint8_t* op = output<uint8_t>(out, "out");
            if (static_cast<uint64_t>(out.size()) != cpu::qmgeo_payload_bytes(n, b))
                throw py::value_error("out must have ceil(n * bits / 8) = " +
                                      std::to_string(cpu::qmgeo_payload_bytes(n, b)) + " bytes, got " +
                                      std::to_string(out.size()));
            py::gil_scoped_release release;
            cpu::qmgeo_pack(ip, n, b, op);
        },
        py::arg("indices"), py::arg("bits"), py::arg("out"),
        "Packs the uint16 indices (each < 2**bits, not checked here) at bits bits each, LSB first, into the uint8 "
        "out (ceil(n bits / 8) bytes, zero padding bits).");

    m.def(
        "qmgeo_unpack",
        [](const py::array& payload, int64_t bits, int64_t levels, py::array& out) {
            const unsigned b = check_bits(bits);
            const uint32_t r = check_levels(levels, b);
            const uint64_t n = check_count(out.size(), "out");
            check_payload_size(payload, n, b);
            const uint8_t* pp = input<uint8_t>(payload, "payload");
            uint16_t* op = output<uint16_t>(out, "out");
            int64_t code;
            {
                py::gil_scoped_release release;
                code = cpu::qmgeo_unpack(pp, static_cast<uint64_t>(payload.size()), n, b, r, op);
            }
            raise_corrupted(code, pp, n, b, r);
        },
        py::arg("payload"), py::arg("bits"), py::arg("levels"), py::arg("out"),
        "Unpacks len(out) indices of bits bits from the uint8 payload into the uint16 out; ValueError when an index "
        "is >= levels or a padding bit is set.");

    m.def(
        "qmgeo_accumulate",
        [](const py::array& payload, int64_t bits, int64_t levels, double coef, double low, double step,
           py::array& acc) {
            const unsigned b = check_bits(bits);
            const uint32_t r = check_levels(levels, b);
            if (!(std::isfinite(coef) && std::isfinite(low) && std::isfinite(step)))
                throw py::value_error("coef, low and step must be finite, got " + std::to_string(coef) + ", " +
                                      std::to_string(low) + " and " + std::to_string(step));
            const uint64_t n = check_count(acc.size(), "acc");
            check_payload_size(payload, n, b);
            const uint8_t* pp = input<uint8_t>(payload, "payload");
            double* ap = output<double>(acc, "acc");
            int64_t code;
            {
                py::gil_scoped_release release;
                code = cpu::qmgeo_accumulate(pp, static_cast<uint64_t>(payload.size()), n, b, r, coef, low, step, ap);
            }
            raise_corrupted(code, pp, n, b, r);
        },
        py::arg("payload"), py::arg("bits"), py::arg("levels"), py::arg("coef"), py::arg("low"), py::arg("step"),
        py::arg("acc"),
        "acc[i] += coef * (low + j_i * step) (float64, as written) for the len(acc) indices j_i of bits bits in the "
        "uint8 payload; ValueError (acc unchanged) when an index is >= levels or a padding bit is set.");
}

}  // namespace dprec::bind
