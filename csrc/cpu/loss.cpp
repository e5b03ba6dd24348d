// Softmax with cross-entropy over the class axis (Caffe's SoftmaxWithLoss, PyTorch's
// cross_entropy with mean reduction). in (C, H, W) (or {K}): a softmax over C at each of the H*W
// positions (element (b, c, p) at (b*C + c)*H*W + p), one label per position (common/fill.h's
// label_shape: sample b position p at b*H*W + p); a classifier's (K, 1, 1) is one position.
// out_shape {1}: y[0] = mean loss over batch * positions (the rest of the batch-sized buffer is set
// to 0). Backward ignores dy (the loss is the end of the graph) and writes
// dx += (softmax - onehot(label)) / (batch * positions).
// Layout: position p of a sample reads its classes at stride H*W. The forward keeps only each
// position's log-sum-exp (lse); backward recomputes softmax = exp(x - lse) from the input, so the
// scores are read once per pass and no probabilities are stored (torch keeps log_softmax instead).
// The forward runs on kBlock neighbouring positions at once, so every pass over the classes reads
// kBlock contiguous floats (one cache line) of each class's row and the exp (fast_math.h)
// vectorises across them; the classes go by in chunks of kChunk rows (16 KiB, in L1) with an
// online max, so the scores come from memory once. A classifier (one position) walks its
// contiguous classes instead.
#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "common/fill.h"
#include "cpu/fast_math.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

constexpr int64_t kBlock = 16, kChunk = 256;

// lse = log sum_j exp(s_j) over k classes at stride ps, for L neighbouring positions (L = kBlock;
// 0: len of them, len <= kBlock).
template <int64_t L>
void lse_block(const float* s, int64_t k, int64_t ps, int64_t len, double* lse) {
  const int64_t n = L ? L : len;
  float m[kBlock], cm[kBlock];
  double z[kBlock];
  for (int64_t i = 0; i < n; ++i) m[i] = s[i], z[i] = 0;
  for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
    const int64_t c1 = std::min(k, c0 + kChunk);
    for (int64_t i = 0; i < n; ++i) cm[i] = m[i];
    for (int64_t j = c0; j < c1; ++j) {  // the chunk's max, then rescale the sum to it
      const float* r = s + j * ps;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) cm[i] = std::max(cm[i], r[i]);
    }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) z[i] *= double(exp_poly(m[i] - cm[i])), m[i] = cm[i];
    float zc[kBlock] = {0.f};  // the chunk's sum in float (kChunk terms), then into the double total
    for (int64_t j = c0; j < c1; ++j) {  // the chunk again, from L1
      const float* r = s + j * ps;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) zc[i] += exp_poly(r[i] - m[i]);
    }
    for (int64_t i = 0; i < n; ++i) z[i] += zc[i];
  }
  for (int64_t i = 0; i < n; ++i) lse[i] = double(m[i]) + std::log(z[i]);
}

// One position whose k classes are contiguous (a classifier): the same, vectorised over classes.
double lse_row(const float* s, int64_t k) {
  float m = s[0];
#pragma omp simd reduction(max : m)
  for (int64_t j = 1; j < k; ++j) m = std::max(m, s[j]);
  double z = 0;
#pragma omp simd reduction(+ : z)
  for (int64_t j = 0; j < k; ++j) z += exp_poly(s[j] - m);
  return double(m) + std::log(z);
}

class SoftmaxXentLayer : public Layer {
 public:
  explicit SoftmaxXentLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1, "softmax_xent ", s.name, ": takes one input (the scores)");
    GDL_REQUIRE(numel(s.out_shape) == 1, "softmax_xent ", s.name, ": out_shape must be {1}");
    const LabelShape ls = label_shape(s);
    k_ = ls.classes, positions_ = ls.positions;
    GDL_REQUIRE(k_ >= 1 && k_ * positions_ == numel(s.in_shapes[0]), "softmax_xent ", s.name,
                ": input must be (C, H, W) with C >= 1");
    lse_hi_.resize(s.batch * positions_), lse_lo_.resize(s.batch * positions_);
    loss_.resize(s.batch * positions_);
  }
  void set_labels(const int32_t* labels) override { labels_ = labels; }

  void forward(const std::vector<const float*>& x, float* y) override {
    GDL_REQUIRE(labels_, "softmax_xent ", spec_.name, ": no labels (set_labels)");
    const int64_t k = k_, ps = positions_, np = spec_.batch * ps, blocks = (ps + kBlock - 1) / kBlock;
    double* loss = loss_.data();
    float *hi = lse_hi_.data(), *lo = lse_lo_.data();
    bool bad = false;
#pragma omp parallel for schedule(static) reduction(|| : bad)
    for (int64_t t = 0; t < spec_.batch * blocks; ++t) {  // sample t / blocks, positions p0 .. p0 + len
      const int64_t b = t / blocks, p0 = (t % blocks) * kBlock, len = std::min(kBlock, ps - p0);
      const int64_t off = b * k * ps + p0;
      double lse[kBlock];
      if (len == kBlock) lse_block<kBlock>(x[0] + off, k, ps, len, lse);
      else if (ps == 1) lse[0] = lse_row(x[0] + off, k);
      else lse_block<0>(x[0] + off, k, ps, len, lse);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t at = b * ps + p0 + i;
        const int32_t l = labels_[at];
        const bool ok = l >= 0 && l < k;
        bad = bad || !ok;  // log-sum-exp: exact even when the label's probability underflows
        loss[at] = ok ? lse[i] - double(x[0][off + l * ps + i]) : 0.0;
        hi[at] = float(lse[i]), lo[at] = float(lse[i] - double(hi[at]));
      }
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
    const int64_t k = k_, ps = positions_, np = spec_.batch * ps, count = in_count();
    const float inv_n = 1.f / float(np);
    const float *in = x[0], *hi = lse_hi_.data(), *lo = lse_lo_.data();
    float* d = dx[0];
    if (ps == 1) {  // a classifier: row b is sample b's classes
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < count; ++i) d[i] += exp_poly((in[i] - hi[i / k]) - lo[i / k]) * inv_n;
    } else {  // row (b, c): sample b's positions of class c, against their lse
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < count / ps; ++r) {
        const float *h = hi + (r / k) * ps, *l = lo + (r / k) * ps;
#pragma omp simd
        for (int64_t i = 0; i < ps; ++i) d[r * ps + i] += exp_poly((in[r * ps + i] - h[i]) - l[i]) * inv_n;
      }
    }
    for (int64_t i = 0; i < np; ++i) d[(i / ps) * k * ps + labels_[i] * ps + i % ps] -= inv_n;  // - onehot
  }

 private:
  int64_t k_ = 0, positions_ = 1;
  const int32_t* labels_ = nullptr;
  // log-sum-exp per sample and position, saved for backward as two floats (hi + lo): the exp's
  // argument (x - hi) - lo keeps the double's accuracy in float arithmetic, which vectorises
  std::vector<float> lse_hi_, lse_lo_;
  std::vector<double> loss_;  // per sample and position
};
GDL_REGISTER_LAYER("softmax_xent", SoftmaxXentLayer);

}  // namespace
}  // namespace gdl::cpu
