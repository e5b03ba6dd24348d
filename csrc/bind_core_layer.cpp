// One CPU layer on its own: built from a spec dict, timed per pass, or run on given arrays so
// tests can compare it with a numpy reference. Both paths use the same Layer object.
#include "bind_layer_spec.h"
#include "cpu/layer.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>

#include "bind_core.h"
#include "bind_util.h"
#include "common/timer.h"
#include "cpu/blas.h"

namespace py = pybind11;

namespace gdl::bind {

namespace {

// A layer with its own buffers, filled with gdlbench's test data (common/fill.h).
class LayerBench {
 public:
  LayerBench(const py::dict& spec, int batch) : layer_(cpu::make_layer(spec_from_dict(spec, batch))) {
    const auto& s = layer_->spec();
    for (std::size_t i = 0; i < s.in_shapes.size(); ++i) {
      x_.emplace_back(layer_->in_count(static_cast<int>(i)));
      dx_.emplace_back(x_.back().size());
      cpu::fill(x_.back().data(), x_.back().size(), 11 + i);
    }
    y_.resize(layer_->out_count());
    dy_.resize(y_.size());
    cpu::fill(dy_.data(), dy_.size(), 7);
    params_.resize(layer_->param_count());
    grads_.resize(params_.size());
    cpu::fill(params_.data(), params_.size(), 5);
    for (auto& p : params_) p *= 0.125f;  // keep deep products in range
    layer_->bind_params(params_.data(), grads_.data());
    labels_.resize(batch);
    const int64_t classes = std::max<int64_t>(1, cpu::numel(s.in_shapes[0]));
    for (int i = 0; i < batch; ++i) labels_[i] = static_cast<int32_t>((i * 7919) % classes);
    layer_->set_labels(labels_.data());
  }

  std::vector<double> time(const std::string& pass, int warmup, int iters) {
    GDL_REQUIRE(pass == "fwd" || pass == "bwd" || pass == "bwd-data" || pass == "bwd-filter",
                "pass must be fwd, bwd, bwd-data or bwd-filter, got '", pass, "'");
    auto xs = inputs();
    auto dxs = input_grads();
    py::gil_scoped_release nogil;
    layer_->forward(xs, y_.data());  // backward needs the forward's saved state
    TimingPlan plan{warmup, iters};
    if (pass == "fwd") return time_steady(plan, [&] { layer_->forward(xs, y_.data()); });
    if (pass == "bwd-filter") return time_steady(plan, [&] { layer_->backward_params(xs, y_.data(), dy_.data()); });
    if (pass == "bwd-data") return time_steady(plan, [&] { layer_->backward_data(xs, y_.data(), dy_.data(), dxs); });
    return time_steady(plan, [&] {
      layer_->backward_params(xs, y_.data(), dy_.data());
      layer_->backward_data(xs, y_.data(), dy_.data(), dxs);
    });
  }

  // Runs forward and backward on the given arrays; returns (y, [dx...], [dw...]) as float32 arrays.
  py::tuple run(const std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>>& xs,
                py::array_t<float, py::array::c_style | py::array::forcecast> dy,
                const std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>>& params,
                std::vector<int32_t> labels,
                const std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>>& dx_init) {
    const auto& s = layer_->spec();
    GDL_REQUIRE(xs.size() == x_.size(), "run: expected ", x_.size(), " inputs, got ", xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      GDL_REQUIRE(static_cast<std::size_t>(xs[i].size()) == x_[i].size(), "run: input ", i, " has ", xs[i].size(),
                  " elements, expected ", x_[i].size());
      std::copy_n(xs[i].data(), x_[i].size(), x_[i].begin());
    }
    GDL_REQUIRE(static_cast<std::size_t>(dy.size()) == dy_.size(), "run: dy has ", dy.size(), " elements, expected ",
                dy_.size());
    std::copy_n(dy.data(), dy_.size(), dy_.begin());
    GDL_REQUIRE(params.size() == s.param_shapes.size(), "run: expected ", s.param_shapes.size(), " parameter arrays");
    for (std::size_t i = 0; i < params.size(); ++i) {
      GDL_REQUIRE(params[i].size() == cpu::numel(s.param_shapes[i]), "run: parameter ", i, " has the wrong size");
      std::copy_n(params[i].data(), params[i].size(), layer_->params()[i]);
    }
    if (!labels.empty()) {
      GDL_REQUIRE(labels.size() == labels_.size(), "run: expected ", labels_.size(), " labels");
      labels_ = labels;
      layer_->set_labels(labels_.data());
    }
    GDL_REQUIRE(dx_init.empty() || dx_init.size() == dx_.size(), "run: expected ", dx_.size(), " dx_init arrays");
    for (std::size_t i = 0; i < dx_init.size(); ++i)
      GDL_REQUIRE(static_cast<std::size_t>(dx_init[i].size()) == dx_[i].size(), "run: dx_init ", i, " has the wrong size");
    auto xp = inputs();
    auto dxp = input_grads();
    {
      py::gil_scoped_release nogil;
      for (std::size_t i = 0; i < dx_.size(); ++i) {  // backward_data accumulates onto this
        if (dx_init.empty()) std::fill(dx_[i].begin(), dx_[i].end(), 0.f);
        else std::copy_n(dx_init[i].data(), dx_[i].size(), dx_[i].begin());
      }
      layer_->forward(xp, y_.data());
      layer_->backward_params(xp, y_.data(), dy_.data());
      layer_->backward_data(xp, y_.data(), dy_.data(), dxp);
    }
    py::list dxs, dws;
    for (auto& g : dx_) dxs.append(py::array_t<float>(g.size(), g.data()));
    for (std::size_t i = 0; i < s.param_shapes.size(); ++i)
      dws.append(py::array_t<float>(cpu::numel(s.param_shapes[i]), layer_->grads()[i]));
    return py::make_tuple(py::array_t<float>(y_.size(), y_.data()), dxs, dws);
  }

  int64_t param_count() const { return layer_->param_count(); }

 private:
  std::vector<const float*> inputs() const {
    std::vector<const float*> v;
    for (auto& x : x_) v.push_back(x.data());
    return v;
  }
  std::vector<float*> input_grads() {
    std::vector<float*> v;
    for (auto& g : dx_) v.push_back(g.data());
    return v;
  }

  std::unique_ptr<cpu::Layer> layer_;
  std::vector<std::vector<float>> x_, dx_;
  std::vector<float> y_, dy_, params_, grads_;
  std::vector<int32_t> labels_;
};

}  // namespace

void bind_layer(py::module_& m) {
  m.def("layer_types", &cpu::layer_types, "CPU layer types the executor can build.");
  m.def("set_compute_threads", &cpu::set_compute_threads, py::arg("n"));
  m.def("compute_threads", &cpu::compute_threads);
  py::class_<LayerBench>(m, "LayerBench", "One CPU layer with its own buffers, for timing and checking.")
      .def(py::init<const py::dict&, int>(), py::arg("spec"), py::arg("batch"))
      .def("time", &LayerBench::time, py::arg("pass_"), py::arg("warmup"), py::arg("iters"),
           "Host steady-clock samples (us) of one pass: fwd, bwd-data, bwd-filter or bwd (both).")
      .def("run", &LayerBench::run, py::arg("inputs"), py::arg("dy"), py::arg("params"),
           py::arg("labels") = std::vector<int32_t>{},
           py::arg("dx_init") = std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>>{},
           "Forward + backward on these arrays: (y, [dx per input], [dw per parameter]), flat float32. "
           "dx starts at zero, or at dx_init (backward_data accumulates).")
      .def_property_readonly("param_count", &LayerBench::param_count);
}

}  // namespace gdl::bind
