// Softmax with cross-entropy (twin of cpu/loss.cpp): our kernels for the log-softmax (cuDNN's
// softmax is a deprecated legacy op in cuDNN 9), the mean loss and dx += (softmax - onehot) / n.
// Input (C, H, W): a softmax over the C classes at each of the P = H*W positions (label_shape in
// common/fill.h: label of sample b position p at b*P + p; element (b, c, p) at (b*C + c)*P + p), n =
// batch * P rows; P = 1 is the classifier's (K, 1, 1) case. A label outside [0, C) gives a NaN loss
// (the device cannot throw; the CPU layer raises instead) and no gradient for that row.
#include <cmath>

#include "common/fill.h"
#include "cuda/layer_util.h"

namespace gdl::cuda {
namespace {

// One warp per row: logp = s - max - log(sum exp(s - max)), as the CPU layer computes it.
__global__ void log_softmax(const float* __restrict__ s, float* __restrict__ logp, int64_t rows, int64_t k) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const float* in = s + r * k;
    float mx = -INFINITY;
    for (int64_t j = lane; j < k; j += 32) mx = fmaxf(mx, in[j]);
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float z = 0.f;
    for (int64_t j = lane; j < k; j += 32) z += expf(in[j] - mx);
    for (int off = 16; off > 0; off /= 2) z += __shfl_xor_sync(0xffffffffu, z, off);
    const float shift = mx + logf(z);
    for (int64_t j = lane; j < k; j += 32) logp[r * k + j] = in[j] - shift;
  }
}

// One thread per position (P > 1): row (b, p) reads class c at (b*C + c)*P + p, adjacent threads
// adjacent positions (coalesced). Online max and sum, then the write.
__global__ void log_softmax_positions(const float* __restrict__ s, float* __restrict__ logp, int64_t rows, int64_t k,
                                      int64_t P) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (r / P) * k * P + r % P;
    float mx = -INFINITY, z = 0.f;
    for (int64_t c = 0; c < k; ++c) {
      const float v = s[base + c * P];
      if (v > mx) {
        z = z * expf(mx - v);
        mx = v;
      }
      z += expf(v - mx);
    }
    const float shift = mx + logf(z);
    for (int64_t c = 0; c < k; ++c) logp[base + c * P] = s[base + c * P] - shift;
  }
}

// Row r (sample r / P, position r % P), class l: (r / P * k + l) * P + r % P.
__device__ __forceinline__ int64_t class_at(int64_t r, int64_t l, int64_t k, int64_t P) {
  return ((r / P) * k + l) * P + r % P;
}

__global__ void xent_loss(const float* __restrict__ logp, const int32_t* __restrict__ labels, int64_t n, int64_t k,
                          int64_t P, float* __restrict__ y, int64_t batch) {
  __shared__ double part[256];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t l = labels[i];
    s += (l >= 0 && l < k) ? -double(logp[class_at(i, l, k, P)]) : nan("");
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  // The mean in the first sample's output, 0 in the others' (batch outputs of (1, 1, 1)).
  for (int64_t i = threadIdx.x; i < batch; i += blockDim.x) y[i] = i == 0 ? float(part[0] / double(n)) : 0.f;
}

__global__ void xent_bwd(float* __restrict__ dx, const float* __restrict__ logp, const int32_t* __restrict__ labels,
                         int64_t n, int64_t k, int64_t P) {
  const float inv_n = 1.f / float(n);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * k; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = (i / P) % k, r = (i / (k * P)) * P + i % P;  // element (b, j, p): row b*P + p
    const int32_t l = labels[r];
    if (l < 0 || l >= k) continue;
    dx[i] += (expf(logp[i]) - (j == l ? 1.f : 0.f)) * inv_n;
  }
}

class SoftmaxXentLayer : public Layer {
 public:
  explicit SoftmaxXentLayer(const LayerSpec& s)
      : Layer(s), k_(label_shape(s).classes), P_(label_shape(s).positions), logp_(std::size_t(in_count()) * sizeof(float)) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1, "softmax_xent ", s.name, ": takes one input (the scores)");
    GDL_REQUIRE(numel(s.out_shape) == 1, "softmax_xent ", s.name, ": out_shape must be {1}");
  }
  void set_labels(const int32_t* device_labels) override { labels_ = device_labels; }

  void forward(const std::vector<const void*>& x, void* y) override {
    GDL_REQUIRE(labels_, "softmax_xent ", spec_.name, ": no labels (set_labels)");
    const int64_t rows = spec_.batch * P_;
    if (P_ == 1)
      log_softmax<<<grid_for(rows * 32), 256, 0, context().stream>>>(static_cast<const float*>(x[0]),
                                                                     static_cast<float*>(logp_.data()), rows, k_);
    else
      log_softmax_positions<<<grid_for(rows), 256, 0, context().stream>>>(
          static_cast<const float*>(x[0]), static_cast<float*>(logp_.data()), rows, k_, P_);
    CUDA_CHECK(cudaGetLastError());
    xent_loss<<<1, 256, 0, context().stream>>>(static_cast<const float*>(logp_.data()), labels_, rows, k_, P_,
                                               static_cast<float*>(y), spec_.batch);
    CUDA_CHECK(cudaGetLastError());
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    xent_bwd<<<grid_for(in_count()), 256, 0, context().stream>>>(static_cast<float*>(dx[0]),
                                                                 static_cast<const float*>(logp_.data()), labels_,
                                                                 spec_.batch * P_, k_, P_);
    CUDA_CHECK(cudaGetLastError());
  }

 private:
  int64_t k_, P_;  // classes, positions per sample
  DeviceBuffer logp_;  // log-softmax, saved for backward
  const int32_t* labels_ = nullptr;
};
GDL_REGISTER_CUDA_LAYER("softmax_xent", SoftmaxXentLayer);

}  // namespace
}  // namespace gdl::cuda
