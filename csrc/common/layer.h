// The layer interface of both backends, written once: cpu::Layer is LayerOn<float> (host float32
// pointers), cuda::Layer is LayerOn<void> (device pointers whose dtype the spec names). A network
// is a list of these, built from the specs gdlbench/nets/network.py infers; the executors and the
// single-layer benchmarks drive layers only through it.
//
// Tensors are NCHW (or NHWC where a CUDA layer says so), batch-major; shapes in a spec are per
// sample (C, H, W), the batch is separate. The caller owns every activation and gradient buffer;
// a layer owns its scratch (im2col columns, saved statistics, dropout masks, cuDNN workspaces).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/layer_spec.h"
#include "common/registry.h"

namespace gdl {

template <class Elem>  // float on the host; void on the device
class LayerOn {
 public:
  explicit LayerOn(LayerSpec spec) : spec_(std::move(spec)) {}
  virtual ~LayerOn() = default;
  LayerOn(const LayerOn&) = delete;
  LayerOn& operator=(const LayerOn&) = delete;

  const LayerSpec& spec() const { return spec_; }
  int64_t in_count(int i = 0) const { return spec_.batch * numel(spec_.in_shapes.at(i)); }
  int64_t out_count() const { return spec_.batch * numel(spec_.out_shape); }

  // y = f(x). x[i] holds batch * numel(in_shapes[i]) elements.
  virtual void forward(const std::vector<const Elem*>& x, Elem* y) = 0;
  // Gradient w.r.t. the inputs, ACCUMULATED: dx[i] += dL/dx_i (the caller zeroes dx first; an
  // activation that feeds several layers gets all their contributions). dx[i] may be nullptr
  // (the data input needs no gradient); a layer skips that work.
  virtual void backward_data(const std::vector<const Elem*>& x, const Elem* y, const Elem* dy,
                             const std::vector<Elem*>& dx) = 0;
  // Gradient w.r.t. the parameters, OVERWRITTEN into grads(): layers without parameters do nothing.
  virtual void backward_params(const std::vector<const Elem*>& x, const Elem* y, const Elem* dy) {}
  // Loss layers read the labels (int32 class indices, label_shape(spec).count(batch) of them, in
  // common/fill.h's order, where the layer's data lives).
  virtual void set_labels(const int32_t* labels) {}
  // Weight tying (an LM head that reuses the embedding's token table, [vocab, hidden]): the graph
  // (tie_weights) hands the head the table and its gradient, and tells the embedding with
  // share_grads(). The head, later in the net, runs its backward first and OVERWRITES that
  // gradient; the embedding then ADDS its own to it.
  virtual void bind_tied(Elem* weight, Elem* grad) {}
  void share_grads() { grads_shared_ = true; }

  // Parameter and gradient storage: views into the caller's flat buffers, in param_shapes order,
  // elem_size bytes per element (float32 unless a layer keeps its parameters in its data type).
  void bind_params(Elem* params, Elem* grads, std::size_t elem_size = sizeof(float)) {
    params_.clear();
    grads_.clear();
    auto* p = static_cast<char*>(static_cast<void*>(params));
    auto* g = static_cast<char*>(static_cast<void*>(grads));
    for (const auto& s : spec_.param_shapes) {
      params_.push_back(static_cast<Elem*>(static_cast<void*>(p)));
      grads_.push_back(static_cast<Elem*>(static_cast<void*>(g)));
      p += numel(s) * elem_size;
      g += numel(s) * elem_size;
    }
  }
  int64_t param_count() const {
    int64_t n = 0;
    for (const auto& s : spec_.param_shapes) n += numel(s);
    return n;
  }
  const std::vector<Elem*>& params() const { return params_; }
  const std::vector<Elem*>& grads() const { return grads_; }

 protected:
  LayerSpec spec_;
  std::vector<Elem*> params_, grads_;
  bool grads_shared_ = false;  // share_grads(): backward_params adds to grads()[0]
};

// Layer types by name, one registry per backend: each layer file registers its factory at load
// time (GDL_REGISTER_LAYER / GDL_REGISTER_CUDA_LAYER); the executors build layers by spec type.
template <class Elem>
struct LayerTypes {
  using Factory = std::function<std::unique_ptr<LayerOn<Elem>>(const LayerSpec&)>;
  static bool add(const std::string& type, Factory f) { return Registry<Factory>::instance().add(type, std::move(f)); }
  // backend: named in the error for a type nobody registered ("CPU", "CUDA").
  static std::unique_ptr<LayerOn<Elem>> make(const LayerSpec& spec, const char* backend) {
    const Factory* make = Registry<Factory>::instance().find(spec.type);
    GDL_REQUIRE(make, "layer ", spec.name, ": unknown type '", spec.type, "' (no ", backend, " kernel)");
    GDL_REQUIRE(spec.batch >= 1, "layer ", spec.name, ": batch must be >= 1");
    return (*make)(spec);
  }
  static std::vector<std::string> names() { return Registry<Factory>::instance().names(); }
};

}  // namespace gdl
