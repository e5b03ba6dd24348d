// The single-layer benchmark of both backends, written once (cpu/layer_bench.h and
// cuda/layer_bench.h only say where the buffers live and which clock times them): the passes a
// layer is timed in, its test data, seeds and labels, and the checked run that tests compare with
// a reference. One place, so both backends time and check the same thing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/fill.h"
#include "common/layer.h"
#include "common/timer.h"

namespace gdl {

enum class LayerPass { fwd, bwd_data, bwd_filter, bwd };  // bwd: bwd_filter then bwd_data

inline LayerPass parse_layer_pass(const std::string& s) {
  if (s == "fwd") return LayerPass::fwd;
  if (s == "bwd-data") return LayerPass::bwd_data;
  if (s == "bwd-filter") return LayerPass::bwd_filter;
  if (s == "bwd") return LayerPass::bwd;
  GDL_FAIL("pass must be fwd, bwd, bwd-data or bwd-filter, got '", s, "'");
}

// One pass of `layer` (a cpu::Layer or cuda::Layer) on its buffers.
template <class Layer, class Xs, class Y, class DY, class DXs>
void run_layer_pass(Layer& layer, LayerPass p, const Xs& xs, Y y, DY dy, const DXs& dxs) {
  if (p == LayerPass::fwd) return layer.forward(xs, y);
  if (p != LayerPass::bwd_data) layer.backward_params(xs, y, dy);
  if (p != LayerPass::bwd_filter) layer.backward_data(xs, y, dy, dxs);
}

// A host array handed to a checked run.
struct Floats {
  const float* data;
  int64_t size;
};

// Forward + backward once: y, the input gradients and the parameter gradients, flat float32.
struct LayerRun {
  std::vector<float> y;
  std::vector<std::vector<float>> dx, dw;
};

// One layer on its own: built from a spec with its own buffers holding gdlbench's test data
// (common/fill.h), each pass timed, or run once on host arrays (copied in and back) so tests can
// compare it with a reference. Both paths use the same Layer object. Memory provides:
//   Elem              the layers' element pointer type: float on the host, void on the device
//   Buffer            owns n bytes: Buffer(n), data()
//   make_layer(spec)  the backend's layer
//   copy(dst, src, n) n bytes between host memory and a Buffer, either way, done when it returns
//   zero(dst, n)      likewise
//   time(plan, pass)  samples of pass() in microseconds, on the backend's clock
template <class Memory>
class LayerBenchOn {
 public:
  using Elem = typename Memory::Elem;
  using Buffer = typename Memory::Buffer;

  explicit LayerBenchOn(const LayerSpec& spec) : layer_(Memory::make_layer(spec)) {
    const auto& s = layer_->spec();
    for (std::size_t i = 0; i < s.in_shapes.size(); ++i) {
      counts_.push_back(layer_->in_count(static_cast<int>(i)));
      x_.push_back(reads_token_ids(s) ? token_ids(counts_.back(), s.attr("vocab")) : filled(counts_.back(), 11 + i));
      dx_.push_back(floats(counts_.back()));  // zero: the timed passes add into it
    }
    y_ = floats(layer_->out_count());
    dy_ = filled(layer_->out_count(), 7);
    params_ = filled(layer_->param_count(), 5, 0.125f);  // small, to keep deep products in range
    grads_ = floats(layer_->param_count());
    layer_->bind_params(elems(params_), elems(grads_));
    const LabelShape labels = label_shape(s);
    labels_ = std::make_unique<Buffer>(std::size_t(labels.count(s.batch)) * sizeof(int32_t));
    set_labels(test_labels(static_cast<int>(labels.count(s.batch)), labels.classes));
  }

  std::vector<double> time(LayerPass pass, const TimingPlan& plan) {
    const auto xs = inputs();
    const auto dxs = input_grads();
    layer_->forward(xs, elems(y_));  // backward needs the forward's saved state
    return Memory::time(plan, [&] { run_layer_pass(*layer_, pass, xs, elems(y_), celems(dy_), dxs); });
  }

  // Forward + backward on these arrays (sizes checked). labels: empty keeps the test labels;
  // dx_init: empty starts the input gradients at zero (backward_data accumulates onto them).
  LayerRun run(const std::vector<Floats>& xs, Floats dy, const std::vector<Floats>& params,
               const std::vector<int32_t>& labels, const std::vector<Floats>& dx_init) {
    const auto& s = layer_->spec();
    GDL_REQUIRE(xs.size() == x_.size(), "run: expected ", x_.size(), " inputs, got ", xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) copy_in(x_[i]->data(), xs[i], counts_[i], "input", i);
    copy_in(dy_->data(), dy, layer_->out_count(), "dy", 0);
    GDL_REQUIRE(params.size() == s.param_shapes.size(), "run: expected ", s.param_shapes.size(), " parameter arrays");
    for (std::size_t i = 0; i < params.size(); ++i)
      copy_in(layer_->params()[i], params[i], numel(s.param_shapes[i]), "parameter", i);
    if (!labels.empty()) {
      const int64_t expected = label_shape(s).count(s.batch);
      GDL_REQUIRE(static_cast<int64_t>(labels.size()) == expected, "run: expected ", expected, " labels");
      set_labels(labels);
    }
    GDL_REQUIRE(dx_init.empty() || dx_init.size() == dx_.size(), "run: expected ", dx_.size(), " dx_init arrays");
    for (std::size_t i = 0; i < dx_.size(); ++i) {  // backward_data accumulates onto this
      if (dx_init.empty()) Memory::zero(dx_[i]->data(), std::size_t(counts_[i]) * sizeof(float));
      else copy_in(dx_[i]->data(), dx_init[i], counts_[i], "dx_init", i);
    }
    const auto xp = inputs();
    const auto dxp = input_grads();
    layer_->forward(xp, elems(y_));
    run_layer_pass(*layer_, LayerPass::bwd, xp, elems(y_), celems(dy_), dxp);
    LayerRun out;
    out.y = copy_out(y_->data(), layer_->out_count());
    for (std::size_t i = 0; i < dx_.size(); ++i) out.dx.push_back(copy_out(dx_[i]->data(), counts_[i]));
    for (std::size_t i = 0; i < s.param_shapes.size(); ++i)
      out.dw.push_back(copy_out(layer_->grads()[i], numel(s.param_shapes[i])));
    return out;
  }

  int64_t param_count() const { return layer_->param_count(); }

 private:
  using BufferPtr = std::unique_ptr<Buffer>;

  static Elem* elems(const BufferPtr& b) { return static_cast<Elem*>(b->data()); }
  static const Elem* celems(const BufferPtr& b) { return static_cast<const Elem*>(b->data()); }
  static BufferPtr floats(int64_t n) {  // zeroed; never empty, so every pointer is valid
    const std::size_t bytes = std::size_t(std::max<int64_t>(n, 1)) * sizeof(float);
    auto b = std::make_unique<Buffer>(bytes);
    Memory::zero(b->data(), bytes);
    return b;
  }
  static BufferPtr filled(int64_t n, uint64_t seed, float scale = 1.f) {
    auto b = floats(n);
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = fill_value(seed, uint64_t(i)) * scale;
    copy(b->data(), v.data(), v.size() * sizeof(float));
    return b;
  }
  static BufferPtr token_ids(int64_t n, double vocab) {  // an embedding's input (fill.h)
    auto b = floats(n);
    std::vector<float> v(n);
    fill_token_ids(v.data(), n, static_cast<int64_t>(vocab));
    copy(b->data(), v.data(), v.size() * sizeof(float));
    return b;
  }
  static void copy_in(void* dst, Floats src, int64_t n, const char* what, std::size_t i) {
    GDL_REQUIRE(src.size == n, "run: ", what, " ", i, " has ", src.size, " elements, expected ", n);
    copy(dst, src.data, std::size_t(n) * sizeof(float));
  }
  static std::vector<float> copy_out(const void* src, int64_t n) {
    std::vector<float> v(n);
    copy(v.data(), src, v.size() * sizeof(float));
    return v;
  }
  static void copy(void* dst, const void* src, std::size_t bytes) {  // empty arrays may have null data
    if (bytes > 0) Memory::copy(dst, src, bytes);
  }
  void set_labels(const std::vector<int32_t>& l) {
    Memory::copy(labels_->data(), l.data(), l.size() * sizeof(int32_t));
    layer_->set_labels(static_cast<const int32_t*>(labels_->data()));
  }
  std::vector<const Elem*> inputs() const {
    std::vector<const Elem*> v;
    for (const auto& x : x_) v.push_back(celems(x));
    return v;
  }
  std::vector<Elem*> input_grads() {
    std::vector<Elem*> v;
    for (const auto& g : dx_) v.push_back(elems(g));
    return v;
  }

  std::unique_ptr<LayerOn<Elem>> layer_;
  std::vector<BufferPtr> x_, dx_;
  std::vector<int64_t> counts_;  // elements per input
  BufferPtr y_, dy_, params_, grads_, labels_;
};

}  // namespace gdl
