// Pooling geometry as Caffe computes it, shared by the CPU and CUDA pooling layers.
// Output size: ceil_mode 1 (Caffe's only mode): ceil((H + 2p - k) / s) + 1, then one less when the
// last window would start inside the bottom padding; ceil_mode 0: floor((H + 2p - k) / s) + 1 (PyTorch's
// default, cuDNN's only mode).
// Average pooling divides by the window clipped to the PADDED input (Caffe; PyTorch's
// count_include_pad=True): padding counts, but positions past the padding (ceil mode) do not.
#pragma once
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "common/fill.h"  // GDL_HD: host and device
#include "common/layer_spec.h"

namespace gdl {

struct PoolGeom {
  int64_t c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  bool ceil_mode = true;

  static int64_t out_dim(int64_t in, int k, int s, int p, bool ceil_mode) {
    const int64_t span = in + 2 * p - k;
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && p > 0 && (o - 1) * s >= in + p) --o;
    return o;
  }

  // kernel_h/kernel_w (or kernel), stride_h/stride_w (or stride, default 1), pad_h/pad_w (or pad,
  // default 0), ceil_mode (default 1, Caffe). in_shapes[0] = {C, H, W}; out_shape must agree.
  static PoolGeom from_spec(const LayerSpec& s) {
    PoolGeom g;
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, s.type, " ", s.name,
                ": needs one input of shape {C, H, W}");
    g.c = s.in_shapes[0][0], g.h = s.in_shapes[0][1], g.w = s.in_shapes[0][2];
    const double k = s.attr("kernel", 0), st = s.attr("stride", 1), p = s.attr("pad", 0);
    g.kh = int(s.attr("kernel_h", k)), g.kw = int(s.attr("kernel_w", k));
    g.sh = int(s.attr("stride_h", st)), g.sw = int(s.attr("stride_w", st));
    g.ph = int(s.attr("pad_h", p)), g.pw = int(s.attr("pad_w", p));
    g.ceil_mode = s.attr("ceil_mode", 1) != 0;
    GDL_REQUIRE(g.kh >= 1 && g.kw >= 1, s.type, " ", s.name, ": kernel_h and kernel_w must be >= 1");
    GDL_REQUIRE(g.sh >= 1 && g.sw >= 1, s.type, " ", s.name, ": strides must be >= 1");
    GDL_REQUIRE(g.ph >= 0 && g.pw >= 0 && g.ph < g.kh && g.pw < g.kw, s.type, " ", s.name,
                ": padding must be >= 0 and smaller than the kernel");
    GDL_REQUIRE(g.h + 2 * g.ph >= g.kh && g.w + 2 * g.pw >= g.kw, s.type, " ", s.name,
                ": kernel larger than the padded input");
    g.oh = out_dim(g.h, g.kh, g.sh, g.ph, g.ceil_mode);
    g.ow = out_dim(g.w, g.kw, g.sw, g.pw, g.ceil_mode);
    GDL_REQUIRE(numel(s.out_shape) == g.c * g.oh * g.ow, s.type, " ", s.name, ": out_shape should be {", g.c, ", ",
                g.oh, ", ", g.ow, "} (ceil_mode ", int(g.ceil_mode), ")");
    return g;
  }

  // Output o's window along one axis (stride s, padding p, kernel k, input extent n): the input
  // range [lo, hi) clipped to the input; returns the extent clipped to the PADDED input (average
  // pooling's divisor).
  static GDL_HD float window(int64_t o, int s, int p, int k, int64_t n, int64_t& lo, int64_t& hi) {
    const int64_t start = o * s - p;
    const int64_t end_padded = start + k < n + p ? start + k : n + p;
    lo = start > 0 ? start : 0;
    hi = end_padded < n ? end_padded : n;
    return float(end_padded - start);
  }

  // Max pooling of output (oy, ox) over one input plane, scanning rows then columns (Caffe's
  // order): strict > keeps the first maximum, whose offset in the plane goes to `index` (-1 for a
  // window that holds no input).
  GDL_HD float window_max(const float* plane, int64_t oy, int64_t ox, int32_t& index) const {
    int64_t y0, y1, x0, x1;
    window(oy, sh, ph, kh, h, y0, y1);
    window(ox, sw, pw, kw, w, x0, x1);
    float best = -FLT_MAX;
    index = -1;
    for (int64_t iy = y0; iy < y1; ++iy)
      for (int64_t ix = x0; ix < x1; ++ix) {
        const float v = plane[iy * w + ix];
        if (v > best) best = v, index = int32_t(iy * w + ix);
      }
    return best;
  }
};

}  // namespace gdl
