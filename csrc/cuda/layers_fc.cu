// Fully connected layer through cuBLAS (twin of cpu/fc.cpp): y = x W^T + b, W [out, in] row-major.
// Row-major products are issued as column-major ones with the operands swapped (see gemm.cu).
#include "common/fc.h"
#include "cuda/layer_util.h"

namespace gdl::cuda {
namespace {

__global__ void broadcast_rows(float* __restrict__ y, const float* __restrict__ b, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = b[i % cols];
}

__global__ void fill_ones(float* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = 1.f;
}

class FcLayer : public Layer {
 public:
  explicit FcLayer(const LayerSpec& s) : Layer(s), ones_(std::size_t(s.batch) * sizeof(float)) {
    require_fp32_nchw(s);
    const FcGeom g = FcGeom::from_spec(s);
    in_ = g.in, out_ = g.out, bias_ = g.bias;
    GDL_REQUIRE(in_ < (int64_t(1) << 31) && out_ < (int64_t(1) << 31), "fc ", s.name, ": too large for cuBLAS");
    fill_ones<<<grid_for(s.batch), 256, 0, context().stream>>>(static_cast<float*>(ones_.data()), s.batch);
    CUDA_CHECK(cudaGetLastError());
  }

  void forward(const std::vector<const void*>& x, void* y) override {
    const int n = spec_.batch, in = int(in_), out = int(out_);
    auto* yp = static_cast<float*>(y);
    if (bias_) {
      broadcast_rows<<<grid_for(int64_t(n) * out), 256, 0, context().stream>>>(yp, static_cast<const float*>(params_[1]),
                                                                                 n, out);
      CUDA_CHECK(cudaGetLastError());
    }
    // column-major: y^T[out x n] = W[out x in] (W^T in column-major storage, op T) * x^T[in x n]
    CUBLAS_CHECK(cublasSgemm(context().cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &kOne,
                             static_cast<const float*>(params_[0]), in, static_cast<const float*>(x[0]), in,
                             bias_ ? &kOne : &kZero, yp, out));
  }

  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    const int n = spec_.batch, in = int(in_), out = int(out_);
    // dx^T[in x n] += W^T[in x out] * dy^T[out x n]   (beta = 1: accumulate)
    CUBLAS_CHECK(cublasSgemm(context().cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &kOne,
                             static_cast<const float*>(params_[0]), in, static_cast<const float*>(dy), out, &kOne,
                             static_cast<float*>(dx[0]), in));
  }

  void backward_params(const std::vector<const void*>& x, const void* y, const void* dy) override {
    const int n = spec_.batch, in = int(in_), out = int(out_);
    // dW^T[in x out] = x^T[in x n] * dy[n x out]
    CUBLAS_CHECK(cublasSgemm(context().cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &kOne,
                             static_cast<const float*>(x[0]), in, static_cast<const float*>(dy), out, &kZero,
                             static_cast<float*>(grads_[0]), in));
    if (bias_)  // db[out] = dy^T[out x n] * ones[n]
      CUBLAS_CHECK(cublasSgemv(context().cublas, CUBLAS_OP_N, out, n, &kOne, static_cast<const float*>(dy), out,
                               static_cast<const float*>(ones_.data()), 1, &kZero, static_cast<float*>(grads_[1]), 1));
  }

 private:
  int64_t in_ = 0, out_ = 0;
  bool bias_ = true;
  DeviceBuffer ones_;
};
GDL_REGISTER_CUDA_LAYER("fc", FcLayer);

}  // namespace
}  // namespace gdl::cuda
