// The Python class LayerBench of both modules (cpu::LayerBench in _core, cuda::LayerBench in
// _cuda): one binding, so both keep the same constructor, time() and run(), and tests compare the
// two on the same inputs. numpy arrays in, flat float32 arrays out.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bind_layer_spec.h"
#include "common/layer_bench.h"
#include "common/timer.h"

namespace gdl::bind {
namespace py = pybind11;

using farray = py::array_t<float, py::array::c_style | py::array::forcecast>;

inline Floats floats(const farray& a) { return Floats{a.data(), static_cast<int64_t>(a.size())}; }

inline std::vector<Floats> floats(const std::vector<farray>& v) {
  std::vector<Floats> out;
  for (const auto& a : v) out.push_back(floats(a));
  return out;
}

inline py::array_t<float> to_array(const std::vector<float>& v) {
  return py::array_t<float>(static_cast<py::ssize_t>(v.size()), v.data());
}

template <class Bench>
void bind_layer_bench(py::module_& m, const char* doc, const char* clock) {
  py::class_<Bench>(m, "LayerBench", doc)
      .def(py::init([](const py::dict& spec, int batch) {
             const LayerSpec s = spec_from_dict(spec, batch);
             py::gil_scoped_release nogil;  // buffers are allocated and filled here
             return std::make_unique<Bench>(s);
           }),
           py::arg("spec"), py::arg("batch"))
      .def(
          "time",
          [](Bench& b, const std::string& pass, int warmup, int iters) {
            const LayerPass p = parse_layer_pass(pass);
            py::gil_scoped_release nogil;
            return b.time(p, TimingPlan{warmup, iters});
          },
          py::arg("pass_"), py::arg("warmup"), py::arg("iters"),
          (std::string(clock) + " samples (us) of one pass: fwd, bwd-data, bwd-filter or bwd (both).").c_str())
      .def(
          "run",
          [](Bench& b, const std::vector<farray>& xs, const farray& dy, const std::vector<farray>& params,
             const std::vector<int32_t>& labels, const std::vector<farray>& dx_init) {
            LayerRun r;
            {
              py::gil_scoped_release nogil;
              r = b.run(floats(xs), floats(dy), floats(params), labels, floats(dx_init));
            }
            py::list dxs, dws;
            for (const auto& g : r.dx) dxs.append(to_array(g));
            for (const auto& g : r.dw) dws.append(to_array(g));
            return py::make_tuple(to_array(r.y), dxs, dws);
          },
          py::arg("inputs"), py::arg("dy"), py::arg("params"), py::arg("labels") = std::vector<int32_t>{},
          py::arg("dx_init") = std::vector<farray>{},
          "Forward + backward on these arrays: (y, [dx per input], [dw per parameter]), flat float32. "
          "dx starts at zero, or at dx_init (backward_data accumulates).")
      .def_property_readonly("param_count", &Bench::param_count);
}

}  // namespace gdl::bind
