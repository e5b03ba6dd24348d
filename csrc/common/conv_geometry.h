// The geometry of a 2-D convolution layer, read from a LayerSpec and checked once, shared by the
// CPU (im2col) and CUDA (cuDNN) kernels so both read the same attributes the same way.
//
// Spec contract (agreed with the network engine): in_shapes[0] = {C, H, W}, out_shape = {K, P, Q};
// attrs out_channels, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
// groups, bias (0/1); param_shapes = {K, C/groups, R, S} then {K} when bias = 1.
#pragma once
#include <cstdint>

#include "common/errors.h"
#include "common/layer_spec.h"

namespace gdl {

struct ConvGeometry {
  int64_t n, c, h, w;    // input: batch, channels, height, width
  int64_t k, r, s;       // output channels, kernel height, kernel width
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  int64_t p, q;          // output height, width
  bool bias;

  int64_t cg() const { return c / groups; }         // input channels per group
  int64_t kg() const { return k / groups; }         // output channels per group
  int64_t crs() const { return cg() * r * s; }      // GEMM inner dimension per group
  int64_t pq() const { return p * q; }
  // 2·N·K·(C/g)·R·S·P·Q: a convolution's FLOPs, per group summed over groups (docs/report.md).
  double flops() const { return 2.0 * n * k * crs() * pq(); }

  static int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dil) {
    return (in + 2 * pad - dil * (kernel - 1) - 1) / stride + 1;
  }

  static ConvGeometry from_spec(const LayerSpec& sp) {
    ConvGeometry g{};
    GDL_REQUIRE(sp.in_shapes.size() == 1 && sp.in_shapes[0].size() == 3, "conv ", sp.name,
                ": expected one input of shape {C, H, W}");
    g.n = sp.batch;
    g.c = sp.in_shapes[0][0];
    g.h = sp.in_shapes[0][1];
    g.w = sp.in_shapes[0][2];
    g.k = static_cast<int64_t>(sp.attr("out_channels"));
    g.r = static_cast<int64_t>(sp.attr("kernel_h"));
    g.s = static_cast<int64_t>(sp.attr("kernel_w"));
    g.stride_h = static_cast<int64_t>(sp.attr("stride_h", 1));
    g.stride_w = static_cast<int64_t>(sp.attr("stride_w", 1));
    g.pad_h = static_cast<int64_t>(sp.attr("pad_h", 0));
    g.pad_w = static_cast<int64_t>(sp.attr("pad_w", 0));
    g.dil_h = static_cast<int64_t>(sp.attr("dilation_h", 1));
    g.dil_w = static_cast<int64_t>(sp.attr("dilation_w", 1));
    g.groups = static_cast<int64_t>(sp.attr("groups", 1));
    g.bias = sp.attr("bias", 0) != 0;
    GDL_REQUIRE(g.n >= 1 && g.c >= 1 && g.h >= 1 && g.w >= 1 && g.k >= 1 && g.r >= 1 && g.s >= 1, "conv ",
                sp.name, ": sizes must be positive");
    GDL_REQUIRE(g.stride_h >= 1 && g.stride_w >= 1 && g.dil_h >= 1 && g.dil_w >= 1 && g.groups >= 1, "conv ",
                sp.name, ": stride, dilation and groups must be >= 1");
    GDL_REQUIRE(g.pad_h >= 0 && g.pad_w >= 0, "conv ", sp.name, ": padding must be >= 0");
    GDL_REQUIRE(g.c % g.groups == 0 && g.k % g.groups == 0, "conv ", sp.name, ": channels (", g.c, " in, ", g.k,
                " out) are not divisible by groups=", g.groups);
    GDL_REQUIRE(g.dil_h * (g.r - 1) + 1 <= g.h + 2 * g.pad_h && g.dil_w * (g.s - 1) + 1 <= g.w + 2 * g.pad_w,
                "conv ", sp.name, ": the kernel is larger than the padded input");
    g.p = out_size(g.h, g.r, g.stride_h, g.pad_h, g.dil_h);
    g.q = out_size(g.w, g.s, g.stride_w, g.pad_w, g.dil_w);
    GDL_REQUIRE(sp.out_shape.size() == 3 && sp.out_shape[0] == g.k && sp.out_shape[1] == g.p &&
                    sp.out_shape[2] == g.q,
                "conv ", sp.name, ": out_shape must be {", g.k, ", ", g.p, ", ", g.q, "}");
    const std::size_t nparams = g.bias ? 2 : 1;
    const Shape w_shape{g.k, g.cg(), g.r, g.s}, b_shape{g.k};
    GDL_REQUIRE(sp.param_shapes.size() == nparams && sp.param_shapes[0] == w_shape &&
                    (!g.bias || sp.param_shapes[1] == b_shape),
                "conv ", sp.name, ": param_shapes must be [[", g.k, ", ", g.cg(), ", ", g.r, ", ", g.s, "]",
                g.bias ? concat(", [", g.k, "]]") : std::string("]"));
    return g;
  }
};

}  // namespace gdl
