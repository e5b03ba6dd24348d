#include "cpu/layer_bench.h"

#include <algorithm>

#include "cpu/blas.h"

namespace gdl::cpu {

namespace {
void copy_in(Floats src, std::vector<float>& dst, const char* what, std::size_t i) {
  GDL_REQUIRE(static_cast<std::size_t>(src.size) == dst.size(), "run: ", what, " ", i, " has ", src.size,
              " elements, expected ", dst.size());
  std::copy_n(src.data, dst.size(), dst.begin());
}
}  // namespace

LayerBench::LayerBench(const LayerSpec& spec) : layer_(make_layer(spec)) {
  const auto& s = layer_->spec();
  for (std::size_t i = 0; i < s.in_shapes.size(); ++i) {
    x_.emplace_back(layer_->in_count(static_cast<int>(i)));
    dx_.emplace_back(x_.back().size());
    fill(x_.back().data(), x_.back().size(), 11 + i);
  }
  y_.resize(layer_->out_count());
  dy_.resize(y_.size());
  fill(dy_.data(), dy_.size(), 7);
  params_.resize(layer_->param_count());
  grads_.resize(params_.size());
  fill(params_.data(), params_.size(), 5);
  for (auto& p : params_) p *= 0.125f;  // keep deep products in range
  layer_->bind_params(params_.data(), grads_.data());
  labels_ = test_labels(s.batch, numel(s.in_shapes[0]));
  layer_->set_labels(labels_.data());
}

std::vector<double> LayerBench::time(LayerPass pass, const TimingPlan& plan) {
  const auto xs = inputs();
  const auto dxs = input_grads();
  layer_->forward(xs, y_.data());  // backward needs the forward's saved state
  return time_steady(plan, [&] { run_layer_pass(*layer_, pass, xs, y_.data(), dy_.data(), dxs); });
}

LayerRun LayerBench::run(const std::vector<Floats>& xs, Floats dy, const std::vector<Floats>& params,
                         const std::vector<int32_t>& labels, const std::vector<Floats>& dx_init) {
  const auto& s = layer_->spec();
  GDL_REQUIRE(xs.size() == x_.size(), "run: expected ", x_.size(), " inputs, got ", xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) copy_in(xs[i], x_[i], "input", i);
  copy_in(dy, dy_, "dy", 0);
  GDL_REQUIRE(params.size() == s.param_shapes.size(), "run: expected ", s.param_shapes.size(), " parameter arrays");
  for (std::size_t i = 0; i < params.size(); ++i) {
    GDL_REQUIRE(params[i].size == numel(s.param_shapes[i]), "run: parameter ", i, " has the wrong size");
    std::copy_n(params[i].data, params[i].size, layer_->params()[i]);
  }
  if (!labels.empty()) {
    GDL_REQUIRE(labels.size() == labels_.size(), "run: expected ", labels_.size(), " labels");
    labels_ = labels;
    layer_->set_labels(labels_.data());
  }
  GDL_REQUIRE(dx_init.empty() || dx_init.size() == dx_.size(), "run: expected ", dx_.size(), " dx_init arrays");
  for (std::size_t i = 0; i < dx_.size(); ++i) {  // backward_data accumulates onto this
    if (dx_init.empty()) std::fill(dx_[i].begin(), dx_[i].end(), 0.f);
    else copy_in(dx_init[i], dx_[i], "dx_init", i);
  }
  const auto xp = inputs();
  const auto dxp = input_grads();
  layer_->forward(xp, y_.data());
  run_layer_pass(*layer_, LayerPass::bwd, xp, y_.data(), dy_.data(), dxp);
  LayerRun out{y_, dx_, {}};
  for (std::size_t i = 0; i < s.param_shapes.size(); ++i)
    out.dw.emplace_back(layer_->grads()[i], layer_->grads()[i] + numel(s.param_shapes[i]));
  return out;
}

std::vector<const float*> LayerBench::inputs() const {
  std::vector<const float*> v;
  for (auto& x : x_) v.push_back(x.data());
  return v;
}

std::vector<float*> LayerBench::input_grads() {
  std::vector<float*> v;
  for (auto& g : dx_) v.push_back(g.data());
  return v;
}

}  // namespace gdl::cpu
