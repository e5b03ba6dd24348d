// The CUDA layer interface: the twin of cpu/layer.h on device pointers. Activations are in the
// spec's dtype, attrs["dtype"]: 0 float32, 1 float16, 2 bfloat16 (this numbering, not DType's);
// attrs["tf32"] = 1 asks float32 convolutions for TF32 math; attrs["nhwc"] = 1 for channels-last.
// Layers that support only float32 NCHW refuse the rest. Parameters and their gradients are
// float32 unless a layer says otherwise (cuDNN convolution keeps filters in the data type).
// All work is queued on context().stream.
#pragma once
#include <cudnn.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/layer_spec.h"
#include "cuda/check.h"
#include "cuda/device.h"

namespace gdl::cuda {

struct Context {
  cudaStream_t stream;
  cublasHandle_t cublas;
  cudnnHandle_t cudnn;
};
Context& context();  // created on first use, bound to default_stream()

class Layer {
 public:
  explicit Layer(LayerSpec spec) : spec_(std::move(spec)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const LayerSpec& spec() const { return spec_; }
  int64_t in_count(int i = 0) const { return spec_.batch * numel(spec_.in_shapes.at(i)); }
  int64_t out_count() const { return spec_.batch * numel(spec_.out_shape); }

  // Same contract as cpu::Layer: backward_data ACCUMULATES into dx (nullptr = not needed),
  // backward_params OVERWRITES the parameter gradients.
  virtual void forward(const std::vector<const void*>& x, void* y) = 0;
  virtual void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                             const std::vector<void*>& dx) = 0;
  virtual void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) {}
  virtual void set_labels(const int32_t* device_labels) {}

  void bind_params(void* params, void* grads, std::size_t elem_size);
  const std::vector<void*>& params() const { return params_; }
  const std::vector<void*>& grads() const { return grads_; }

 protected:
  LayerSpec spec_;
  std::vector<void*> params_, grads_;
};

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec&)>;
bool register_layer(const std::string& type, LayerFactory factory);
std::unique_ptr<Layer> make_layer(const LayerSpec& spec);
std::vector<std::string> layer_types();

}  // namespace gdl::cuda

#define GDL_REGISTER_CUDA_LAYER(type_name, Class)                                             \
  static const bool gdl_registered_cuda_##Class = ::gdl::cuda::register_layer(               \
      type_name, [](const ::gdl::LayerSpec& s) { return std::make_unique<Class>(s); })
