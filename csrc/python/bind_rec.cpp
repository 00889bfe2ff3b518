// DP-REC kernels: log-likelihood-ratio dot products, Gumbel-max, aggregation.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "../cpu/rec.h"
#include "arrays.h"
#include "checks.h"

namespace py = pybind11;

namespace dprec::bind {

void bind_rec(py::module_& m) {
    m.def(
        "rec_dot_products",
        [](const py::array& phi, uint64_t seed, uint32_t group, py::array& out) {
            double* o = output<double>(out, "out");
            const uint64_t d = static_cast<uint64_t>(phi.size());
            const uint64_t n = static_cast<uint64_t>(out.size());
            if (d == 0) throw py::value_error("phi must not be empty");
            check_stream_range(0, d);
            if (n == 0 || n > (uint64_t(1) << 24))
                throw py::value_error("out (one slot per candidate) must have 1 .. 2**24 elements, got " +
                                      std::to_string(n));
            if (has_dtype(phi, py::dtype::of<float>())) {
                const float* p = input<float>(phi, "phi");
                py::gil_scoped_release release;
                cpu::rec_dot_products(p, d, seed, group, static_cast<uint32_t>(n), o);
            } else {
                const double* p = input<double>(phi, "phi");
                py::gil_scoped_release release;
                cpu::rec_dot_products(p, d, seed, group, static_cast<uint32_t>(n), o);
            }
        },
        py::arg("phi"), py::arg("seed"), py::arg("group"), py::arg("out"));

    m.def(
        "rec_accumulate",
        [](py::array& out, uint32_t group, const py::array& seeds, const py::array& indices, const py::array& coefs) {
            const uint64_t* s = input<uint64_t>(seeds, "seeds");
            const uint32_t* k = input<uint32_t>(indices, "indices");
            const double* c = input<double>(coefs, "coefs");
            if (indices.size() != seeds.size() || coefs.size() != seeds.size())
                throw py::value_error("seeds, indices and coefs must have the same length");
            const uint64_t d = static_cast<uint64_t>(out.size());
            if (d == 0) throw py::value_error("out must not be empty");
            check_stream_range(0, d);
            const size_t n = static_cast<size_t>(seeds.size());
            if (has_dtype(out, py::dtype::of<float>())) {
                float* o = output<float>(out, "out");
                py::gil_scoped_release release;
                cpu::rec_accumulate(o, d, group, s, k, c, n);
            } else {
                double* o = output<double>(out, "out");
                py::gil_scoped_release release;
                cpu::rec_accumulate(o, d, group, s, k, c, n);
            }
        },
        py::arg("out"), py::arg("group"), py::arg("seeds"), py::arg("indices"), py::arg("coefs"));

    m.def(
        "gumbel_argmax",
        [](const py::array& logits, const py::array& gumbel) {
            const double* l = input<double>(logits, "logits");
            const double* g = input<double>(gumbel, "gumbel");
            if (logits.size() == 0) throw py::value_error("logits must not be empty");
            if (gumbel.size() != logits.size()) throw py::value_error("gumbel must have the size of logits");
            const size_t n = static_cast<size_t>(logits.size());
            py::gil_scoped_release release;
            return cpu::gumbel_argmax(l, g, n);
        },
        py::arg("logits"), py::arg("gumbel"));
}

}  // namespace dprec::bind
