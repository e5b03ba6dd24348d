// Element-wise layers without parameters.
#include "common/errors.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

class ReluLayer : public Layer {
 public:
  using Layer::Layer;
  void forward(const std::vector<const float*>& x, float* y) override {
    const float* in = x[0];
    const int64_t n = out_count();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = in[i] > 0.f ? in[i] : 0.f;
  }
  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    float* g = dx[0];
    const int64_t n = out_count();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] += y[i] > 0.f ? dy[i] : 0.f;
  }
};
GDL_REGISTER_LAYER("relu", ReluLayer);

}  // namespace
}  // namespace gdl::cpu
