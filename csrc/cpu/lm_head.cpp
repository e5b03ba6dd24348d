// Language-model head: (D, S, 1) -> (vocab, S, 1) logits, Y_b = W X_b (+ b), W [vocab, D]
// (gdlbench/nets/network.py). Attributes vocab, tied [1], bias [0]. Untied: W is the layer's first
// parameter, then [vocab] if bias. Tied: W is the first embedding's token table, handed over by
// bind_tied with its gradient, which backward_params OVERWRITES (the embedding adds its own later);
// parameters are only [vocab] if bias. A tied head never bound (a single-layer benchmark) uses a
// table of its own: fill_value(kOwnSeed, i) / 8 (common/fill.h), its gradient kept internally.
// The batch is packed as [D][B*S] and [vocab][B*S] (cpu/seq_gemm.h): one GEMM per pass, the
// 50257-row table streamed once instead of once per sample, on the OpenMP threads (gemm_rows).
#include "common/errors.h"
#include "common/fill.h"
#include "cpu/blas.h"
#include "cpu/layer.h"
#include "cpu/seq_gemm.h"

namespace gdl::cpu {
namespace {

constexpr uint64_t kOwnSeed = 3;  // the own table of an unbound tied head (tests regenerate it)

class LmHeadLayer : public Layer {
 public:
  explicit LmHeadLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3 && s.in_shapes[0][2] == 1, "lm_head ",
                s.name, ": takes one sequence (D, S, 1)");
    d_ = s.in_shapes[0][0], s_ = s.in_shapes[0][1];
    const double vocab = s.attr("vocab", 0);
    GDL_REQUIRE(vocab >= 1, "lm_head ", s.name, ": vocab must be a positive integer, got ", vocab);
    v_ = int64_t(vocab);
    GDL_REQUIRE(s.out_shape == Shape({v_, s_, 1}), "lm_head ", s.name, ": out_shape must be [", v_, ", ", s_, ", 1]");
    tied_ = s.attr("tied", 1) != 0, bias_ = s.attr("bias", 0) != 0;
    std::vector<Shape> want;
    if (!tied_) want.push_back({v_, d_});
    if (bias_) want.push_back({v_});
    const char* expect = tied_ ? (bias_ ? "[vocab] (tied)" : "empty (tied)") : (bias_ ? "[vocab, D], [vocab]" : "[vocab, D]");
    GDL_REQUIRE(s.param_shapes == want, "lm_head ", s.name, ": param_shapes must be ", expect, " with vocab = ", v_,
                ", D = ", d_);
    xp_.resize(s.batch * d_ * s_), yp_.resize(s.batch * v_ * s_);
    if (tied_) {
      own_.resize(v_ * d_), own_grad_.resize(v_ * d_);
      for (int64_t i = 0; i < v_ * d_; ++i) own_[i] = fill_value(kOwnSeed, uint64_t(i)) * 0.125f;
      table_ = own_.data(), table_grad_ = own_grad_.data();
    }
  }

  void bind_tied(float* weight, float* grad) override {
    GDL_REQUIRE(tied_, "lm_head ", spec_.name, ": bind_tied on an untied head");
    table_ = weight, table_grad_ = grad;
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t n = spec_.batch, ns = n * s_;
    const float* b = bias_ ? params_[tied_ ? 0 : 1] : nullptr;
    pack_seq(x[0], n, d_, s_, xp_.data());  // Yp[V x nS] = W Xp, then Y_k = Yp's k-th columns (+ b)
    gemm_rows(false, false, int(v_), int(ns), int(d_), 1.f, weight(), int(d_), xp_.data(), int(ns), 0.f,
              yp_.data(), int(ns));
    unpack_seq(yp_.data(), n, v_, s_, b, false, y);
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t n = spec_.batch, ns = n * s_;
    pack_seq(dy, n, v_, s_, yp_.data());  // dXp[D x nS] = W^T dYp, added to each dX_k
    gemm_rows(true, false, int(d_), int(ns), int(v_), 1.f, weight(), int(d_), yp_.data(), int(ns), 0.f,
              xp_.data(), int(ns));
    unpack_seq(xp_.data(), n, d_, s_, nullptr, true, dx[0]);
  }

  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    const int64_t n = spec_.batch, ns = n * s_;
    float* dw = tied_ ? table_grad_ : grads_[0];
    pack_seq(dy, n, v_, s_, yp_.data());  // dW = dYp Xp^T (K = nS), overwritten
    pack_seq(x[0], n, d_, s_, xp_.data());
    gemm_rows(false, true, int(v_), int(d_), int(ns), 1.f, yp_.data(), int(ns), xp_.data(), int(ns), 0.f, dw,
              int(d_));
    if (bias_) {
      float* db = grads_[tied_ ? 0 : 1];
      const int64_t v = v_, s = s_;
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < v; ++r) {
        float acc = 0.f;
        for (int64_t k = 0; k < n; ++k)
          for (int64_t j = 0; j < s; ++j) acc += dy[(k * v + r) * s + j];
        db[r] = acc;
      }
    }
  }

 private:
  const float* weight() const { return tied_ ? table_ : params_[0]; }

  int64_t d_ = 0, s_ = 0, v_ = 0;
  bool tied_ = true, bias_ = false;
  float *table_ = nullptr, *table_grad_ = nullptr;  // tied: the embedding's table, or own_
  std::vector<float> own_, own_grad_;               // the table of a tied head never bound
  std::vector<float> xp_, yp_;                      // the batch packed: [D][B*S], [vocab][B*S]
};
GDL_REGISTER_LAYER("lm_head", LmHeadLayer);

}  // namespace
}  // namespace gdl::cpu
