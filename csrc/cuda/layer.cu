#include <map>

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

static std::map<std::string, LayerFactory>& registry() {
  static std::map<std::string, LayerFactory> r;
  return r;
}

bool register_layer(const std::string& type, LayerFactory factory) {
  registry()[type] = std::move(factory);
  return true;
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec) {
  auto it = registry().find(spec.type);
  GDL_REQUIRE(it != registry().end(), "layer ", spec.name, ": no CUDA kernel for type '", spec.type, "'");
  return it->second(spec);
}

std::vector<std::string> layer_types() {
  std::vector<std::string> names;
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

}  // namespace gdl::cuda
