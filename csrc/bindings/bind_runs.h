// The copy and update benchmarks' results (common/timer.h), bound the same way in both modules.
// module_local: _core and _cuda each have their own Python class of the same shape.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/timer.h"

namespace gdl::bind {

inline void bind_runs(pybind11::module_& m) {
  namespace py = pybind11;
  py::class_<CopyRun>(m, "CopyRun", py::module_local(), "Samples of a copy benchmark and its check.")
      .def_readonly("samples_us", &CopyRun::samples_us, "one per sample: `copies` back-to-back copies")
      .def_readonly("wrong_bytes", &CopyRun::wrong_bytes, "destination bytes that differ from the source");
  py::class_<UpdateRun>(m, "UpdateRun", py::module_local(), "Samples of the SGD update and its same-traffic copy.")
      .def_readonly("update_us", &UpdateRun::update_us)
      .def_readonly("copy_us", &UpdateRun::copy_us)
      .def_readonly("copy_bytes", &UpdateRun::copy_bytes);
}

}  // namespace gdl::bind
