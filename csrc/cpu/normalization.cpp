// Local response normalization (Caffe, ACROSS_CHANNELS) and batch normalization (training mode).
// sqrt without errno lets the compiler vectorise it (no input here is negative).
#pragma GCC optimize("no-math-errno")
#include <cmath>

#include "common/errors.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

// Caffe's LRN across channels: scale_c = k + alpha/size * sum_{c' = c-(size-1)/2}^{c+size/2... clipped} x_c'^2,
// y = x * scale^-beta. Attributes: size (odd, default 5), alpha (1e-4), beta (0.75), k (1).
// Backward (Caffe's formula): dx = dy * scale^-beta - 2 alpha beta / size * x * sum_window(dy * y / scale).
class LrnLayer : public Layer {
 public:
  explicit LrnLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "lrn ", s.name, ": needs one input {C, H, W}");
    GDL_REQUIRE(numel(s.out_shape) == numel(s.in_shapes[0]), "lrn ", s.name, ": out_shape must equal the input shape");
    size_ = int(s.attr("size", 5));
    alpha_ = float(s.attr("alpha", 1e-4));
    beta_ = float(s.attr("beta", 0.75));
    k_ = float(s.attr("k", 1.0));
    GDL_REQUIRE(size_ >= 1 && size_ % 2 == 1, "lrn ", s.name, ": size must be odd and >= 1, got ", size_);
    GDL_REQUIRE(k_ > 0.f, "lrn ", s.name, ": k must be > 0");
    c_ = s.in_shapes[0][0];
    hw_ = s.in_shapes[0][1] * s.in_shapes[0][2];
    scale_.resize(in_count());
  }

  // s^-beta; beta = 0.75 (AlexNet, GoogLeNet) as 1 / (sqrt(s) sqrt(sqrt(s))), which vectorises.
  static inline float pow_neg(float s, float beta, bool three_quarters) {
    if (three_quarters) {
      const float r = std::sqrt(s);
      return 1.f / (r * std::sqrt(r));
    }
    return std::pow(s, -beta);
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t c = c_, hw = hw_, blocks = (hw + kBlock - 1) / kBlock;
    const int half = (size_ - 1) / 2;
    const float a = alpha_ / float(size_), k = k_, beta = beta_;
    const bool tq = beta_ == 0.75f;
    float* scale = scale_.data();
    // Parallel over (sample, block of spatial positions); a sliding window over the channels keeps
    // the sum of squares of each position in a small buffer, so every x is read twice at most.
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < spec_.batch * blocks; ++t) {
      const int64_t n = t / blocks, b0 = (t % blocks) * kBlock, len = std::min<int64_t>(kBlock, hw - b0);
      const float* in = x[0] + n * c * hw + b0;
      float* sc = scale + n * c * hw + b0;
      float* out = y + n * c * hw + b0;
      float sum[kBlock] = {0.f};
      for (int64_t j = 0; j < std::min<int64_t>(half, c); ++j)
        for (int64_t i = 0; i < len; ++i) sum[i] += in[j * hw + i] * in[j * hw + i];
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t add = ch + half, sub = ch - half - 1;
        if (add < c)
          for (int64_t i = 0; i < len; ++i) sum[i] += in[add * hw + i] * in[add * hw + i];
        if (sub >= 0)
          for (int64_t i = 0; i < len; ++i) sum[i] -= in[sub * hw + i] * in[sub * hw + i];
        for (int64_t i = 0; i < len; ++i) {
          const float s = k + a * sum[i];
          sc[ch * hw + i] = s;
          out[ch * hw + i] = in[ch * hw + i] * pow_neg(s, beta, tq);
        }
      }
    }
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t c = c_, hw = hw_, blocks = (hw + kBlock - 1) / kBlock;
    const int half = (size_ - 1) / 2;
    const float coef = 2.f * alpha_ * beta_ / float(size_), beta = beta_;
    const bool tq = beta_ == 0.75f;
    const float* scale = scale_.data();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < spec_.batch * blocks; ++t) {
      const int64_t n = t / blocks, b0 = (t % blocks) * kBlock, len = std::min<int64_t>(kBlock, hw - b0);
      const int64_t off = n * c * hw + b0;
      const float *in = x[0] + off, *sc = scale + off, *out = y + off, *g = dy + off;
      float* d = dx[0] + off;
      // r_c = dy_c * y_c / scale_c, summed over the same window of channels
      auto r = [&](int64_t ch, int64_t i) { return g[ch * hw + i] * out[ch * hw + i] / sc[ch * hw + i]; };
      float sum[kBlock] = {0.f};
      for (int64_t j = 0; j < std::min<int64_t>(half, c); ++j)
        for (int64_t i = 0; i < len; ++i) sum[i] += r(j, i);
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t add = ch + half, sub = ch - half - 1;
        if (add < c)
          for (int64_t i = 0; i < len; ++i) sum[i] += r(add, i);
        if (sub >= 0)
          for (int64_t i = 0; i < len; ++i) sum[i] -= r(sub, i);
        for (int64_t i = 0; i < len; ++i)
          d[ch * hw + i] += g[ch * hw + i] * pow_neg(sc[ch * hw + i], beta, tq) - coef * in[ch * hw + i] * sum[i];
      }
    }
  }

 private:
  static constexpr int64_t kBlock = 256;
  int size_ = 5;
  float alpha_ = 1e-4f, beta_ = 0.75f, k_ = 1.f;
  int64_t c_ = 0, hw_ = 0;
  std::vector<float> scale_;  // saved for backward
};
GDL_REGISTER_LAYER("lrn", LrnLayer);

// Batch normalization, training mode: statistics of this batch (biased variance, over N, H, W per
// channel), y = gamma * (x - mean) / sqrt(var + eps) + beta. param_shapes {C} (gamma) then {C} (beta);
// attr eps (default 1e-5). No running averages: they do not change the cost of an iteration.
class BatchNormLayer : public Layer {
 public:
  explicit BatchNormLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && !s.in_shapes[0].empty(), "bn ", s.name, ": needs one input {C, ...}");
    GDL_REQUIRE(numel(s.out_shape) == numel(s.in_shapes[0]), "bn ", s.name, ": out_shape must equal the input shape");
    c_ = s.in_shapes[0][0];
    hw_ = numel(s.in_shapes[0]) / c_;
    eps_ = s.attr("eps", 1e-5);
    GDL_REQUIRE(eps_ > 0, "bn ", s.name, ": eps must be > 0");
    GDL_REQUIRE(s.param_shapes.size() == 2 && numel(s.param_shapes[0]) == c_ && numel(s.param_shapes[1]) == c_,
                "bn ", s.name, ": param_shapes must be [C] (scale) then [C] (shift), C = ", c_);
    mean_.resize(c_);
    invstd_.resize(c_);
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t c = c_, hw = hw_, n = spec_.batch;
    const double m = double(n * hw);
    const float *gamma = params_[0], *beta = params_[1];
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < c; ++ch) {
      // Two passes (mean, then squared deviations) in double: one-pass E[x^2] - E[x]^2 loses digits.
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x[0] + (i * c + ch) * hw;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < hw; ++j) s += p[j];
      }
      const double mu = s / m;
      double v = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x[0] + (i * c + ch) * hw;
#pragma omp simd reduction(+ : v)
        for (int64_t j = 0; j < hw; ++j) v += (p[j] - mu) * (p[j] - mu);
      }
      const float inv = float(1.0 / std::sqrt(v / m + eps_));
      mean_[ch] = float(mu);
      invstd_[ch] = inv;
      const float a = gamma[ch] * inv, b = beta[ch] - float(mu) * a;
      for (int64_t i = 0; i < n; ++i) {
        const float* p = x[0] + (i * c + ch) * hw;
        float* q = y + (i * c + ch) * hw;
#pragma omp simd
        for (int64_t j = 0; j < hw; ++j) q[j] = p[j] * a + b;
      }
    }
  }

  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < c_; ++ch) sums(x[0], dy, ch, grads_[0][ch], grads_[1][ch]);
  }

  // dx = gamma * invstd / M * (M dy - sum(dy) - xhat * sum(dy xhat)); the two sums are recomputed
  // here so that backward_data does not depend on backward_params having run.
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t c = c_, hw = hw_, n = spec_.batch;
    const float m = float(n * hw);
    const float* gamma = params_[0];
#pragma omp parallel for schedule(static)
    for (int64_t ch = 0; ch < c; ++ch) {
      float dgamma, dbeta;
      sums(x[0], dy, ch, dgamma, dbeta);
      const float mu = mean_[ch], inv = invstd_[ch];
      const float k = gamma[ch] * inv / m, sum_dy = dbeta, sum_dy_xhat = dgamma;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t o = (i * c + ch) * hw;
        const float *p = x[0] + o, *g = dy + o;
        float* d = dx[0] + o;
#pragma omp simd
        for (int64_t j = 0; j < hw; ++j) d[j] += k * (m * g[j] - sum_dy - (p[j] - mu) * inv * sum_dy_xhat);
      }
    }
  }

 private:
  // sum(dy * xhat) and sum(dy) over channel ch
  void sums(const float* x, const float* dy, int64_t ch, float& dgamma, float& dbeta) const {
    const int64_t c = c_, hw = hw_;
    const float mu = mean_[ch], inv = invstd_[ch];
    double sg = 0, sb = 0;
    for (int64_t i = 0; i < spec_.batch; ++i) {
      const float *p = x + (i * c + ch) * hw, *g = dy + (i * c + ch) * hw;
      float sgf = 0, sbf = 0;
#pragma omp simd reduction(+ : sgf, sbf)
      for (int64_t j = 0; j < hw; ++j) {
        sgf += g[j] * (p[j] - mu);
        sbf += g[j];
      }
      sg += sgf, sb += sbf;
    }
    dgamma = float(sg * inv);
    dbeta = float(sb);
  }

  int64_t c_ = 0, hw_ = 0;
  double eps_ = 1e-5;
  std::vector<float> mean_, invstd_;  // saved for backward
};
GDL_REGISTER_LAYER("bn", BatchNormLayer);

}  // namespace
}  // namespace gdl::cpu
