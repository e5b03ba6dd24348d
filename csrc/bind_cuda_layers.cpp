// gdlbench._cuda: one CUDA layer on its own (the twin of _core.LayerBench: same constructor, same
// time() and run() signatures, so tests compare the two on the same inputs), plus the SGD update and
// the copy benchmark. Host arrays are copied to device buffers owned here.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>

#include "bind_cuda.h"
#include "bind_layer_spec.h"
#include "bind_util.h"
#include "common/fill.h"
#include "common/timer.h"
#include "cuda/check.h"
#include "cuda/copy.h"
#include "cuda/cuda_timer.h"
#include "cuda/device.h"
#include "cuda/layer.h"
#include "cuda/sgd.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

using farray = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::unique_ptr<cuda::DeviceBuffer> device_floats(int64_t n) {
  return std::make_unique<cuda::DeviceBuffer>(std::size_t(std::max<int64_t>(n, 1)) * sizeof(float));
}

void upload(void* dst, const float* src, int64_t n) { cuda::copy_now(dst, src, std::size_t(n) * sizeof(float)); }

py::array_t<float> download(const void* src, int64_t n) {
  py::array_t<float> out(n);
  cuda::copy_now(out.mutable_data(), src, std::size_t(n) * sizeof(float));
  return out;
}

std::vector<float> host_fill(int64_t n, uint64_t seed, float scale = 1.f) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = fill_value(seed, uint64_t(i)) * scale;
  return v;
}

// The same test data, seeds and labels as _core.LayerBench, on the device.
class CudaLayerBench {
 public:
  CudaLayerBench(const py::dict& spec, int batch) : layer_(cuda::make_layer(spec_from_dict(spec, batch))) {
    const auto& s = layer_->spec();
    for (std::size_t i = 0; i < s.in_shapes.size(); ++i) {
      const int64_t n = layer_->in_count(int(i));
      x_.push_back(device_floats(n));
      dx_.push_back(device_floats(n));
      counts_.push_back(n);
      upload(x_.back()->data(), host_fill(n, 11 + i).data(), n);
      cuda::zero_now(dx_.back()->data(), std::size_t(n) * sizeof(float));  // timed passes add into it
    }
    y_ = device_floats(layer_->out_count());
    dy_ = device_floats(layer_->out_count());
    upload(dy_->data(), host_fill(layer_->out_count(), 7).data(), layer_->out_count());
    for (const auto& p : s.param_shapes) param_count_ += numel(p);
    params_ = device_floats(param_count_);
    grads_ = device_floats(param_count_);
    upload(params_->data(), host_fill(param_count_, 5, 0.125f).data(), param_count_);
    layer_->bind_params(params_->data(), grads_->data(), sizeof(float));
    labels_ = std::make_unique<cuda::DeviceBuffer>(std::size_t(batch) * sizeof(int32_t));
    const int64_t classes = std::max<int64_t>(1, numel(s.in_shapes[0]));
    std::vector<int32_t> l(batch);
    for (int i = 0; i < batch; ++i) l[i] = static_cast<int32_t>((i * 7919) % classes);
    set_labels(l);
  }

  std::vector<double> time(const std::string& pass, int warmup, int iters) {
    GDL_REQUIRE(pass == "fwd" || pass == "bwd" || pass == "bwd-data" || pass == "bwd-filter",
                "pass must be fwd, bwd, bwd-data or bwd-filter, got '", pass, "'");
    auto xs = inputs();
    auto dxs = input_grads();
    py::gil_scoped_release nogil;
    const cudaStream_t st = cuda::context().stream;
    layer_->forward(xs, y_->data());
    TimingPlan plan{warmup, iters};
    if (pass == "fwd") return cuda::time_events(plan, st, [&] { layer_->forward(xs, y_->data()); });
    if (pass == "bwd-filter")
      return cuda::time_events(plan, st, [&] { layer_->backward_params(xs, y_->data(), dy_->data()); });
    if (pass == "bwd-data")
      return cuda::time_events(plan, st, [&] { layer_->backward_data(xs, y_->data(), dy_->data(), dxs); });
    return cuda::time_events(plan, st, [&] {
      layer_->backward_params(xs, y_->data(), dy_->data());
      layer_->backward_data(xs, y_->data(), dy_->data(), dxs);
    });
  }

  py::tuple run(const std::vector<farray>& xs, farray dy, const std::vector<farray>& params,
                std::vector<int32_t> labels) {
    const auto& s = layer_->spec();
    GDL_REQUIRE(xs.size() == x_.size(), "run: expected ", x_.size(), " inputs, got ", xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      GDL_REQUIRE(xs[i].size() == counts_[i], "run: input ", i, " has ", xs[i].size(), " elements, expected ", counts_[i]);
      upload(x_[i]->data(), xs[i].data(), counts_[i]);
    }
    GDL_REQUIRE(dy.size() == layer_->out_count(), "run: dy has ", dy.size(), " elements, expected ", layer_->out_count());
    upload(dy_->data(), dy.data(), dy.size());
    GDL_REQUIRE(params.size() == s.param_shapes.size(), "run: expected ", s.param_shapes.size(), " parameter arrays");
    for (std::size_t i = 0; i < params.size(); ++i) {
      GDL_REQUIRE(params[i].size() == numel(s.param_shapes[i]), "run: parameter ", i, " has the wrong size");
      upload(layer_->params()[i], params[i].data(), params[i].size());
    }
    if (!labels.empty()) {
      GDL_REQUIRE(int(labels.size()) == s.batch, "run: expected ", s.batch, " labels");
      set_labels(labels);
    }
    auto xp = inputs();
    auto dxp = input_grads();
    {
      py::gil_scoped_release nogil;
      const cudaStream_t st = cuda::context().stream;
      for (std::size_t i = 0; i < dx_.size(); ++i)
        CUDA_CHECK(cudaMemsetAsync(dx_[i]->data(), 0, std::size_t(counts_[i]) * sizeof(float), st));
      layer_->forward(xp, y_->data());
      layer_->backward_params(xp, y_->data(), dy_->data());
      layer_->backward_data(xp, y_->data(), dy_->data(), dxp);
      CUDA_CHECK(cudaStreamSynchronize(st));
    }
    py::list dxs, dws;
    for (std::size_t i = 0; i < dx_.size(); ++i) dxs.append(download(dx_[i]->data(), counts_[i]));
    for (std::size_t i = 0; i < s.param_shapes.size(); ++i)
      dws.append(download(layer_->grads()[i], numel(s.param_shapes[i])));
    return py::make_tuple(download(y_->data(), layer_->out_count()), dxs, dws);
  }

  int64_t param_count() const { return param_count_; }

 private:
  void set_labels(const std::vector<int32_t>& l) {
    cuda::copy_now(labels_->data(), l.data(), l.size() * sizeof(int32_t));
    layer_->set_labels(static_cast<const int32_t*>(labels_->data()));
  }
  std::vector<const void*> inputs() const {
    std::vector<const void*> v;
    for (auto& x : x_) v.push_back(x->data());
    return v;
  }
  std::vector<void*> input_grads() {
    std::vector<void*> v;
    for (auto& g : dx_) v.push_back(g->data());
    return v;
  }

  std::unique_ptr<cuda::Layer> layer_;
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> x_, dx_;
  std::vector<int64_t> counts_;
  std::unique_ptr<cuda::DeviceBuffer> y_, dy_, params_, grads_, labels_;
  int64_t param_count_ = 0;
};

// Interleaved per iteration: one update, then one device-to-device copy of 10 bytes per parameter
// (10 read + 10 written = the update's 20 bytes of traffic), each between its own pair of events.
py::dict update_bench(int64_t n, float lr, float momentum, float wd, int warmup, int iters) {
  GDL_REQUIRE(n >= 1, "update: need at least one parameter, got ", n);
  validate(TimingPlan{warmup, iters});
  std::vector<double> upd, cpy;
  const std::size_t copy_bytes = std::size_t(n) * 10;
  {
    py::gil_scoped_release nogil;
    const cudaStream_t st = cuda::default_stream();
    cuda::DeviceBuffer w(n * sizeof(float)), g(n * sizeof(float)), v(n * sizeof(float)), src(copy_bytes),
        dst(copy_bytes);
    cuda::fill(w.data(), n, cuda::DType::f32, 1);
    cuda::fill(g.data(), n, cuda::DType::f32, 2);
    CUDA_CHECK(cudaMemsetAsync(v.data(), 0, v.nbytes(), st));
    CUDA_CHECK(cudaMemsetAsync(src.data(), 1, copy_bytes, st));
    CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, copy_bytes, st));
    auto *pw = static_cast<float*>(w.data()), *pg = static_cast<float*>(g.data()), *pv = static_cast<float*>(v.data());
    for (int i = 0; i < warmup; ++i) {
      cuda::sgd_update(pw, pg, pv, n, lr, momentum, wd, st);
      CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, st));
    }
    std::vector<cudaEvent_t> ev(4 * iters);
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    struct Release {
      std::vector<cudaEvent_t>& ev;
      ~Release() {
        for (auto e : ev) cudaEventDestroy(e);
      }
    } release{ev};
    for (int i = 0; i < iters; ++i) {
      CUDA_CHECK(cudaEventRecord(ev[4 * i], st));
      cuda::sgd_update(pw, pg, pv, n, lr, momentum, wd, st);
      CUDA_CHECK(cudaEventRecord(ev[4 * i + 1], st));
      CUDA_CHECK(cudaEventRecord(ev[4 * i + 2], st));
      CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, st));
      CUDA_CHECK(cudaEventRecord(ev[4 * i + 3], st));
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (int i = 0; i < iters; ++i) {
      float a = 0.f, b = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&a, ev[4 * i], ev[4 * i + 1]));
      CUDA_CHECK(cudaEventElapsedTime(&b, ev[4 * i + 2], ev[4 * i + 3]));
      upd.push_back(1000.0 * a);
      cpy.push_back(1000.0 * b);
    }
  }
  py::dict d;
  d["update_us"] = upd;
  d["copy_us"] = cpy;
  d["copy_bytes"] = copy_bytes;
  return d;
}

// One step of the CUDA kernel on host arrays (copied in and back), for checks against numpy.
void sgd_update_host(py::array w, py::array g, py::array v, float lr, float momentum, float wd) {
  float* pw = host_data<float>(w, "w");
  float* pg = host_data<float>(g, "g");
  float* pv = host_data<float>(v, "v");
  GDL_REQUIRE(w.size() == g.size() && w.size() == v.size(), "sgd_update: w, g and v differ in size");
  const int64_t n = w.size();
  py::gil_scoped_release nogil;
  auto dw = device_floats(n), dg = device_floats(n), dv = device_floats(n);
  upload(dw->data(), pw, n);
  upload(dg->data(), pg, n);
  upload(dv->data(), pv, n);
  cuda::sgd_update(static_cast<float*>(dw->data()), static_cast<const float*>(dg->data()),
                   static_cast<float*>(dv->data()), n, lr, momentum, wd, cuda::default_stream());
  CUDA_CHECK(cudaMemcpyAsync(pw, dw->data(), n * sizeof(float), cudaMemcpyDeviceToHost, cuda::default_stream()));
  CUDA_CHECK(cudaMemcpyAsync(pv, dv->data(), n * sizeof(float), cudaMemcpyDeviceToHost, cuda::default_stream()));
  CUDA_CHECK(cudaStreamSynchronize(cuda::default_stream()));
}

}  // namespace

void bind_cuda_layers(py::module_& m) {
  m.def("layer_types", &cuda::layer_types, "CUDA layer types the executor can build.");
  py::class_<CudaLayerBench>(m, "LayerBench", "One CUDA layer with its own device buffers, for timing and checking.")
      .def(py::init<const py::dict&, int>(), py::arg("spec"), py::arg("batch"))
      .def("time", &CudaLayerBench::time, py::arg("pass_"), py::arg("warmup"), py::arg("iters"),
           "CUDA-event samples (us) of one pass: fwd, bwd-data, bwd-filter or bwd (both).")
      .def("run", &CudaLayerBench::run, py::arg("inputs"), py::arg("dy"), py::arg("params"),
           py::arg("labels") = std::vector<int32_t>{},
           "Forward + backward on these host arrays: (y, [dx per input], [dw per parameter]), flat float32.")
      .def_property_readonly("param_count", &CudaLayerBench::param_count);
  m.def("update_bench", &update_bench, py::arg("n"), py::arg("lr"), py::arg("momentum"), py::arg("wd"),
        py::arg("warmup"), py::arg("iters"),
        "Time the SGD kernel over n parameters, interleaved with a device-to-device copy of 10n bytes: "
        "{'update_us', 'copy_us', 'copy_bytes'} (CUDA events).");
  m.def("sgd_update_host", &sgd_update_host, py::arg("w"), py::arg("g"), py::arg("v"), py::arg("lr"),
        py::arg("momentum"), py::arg("wd"), "One CUDA SGD step on float32 host arrays, in place (for checks).");
  m.def(
      "copy_bench",
      [](const std::string& direction, bool pinned, std::size_t nbytes, int copies, int warmup, int iters) {
        py::gil_scoped_release nogil;
        auto r = cuda::copy_bench(direction, pinned, nbytes, copies, warmup, iters);
        py::gil_scoped_acquire gil;
        return py::make_tuple(r.samples_us, r.wrong_bytes);
      },
      py::arg("direction"), py::arg("pinned"), py::arg("nbytes"), py::arg("copies"), py::arg("warmup"),
      py::arg("iters"), "Copy bandwidth samples: (samples_us, wrong_bytes); one sample = `copies` copies.");
}

}  // namespace gdl::bind
