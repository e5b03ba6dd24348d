// The per-position layers of a transformer block (gdlbench/nets/network.py's docstring): layernorm,
// linear and gelu (tanh: activations.cpp). A sequence is the per-sample shape (D, S, 1),
// features-major: sample b, feature d, position s at (b * D + d) * S + s, so a position's features
// are S floats apart and a per-position linear is W[F, D] @ X_b[D, S] (the batch packed as one
// GEMM: cpu/seq_gemm.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/errors.h"
#include "cpu/blas.h"
#include "cpu/fast_math.h"
#include "cpu/layer.h"
#include "cpu/seq_gemm.h"

namespace gdl::cpu {
namespace {

// LayerNorm over the features D at each position (torch.nn.LayerNorm(D)): biased variance,
// y = (x - mean) / sqrt(var + eps) * gamma + beta. param_shapes [D] (gamma), [D] (beta); attr eps.
// The statistics of kBlock neighbouring positions are kept side by side, so every pass over the
// features reads contiguous runs of S.
class LayerNormLayer : public Layer {
 public:
  explicit LayerNormLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "layernorm ", s.name,
                ": needs one input (D, S, 1)");
    GDL_REQUIRE(s.out_shape == s.in_shapes[0], "layernorm ", s.name, ": out_shape must equal the input shape");
    d_ = s.in_shapes[0][0];
    s_ = s.in_shapes[0][1] * s.in_shapes[0][2];
    eps_ = s.attr("eps", 1e-5);
    GDL_REQUIRE(eps_ > 0, "layernorm ", s.name, ": eps must be > 0");
    GDL_REQUIRE(s.param_shapes.size() == 2 && s.param_shapes[0] == Shape{d_} && s.param_shapes[1] == Shape{d_},
                "layernorm ", s.name, ": param_shapes must be [D] (gamma) then [D] (beta), D = ", d_);
    mean_.resize(spec_.batch * s_);
    rstd_.resize(spec_.batch * s_);
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t d = d_, s = s_, blocks = (s + kBlock - 1) / kBlock;
    const float *gamma = params_[0], *beta = params_[1];
    const float inv_d = 1.f / float(d), eps = float(eps_);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < spec_.batch * blocks; ++t) {
      const int64_t b = t / blocks, s0 = (t % blocks) * kBlock, len = std::min<int64_t>(kBlock, s - s0);
      const float* in = x[0] + b * d * s + s0;
      float* out = y + b * d * s + s0;
      float mu[kBlock] = {0.f}, var[kBlock] = {0.f};
      for (int64_t f = 0; f < d; ++f)
        for (int64_t i = 0; i < len; ++i) mu[i] += in[f * s + i];
      for (int64_t i = 0; i < len; ++i) mu[i] *= inv_d;
      for (int64_t f = 0; f < d; ++f)  // two passes: E[x^2] - E[x]^2 loses digits
        for (int64_t i = 0; i < len; ++i) var[i] += (in[f * s + i] - mu[i]) * (in[f * s + i] - mu[i]);
      for (int64_t i = 0; i < len; ++i) var[i] = 1.f / std::sqrt(var[i] * inv_d + eps);  // now rstd
      for (int64_t f = 0; f < d; ++f) {
        const float g = gamma[f], be = beta[f];
        for (int64_t i = 0; i < len; ++i) out[f * s + i] = (in[f * s + i] - mu[i]) * var[i] * g + be;
      }
      std::copy(mu, mu + len, mean_.data() + b * s + s0);
      std::copy(var, var + len, rstd_.data() + b * s + s0);
    }
  }

  // dx = rstd * (g - mean_d(g) - xhat * mean_d(g xhat)), g = dy * gamma.
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t d = d_, s = s_, blocks = (s + kBlock - 1) / kBlock;
    const float* gamma = params_[0];
    const float inv_d = 1.f / float(d);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < spec_.batch * blocks; ++t) {
      const int64_t b = t / blocks, s0 = (t % blocks) * kBlock, len = std::min<int64_t>(kBlock, s - s0);
      const int64_t off = b * d * s + s0;
      const float *in = x[0] + off, *g = dy + off, *mu = mean_.data() + b * s + s0, *rs = rstd_.data() + b * s + s0;
      float* out = dx[0] + off;
      float sg[kBlock] = {0.f}, sgx[kBlock] = {0.f};
      for (int64_t f = 0; f < d; ++f)
        for (int64_t i = 0; i < len; ++i) {
          const float gi = g[f * s + i] * gamma[f];
          sg[i] += gi;
          sgx[i] += gi * (in[f * s + i] - mu[i]) * rs[i];
        }
      for (int64_t i = 0; i < len; ++i) sg[i] *= inv_d, sgx[i] *= inv_d;
      for (int64_t f = 0; f < d; ++f)
        for (int64_t i = 0; i < len; ++i) {
          const float xh = (in[f * s + i] - mu[i]) * rs[i];
          out[f * s + i] += rs[i] * (g[f * s + i] * gamma[f] - sg[i] - xh * sgx[i]);
        }
    }
  }

  // dgamma[d] = sum over batch and positions of dy * xhat; dbeta[d] = sum of dy.
  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    const int64_t d = d_, s = s_, n = spec_.batch;
#pragma omp parallel for schedule(static)
    for (int64_t f = 0; f < d; ++f) {
      double sgx = 0, sg = 0;
      for (int64_t b = 0; b < n; ++b) {
        const float *in = x[0] + (b * d + f) * s, *g = dy + (b * d + f) * s;
        const float *mu = mean_.data() + b * s, *rs = rstd_.data() + b * s;
        float a = 0.f, c = 0.f;
#pragma omp simd reduction(+ : a, c)
        for (int64_t i = 0; i < s; ++i) {
          a += g[i] * (in[i] - mu[i]) * rs[i];
          c += g[i];
        }
        sgx += a, sg += c;
      }
      grads_[0][f] = float(sgx);
      grads_[1][f] = float(sg);
    }
  }

 private:
  static constexpr int64_t kBlock = 64;
  int64_t d_ = 0, s_ = 0;
  double eps_ = 1e-5;
  std::vector<float> mean_, rstd_;  // per (sample, position), saved for backward
};
GDL_REGISTER_LAYER("layernorm", LayerNormLayer);

// Per-position linear (torch.nn.Linear on (B, S, C)): (C, H, W) -> (F, H, W), Y_b = W X_b (+ b),
// weight [F, C] (+ bias [F]). The batch packed as [C][B*P] (cpu/seq_gemm.h): one GEMM per pass
// with N (or K) = B*P, as torch's, on the OpenMP threads (gemm_rows). A single position per sample
// (P = 1, the fc case) goes the same way: packed, X is X^T, so the GEMM's rows are the F outputs
// (split over the threads) rather than the batch's few samples.
class LinearLayer : public Layer {
 public:
  explicit LinearLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "linear ", s.name, ": needs one input (C, H, W)");
    c_ = s.in_shapes[0][0];
    p_ = s.in_shapes[0][1] * s.in_shapes[0][2];
    f_ = int64_t(s.attr("out_features"));
    bias_ = s.attr("bias", 1) != 0;
    GDL_REQUIRE(s.out_shape == (Shape{f_, s.in_shapes[0][1], s.in_shapes[0][2]}), "linear ", s.name,
                ": out_shape must be (out_features, H, W) = (", f_, ", ", s.in_shapes[0][1], ", ", s.in_shapes[0][2], ")");
    GDL_REQUIRE(s.param_shapes.size() == std::size_t(bias_ ? 2 : 1) && s.param_shapes[0] == (Shape{f_, c_}) &&
                    (!bias_ || s.param_shapes[1] == Shape{f_}),
                "linear ", s.name, ": param_shapes must be [", f_, ", ", c_, "] (weight)", bias_ ? " then [F] (bias)" : "");
    xp_.resize(spec_.batch * c_ * p_), yp_.resize(spec_.batch * f_ * p_);
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t c = c_, p = p_, f = f_, n = spec_.batch;
    const float* bias = bias_ ? params_[1] : nullptr;
    pack_seq(x[0], n, c, p, xp_.data());  // Yp[F x nP] = W[F x C] Xp[C x nP], then Y_b = Yp's b-th columns + b
    gemm_rows(false, false, int(f), int(n * p), int(c), 1.f, params_[0], int(c), xp_.data(), int(n * p), 0.f,
              yp_.data(), int(n * p));
    unpack_seq(yp_.data(), n, f, p, bias, false, y);
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t c = c_, p = p_, f = f_, n = spec_.batch;
    pack_seq(dy, n, f, p, yp_.data());  // dXp[C x nP] = W^T dYp[F x nP], added to each dX_b
    gemm_rows(true, false, int(c), int(n * p), int(f), 1.f, params_[0], int(c), yp_.data(), int(n * p), 0.f,
              xp_.data(), int(n * p));
    unpack_seq(xp_.data(), n, c, p, nullptr, true, dx[0]);
  }

  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    const int64_t c = c_, p = p_, f = f_, n = spec_.batch;
    if (p == 1) {  // dW[F x C] = dY^T X
      gemm_rows(true, false, int(f), int(c), int(n), 1.f, dy, int(f), x[0], int(c), 0.f, grads_[0], int(c));
    } else {  // dW[F x C] = dYp[F x nP] Xp^T: one GEMM with K = nP
      pack_seq(dy, n, f, p, yp_.data());
      pack_seq(x[0], n, c, p, xp_.data());
      gemm_rows(false, true, int(f), int(c), int(n * p), 1.f, yp_.data(), int(n * p), xp_.data(), int(n * p), 0.f,
                grads_[0], int(c));
    }
    if (!bias_) return;
    float* db = grads_[1];
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < f; ++j) {
      double sum = 0;
      for (int64_t b = 0; b < n; ++b) {
        const float* g = dy + (b * f + j) * p;
        float part = 0.f;
#pragma omp simd reduction(+ : part)
        for (int64_t i = 0; i < p; ++i) part += g[i];
        sum += part;
      }
      db[j] = float(sum);
    }
  }

 private:
  int64_t c_ = 0, p_ = 0, f_ = 0;
  bool bias_ = true;
  std::vector<float> xp_, yp_;  // the batch packed [C][B*P] and [F][B*P]
};
GDL_REGISTER_LAYER("linear", LinearLayer);

// tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error about 1e-7.
inline float tanh_poly(float u) { return 1.f - 2.f / (exp_poly(2.f * u) + 1.f); }
// The normal CDF Phi(v) = erfc(-v / sqrt 2) / 2, with Numerical Recipes' erfc (erfcc: fractional
// error under 1.2e-7 everywhere, so Phi keeps its relative accuracy far into the negative tail).
inline float phi_poly(float v) {
  const float z = std::fabs(v) * 0.70710678118654752f, t = 1.f / (1.f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  const float half_erfc = 0.5f * t * exp_poly(-z * z - 1.26551223f + t * p);  // erfc(z) / 2
  return v < 0.f ? half_erfc : 1.f - half_erfc;
}

// GELU, element-wise. approximate 0: x Phi(x), the exact erf form (torch's default; BERT, ViT);
// approximate 1: the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's gelu_new,
// torch's approximate='tanh'). Backward reads the input.
class GeluLayer : public Layer {
 public:
  explicit GeluLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), "gelu ", s.name,
                ": out_shape must have as many elements as the input");
    const double a = s.attr("approximate", 0);
    GDL_REQUIRE(a == 0 || a == 1, "gelu ", s.name, ": approximate must be 0 (erf) or 1 (tanh), got ", a);
    tanh_ = a == 1;
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    const float* in = x[0];
    const int64_t n = out_count();
    if (tanh_) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        y[i] = 0.5f * v * (1.f + tanh_poly(kC * (v + kA * v * v * v)));
      }
    } else {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) y[i] = in[i] * phi_poly(in[i]);
    }
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const float* in = x[0];
    float* g = dx[0];
    const int64_t n = out_count();
    if (tanh_) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const float v = in[i], t = tanh_poly(kC * (v + kA * v * v * v));
        g[i] += dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * kC * (1.f + 3.f * kA * v * v));
      }
    } else {  // d/dv v Phi(v) = Phi(v) + v phi(v)
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        g[i] += dy[i] * (phi_poly(v) + v * kRsqrt2pi * exp_poly(-0.5f * v * v));
      }
    }
  }

 private:
  static constexpr float kRsqrt2pi = 0.39894228040143268f;
  static constexpr float kC = 0.79788456080286536f, kA = 0.044715f;  // sqrt(2/pi)
  bool tanh_ = false;
};
GDL_REGISTER_LAYER("gelu", GeluLayer);

}  // namespace
}  // namespace gdl::cpu
