// Softmax with cross-entropy over the class axis (Caffe's SoftmaxWithLoss, PyTorch's
// cross_entropy with mean reduction). in (C, H, W) (or {K}): a softmax over C at each of the H*W
// positions (element (b, c, p) at (b*C + c)*H*W + p), one label per position (common/fill.h's
// label_shape: sample b position p at b*H*W + p); a classifier's (K, 1, 1) is one position.
// out_shape {1}: y[0] = mean loss over batch * positions (the rest of the batch-sized buffer is set
// to 0). Backward ignores dy (the loss is the end of the graph) and writes
// dx += (softmax - onehot(label)) / (batch * positions).
#include <cmath>

#include "common/errors.h"
#include "common/fill.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

class SoftmaxXentLayer : public Layer {
 public:
  explicit SoftmaxXentLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1, "softmax_xent ", s.name, ": takes one input (the scores)");
    GDL_REQUIRE(numel(s.out_shape) == 1, "softmax_xent ", s.name, ": out_shape must be {1}");
    const LabelShape ls = label_shape(s);
    k_ = ls.classes, positions_ = ls.positions;
    GDL_REQUIRE(k_ >= 1 && k_ * positions_ == numel(s.in_shapes[0]), "softmax_xent ", s.name,
                ": input must be (C, H, W) with C >= 1");
    prob_.resize(in_count());
    loss_.resize(s.batch * positions_);
  }
  void set_labels(const int32_t* labels) override { labels_ = labels; }

  void forward(const std::vector<const float*>& x, float* y) override {
    GDL_REQUIRE(labels_, "softmax_xent ", spec_.name, ": no labels (set_labels)");
    const int64_t k = k_, np = spec_.batch * positions_, ps = positions_;
    float* prob = prob_.data();
    double* loss = loss_.data();
    bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad)
    for (int64_t i = 0; i < np; ++i) {  // i = b * positions + p: classes at stride positions
      const int64_t off = (i / ps) * k * ps + i % ps;
      const float* s = x[0] + off;
      float* p = prob + off;
      float mx = s[0];
      for (int64_t j = 1; j < k; ++j) mx = std::max(mx, s[j * ps]);
      double z = 0;
      for (int64_t j = 0; j < k; ++j) {
        p[j * ps] = std::exp(s[j * ps] - mx);
        z += p[j * ps];
      }
      const float inv = float(1.0 / z);
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) p[j * ps] *= inv;
      const int32_t l = labels_[i];
      if (l < 0 || l >= k) {
        bad = true;
        loss[i] = 0;
        continue;
      }
      loss[i] = -(double(s[l * ps]) - double(mx) - std::log(z));  // log-sum-exp: exact even when p[l] underflows
    }
    GDL_REQUIRE(!bad, "softmax_xent ", spec_.name, ": a label is outside [0, ", k, ")");
    double total = 0;
    for (int64_t i = 0; i < np; ++i) total += loss[i];
    y[0] = float(total / double(np));
    for (int64_t i = 1; i < spec_.batch; ++i) y[i] = 0.f;
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t k = k_, np = spec_.batch * positions_, ps = positions_;
    const float inv_n = 1.f / float(np);
    const float* prob = prob_.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < np; ++i) {
      const int64_t off = (i / ps) * k * ps + i % ps;
      float* d = dx[0] + off;
      const float* p = prob + off;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) d[j * ps] += p[j * ps] * inv_n;
      d[labels_[i] * ps] -= inv_n;
    }
  }

 private:
  int64_t k_ = 0, positions_ = 1;
  const int32_t* labels_ = nullptr;
  std::vector<float> prob_;   // softmax, saved for backward
  std::vector<double> loss_;  // per sample and position
};
GDL_REGISTER_LAYER("softmax_xent", SoftmaxXentLayer);

}  // namespace
}  // namespace gdl::cpu
