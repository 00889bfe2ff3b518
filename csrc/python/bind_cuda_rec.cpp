// DP-REC and Philox-stream kernels on the GPU. Arrays arrive as (pointer, device) from
// the Python layer, which has taken them from the caller's framework together with the
// caller's current stream; this layer checks what Python cannot (the pointer's owner,
// alignment, counter ranges) and calls the launchers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../cuda/launch.h"
#include "arrays.h"
#include "checks.h"
#include "device_pointers.h"
#include "scratch.h"

namespace py = pybind11;

namespace dprec::bind {
namespace {

enum class FloatType { kFloat32, kFloat64 };

FloatType float_type(const std::string& dtype, const char* name) {
    if (dtype == "float32") return FloatType::kFloat32;
    if (dtype == "float64") return FloatType::kFloat64;
    throw py::type_error(std::string(name) + " must be float32 or float64 on the GPU, got " + dtype);
}

void check_candidates(uint64_t k) {
    if (k == 0 || k > (uint64_t(1) << 24))
        throw py::value_error("n_candidates must be in [1, 2**24], got " + std::to_string(k));
}

void check_clients(const py::array& seeds, const py::array& indices, const py::array& coefs) {
    input<uint64_t>(seeds, "seeds");
    input<uint32_t>(indices, "indices");
    input<double>(coefs, "coefs");
    if (seeds.size() == 0) throw py::value_error("seeds must not be empty");
    if (indices.size() != seeds.size() || coefs.size() != seeds.size())
        throw py::value_error("seeds, indices and coefs must have the same length");
}

}  // namespace

void bind_cuda_rec(py::module_& m) {
    m.def(
        "stream_normals",
        [](int device, uintptr_t stream, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
           uint64_t offset, uint64_t count, float scale, uintptr_t out) {
            checked_launch(device, stream);
            check_stream_range(offset, count);
            if (count == 0) return;
            float* o = device_pointer<float>(out, device, "out");
            py::gil_scoped_release release;
            cuda::stream_normals(device, stream, seed, substream, group, domain, offset, count, scale, o);
        },
        py::arg("device"), py::arg("stream"), py::arg("seed"), py::arg("substream"), py::arg("group"),
        py::arg("domain"), py::arg("offset"), py::arg("count"), py::arg("scale"), py::arg("out"));

    m.def(
        "stream_words",
        [](int device, uintptr_t stream, uint64_t seed, uint32_t substream, uint32_t group, uint32_t domain,
           uint64_t offset, uint64_t count, uintptr_t out) {
            checked_launch(device, stream);
            check_stream_range(offset, count);
            if (count == 0) return;
            uint32_t* o = device_pointer<uint32_t>(out, device, "out");
            py::gil_scoped_release release;
            cuda::stream_words(device, stream, seed, substream, group, domain, offset, count, o);
        },
        py::arg("device"), py::arg("stream"), py::arg("seed"), py::arg("substream"), py::arg("group"),
        py::arg("domain"), py::arg("offset"), py::arg("count"), py::arg("out"));

    m.def(
        "rec_dot_products",
        [](int device, uintptr_t stream, uintptr_t phi, const std::string& dtype, uint64_t d, uint64_t seed,
           uint32_t group, uint64_t n_candidates, double factor, uintptr_t out, const py::object& scratch) {
            checked_launch(device, stream);
            if (d == 0) throw py::value_error("phi must not be empty");
            check_stream_range(0, d);
            check_candidates(n_candidates);
            const FloatType type = float_type(dtype, "phi");
            double* o = device_pointer<double>(out, device, "out");
            const auto k = static_cast<uint32_t>(n_candidates);
            if (type == FloatType::kFloat32) {
                const float* p = device_pointer<float>(phi, device, "phi");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::rec_dot_products(device, stream, p, d, seed, group, k, factor, o);
            } else {
                const double* p = device_pointer<double>(phi, device, "phi");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::rec_dot_products(device, stream, p, d, seed, group, k, factor, o);
            }
        },
        py::arg("device"), py::arg("stream"), py::arg("phi"), py::arg("dtype"), py::arg("d"), py::arg("seed"),
        py::arg("group"), py::arg("n_candidates"), py::arg("factor"), py::arg("out"), py::arg("scratch") = py::none(),
        "out[k] = factor * <z_{group,k}, phi> for k < n_candidates, float64, asynchronous.");

    m.def(
        "generate_only",
        [](int device, uintptr_t stream, uint64_t d, uint64_t seed, uint32_t group, uint64_t n_candidates,
           const py::object& scratch) {
            checked_launch(device, stream);
            if (d == 0) throw py::value_error("d must be at least 1");
            check_stream_range(0, d);
            check_candidates(n_candidates);
            ScratchScope scope(scratch);
                py::gil_scoped_release release;
            cuda::generate_only(device, stream, d, seed, group, static_cast<uint32_t>(n_candidates));
        },
        py::arg("device"), py::arg("stream"), py::arg("d"), py::arg("seed"), py::arg("group"),
        py::arg("n_candidates"), py::arg("scratch") = py::none(),
        "Benchmark anchor: the normals of rec_dot_products, summed and discarded.");

    m.def(
        "gumbel_argmax",
        [](int device, uintptr_t stream, uintptr_t logits, const py::array& gumbel, const py::array& offsets,
           const py::object& scratch) {
            checked_launch(device, stream);
            const double* g = input<double>(gumbel, "gumbel");
            const int64_t* off = input<int64_t>(offsets, "offsets");
            if (offsets.size() < 2) throw py::value_error("offsets must hold at least one group (2 entries)");
            const auto n_groups = static_cast<uint64_t>(offsets.size() - 1);
            if (off[0] != 0) throw py::value_error("offsets[0] must be 0");
            for (uint64_t i = 0; i < n_groups; ++i)
                if (off[i + 1] <= off[i]) throw py::value_error("offsets must be strictly increasing (no empty group)");
            if (off[n_groups] != gumbel.size())
                throw py::value_error("offsets[-1] must equal the number of logits (" + std::to_string(gumbel.size()) +
                                      "), got " + std::to_string(off[n_groups]));
            const double* l = device_pointer<double>(logits, device, "logits");
            py::array_t<int64_t> result(static_cast<py::ssize_t>(n_groups));
            int64_t* r = result.mutable_data();
            {
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::gumbel_argmax(device, stream, l, g, off, n_groups, r);
            }
            return result;
        },
        py::arg("device"), py::arg("stream"), py::arg("logits"), py::arg("gumbel"), py::arg("offsets"), py::arg("scratch") = py::none(),
        "argmax_k (logits + gumbel) for each group [offsets[g], offsets[g+1]); synchronises.");

    m.def(
        "accumulate",
        [](int device, uintptr_t stream, uintptr_t out, const std::string& dtype, uint64_t d, uint32_t group,
           const py::array& seeds, const py::array& indices, const py::array& coefs,
           const py::object& scratch) {
            checked_launch(device, stream);
            if (d == 0) throw py::value_error("out must not be empty");
            check_stream_range(0, d);
            check_clients(seeds, indices, coefs);
            const auto* s = static_cast<const uint64_t*>(seeds.data());
            const auto* k = static_cast<const uint32_t*>(indices.data());
            const auto* c = static_cast<const double*>(coefs.data());
            const auto n = static_cast<uint64_t>(seeds.size());
            if (float_type(dtype, "out") == FloatType::kFloat32) {
                float* o = device_pointer<float>(out, device, "out");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::accumulate_f32(device, stream, o, d, group, s, k, c, n);
            } else {
                double* o = device_pointer<double>(out, device, "out");
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::accumulate_f64(device, stream, o, d, group, s, k, c, n);
            }
        },
        py::arg("device"), py::arg("stream"), py::arg("out"), py::arg("dtype"), py::arg("d"), py::arg("group"),
        py::arg("seeds"), py::arg("indices"), py::arg("coefs"), py::arg("scratch") = py::none());

    m.def(
        "aggregate_f32",
        [](int device, uintptr_t stream, uintptr_t out, uint64_t d, uint32_t group, const py::array& seeds,
           const py::array& indices, const py::array& coefs, const py::object& scratch) {
            checked_launch(device, stream);
            if (d == 0) throw py::value_error("out must not be empty");
            check_stream_range(0, d);
            check_clients(seeds, indices, coefs);
            float* o = device_pointer<float>(out, device, "out");
            const auto* s = static_cast<const uint64_t*>(seeds.data());
            const auto* k = static_cast<const uint32_t*>(indices.data());
            const auto* c = static_cast<const double*>(coefs.data());
            const auto n = static_cast<uint64_t>(seeds.size());
            ScratchScope scope(scratch);
                py::gil_scoped_release release;
            cuda::aggregate_f32(device, stream, o, d, group, s, k, c, n);
        },
        py::arg("device"), py::arg("stream"), py::arg("out"), py::arg("d"), py::arg("group"), py::arg("seeds"),
        py::arg("indices"), py::arg("coefs"), py::arg("scratch") = py::none(),
        "out = float32(sum_c coefs[c] * z_c) with a float64 sum from zero, in client order.");

    m.def(
        "norm_stats",
        [](int device, uintptr_t stream, const std::vector<uintptr_t>& ptrs, const std::vector<std::string>& dtypes,
           const std::vector<uint64_t>& sizes, double divisor, const py::object& scratch) {
            checked_launch(device, stream);
            if (ptrs.empty()) throw py::value_error("norm_stats needs at least one array");
            if (dtypes.size() != ptrs.size() || sizes.size() != ptrs.size())
                throw py::value_error("ptrs, dtypes and sizes must have the same length");
            if (!(divisor > 0.0) || divisor == HUGE_VAL) throw py::value_error("divisor must be finite and > 0");
            std::vector<cuda::NormInput> inputs;
            for (size_t i = 0; i < ptrs.size(); ++i) {
                const std::string name = "x[" + std::to_string(i) + "]";
                if (sizes[i] == 0) throw py::value_error(name + " must not be empty");
                const bool is_double = float_type(dtypes[i], name.c_str()) == FloatType::kFloat64;
                const void* p = is_double ? static_cast<const void*>(device_pointer<double>(ptrs[i], device, name.c_str()))
                                          : static_cast<const void*>(device_pointer<float>(ptrs[i], device, name.c_str()));
                inputs.push_back(cuda::NormInput{p, is_double, sizes[i]});
            }
            py::array_t<double> result({static_cast<py::ssize_t>(ptrs.size()), py::ssize_t(2)});
            double* r = result.mutable_data();
            {
                ScratchScope scope(scratch);
                py::gil_scoped_release release;
                cuda::norm_stats(device, stream, inputs.data(), inputs.size(), divisor, r);
            }
            return result;
        },
        py::arg("device"), py::arg("stream"), py::arg("ptrs"), py::arg("dtypes"), py::arg("sizes"), py::arg("divisor"), py::arg("scratch") = py::none(),
        "Per array: (sum of (x / divisor)**2 in float64, max |x| or NaN), shape (n, 2); one synchronisation.");

    m.def(
        "scale_f64",
        [](int device, uintptr_t stream, uintptr_t src, uint64_t n, double factor, uintptr_t dst) {
            checked_launch(device, stream);
            if (n == 0) return;
            const double* s = device_pointer<double>(src, device, "src");
            double* o = device_pointer<double>(dst, device, "dst");
            py::gil_scoped_release release;
            cuda::scale_f64(device, stream, s, n, factor, o);
        },
        py::arg("device"), py::arg("stream"), py::arg("src"), py::arg("n"), py::arg("factor"), py::arg("dst"));

    m.def(
        "to_float32",
        [](int device, uintptr_t stream, uintptr_t src, const std::string& dtype, uint64_t n, uintptr_t dst) {
            checked_launch(device, stream);
            if (n == 0) return;
            float* o = device_pointer<float>(dst, device, "dst");
            cuda::SourceType type;
            if (dtype == "float16") {
                type = cuda::SourceType::kFloat16;
                device_pointer<uint16_t>(src, device, "src");
            } else if (dtype == "bfloat16") {
                type = cuda::SourceType::kBFloat16;
                device_pointer<uint16_t>(src, device, "src");
            } else if (dtype == "float64") {
                type = cuda::SourceType::kFloat64;
                device_pointer<double>(src, device, "src");
            } else {
                throw py::type_error("src must be float16, bfloat16 or float64, got " + dtype);
            }
            py::gil_scoped_release release;
            cuda::to_float32(device, stream, reinterpret_cast<const void*>(src), type, n, o);
        },
        py::arg("device"), py::arg("stream"), py::arg("src"), py::arg("dtype"), py::arg("n"), py::arg("dst"));
}

}  // namespace dprec::bind
