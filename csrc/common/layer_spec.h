// A layer as the network engine (gdlbench/nets/network.py, Network.layer_specs()) describes it; shared
// by the CPU and CUDA layer interfaces. Shapes are per sample; the batch is separate.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/errors.h"

namespace gdl {

using Shape = std::vector<int64_t>;  // per-sample shape, e.g. {C, H, W}, or {F} for fc outputs

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

struct LayerSpec {
  std::string name, type;
  std::vector<int> inputs;            // producer layer indices; -1 = the data input
  std::vector<Shape> in_shapes;       // per sample
  Shape out_shape;                    // per sample
  std::map<std::string, double> attrs;  // numeric attributes (kernel_h, stride, groups, ...)
  std::vector<Shape> param_shapes;    // e.g. conv: {K, C/g, R, S} then {K} for the bias
  int batch = 1;

  double attr(const std::string& key, double fallback) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? fallback : it->second;
  }
  double attr(const std::string& key) const {  // throws std::invalid_argument when missing
    auto it = attrs.find(key);
    GDL_REQUIRE(it != attrs.end(), "layer ", name, " (", type, "): missing attribute '", key, "'");
    return it->second;
  }
};

}  // namespace gdl
