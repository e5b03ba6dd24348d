// Multi-head self-attention on a sequence (D, S, 1) per sample, element (b, d, s) at b*D*S + d*S + s
// (features-major: a projection is W[F, D] @ X_b[D, S]). Attributes (gdlbench/nets/network.py): heads,
// bias [1], causal [0], dropout [0] (on the probabilities; common/dropout.h's mask with attribute
// seed [0], element index ((b*heads + h)*S + i)*S + j). Parameters in param_shapes order: W_qkv
// [3D, D], b_qkv [3D] if bias, W_o [D, D], b_o [D] if bias.
//   QKV_b = W_qkv X_b + b_qkv; head h reads rows h*dh.. (dh = D/heads) of Q, K and V;
//   P = softmax over keys of Q_h^T K_h / sqrt(dh) (causal: key j > query i masked);
//   O_h = V_h Pd^T (Pd: P after dropout); Y_b = W_o O_b + b_o.
// Saved for backward: QKV, P (before dropout; the mask is regenerated), O. The per-head GEMMs run
// in OpenMP over (batch, head) with single-threaded BLAS; so do the projections (gemm_rows: rows
// split over the same threads), one GEMM per pass over the batch packed as [rows][B*S]
// (cpu/seq_gemm.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/dropout.h"
#include "common/errors.h"
#include "cpu/blas.h"
#include "cpu/fast_math.h"
#include "cpu/layer.h"
#include "cpu/seq_gemm.h"

namespace gdl::cpu {
namespace {

class AttentionLayer : public Layer {
 public:
  explicit AttentionLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3 && s.in_shapes[0][2] == 1, "attention ",
                s.name, ": takes one sequence (D, S, 1)");
    d_ = s.in_shapes[0][0], s_ = s.in_shapes[0][1];
    GDL_REQUIRE(s.out_shape == s.in_shapes[0], "attention ", s.name, ": out_shape must equal the input shape");
    const double heads = s.attr("heads", 0);
    GDL_REQUIRE(heads >= 1 && heads == std::floor(heads) && d_ % int64_t(heads) == 0, "attention ", s.name,
                ": heads must be a positive integer dividing the width ", d_, ", got ", heads);
    heads_ = int64_t(heads), dh_ = d_ / heads_;
    bias_ = s.attr("bias", 1) != 0, causal_ = s.attr("causal", 0) != 0;
    ratio_ = float(s.attr("dropout", 0)), seed_ = uint64_t(s.attr("seed", 0));
    GDL_REQUIRE(ratio_ >= 0.f && ratio_ < 1.f, "attention ", s.name, ": dropout must be in [0, 1), got ", ratio_);
    std::vector<Shape> want{{3 * d_, d_}};
    if (bias_) want.push_back({3 * d_});
    want.push_back({d_, d_});
    if (bias_) want.push_back({d_});
    GDL_REQUIRE(s.param_shapes == want, "attention ", s.name, ": param_shapes must be [3D, D]", bias_ ? ", [3D]" : "",
                ", [D, D]", bias_ ? ", [D]" : "", " with D = ", d_);
    const int64_t n = s.batch;
    qkv_.resize(n * 3 * d_ * s_), dqkv_.resize(qkv_.size());
    o_.resize(n * d_ * s_), do_.resize(o_.size());
    p_.resize(n * heads_ * s_ * s_);
    pa_.resize(n * 3 * d_ * s_), pb_.resize(n * d_ * s_);
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t n = spec_.batch, ns = n * s_;
    pack_seq(x[0], n, d_, s_, pb_.data());  // QKV_b = W_qkv X_b (+ b_qkv), one GEMM for the batch
    gemm_rows(false, false, int(3 * d_), int(ns), int(d_), 1.f, params_[0], int(d_), pb_.data(), int(ns), 0.f,
              pa_.data(), int(ns));
    unpack_seq(pa_.data(), n, 3 * d_, s_, bias_ ? params_[1] : nullptr, false, qkv_.data());
    over_heads([&](int64_t b, int64_t h, float* scratch) { head_forward(b, h, scratch); });
    pack_seq(o_.data(), n, d_, s_, pb_.data());  // Y_b = W_o O_b (+ b_o)
    gemm_rows(false, false, int(d_), int(ns), int(d_), 1.f, wo(), int(d_), pb_.data(), int(ns), 0.f, pa_.data(),
              int(ns));
    unpack_seq(pa_.data(), n, d_, s_, bias_ ? params_[3] : nullptr, false, y);
    dqkv_for_ = nullptr;
  }

  // Both backward passes need dQKV: backward_params (which the executors run first) computes it,
  // backward_data reuses it for the same dy once, else computes it itself.
  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    const int64_t n = spec_.batch, ns = n * s_;
    compute_dqkv(dy);
    pack_seq(dy, n, d_, s_, pb_.data());  // dW_o = dYp Op^T (K = nS)
    pack_seq(o_.data(), n, d_, s_, pa_.data());
    gemm_rows(false, true, int(d_), int(d_), int(ns), 1.f, pb_.data(), int(ns), pa_.data(), int(ns), 0.f,
              grads_[bias_ ? 2 : 1], int(d_));
    pack_seq(dqkv_.data(), n, 3 * d_, s_, pa_.data());  // dW_qkv = dQKVp Xp^T
    pack_seq(x[0], n, d_, s_, pb_.data());
    gemm_rows(false, true, int(3 * d_), int(d_), int(ns), 1.f, pa_.data(), int(ns), pb_.data(), int(ns), 0.f,
              grads_[0], int(d_));
    if (bias_) {
      sum_rows(dqkv_.data(), 3 * d_, grads_[1]);
      sum_rows(dy, d_, grads_[3]);
    }
    dqkv_for_ = dy;
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    if (dqkv_for_ != dy) compute_dqkv(dy);
    dqkv_for_ = nullptr;
    const int64_t n = spec_.batch, ns = n * s_;
    pack_seq(dqkv_.data(), n, 3 * d_, s_, pa_.data());  // dXp = W_qkv^T dQKVp, added to each dX_b
    gemm_rows(true, false, int(d_), int(ns), int(3 * d_), 1.f, params_[0], int(d_), pa_.data(), int(ns), 0.f,
              pb_.data(), int(ns));
    unpack_seq(pb_.data(), n, d_, s_, nullptr, true, dx[0]);
  }

 private:
  const float* wo() const { return params_[bias_ ? 2 : 1]; }
  float scale() const { return float(1.0 / std::sqrt(double(dh_))); }
  float* head_rows(float* base, int64_t b, int64_t h) const { return base + b * 3 * d_ * s_ + h * dh_ * s_; }
  uint64_t mask_base(int64_t b, int64_t h) const { return uint64_t((b * heads_ + h) * s_ * s_); }

  // f(b, h, scratch of 2 S*S floats) over every (sample, head); BLAS single-threaded inside.
  template <class F>
  void over_heads(F&& f) {
    const int64_t pairs = spec_.batch * heads_, ss = s_ * s_;
    const int threads = int(std::min<int64_t>(compute_threads(), pairs));
    if (scratch_.size() < std::size_t(threads * 2 * ss)) scratch_.resize(threads * 2 * ss);
    if (threads <= 1) {
      for (int64_t i = 0; i < pairs; ++i) f(i / heads_, i % heads_, scratch_.data());
      return;
    }
    const int saved = blas_threads();
    set_blas_threads(1);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < pairs; ++i) f(i / heads_, i % heads_, scratch_.data() + omp_get_thread_num() * 2 * ss);
    set_blas_threads(saved);
  }

  void head_forward(int64_t b, int64_t h, float* pd) {
    const int64_t s = s_, ds = d_ * s_;
    const float* q = head_rows(qkv_.data(), b, h);
    float* p = p_.data() + (b * heads_ + h) * s * s;
    gemm(true, false, int(s), int(s), int(dh_), scale(), q, int(s), q + ds, int(s), 0.f, p, int(s));
    for (int64_t i = 0; i < s; ++i) {  // softmax over the keys 0..len of query i
      float* row = p + i * s;
      const int64_t len = causal_ ? i + 1 : s;
      float mx = row[0];
#pragma omp simd reduction(max : mx)
      for (int64_t j = 1; j < len; ++j) mx = std::max(mx, row[j]);
      double z = 0;
#pragma omp simd reduction(+ : z)
      for (int64_t j = 0; j < len; ++j) {
        row[j] = exp_poly(row[j] - mx);  // fast_math.h: vectorises, unlike std::exp
        z += row[j];
      }
      const float inv = float(1.0 / z);
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) row[j] *= inv;
      for (int64_t j = len; j < s; ++j) row[j] = 0.f;
    }
    const float* pw = p;
    if (ratio_ > 0.f) {
      const float keep_scale = 1.f / (1.f - ratio_);
      const uint64_t base = mask_base(b, h);
      for (int64_t k = 0; k < s * s; ++k) pd[k] = dropout_keep(seed_, base + k, ratio_) ? p[k] * keep_scale : 0.f;
      pw = pd;
    }
    // O_h = V_h Pd^T
    gemm(false, true, int(dh_), int(s), int(s), 1.f, q + 2 * ds, int(s), pw, int(s), 0.f,
         o_.data() + b * ds + h * dh_ * s, int(s));
  }

  void compute_dqkv(const float* dy) {
    const int64_t n = spec_.batch, ns = n * s_;
    pack_seq(dy, n, d_, s_, pb_.data());  // dO_b = W_o^T dY_b
    gemm_rows(true, false, int(d_), int(ns), int(d_), 1.f, wo(), int(d_), pb_.data(), int(ns), 0.f, pa_.data(),
              int(ns));
    unpack_seq(pa_.data(), n, d_, s_, nullptr, false, do_.data());
    over_heads([&](int64_t b, int64_t h, float* scratch) { head_backward(b, h, scratch); });
  }

  void head_backward(int64_t b, int64_t h, float* scratch) {
    const int64_t s = s_, ss = s_ * s_, ds = d_ * s_;
    const float* q = head_rows(qkv_.data(), b, h);
    float* dq = head_rows(dqkv_.data(), b, h);
    const float* p = p_.data() + (b * heads_ + h) * ss;
    const float* dout = do_.data() + b * ds + h * dh_ * s;
    float *pd = scratch, *dp = scratch + ss;
    const bool drop = ratio_ > 0.f;
    const float keep_scale = drop ? 1.f / (1.f - ratio_) : 1.f;
    const uint64_t base = mask_base(b, h);
    if (drop)
      for (int64_t k = 0; k < ss; ++k) pd[k] = dropout_keep(seed_, base + k, ratio_) ? p[k] * keep_scale : 0.f;
    // dV_h = dO_h Pd; dPd = dO_h^T V_h
    gemm(false, false, int(dh_), int(s), int(s), 1.f, dout, int(s), drop ? pd : p, int(s), 0.f, dq + 2 * ds, int(s));
    gemm(true, false, int(s), int(s), int(dh_), 1.f, dout, int(s), q + 2 * ds, int(s), 0.f, dp, int(s));
    if (drop)
      for (int64_t k = 0; k < ss; ++k) dp[k] = dropout_keep(seed_, base + k, ratio_) ? dp[k] * keep_scale : 0.f;
    for (int64_t i = 0; i < s; ++i) {  // dScores = P * (dP - rowsum(P * dP)); masked entries: P = 0
      const float* pr = p + i * s;
      float* r = dp + i * s;
      double dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < s; ++j) dot += double(pr[j]) * r[j];
      const float fdot = float(dot);
#pragma omp simd
      for (int64_t j = 0; j < s; ++j) r[j] = pr[j] * (r[j] - fdot);
    }
    // dQ_h = scale K_h dS^T; dK_h = scale Q_h dS
    gemm(false, true, int(dh_), int(s), int(s), scale(), q + ds, int(s), dp, int(s), 0.f, dq, int(s));
    gemm(false, false, int(dh_), int(s), int(s), scale(), q, int(s), dp, int(s), 0.f, dq + ds, int(s));
  }

  // out[r] = sum over samples and positions of t[b, r, :]
  void sum_rows(const float* t, int64_t rows, float* out) const {
    const int64_t n = spec_.batch, s = s_;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float acc = 0.f;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t j = 0; j < s; ++j) acc += t[(b * rows + r) * s + j];
      out[r] = acc;
    }
  }

  int64_t d_ = 0, s_ = 0, heads_ = 1, dh_ = 0;
  bool bias_ = true, causal_ = false;
  float ratio_ = 0.f;
  uint64_t seed_ = 0;
  std::vector<float> qkv_, dqkv_, o_, do_, p_;  // saved activations and backward scratch
  std::vector<float> scratch_;                  // 2 S*S floats per thread
  std::vector<float> pa_, pb_;                  // packed [rows][B*S] operands of the projections
  const float* dqkv_for_ = nullptr;             // the dy that dqkv_ holds the gradient of
};
GDL_REGISTER_LAYER("attention", AttentionLayer);

}  // namespace
}  // namespace gdl::cpu
