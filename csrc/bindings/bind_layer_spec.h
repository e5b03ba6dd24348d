// Conversion of a Python layer spec (a dict from Network.layer_specs()) into gdl::LayerSpec. Header-only
// so that both native modules (_core and _cuda) parse specs the same way.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common/layer_spec.h"

namespace gdl::bind {
namespace py = pybind11;

inline LayerSpec spec_from_dict(const py::dict& d, int batch) {
  LayerSpec s;
  s.name = d.contains("name") ? py::str(d["name"]).cast<std::string>() : "layer";
  GDL_REQUIRE(d.contains("type"), "layer spec ", s.name, ": no 'type'");
  s.type = d["type"].cast<std::string>();
  if (d.contains("inputs")) s.inputs = d["inputs"].cast<std::vector<int>>();
  GDL_REQUIRE(d.contains("in_shapes") && d.contains("out_shape"), "layer spec ", s.name,
              ": needs 'in_shapes' and 'out_shape'");
  s.in_shapes = d["in_shapes"].cast<std::vector<Shape>>();
  s.out_shape = d["out_shape"].cast<Shape>();
  if (d.contains("param_shapes")) s.param_shapes = d["param_shapes"].cast<std::vector<Shape>>();
  if (d.contains("attrs")) {
    for (auto kv : d["attrs"].cast<py::dict>()) {
      const auto key = py::str(kv.first).cast<std::string>();
      const auto& v = kv.second;
      if (py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) {
        s.attrs[key] = v.cast<double>();
      } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
        // network.py writes 2-D geometry as [h, w]: kernels read key_h and key_w.
        const auto hw = v.cast<std::vector<double>>();
        GDL_REQUIRE(hw.size() == 2, "layer spec ", s.name, ": attribute '", key, "' must be a number or [h, w]");
        s.attrs[key + "_h"] = hw[0];
        s.attrs[key + "_w"] = hw[1];
      }  // other attributes (strings) are for people, not kernels
    }
  }
  GDL_REQUIRE(!s.in_shapes.empty(), "layer spec ", s.name, ": no inputs");
  GDL_REQUIRE(batch >= 1, "batch must be >= 1, got ", batch);
  s.batch = batch;
  return s;
}

}  // namespace gdl::bind
