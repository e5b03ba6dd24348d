#include "cuda/layer_bench.h"

#include <algorithm>

#include "common/fill.h"
#include "cuda/check.h"
#include "cuda/cuda_timer.h"

namespace gdl::cuda {

namespace {

std::unique_ptr<DeviceBuffer> device_floats(int64_t n) {
  return std::make_unique<DeviceBuffer>(std::size_t(std::max<int64_t>(n, 1)) * sizeof(float));
}

void upload(void* dst, const float* src, int64_t n) { copy_now(dst, src, std::size_t(n) * sizeof(float)); }

std::vector<float> download(const void* src, int64_t n) {
  std::vector<float> out(n);
  copy_now(out.data(), src, std::size_t(n) * sizeof(float));
  return out;
}

std::vector<float> host_fill(int64_t n, uint64_t seed, float scale = 1.f) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = fill_value(seed, uint64_t(i)) * scale;
  return v;
}

void upload_checked(void* dst, Floats src, int64_t n, const char* what, std::size_t i) {
  GDL_REQUIRE(src.size == n, "run: ", what, " ", i, " has ", src.size, " elements, expected ", n);
  upload(dst, src.data, n);
}

}  // namespace

LayerBench::LayerBench(const LayerSpec& spec) : layer_(make_layer(spec)) {
  const auto& s = layer_->spec();
  for (std::size_t i = 0; i < s.in_shapes.size(); ++i) {
    const int64_t n = layer_->in_count(int(i));
    x_.push_back(device_floats(n));
    dx_.push_back(device_floats(n));
    counts_.push_back(n);
    upload(x_.back()->data(), host_fill(n, 11 + i).data(), n);
    zero_now(dx_.back()->data(), std::size_t(n) * sizeof(float));  // timed passes add into it
  }
  y_ = device_floats(layer_->out_count());
  dy_ = device_floats(layer_->out_count());
  upload(dy_->data(), host_fill(layer_->out_count(), 7).data(), layer_->out_count());
  for (const auto& p : s.param_shapes) param_count_ += numel(p);
  params_ = device_floats(param_count_);
  grads_ = device_floats(param_count_);
  upload(params_->data(), host_fill(param_count_, 5, 0.125f).data(), param_count_);
  layer_->bind_params(params_->data(), grads_->data(), sizeof(float));
  labels_ = std::make_unique<DeviceBuffer>(std::size_t(std::max(s.batch, 1)) * sizeof(int32_t));
  set_labels(test_labels(s.batch, numel(s.in_shapes[0])));
}

std::vector<double> LayerBench::time(LayerPass pass, const TimingPlan& plan) {
  const auto xs = inputs();
  const auto dxs = input_grads();
  layer_->forward(xs, y_->data());  // backward needs the forward's saved state
  return time_events(plan, context().stream,
                     [&] { run_layer_pass(*layer_, pass, xs, y_->data(), static_cast<const void*>(dy_->data()), dxs); });
}

LayerRun LayerBench::run(const std::vector<Floats>& xs, Floats dy, const std::vector<Floats>& params,
                         const std::vector<int32_t>& labels, const std::vector<Floats>& dx_init) {
  const auto& s = layer_->spec();
  GDL_REQUIRE(xs.size() == x_.size(), "run: expected ", x_.size(), " inputs, got ", xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) upload_checked(x_[i]->data(), xs[i], counts_[i], "input", i);
  upload_checked(dy_->data(), dy, layer_->out_count(), "dy", 0);
  GDL_REQUIRE(params.size() == s.param_shapes.size(), "run: expected ", s.param_shapes.size(), " parameter arrays");
  for (std::size_t i = 0; i < params.size(); ++i)
    upload_checked(layer_->params()[i], params[i], numel(s.param_shapes[i]), "parameter", i);
  if (!labels.empty()) {
    GDL_REQUIRE(int(labels.size()) == s.batch, "run: expected ", s.batch, " labels");
    set_labels(labels);
  }
  GDL_REQUIRE(dx_init.empty() || dx_init.size() == dx_.size(), "run: expected ", dx_.size(), " dx_init arrays");
  const cudaStream_t st = context().stream;
  for (std::size_t i = 0; i < dx_.size(); ++i) {  // backward_data accumulates onto this
    if (dx_init.empty()) CUDA_CHECK(cudaMemsetAsync(dx_[i]->data(), 0, std::size_t(counts_[i]) * sizeof(float), st));
    else upload_checked(dx_[i]->data(), dx_init[i], counts_[i], "dx_init", i);
  }
  const auto xp = inputs();
  const auto dxp = input_grads();
  layer_->forward(xp, y_->data());
  run_layer_pass(*layer_, LayerPass::bwd, xp, y_->data(), static_cast<const void*>(dy_->data()), dxp);
  CUDA_CHECK(cudaStreamSynchronize(st));
  LayerRun out;
  out.y = download(y_->data(), layer_->out_count());
  for (std::size_t i = 0; i < dx_.size(); ++i) out.dx.push_back(download(dx_[i]->data(), counts_[i]));
  for (std::size_t i = 0; i < s.param_shapes.size(); ++i)
    out.dw.push_back(download(layer_->grads()[i], numel(s.param_shapes[i])));
  return out;
}

void LayerBench::set_labels(const std::vector<int32_t>& l) {
  copy_now(labels_->data(), l.data(), l.size() * sizeof(int32_t));
  layer_->set_labels(static_cast<const int32_t*>(labels_->data()));
}

std::vector<const void*> LayerBench::inputs() const {
  std::vector<const void*> v;
  for (auto& x : x_) v.push_back(x->data());
  return v;
}

std::vector<void*> LayerBench::input_grads() {
  std::vector<void*> v;
  for (auto& g : dx_) v.push_back(g->data());
  return v;
}

}  // namespace gdl::cuda
