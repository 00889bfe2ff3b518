// Checked access to NumPy buffers for the bindings. The Python layer converts user
// input; these checks are the last line of defence against a wrong dtype, a
// non-contiguous view or a read-only output reaching a raw pointer.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace dprec::bind {

namespace py = pybind11;

template <class T>
void check_array(const py::array& a, const char* name, bool writeable) {
    if (!a.dtype().is(py::dtype::of<T>()))
        throw py::type_error(std::string(name) + " must have dtype " + std::string(py::str(py::dtype::of<T>())) +
                             ", got " + std::string(py::str(a.dtype())));
    if (a.ndim() != 1) throw py::value_error(std::string(name) + " must be 1-D, got " + std::to_string(a.ndim()) + "-D");
    if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
    if (writeable && !a.writeable()) throw py::value_error(std::string(name) + " must be writeable");
}

template <class T>
const T* input(const py::array& a, const char* name) {
    check_array<T>(a, name, false);
    return static_cast<const T*>(a.data());
}

template <class T>
T* output(py::array& a, const char* name) {
    check_array<T>(a, name, true);
    return static_cast<T*>(a.mutable_data());
}

inline bool has_dtype(const py::array& a, const py::dtype& dt) { return a.dtype().is(dt); }

}  // namespace dprec::bind
