// Layers that move or combine activations without parameters: add (residuals), concat (channel
// axis), flatten, dropout.
#include <cstring>

#include "common/dropout.h"
#include "common/errors.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

// y = x0 + x1 (+ ...): every input has the output's shape. dx_i += dy.
class AddLayer : public Layer {
 public:
  explicit AddLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() >= 2, "add ", s.name, ": needs at least two inputs");
    for (const auto& sh : s.in_shapes)
      GDL_REQUIRE(numel(sh) == numel(s.out_shape), "add ", s.name, ": every input must have the output's shape");
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t n = out_count();
    const float *a = x[0], *b = x[1];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
    for (std::size_t k = 2; k < x.size(); ++k) {
      const float* c = x[k];
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) y[i] += c[i];
    }
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    const int64_t n = out_count();
    for (float* d : dx) {
      if (!d) continue;
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) d[i] += dy[i];
    }
  }
};
GDL_REGISTER_LAYER("add", AddLayer);

// Concatenation along the first per-sample axis (channels for {C, H, W}; features for {F}).
// Inputs agree on every other axis; per sample the output is the inputs' blocks one after another.
class ConcatLayer : public Layer {
 public:
  explicit ConcatLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(!s.in_shapes.empty(), "concat ", s.name, ": needs inputs");
    int64_t total = 0;
    for (const auto& sh : s.in_shapes) {
      GDL_REQUIRE(sh.size() == s.out_shape.size() && !sh.empty(), "concat ", s.name, ": inputs must have the output's rank");
      for (std::size_t d = 1; d < sh.size(); ++d)
        GDL_REQUIRE(sh[d] == s.out_shape[d], "concat ", s.name, ": inputs differ from the output beyond the channel axis");
      block_.push_back(numel(sh));
      total += sh[0];
    }
    GDL_REQUIRE(total == s.out_shape[0], "concat ", s.name, ": input channels sum to ", total, ", out_shape has ",
                s.out_shape[0]);
    out_ = numel(s.out_shape);
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t n = spec_.batch, k = int64_t(x.size());
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        std::memcpy(y + i * out_ + offset(j), x[j] + i * block_[j], block_[j] * sizeof(float));
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    const int64_t n = spec_.batch, k = int64_t(dx.size());
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        if (!dx[j]) continue;
        float* d = dx[j] + i * block_[j];
        const float* g = dy + i * out_ + offset(j);
#pragma omp simd
        for (int64_t e = 0; e < block_[j]; ++e) d[e] += g[e];
      }
  }

 private:
  int64_t offset(int64_t j) const {
    int64_t o = 0;
    for (int64_t t = 0; t < j; ++t) o += block_[t];
    return o;
  }
  std::vector<int64_t> block_;  // elements per sample of each input
  int64_t out_ = 0;
};
GDL_REGISTER_LAYER("concat", ConcatLayer);

// A reshape that the buffer-per-layer interface still has to copy: y = x, dx += dy.
class FlattenLayer : public Layer {
 public:
  explicit FlattenLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), "flatten ", s.name,
                ": out_shape must have as many elements as the input");
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    std::memcpy(y, x[0], out_count() * sizeof(float));
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t n = out_count();
    float* d = dx[0];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] += dy[i];
  }
};
GDL_REGISTER_LAYER("flatten", FlattenLayer);

// Inverted dropout: y = x * keep / (1 - ratio), keep from common/dropout.h (attrs ratio, default 0.5,
// and seed, default 0). The mask is a fixed function of (seed, index), the same every iteration and
// on both backends; it is stored as bytes for backward, as frameworks store theirs.
class DropoutLayer : public Layer {
 public:
  explicit DropoutLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), "dropout ", s.name,
                ": out_shape must equal the input shape");
    ratio_ = float(s.attr("ratio", 0.5));
    seed_ = uint64_t(s.attr("seed", 0));
    GDL_REQUIRE(ratio_ >= 0.f && ratio_ < 1.f, "dropout ", s.name, ": ratio must be in [0, 1), got ", ratio_);
    mask_.resize(out_count());
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    const int64_t n = out_count();
    const float scale = 1.f / (1.f - ratio_), ratio = ratio_;
    const uint64_t seed = seed_;
    const float* in = x[0];
    uint8_t* m = mask_.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = dropout_keep(seed, uint64_t(i), ratio);
      m[i] = keep;
      y[i] = keep ? in[i] * scale : 0.f;
    }
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    const int64_t n = out_count();
    const float scale = 1.f / (1.f - ratio_);
    const uint8_t* m = mask_.data();
    float* d = dx[0];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] += m[i] ? dy[i] * scale : 0.f;
  }

 private:
  float ratio_ = 0.5f;
  uint64_t seed_ = 0;
  std::vector<uint8_t> mask_;
};
GDL_REGISTER_LAYER("dropout", DropoutLayer);

}  // namespace
}  // namespace gdl::cpu
