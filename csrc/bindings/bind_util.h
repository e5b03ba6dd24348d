// Small helpers shared by the pybind11 modules: checked access to numpy (host) arrays.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "common/errors.h"

namespace gdl::bind {
namespace py = pybind11;

// The data pointer of a C-contiguous, writable numpy array of element type T, or a ValueError that
// names the argument.
template <class T>
T* host_data(py::array& a, const char* name) {
  GDL_REQUIRE(py::isinstance<py::array_t<T>>(a) && a.dtype().is(py::dtype::of<T>()), name,
              ": expected dtype ", std::string(py::str(py::dtype::of<T>())), ", got ",
              std::string(py::str(a.dtype())));
  GDL_REQUIRE(a.flags() & py::array::c_style, name, ": array must be C-contiguous");
  GDL_REQUIRE(a.writeable(), name, ": array must be writable");
  return static_cast<T*>(a.mutable_data());
}

}  // namespace gdl::bind
