// The raw Philox stream and its normals.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "../common/philox.h"
#include "../cpu/dispatch.h"
#include "../cpu/rec.h"
#include "arrays.h"
#include "checks.h"

namespace py = pybind11;

namespace dprec::bind {

void bind_philox(py::module_& m) {
    m.def(
        "philox4x32",
        [](const py::array& counter, uint32_t k0, uint32_t k1, py::array& out) {
            const uint32_t* c = input<uint32_t>(counter, "counter");
            uint32_t* o = output<uint32_t>(out, "out");
            if (counter.size() % 4 != 0) throw py::value_error("counter must hold a multiple of 4 words");
            if (out.size() != counter.size()) throw py::value_error("out must have the size of counter");
            const size_t n = static_cast<size_t>(counter.size() / 4);
            py::gil_scoped_release release;
            for (size_t i = 0; i < n; ++i) {
                const Block4 b = philox4x32_10(c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3], k0, k1);
                for (int j = 0; j < 4; ++j) o[4 * i + j] = b.w[j];
            }
        },
        py::arg("counter"), py::arg("k0"), py::arg("k1"), py::arg("out"));

    m.def(
        "normal_transform",
        [](const py::array& radius_words, const py::array& angle_words, py::array& cos_out, py::array& sin_out) {
            const uint32_t* r = input<uint32_t>(radius_words, "radius_words");
            const uint32_t* a = input<uint32_t>(angle_words, "angle_words");
            float* c = output<float>(cos_out, "cos_out");
            float* s = output<float>(sin_out, "sin_out");
            const py::ssize_t n = radius_words.size();
            if (angle_words.size() != n || cos_out.size() != n || sin_out.size() != n)
                throw py::value_error("radius_words, angle_words, cos_out and sin_out must have the same size");
            py::gil_scoped_release release;
            cpu::kernels().transform(r, a, static_cast<size_t>(n), c, s);
        },
        py::arg("radius_words"), py::arg("angle_words"), py::arg("cos_out"), py::arg("sin_out"));

    m.def(
        "stream_words",
        [](uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain, uint64_t offset, py::array& out) {
            uint32_t* o = output<uint32_t>(out, "out");
            const uint64_t count = static_cast<uint64_t>(out.size());
            check_stream_range(offset, count);
            py::gil_scoped_release release;
            cpu::fill_words(StreamId{seed, substream, group, domain}, offset, count, o);
        },
        py::arg("seed"), py::arg("substream"), py::arg("group"), py::arg("domain"), py::arg("offset"),
        py::arg("out"));

    m.def(
        "stream_normals",
        [](uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain, uint64_t offset, float scale,
           py::array& out) {
            float* o = output<float>(out, "out");
            const uint64_t count = static_cast<uint64_t>(out.size());
            check_stream_range(offset, count);
            py::gil_scoped_release release;
            cpu::fill_normals(StreamId{seed, substream, group, domain}, offset, count, scale, o);
        },
        py::arg("seed"), py::arg("substream"), py::arg("group"), py::arg("domain"), py::arg("offset"),
        py::arg("scale"), py::arg("out"));
}

}  // namespace dprec::bind
