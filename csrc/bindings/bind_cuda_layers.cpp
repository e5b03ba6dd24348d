// Bindings for one CUDA layer on its own (cuda/layer_bench.h, the twin of _core.LayerBench), the
// SGD update and the copy benchmark.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bind_cuda.h"
#include "bind_layer_bench.h"
#include "bind_runs.h"
#include "bind_util.h"
#include "cuda/copy.h"
#include "cuda/layer.h"
#include "cuda/layer_bench.h"
#include "cuda/sgd.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

// One step of the CUDA kernel on host arrays (copied in and back), for checks against numpy.
void sgd_update_host(py::array w, py::array g, py::array v, float lr, float momentum, float wd) {
  float* pw = host_data<float>(w, "w");
  float* pg = host_data<float>(g, "g");
  float* pv = host_data<float>(v, "v");
  GDL_REQUIRE(w.size() == g.size() && w.size() == v.size(), "sgd_update: w, g and v differ in size");
  py::gil_scoped_release nogil;
  cuda::sgd_update_host(pw, pg, pv, w.size(), lr, momentum, wd);
}

}  // namespace

void bind_cuda_layers(py::module_& m) {
  m.def("layer_types", &cuda::layer_types, "CUDA layer types the executor can build.");
  bind_layer_bench<cuda::LayerBench>(m, "One CUDA layer with its own device buffers, for timing and checking.",
                                     "CUDA-event");
  bind_runs(m);
  m.def(
      "update_bench",
      [](int64_t n, float lr, float momentum, float wd, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return cuda::update_bench(n, lr, momentum, wd, TimingPlan{warmup, iters});
      },
      py::arg("n"), py::arg("lr"), py::arg("momentum"), py::arg("wd"), py::arg("warmup"), py::arg("iters"),
      "Time the SGD kernel over n parameters, interleaved with a device-to-device copy of 10n bytes "
      "(CUDA events): UpdateRun.");
  m.def("sgd_update_host", &sgd_update_host, py::arg("w"), py::arg("g"), py::arg("v"), py::arg("lr"),
        py::arg("momentum"), py::arg("wd"), "One CUDA SGD step on float32 host arrays, in place (for checks).");
  m.def(
      "copy_bench",
      [](const std::string& direction, bool pinned, std::size_t nbytes, int copies, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return cuda::copy_bench(direction, pinned, nbytes, copies, warmup, iters);
      },
      py::arg("direction"), py::arg("pinned"), py::arg("nbytes"), py::arg("copies"), py::arg("warmup"),
      py::arg("iters"), "Copy bandwidth samples: CopyRun; one sample = `copies` copies.");
}

}  // namespace gdl::bind
