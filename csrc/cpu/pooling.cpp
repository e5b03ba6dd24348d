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
    // Outputs whose window lies inside the row horizontally: ox in [lo, hi).
    const int64_t lo = std::min<int64_t>(g.ow, (g.pw + g.sw - 1) / g.sw);
    const int64_t hi = std::max<int64_t>(lo, std::min<int64_t>(g.ow, (g.w + g.pw - g.kw) / g.sw + 1));
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      const float* in = x[0] + p * g.h * g.w;
      float* out = y + p * g.oh * g.ow;
      int32_t* idx = am + p * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        int64_t y0, y1;
        PoolGeom::window(oy, g.sh, g.ph, g.kh, g.h, y0, y1);
        float* orow = out + oy * g.ow;
        int32_t* irow = idx + oy * g.ow;
        for (int64_t ox = 0; ox < g.ow; ++ox) orow[ox] = -FLT_MAX, irow[ox] = -1;
        // Interior: the window's elements in Caffe's order (rows, then columns), each one compared
        // across a whole output row at once; independent outputs keep the pipeline full, where one
        // output's 9-element max is a chain of dependent compares. Strict > keeps the first maximum.
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int kx = 0; kx < g.kw; ++kx) {
            const int64_t base = iy * g.w + kx - g.pw;
            const float* r = in + base;
            if (g.sw == 1) {
#pragma omp simd
              for (int64_t ox = lo; ox < hi; ++ox) {
                const float v = r[ox];
                const bool take = v > orow[ox];
                irow[ox] = take ? int32_t(base + ox) : irow[ox];
                orow[ox] = take ? v : orow[ox];
              }
            } else {  // strided: no simd (gathers are slow on AMD); the outputs' chains still overlap
              for (int64_t ox = lo; ox < hi; ++ox) {
                const float v = r[ox * g.sw];
                const int32_t take = -int32_t(v > orow[ox]);
                irow[ox] = (int32_t(base + ox * g.sw) & take) | (irow[ox] & ~take);
                orow[ox] = std::max(orow[ox], v);
              }
            }
          }
        // Borders (windows clipped by the padding): one output at a time.
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          if (ox == lo) ox = hi;
          if (ox >= g.ow) break;
          orow[ox] = g.window_max(in, oy, ox, irow[ox]);
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
        const float iy_n = PoolGeom::window(oy, g.sh, g.ph, g.kh, g.h, y0, y1);
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          int64_t x0, x1;
          const float ix_n = PoolGeom::window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
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
        const float iy_n = PoolGeom::window(oy, g.sh, g.ph, g.kh, g.h, y0, y1);
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          int64_t x0, x1;
          const float ix_n = PoolGeom::window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
          const float v = gy[oy * g.ow + ox] / (iy_n * ix_n);
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) d[iy * g.w + ix] += v;
        }
      }
    }
  }

 private:
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
