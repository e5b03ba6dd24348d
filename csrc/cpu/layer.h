// The CPU layer interface: common/layer.h on host float32 pointers. Layer types register
// themselves at load time: GDL_REGISTER_LAYER("relu", ReluLayer).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/layer.h"

namespace gdl::cpu {

using gdl::LayerOn;
using gdl::LayerSpec;
using gdl::LayerTypes;
using gdl::Shape;
using gdl::numel;

using Layer = LayerOn<float>;
using LayerFactory = LayerTypes<float>::Factory;

inline bool register_layer(const std::string& type, LayerFactory factory) {
  return LayerTypes<float>::add(type, std::move(factory));
}
// std::invalid_argument for unknown types.
inline std::unique_ptr<Layer> make_layer(const LayerSpec& spec) { return LayerTypes<float>::make(spec, "CPU"); }
inline std::vector<std::string> layer_types() { return LayerTypes<float>::names(); }

// Compute threads for the element-wise kernels (OpenMP); GEMM threads are set_blas_threads().
void set_compute_threads(int n);
int compute_threads();

}  // namespace gdl::cpu

#define GDL_REGISTER_LAYER(type_name, Class)                                                  \
  static const bool gdl_registered_##Class = ::gdl::cpu::register_layer(                     \
      type_name, [](const ::gdl::cpu::LayerSpec& s) { return std::make_unique<Class>(s); })
