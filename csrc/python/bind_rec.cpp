// DP-REC kernels: log-likelihood-ratio dot products, Gumbel-max, aggregation.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "../cpu/rec.h"
#include "arrays.h"
#include "checks.h"

namespace py = pybind11;

namespace dprec::bind {

namespace {

// The segment bounds of a flat batch of `total` values split into out.size() segments:
// offsets[0] = 0, strictly increasing, offsets[-1] = total.
const int64_t* segment_offsets(const py::array& offsets, const py::array& out, py::ssize_t total) {
    const int64_t* off = input<int64_t>(offsets, "offsets");
    const py::ssize_t n = out.size();
    if (offsets.size() != n + 1) throw py::value_error("offsets must have one more element than out");
    if (off[0] != 0 || off[n] != static_cast<int64_t>(total))
        throw py::value_error("offsets must start at 0 and end at logits.size");
    for (py::ssize_t i = 0; i < n; ++i)
        if (off[i + 1] <= off[i]) throw py::value_error("offsets must be strictly increasing");
    return off;
}

// The groups of rec_dot_products_groups / rec_sample_groups, checked: each row of `groups` is
// (tensor, start, size, group id), its logits go to [offsets[g], offsets[g+1]) of n_logits.
struct GroupSpecs {
    std::vector<py::array> arrays;  // the tensors, kept alive (and checked: 1-D, float32/float64)
    std::vector<cpu::RecGroup> groups;

    GroupSpecs(const py::list& tensors, const py::array& rows_array, const py::array& offsets, const py::array& factors,
               uint64_t n_logits, const char* logits_size) {
        arrays.reserve(tensors.size());
        for (size_t t = 0; t < tensors.size(); ++t) {
            const std::string name = "tensors[" + std::to_string(t) + "]";
            if (!py::isinstance<py::array>(tensors[t])) throw py::type_error(name + " must be a numpy.ndarray");
            py::array a = py::reinterpret_borrow<py::array>(tensors[t]);
            if (has_dtype(a, py::dtype::of<float>()))
                input<float>(a, name.c_str());
            else
                input<double>(a, name.c_str());
            arrays.push_back(a);
        }
        const uint64_t* rows = input<uint64_t>(rows_array, "groups");
        const int64_t* off = input<int64_t>(offsets, "offsets");
        const double* fac = input<double>(factors, "factors");
        if (rows_array.size() % 4 != 0)
            throw py::value_error("groups must hold rows of 4 (tensor, start, size, group), got " +
                                  std::to_string(rows_array.size()) + " values");
        const size_t n = static_cast<size_t>(rows_array.size() / 4);
        if (offsets.size() != static_cast<py::ssize_t>(n + 1) || factors.size() != static_cast<py::ssize_t>(n))
            throw py::value_error("offsets must have one more element than there are groups, factors one per group");
        if (off[0] != 0 || off[n] != static_cast<int64_t>(n_logits))
            throw py::value_error(std::string("offsets must start at 0 and end at ") + logits_size);
        groups.resize(n);
        for (size_t g = 0; g < n; ++g) {
            const uint64_t* r = rows + 4 * g;
            const std::string name = "groups[" + std::to_string(g) + "]";
            if (r[0] >= arrays.size()) throw py::value_error(name + " names a tensor index out of range");
            const py::array& a = arrays[static_cast<size_t>(r[0])];
            const uint64_t size = static_cast<uint64_t>(a.size());
            if (r[2] == 0 || r[1] > size || r[2] > size - r[1])
                throw py::value_error(name + ": start and size must select 1 or more elements of its tensor");
            check_stream_range(0, r[2]);
            if (r[3] > 0xffffffffu) throw py::value_error(name + ": the group id must be < 2**32");
            const int64_t k = off[g + 1] - off[g];
            if (k < 1 || k > (int64_t(1) << 24))
                throw py::value_error("offsets: group " + std::to_string(g) + " must have 1 .. 2**24 candidates");
            const bool f64 = !has_dtype(a, py::dtype::of<float>());
            const char* first = static_cast<const char*>(a.data()) + r[1] * static_cast<uint64_t>(a.itemsize());
            groups[g] = cpu::RecGroup{first, f64, r[2], static_cast<uint32_t>(r[3]), static_cast<uint32_t>(k),
                                      static_cast<uint64_t>(off[g]), fac[g]};
        }
    }
};

// The 53-bit words of the Gumbel noise: uint64, n of them, each < 2**53.
const uint64_t* checked_words(const py::array& words, py::ssize_t n) {
    const uint64_t* w = input<uint64_t>(words, "words");
    if (words.size() != n) throw py::value_error("words must have the size of logits");
    for (py::ssize_t i = 0; i < n; ++i)
        if (w[i] >> 53) throw py::value_error("words must be < 2**53 (53-bit uniform integers)");
    return w;
}

}  // namespace

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
        "rec_dot_products_groups",
        [](const py::list& tensors, uint64_t seed, const py::array& groups, const py::array& offsets,
           const py::array& factors, py::array& out) {
            double* o = output<double>(out, "out");
            const GroupSpecs specs(tensors, groups, offsets, factors, static_cast<uint64_t>(out.size()), "out.size");
            py::gil_scoped_release release;
            cpu::rec_dot_products_groups(specs.groups.data(), specs.groups.size(), seed, o);
        },
        py::arg("tensors"), py::arg("seed"), py::arg("groups"), py::arg("offsets"), py::arg("factors"), py::arg("out"));

    m.def(
        "rec_sample_groups",
        [](const py::list& tensors, uint64_t seed, const py::array& groups, const py::array& offsets,
           const py::array& factors, const py::array& words, py::array& logits, py::array& indices) {
            double* l = output<double>(logits, "logits");
            int64_t* idx = output<int64_t>(indices, "indices");
            const uint64_t* w = checked_words(words, logits.size());
            const GroupSpecs specs(tensors, groups, offsets, factors, static_cast<uint64_t>(logits.size()),
                                   "logits.size");
            if (indices.size() != static_cast<py::ssize_t>(specs.groups.size()))
                throw py::value_error("indices must have one element per group");
            py::gil_scoped_release release;
            return cpu::rec_sample_groups(specs.groups.data(), specs.groups.size(), seed, w,
                                          static_cast<uint64_t>(logits.size()), l, idx);
        },
        py::arg("tensors"), py::arg("seed"), py::arg("groups"), py::arg("offsets"), py::arg("factors"),
        py::arg("words"), py::arg("logits"), py::arg("indices"),
        "rec_dot_products_groups into logits, then each group's Gumbel-max index of the noise of words; "
        "returns 0 when every logit is finite, 1 for an infinity, 2 for a NaN.");

    m.def(
        "gumbel_argmax_groups",
        [](const py::array& logits, const py::array& gumbel, const py::array& offsets, py::array& out) {
            const double* l = input<double>(logits, "logits");
            const double* g = input<double>(gumbel, "gumbel");
            if (gumbel.size() != logits.size()) throw py::value_error("gumbel must have the size of logits");
            const int64_t* off = segment_offsets(offsets, out, logits.size());
            cpu::gumbel_argmax_groups(l, g, off, static_cast<size_t>(out.size()), output<int64_t>(out, "out"));
        },
        py::arg("logits"), py::arg("gumbel"), py::arg("offsets"), py::arg("out"));

    m.def(
        "gumbel_argmax_words_groups",
        [](const py::array& logits, const py::array& words, const py::array& offsets, py::array& out) {
            const double* l = input<double>(logits, "logits");
            const uint64_t* w = checked_words(words, logits.size());
            const int64_t* off = segment_offsets(offsets, out, logits.size());
            cpu::gumbel_argmax_words_groups(l, w, off, static_cast<size_t>(out.size()), output<int64_t>(out, "out"));
        },
        py::arg("logits"), py::arg("words"), py::arg("offsets"), py::arg("out"));

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
