// Fully connected layer through OpenBLAS: y[N x out] = x[N x in] W^T + b, W stored [out, in]
// (Caffe's and PyTorch's layout). The input may be any per-sample shape (C, H, W); it is read
// flat per sample, as Caffe's InnerProduct does.
#include "common/errors.h"
#include "common/fc.h"
#include "cpu/blas.h"
#include "cpu/layer.h"

namespace gdl::cpu {
namespace {

class FcLayer : public Layer {
 public:
  explicit FcLayer(const LayerSpec& s) : Layer(s) {
    const FcGeom g = FcGeom::from_spec(s);
    in_ = g.in, out_ = g.out, bias_ = g.bias;
  }

  void forward(const std::vector<const float*>& x, float* y) override {
    const int n = spec_.batch;
    if (bias_) {  // y = b broadcast, then y += x W^T (one GEMM with beta = 1)
      const float* b = params_[1];
#pragma omp parallel for schedule(static)
      for (int i = 0; i < n; ++i)
        for (int64_t j = 0; j < out_; ++j) y[i * out_ + j] = b[j];
    }
    gemm(false, true, n, int(out_), int(in_), 1.f, x[0], int(in_), params_[0], int(in_), bias_ ? 1.f : 0.f, y,
         int(out_));
  }

  void backward_data(const std::vector<const float*>& x, const float* y, const float* dy,
                     const std::vector<float*>& dx) override {
    if (!dx[0]) return;
    // dx[N x in] += dy[N x out] W[out x in]
    gemm(false, false, spec_.batch, int(in_), int(out_), 1.f, dy, int(out_), params_[0], int(in_), 1.f, dx[0],
         int(in_));
  }

  void backward_params(const std::vector<const float*>& x, const float* y, const float* dy) override {
    const int n = spec_.batch;
    // dW[out x in] = dy^T x
    gemm(true, false, int(out_), int(in_), n, 1.f, dy, int(out_), x[0], int(in_), 0.f, grads_[0], int(in_));
    if (bias_) {
      float* db = grads_[1];
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < out_; ++j) {
        float s = 0.f;
        for (int i = 0; i < n; ++i) s += dy[i * out_ + j];
        db[j] = s;
      }
    }
  }

 private:
  int64_t in_ = 0, out_ = 0;
  bool bias_ = true;
};
GDL_REGISTER_LAYER("fc", FcLayer);

}  // namespace
}  // namespace gdl::cpu
