// The CPU layer interface. A network is a list of these, built from the specs that
// gdlbench/network.py infers (Network.layer_specs()); the iteration executor and the
// single-layer benchmarks (gdlbench conv, gdlbench layer) drive layers only through it.
//
// Tensors are fp32, NCHW, batch-major; shapes in a spec are per sample (C, H, W), the batch is
// separate. The caller owns every activation and gradient buffer; a layer owns its scratch
// (im2col columns, saved statistics, dropout masks).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/layer_spec.h"

namespace gdl::cpu {

using gdl::LayerSpec;
using gdl::Shape;
using gdl::numel;

class Layer {
 public:
  explicit Layer(LayerSpec spec) : spec_(std::move(spec)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const LayerSpec& spec() const { return spec_; }
  int64_t in_count(int i = 0) const { return spec_.batch * numel(spec_.in_shapes.at(i)); }
  int64_t out_count() const { return spec_.batch * numel(spec_.out_shape); }

  // y = f(x). x[i] holds batch * numel(in_shapes[i]) floats.
  virtual void forward(const std::vector<const float*>& x, float* y) = 0;
  // Gradient w.r.t. the inputs, ACCUMULATED: dx[i] += dL/dx_i (the caller zeroes dx first; an
  // activation that feeds several layers gets all their contributions). dx[i] may be nullptr
  // (the data input needs no gradient); a layer skips that work.
  virtual void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                             const std::vector<float*>& dx) = 0;
  // Gradient w.r.t. the parameters, OVERWRITTEN into grads(): layers without parameters do nothing.
  virtual void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) {}

  // Parameter and gradient storage, views into the caller's flat buffers, in param_shapes order.
  void bind_params(float* params, float* grads);
  int64_t param_count() const;
  const std::vector<float*>& params() const { return params_; }
  const std::vector<float*>& grads() const { return grads_; }

  // Loss layers read the labels (batch int32 class indices); others ignore them.
  virtual void set_labels(const int32_t* labels) {}

 protected:
  LayerSpec spec_;
  std::vector<float*> params_, grads_;
};

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec&)>;

// Layer types register themselves at load time: GDL_REGISTER_LAYER("relu", ReluLayer).
bool register_layer(const std::string& type, LayerFactory factory);
std::unique_ptr<Layer> make_layer(const LayerSpec& spec);  // std::invalid_argument for unknown types
std::vector<std::string> layer_types();

// Compute threads for the element-wise kernels (OpenMP); GEMM threads are set_blas_threads().
void set_compute_threads(int n);
int compute_threads();

}  // namespace gdl::cpu

#define GDL_REGISTER_LAYER(type_name, Class)                                                  \
  static const bool gdl_registered_##Class = ::gdl::cpu::register_layer(                     \
      type_name, [](const ::gdl::cpu::LayerSpec& s) { return std::make_unique<Class>(s); })
