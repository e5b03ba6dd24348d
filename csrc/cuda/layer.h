// The CUDA layer interface: common/layer.h on device pointers. Activations are in the
// spec's dtype, attrs["dtype"]: 0 float32, 1 float16, 2 bfloat16 (this numbering, not DType's);
// attrs["tf32"] = 1 asks float32 convolutions for TF32 math; attrs["nhwc"] = 1 for channels-last.
// Layers that support only float32 NCHW refuse the rest. Parameters and their gradients are
// float32 unless a layer says otherwise (cuDNN convolution keeps filters in the data type).
// All work is queued on context().stream; labels are device pointers.
#pragma once
#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "common/layer.h"
#include "cuda/check.h"
#include "cuda/device.h"

namespace gdl::cuda {

struct Context {
  cudaStream_t stream;
  cublasHandle_t cublas;
  cudnnHandle_t cudnn;
};
Context& context();  // created on first use, bound to default_stream()

using Layer = LayerOn<void>;
using LayerFactory = LayerTypes<void>::Factory;

inline bool register_layer(const std::string& type, LayerFactory factory) {
  return LayerTypes<void>::add(type, std::move(factory));
}
inline std::unique_ptr<Layer> make_layer(const LayerSpec& spec) { return LayerTypes<void>::make(spec, "CUDA"); }
inline std::vector<std::string> layer_types() { return LayerTypes<void>::names(); }

}  // namespace gdl::cuda

#define GDL_REGISTER_CUDA_LAYER(type_name, Class)                                             \
  static const bool gdl_registered_cuda_##Class = ::gdl::cuda::register_layer(               \
      type_name, [](const ::gdl::LayerSpec& s) { return std::make_unique<Class>(s); })
