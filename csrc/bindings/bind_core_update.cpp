// Bindings for the SGD update and host copies (cpu/sgd.h, cpu/copy.h): a numpy entry point for
// checks, the benchmarks, and the top-k encode of gdlbench compress (cpu/compress.h).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <vector>

#include "bind_core.h"
#include "bind_runs.h"
#include "bind_util.h"
#include "cpu/compress.h"
#include "cpu/copy.h"
#include "cpu/sgd.h"

namespace py = pybind11;

namespace gdl::bind {

void bind_update(py::module_& m) {
  bind_runs(m);
  m.def(
      "sgd_update",
      [](py::array w, py::array g, py::array v, float lr, float momentum, float wd) {
        float* pw = host_data<float>(w, "w");
        float* pg = host_data<float>(g, "g");
        float* pv = host_data<float>(v, "v");
        GDL_REQUIRE(w.size() == g.size() && w.size() == v.size(), "sgd_update: w, g and v differ in size");
        py::gil_scoped_release nogil;
        cpu::sgd_update(pw, pg, pv, w.size(), lr, momentum, wd);
      },
      py::arg("w"), py::arg("g"), py::arg("v"), py::arg("lr"), py::arg("momentum"), py::arg("wd"),
      "In place: v = momentum*v + (g + wd*w); w -= lr*v (PyTorch's SGD convention), float32 arrays.");
  m.def(
      "update_bench",
      [](int64_t n, float lr, float momentum, float wd, int warmup, int iters, int threads) {
        py::gil_scoped_release nogil;
        return cpu::update_bench(n, lr, momentum, wd, TimingPlan{warmup, iters}, threads);
      },
      py::arg("n"), py::arg("lr"), py::arg("momentum"), py::arg("wd"), py::arg("warmup"), py::arg("iters"),
      py::arg("threads"),
      "Time sgd_update over n parameters, interleaved with a memcpy of 10n bytes (host steady clock): UpdateRun.");
  m.def(
      "copy_bench",
      [](std::size_t nbytes, int copies, int warmup, int iters, int threads) {
        py::gil_scoped_release nogil;
        return cpu::copy_bench(nbytes, copies, TimingPlan{warmup, iters}, threads);
      },
      py::arg("nbytes"), py::arg("copies"), py::arg("warmup"), py::arg("iters"), py::arg("threads"),
      "Time `copies` memcpys of nbytes per sample between touched buffers: CopyRun.");
  m.def(
      "topk_encode",
      [](py::array g, double ratio) {
        const float* pg = host_data<float>(g, "g");
        const auto n = static_cast<std::size_t>(g.size());
        const std::size_t k = cpu::topk_count(n, ratio);
        py::array_t<int32_t> indices(k);
        py::array_t<float> values(k);
        std::vector<float> scratch(n);
        int32_t* pi = indices.mutable_data();
        float* pv = values.mutable_data();
        {
          py::gil_scoped_release nogil;
          cpu::topk_encode(pg, n, k, scratch.data(), pi, pv);
        }
        return py::make_tuple(indices, values);
      },
      py::arg("g"), py::arg("ratio"),
      "Top-k encode of a float32 gradient at compression ratio r: (indices, values), k = n / (2r).");
  m.def(
      "topk_encode_time",
      [](std::size_t n, double ratio, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return cpu::time_topk_encode(n, ratio, TimingPlan{warmup, iters});
      },
      py::arg("n"), py::arg("ratio"), py::arg("warmup"), py::arg("iters"),
      "Time the top-k encode of n float32 values at ratio r: samples in us (host steady clock).");
  m.def(
      "topk_encode_timed_output",
      [](std::size_t n, double ratio) {
        cpu::TopkTimedOutput out;
        {
          py::gil_scoped_release nogil;
          cpu::time_topk_encode(n, ratio, TimingPlan{0, 1}, &out);
        }
        return py::make_tuple(py::array_t<float>(out.g.size(), out.g.data()),
                              py::array_t<int32_t>(out.indices.size(), out.indices.data()),
                              py::array_t<float>(out.values.size(), out.values.data()));
      },
      py::arg("n"), py::arg("ratio"),
      "One encode through the timed loop's code and buffers: (gradient, indices, values), for the check.");
}

}  // namespace gdl::bind
