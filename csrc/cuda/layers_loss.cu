// Softmax with cross-entropy (twin of cpu/loss.cpp): cuDNN's log-softmax, then our kernels for the
// mean loss and for dx += (softmax - onehot) / batch. A label outside [0, K) gives a NaN loss (the
// device cannot throw; the CPU layer raises instead) and no gradient for that sample.
#include <cmath>

#include "cuda/layer_util.h"

namespace gdl::cuda {
namespace {

__global__ void xent_loss(const float* __restrict__ logp, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                          float* __restrict__ y) {
  __shared__ double part[256];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t l = labels[i];
    s += (l >= 0 && l < k) ? -double(logp[i * k + l]) : nan("");
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = i == 0 ? float(part[0] / double(n)) : 0.f;
}

__global__ void xent_bwd(float* __restrict__ dx, const float* __restrict__ logp, const int32_t* __restrict__ labels,
                         int64_t n, int64_t k) {
  const float inv_n = 1.f / float(n);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * k; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, j = i % k;
    const int32_t l = labels[r];
    if (l < 0 || l >= k) continue;
    dx[i] += (expf(logp[i]) - (j == l ? 1.f : 0.f)) * inv_n;
  }
}

class SoftmaxXentLayer : public Layer {
 public:
  explicit SoftmaxXentLayer(const LayerSpec& s)
      : Layer(s), k_(numel(s.in_shapes.at(0))), logp_(std::size_t(in_count()) * sizeof(float)) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1, "softmax_xent ", s.name, ": takes one input (the scores)");
    GDL_REQUIRE(numel(s.out_shape) == 1, "softmax_xent ", s.name, ": out_shape must be {1}");
    desc_.set(s.batch, k_, 1, 1);
  }
  void set_labels(const int32_t* device_labels) override { labels_ = device_labels; }

  void forward(const std::vector<const void*>& x, void* y) override {
    GDL_REQUIRE(labels_, "softmax_xent ", spec_.name, ": no labels (set_labels)");
    CUDNN_CHECK(cudnnSoftmaxForward(context().cudnn, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, desc_, x[0],
                                    &kZero, desc_, logp_.data()));
    xent_loss<<<1, 256, 0, context().stream>>>(static_cast<const float*>(logp_.data()), labels_, spec_.batch, k_,
                                               static_cast<float*>(y));
    CUDA_CHECK(cudaGetLastError());
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    xent_bwd<<<grid_for(in_count()), 256, 0, context().stream>>>(static_cast<float*>(dx[0]),
                                                                 static_cast<const float*>(logp_.data()), labels_,
                                                                 spec_.batch, k_);
    CUDA_CHECK(cudaGetLastError());
  }

 private:
  int64_t k_;
  TensorDesc desc_;
  DeviceBuffer logp_;  // log-softmax, saved for backward
  const int32_t* labels_ = nullptr;
};
GDL_REGISTER_CUDA_LAYER("softmax_xent", SoftmaxXentLayer);

}  // namespace
}  // namespace gdl::cuda
