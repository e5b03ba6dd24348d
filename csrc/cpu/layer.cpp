#include "cpu/layer.h"

#include <omp.h>

#include "common/errors.h"

namespace gdl::cpu {

void Layer::bind_params(float* params, float* grads) {
  params_.clear();
  grads_.clear();
  for (const auto& s : spec_.param_shapes) {
    params_.push_back(params);
    grads_.push_back(grads);
    params += numel(s);
    grads += numel(s);
  }
}

int64_t Layer::param_count() const {
  int64_t n = 0;
  for (const auto& s : spec_.param_shapes) n += numel(s);
  return n;
}

static std::map<std::string, LayerFactory>& registry() {
  static std::map<std::string, LayerFactory> r;  // function-local: safe during static init
  return r;
}

bool register_layer(const std::string& type, LayerFactory factory) {
  registry()[type] = std::move(factory);
  return true;
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec) {
  auto it = registry().find(spec.type);
  GDL_REQUIRE(it != registry().end(), "layer ", spec.name, ": unknown type '", spec.type, "'");
  GDL_REQUIRE(spec.batch >= 1, "layer ", spec.name, ": batch must be >= 1");
  return it->second(spec);
}

std::vector<std::string> layer_types() {
  std::vector<std::string> names;
  for (const auto& kv : registry()) names.push_back(kv.first);
  return names;
}

void set_compute_threads(int n) { omp_set_num_threads(n); }
int compute_threads() { return omp_get_max_threads(); }

}  // namespace gdl::cpu
