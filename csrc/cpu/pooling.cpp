// Max, average and global average pooling (Caffe's semantics: common/pooling.h). Planes (n, c)
// are independent, so each OpenMP thread owns whole planes of y and dx: no races, no atomics.
#include <cfloat>

#include "common/pooling.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

class MaxPoolLayer : public Layer {
 public:
  explicit MaxPoolLayer(const LayerSpec& s) : Layer(s), g_(PoolGeom::from_spec(s)) {
    argmax_.resize(out_count());
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    const PoolGeom g = g_;
    const int64_t planes = spec_.batch * g.c;
    int32_t* am = argmax_.data();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      const float* in = x[0] + p * g.h * g.w;
      float* out = y + p * g.oh * g.ow;
      int32_t* idx = am + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t y0 = std::max<int64_t>(oy * g.sh - g.ph, 0), y1 = std::min<int64_t>(oy * g.sh - g.ph + g.kh, g.h);
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t x0 = std::max<int64_t>(ox * g.sw - g.pw, 0), x1 = std::min<int64_t>(ox * g.sw - g.pw + g.kw, g.w);
          float best = -FLT_MAX;
          int32_t bi = -1;
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) {
              const float v = in[iy * g.w + ix];
              if (v > best) best = v, bi = int32_t(iy * g.w + ix);  // first maximum wins, as Caffe
            }
          out[oy * g.ow + ox] = best;
          idx[oy * g.ow + ox] = bi;
        }
      }
    }
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const PoolGeom g = g_;
    const int64_t planes = spec_.batch * g.c, osz = g.oh * g.ow;
    const int32_t* am = argmax_.data();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      float* d = dx[0] + p * g.h * g.w;
      for (int64_t o = 0; o < osz; ++o) {
        const int32_t i = am[p * osz + o];
        if (i >= 0) d[i] += dy[p * osz + o];
      }
    }
  }

 private:
  PoolGeom g_;
  std::vector<int32_t> argmax_;  // input offset within the plane of each output's maximum
};
GDL_REGISTER_LAYER("maxpool", MaxPoolLayer);

class AvgPoolLayer : public Layer {
 public:
  explicit AvgPoolLayer(const LayerSpec& s) : Layer(s), g_(PoolGeom::from_spec(s)) {}
  void forward(const std::vector<const float*>& x, float* y) override {
    const PoolGeom g = g_;
    const int64_t planes = spec_.batch * g.c;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      const float* in = x[0] + p * g.h * g.w;
      float* out = y + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        int64_t y0, y1;
        const float iy_n = window(oy, g.sh, g.ph, g.kh, g.h, y0, y1);
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          int64_t x0, x1;
          const float ix_n = window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
          float s = 0.f;
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) s += in[iy * g.w + ix];
          out[oy * g.ow + ox] = s / (iy_n * ix_n);
        }
      }
    }
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const PoolGeom g = g_;
    const int64_t planes = spec_.batch * g.c;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      float* d = dx[0] + p * g.h * g.w;
      const float* gy = dy + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        int64_t y0, y1;
        const float iy_n = window(oy, g.sh, g.ph, g.kh, g.h, y0, y1);
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          int64_t x0, x1;
          const float ix_n = window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
          const float v = gy[oy * g.ow + ox] / (iy_n * ix_n);
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) d[iy * g.w + ix] += v;
        }
      }
    }
  }

 private:
  // Window [lo, hi) clipped to the input; returns its extent clipped to the padded input (the divisor).
  static float window(int64_t o, int s, int p, int k, int64_t n, int64_t& lo, int64_t& hi) {
    const int64_t start = o * s - p;
    const int64_t end_padded = std::min<int64_t>(start + k, n + p);
    const float extent = float(end_padded - start);
    lo = std::max<int64_t>(start, 0);
    hi = std::min<int64_t>(end_padded, n);
    return extent;
  }
  PoolGeom g_;
};
GDL_REGISTER_LAYER("avgpool", AvgPoolLayer);

// Mean over H x W per (n, c): in {C, H, W}, out {C} or {C, 1, 1}.
class GlobalAvgPoolLayer : public Layer {
 public:
  explicit GlobalAvgPoolLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "global_avgpool ", s.name,
                ": needs one input {C, H, W}");
    c_ = s.in_shapes[0][0];
    hw_ = s.in_shapes[0][1] * s.in_shapes[0][2];
    GDL_REQUIRE(numel(s.out_shape) == c_, "global_avgpool ", s.name, ": out_shape must have C = ", c_, " elements");
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t planes = spec_.batch * c_, hw = hw_;
    const float inv = 1.f / float(hw);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      const float* in = x[0] + p * hw;
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < hw; ++i) s += in[i];
      y[p] = s * inv;
    }
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t planes = spec_.batch * c_, hw = hw_;
    const float inv = 1.f / float(hw);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      float* d = dx[0] + p * hw;
      const float v = dy[p] * inv;
#pragma omp simd
      for (int64_t i = 0; i < hw; ++i) d[i] += v;
    }
  }

 private:
  int64_t c_ = 0, hw_ = 0;
};
GDL_REGISTER_LAYER("global_avgpool", GlobalAvgPoolLayer);

}  // namespace
}  // namespace gdl::cpu
