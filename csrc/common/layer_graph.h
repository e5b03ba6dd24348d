// The layer graph both executors run (cpu/net.h on host float32 pointers, cuda/net.h on device
// pointers): each layer reads the data batch or earlier layers' outputs; forward runs the layers
// in order, backward in reverse, calling after_layer(l) as soon as layer l is done (where the
// composed iteration posts its messages). The executor owns the buffers and says where they are.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/errors.h"
#include "common/layer.h"

namespace gdl {

template <class Elem>
class LayerGraph {
 public:
  using LayerPtr = std::unique_ptr<LayerOn<Elem>>;

  // Builds every layer with make(spec) after setting its batch; checks that inputs name earlier layers.
  LayerGraph(std::vector<LayerSpec>& specs, int batch, const std::function<LayerPtr(const LayerSpec&)>& make) {
    GDL_REQUIRE(!specs.empty(), "a network needs at least one layer");
    GDL_REQUIRE(batch >= 1, "batch must be >= 1, got ", batch);
    for (std::size_t l = 0; l < specs.size(); ++l) {
      auto& s = specs[l];
      s.batch = batch;
      for (int j : s.inputs)
        GDL_REQUIRE(j >= -1 && j < static_cast<int>(l), "layer ", s.name, ": input ", j, " is not an earlier layer");
      GDL_REQUIRE(s.inputs.size() == s.in_shapes.size(), "layer ", s.name, ": inputs and in_shapes differ in length");
      layers_.push_back(make(s));
      inputs_.push_back(s.inputs);
      param_offset_.push_back(param_count_);
      param_count_ += layers_.back()->param_count();
    }
  }
  virtual ~LayerGraph() = default;
  LayerGraph(const LayerGraph&) = delete;
  LayerGraph& operator=(const LayerGraph&) = delete;

  // Ties every LM head with attribute tied to the net's first embedding (LayerOn::bind_tied); the
  // executors call it once the parameters are bound.
  void tie_weights() {
    for (auto& head : layers_) {
      const auto& s = head->spec();
      if (s.type != "lm_head" || s.attr("tied", 0) == 0) continue;
      LayerOn<Elem>* table = nullptr;
      for (auto& l : layers_)
        if (l->spec().type == "embedding") {
          table = l.get();
          break;
        }
      GDL_REQUIRE(table && !table->params().empty(), "layer ", s.name, ": tied, but the net has no embedding");
      head->bind_tied(table->params()[0], table->grads()[0]);
      table->share_grads();
    }
  }

  int layers() const { return static_cast<int>(layers_.size()); }
  int64_t param_count() const { return param_count_; }
  int64_t layer_param_offset(int l) const { return param_offset_.at(l); }

  void forward(const std::function<void(int)>& after_layer = {}) {
    for (int l = 0; l < layers(); ++l) {
      forward_layer(l);
      if (after_layer) after_layer(l);
    }
  }
  // Input gradients accumulate (an activation may feed several layers): backward zeroes them first.
  virtual void zero_act_grads() = 0;
  void backward_layers(const std::function<void(int)>& after_layer) {
    for (int l = layers() - 1; l >= 0; --l) {
      backward_layer(l);
      if (after_layer) after_layer(l);
    }
  }
  // Zeroes the activation gradients, then runs every layer's backward, last first.
  void backward(const std::function<void(int)>& after_layer = {}) {
    zero_act_grads();
    backward_layers(after_layer);
  }

 protected:
  // Where the data batch, each layer's output and each output's gradient live.
  void place(const Elem* data, std::vector<Elem*> outputs, std::vector<Elem*> output_grads) {
    data_in_ = data;
    outputs_ = std::move(outputs);
    output_grads_ = std::move(output_grads);
  }
  void forward_layer(int l) { layers_[l]->forward(layer_inputs(l), outputs_[l]); }
  void backward_layer(int l) {
    const auto x = layer_inputs(l);
    layers_[l]->backward_params(x, outputs_[l], output_grads_[l]);
    layers_[l]->backward_data(x, outputs_[l], output_grads_[l], layer_input_grads(l));
  }

  int64_t param_count_ = 0;
  std::vector<LayerPtr> layers_;
  std::vector<std::vector<int>> inputs_;  // producer indices per layer (-1 = the data)
  std::vector<int64_t> param_offset_;

 private:
  std::vector<const Elem*> layer_inputs(int l) const {
    std::vector<const Elem*> v;
    for (int j : inputs_[l]) v.push_back(j < 0 ? data_in_ : outputs_[j]);
    return v;
  }
  std::vector<Elem*> layer_input_grads(int l) const {
    std::vector<Elem*> v;
    for (int j : inputs_[l]) v.push_back(j < 0 ? nullptr : output_grads_[j]);
    return v;
  }

  const Elem* data_in_ = nullptr;
  std::vector<Elem*> outputs_, output_grads_;
};

}  // namespace gdl
