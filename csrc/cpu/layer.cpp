#include "cpu/layer.h"

#include <omp.h>

#include "common/errors.h"
#include "common/registry.h"

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

using Layers = Registry<LayerFactory>;

bool register_layer(const std::string& type, LayerFactory factory) { return Layers::instance().add(type, std::move(factory)); }

std::unique_ptr<Layer> make_layer(const LayerSpec& spec) {
  const LayerFactory* make = Layers::instance().find(spec.type);
  GDL_REQUIRE(make, "layer ", spec.name, ": unknown type '", spec.type, "'");
  GDL_REQUIRE(spec.batch >= 1, "layer ", spec.name, ": batch must be >= 1");
  return (*make)(spec);
}

std::vector<std::string> layer_types() { return Layers::instance().names(); }

void set_compute_threads(int n) { omp_set_num_threads(n); }
int compute_threads() { return omp_get_max_threads(); }

}  // namespace gdl::cpu
