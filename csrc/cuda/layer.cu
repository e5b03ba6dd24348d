#include "common/registry.h"
#include "cuda/gemm.h"
#include "cuda/layer.h"

namespace gdl::cuda {

Context& context() {
  static Context ctx = [] {
    Context c{};
    c.stream = default_stream();
    c.cublas = cublas_handle();
    CUDNN_CHECK(cudnnCreate(&c.cudnn));
    CUDNN_CHECK(cudnnSetStream(c.cudnn, c.stream));
    return c;
  }();
  return ctx;
}

void Layer::bind_params(void* params, void* grads, std::size_t elem_size) {
  params_.clear();
  grads_.clear();
  auto* p = static_cast<char*>(params);
  auto* g = static_cast<char*>(grads);
  for (const auto& s : spec_.param_shapes) {
    params_.push_back(p);
    grads_.push_back(g);
    p += numel(s) * elem_size;
    g += numel(s) * elem_size;
  }
}

using Layers = Registry<LayerFactory>;

bool register_layer(const std::string& type, LayerFactory factory) { return Layers::instance().add(type, std::move(factory)); }

std::unique_ptr<Layer> make_layer(const LayerSpec& spec) {
  const LayerFactory* make = Layers::instance().find(spec.type);
  GDL_REQUIRE(make, "layer ", spec.name, ": no CUDA kernel for type '", spec.type, "'");
  return (*make)(spec);
}

std::vector<std::string> layer_types() { return Layers::instance().names(); }

}  // namespace gdl::cuda
