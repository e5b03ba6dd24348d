// Fully connected layer geometry from its spec, shared by the CPU and CUDA fc layers:
// y[N x out] = x[N x in] W^T + b, W stored [out, in] (Caffe's and PyTorch's layout); the input is
// read flat per sample, as Caffe's InnerProduct does.
#pragma once
#include <cstdint>

#include "common/layer_spec.h"

namespace gdl {

struct FcGeom {
  int64_t in = 0, out = 0;
  bool bias = true;

  static FcGeom from_spec(const LayerSpec& s) {
    GDL_REQUIRE(s.in_shapes.size() == 1, "fc ", s.name, ": takes one input");
    FcGeom g;
    g.in = numel(s.in_shapes[0]);
    g.out = static_cast<int64_t>(s.attr("out_features", static_cast<double>(numel(s.out_shape))));
    g.bias = s.attr("bias", 1.0) != 0.0;
    GDL_REQUIRE(g.out == numel(s.out_shape), "fc ", s.name, ": out_features ", g.out, " but out_shape has ",
                numel(s.out_shape), " elements");
    GDL_REQUIRE(s.param_shapes.size() == (g.bias ? 2u : 1u), "fc ", s.name, ": param_shapes must be [out, in]",
                g.bias ? " then [out]" : "");
    GDL_REQUIRE(numel(s.param_shapes[0]) == g.out * g.in, "fc ", s.name, ": weight must be [", g.out, ", ", g.in, "]");
    if (g.bias) GDL_REQUIRE(numel(s.param_shapes[1]) == g.out, "fc ", s.name, ": bias must be [", g.out, "]");
    return g;
  }
};

}  // namespace gdl
