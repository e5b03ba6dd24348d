// Element-wise activations without parameters, whose gradient follows from the output:
// y = F::f(x), dx += F::grad(y, dy).
#include <cmath>

#include "common/errors.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

template <class F>
class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(const LayerSpec& s) : Layer(s) {
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), F::kName, " ", s.name,
                ": out_shape must have as many elements as the input");
  }
  void forward(const std::vector<const float*>& x, float* y) override {
    const float* in = x[0];
    const int64_t n = out_count();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = F::f(in[i]);
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    float* g = dx[0];
    const int64_t n = out_count();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] += F::grad(y[i], dy[i]);
  }
};

struct Relu {
  static constexpr const char* kName = "relu";
  static float f(float x) { return x > 0.f ? x : 0.f; }
  static float grad(float y, float dy) { return y > 0.f ? dy : 0.f; }
};
struct Tanh {  // std::tanh for its accuracy near 0 (BERT's pooler: one position per sample, cheap)
  static constexpr const char* kName = "tanh";
  static float f(float x) { return std::tanh(x); }
  static float grad(float y, float dy) { return dy * (1.f - y * y); }
};

using ReluLayer = ActivationLayer<Relu>;
using TanhLayer = ActivationLayer<Tanh>;
GDL_REGISTER_LAYER("relu", ReluLayer);
GDL_REGISTER_LAYER("tanh", TanhLayer);

}  // namespace
}  // namespace gdl::cpu
