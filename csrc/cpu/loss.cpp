// Softmax with cross-entropy over the class axis (Caffe's SoftmaxWithLoss, PyTorch's
// cross_entropy with mean reduction). in {K} or {K, 1, 1}; out_shape {1}: y[0] = mean loss over the
// batch (the rest of the batch-sized buffer is set to 0). Backward ignores dy (the loss is the end
// of the graph) and writes dx += (softmax - onehot(label)) / batch.
#include <cmath>

#include "common/errors.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

class SoftmaxXentLayer : public Layer {
 public:
  explicit SoftmaxXentLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1, "softmax_xent ", s.name, ": takes one input (the scores)");
    GDL_REQUIRE(numel(s.out_shape) == 1, "softmax_xent ", s.name, ": out_shape must be {1}");
    k_ = numel(s.in_shapes[0]);
    prob_.resize(in_count());
    loss_.resize(s.batch);
  }
  void set_labels(const int32_t* labels) override { labels_ = labels; }

  void forward(const std::vector<const float*>& x, float* y) override {
    GDL_REQUIRE(labels_, "softmax_xent ", spec_.name, ": no labels (set_labels)");
    const int64_t k = k_, n = spec_.batch;
    float* prob = prob_.data();
    double* loss = loss_.data();
    bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad)
    for (int64_t i = 0; i < n; ++i) {
      const float* s = x[0] + i * k;
      float* p = prob + i * k;
      float mx = s[0];
      for (int64_t j = 1; j < k; ++j) mx = std::max(mx, s[j]);
      double z = 0;
      for (int64_t j = 0; j < k; ++j) {
        p[j] = std::exp(s[j] - mx);
        z += p[j];
      }
      const float inv = float(1.0 / z);
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) p[j] *= inv;
      const int32_t l = labels_[i];
      if (l < 0 || l >= k) {
        bad = true;
        loss[i] = 0;
        continue;
      }
      loss[i] = -(double(s[l]) - double(mx) - std::log(z));  // log-sum-exp: exact even when p[l] underflows
    }
    GDL_REQUIRE(!bad, "softmax_xent ", spec_.name, ": a label is outside [0, ", k, ")");
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += loss[i];
    y[0] = float(total / double(n));
    for (int64_t i = 1; i < n; ++i) y[i] = 0.f;
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t k = k_, n = spec_.batch;
    const float inv_n = 1.f / float(n);
    const float* prob = prob_.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float* d = dx[0] + i * k;
      const float* p = prob + i * k;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) d[j] += p[j] * inv_n;
      d[labels_[i]] -= inv_n;
    }
  }

 private:
  int64_t k_ = 0;
  const int32_t* labels_ = nullptr;
  std::vector<float> prob_;   // softmax, saved for backward
  std::vector<double> loss_;  // per sample
};
GDL_REGISTER_LAYER("softmax_xent", SoftmaxXentLayer);

}  // namespace
}  // namespace gdl::cpu
