// Pooling on the GPU with Caffe's geometry (common/pooling.h). cuDNN computes only floor-mode output
// sizes; when the spec's output matches cuDNN's (every floor-mode layer, and ceil-mode layers whose
// windows fit), cuDNN runs (max: CUDNN_POOLING_MAX; avg: COUNT_INCLUDE_PADDING, which equals Caffe's
// divisor whenever no window passes the padding). Otherwise (Caffe's ceil mode, e.g. GoogLeNet) our
// own kernels run, with Caffe's exact windows and divisors.
#include <cfloat>

#include "common/pooling.h"
#include "cuda/layer_util.h"

namespace gdl::cuda {
namespace {

__global__ void maxpool_fwd(const float* __restrict__ x, float* __restrict__ y, int32_t* __restrict__ arg,
                            int64_t planes, PoolGeom g) {
  const int64_t n = planes * g.oh * g.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    const int64_t y0 = max(oy * g.sh - g.ph, int64_t(0)), y1 = min(oy * g.sh - g.ph + g.kh, g.h);
    const int64_t x0 = max(ox * g.sw - g.pw, int64_t(0)), x1 = min(ox * g.sw - g.pw + g.kw, g.w);
    const float* in = x + p * g.h * g.w;
    float best = -FLT_MAX;
    int32_t bi = -1;
    for (int64_t iy = y0; iy < y1; ++iy)
      for (int64_t ix = x0; ix < x1; ++ix) {
        const float v = in[iy * g.w + ix];
        if (v > best) best = v, bi = int32_t(iy * g.w + ix);
      }
    y[i] = best;
    arg[i] = bi;
  }
}

__global__ void maxpool_bwd(float* __restrict__ dx, const float* __restrict__ dy, const int32_t* __restrict__ arg,
                            int64_t planes, PoolGeom g) {
  const int64_t n = planes * g.oh * g.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i / (g.ow * g.oh);
    if (arg[i] >= 0) atomicAdd(dx + p * g.h * g.w + arg[i], dy[i]);
  }
}

__device__ __forceinline__ float window(int64_t o, int s, int p, int k, int64_t n, int64_t& lo, int64_t& hi) {
  const int64_t start = o * s - p, end_padded = min(start + k, n + p);
  lo = max(start, int64_t(0));
  hi = min(end_padded, n);
  return float(end_padded - start);
}

__global__ void avgpool_fwd(const float* __restrict__ x, float* __restrict__ y, int64_t planes, PoolGeom g) {
  const int64_t n = planes * g.oh * g.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    int64_t y0, y1, x0, x1;
    const float div = window(oy, g.sh, g.ph, g.kh, g.h, y0, y1) * window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
    const float* in = x + p * g.h * g.w;
    float s = 0.f;
    for (int64_t iy = y0; iy < y1; ++iy)
      for (int64_t ix = x0; ix < x1; ++ix) s += in[iy * g.w + ix];
    y[i] = s / div;
  }
}

__global__ void avgpool_bwd(float* __restrict__ dx, const float* __restrict__ dy, int64_t planes, PoolGeom g) {
  const int64_t n = planes * g.oh * g.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    int64_t y0, y1, x0, x1;
    const float div = window(oy, g.sh, g.ph, g.kh, g.h, y0, y1) * window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
    const float v = dy[i] / div;
    float* d = dx + p * g.h * g.w;
    for (int64_t iy = y0; iy < y1; ++iy)
      for (int64_t ix = x0; ix < x1; ++ix) atomicAdd(d + iy * g.w + ix, v);
  }
}

class PoolLayer : public Layer {
 public:
  PoolLayer(const LayerSpec& s, bool max) : Layer(s), g_(PoolGeom::from_spec(s)), max_(max) {
    require_fp32_nchw(s);
    in_.set(s.batch, g_.c, g_.h, g_.w);
    out_.set(s.batch, g_.c, g_.oh, g_.ow);
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_, max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                            CUDNN_PROPAGATE_NAN, g_.kh, g_.kw, g_.ph, g_.pw, g_.sh, g_.sw));
    int n = 0, c = 0, h = 0, w = 0;
    CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool_, in_, &n, &c, &h, &w));
    use_cudnn_ = h == g_.oh && w == g_.ow && s.attr("impl", 0) == 0;  // attrs.impl = 1 forces our kernels
    if (!use_cudnn_ && max_) arg_ = std::make_unique<DeviceBuffer>(std::size_t(out_count()) * sizeof(int32_t));
  }
  ~PoolLayer() override { cudnnDestroyPoolingDescriptor(pool_); }

  void forward(const std::vector<const void*>& x, void* y) override {
    if (use_cudnn_) {
      CUDNN_CHECK(cudnnPoolingForward(context().cudnn, pool_, &kOne, in_, x[0], &kZero, out_, y));
      return;
    }
    const int64_t planes = spec_.batch * g_.c, n = planes * g_.oh * g_.ow;
    if (max_)
      maxpool_fwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<const float*>(x[0]), static_cast<float*>(y),
                                                              static_cast<int32_t*>(arg_->data()), planes, g_);
    else
      avgpool_fwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<const float*>(x[0]), static_cast<float*>(y),
                                                              planes, g_);
    CUDA_CHECK(cudaGetLastError());
  }

  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    if (use_cudnn_) {  // beta = 1: accumulate into dx
      CUDNN_CHECK(cudnnPoolingBackward(context().cudnn, pool_, &kOne, out_, y, out_, dy, in_, x[0], &kOne, in_, dx[0]));
      return;
    }
    const int64_t planes = spec_.batch * g_.c, n = planes * g_.oh * g_.ow;
    if (max_)
      maxpool_bwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<float*>(dx[0]), static_cast<const float*>(dy),
                                                              static_cast<const int32_t*>(arg_->data()), planes, g_);
    else
      avgpool_bwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<float*>(dx[0]), static_cast<const float*>(dy),
                                                              planes, g_);
    CUDA_CHECK(cudaGetLastError());
  }

 private:
  PoolGeom g_;
  bool max_, use_cudnn_ = false;
  TensorDesc in_, out_;
  cudnnPoolingDescriptor_t pool_{};
  std::unique_ptr<DeviceBuffer> arg_;  // argmax per output (own max kernel only)
};

class MaxPoolLayer : public PoolLayer {
 public:
  explicit MaxPoolLayer(const LayerSpec& s) : PoolLayer(s, true) {}
};
class AvgPoolLayer : public PoolLayer {
 public:
  explicit AvgPoolLayer(const LayerSpec& s) : PoolLayer(s, false) {}
};
GDL_REGISTER_CUDA_LAYER("maxpool", MaxPoolLayer);
GDL_REGISTER_CUDA_LAYER("avgpool", AvgPoolLayer);

// cuDNN average pooling with one H x W window per plane.
class GlobalAvgPoolLayer : public Layer {
 public:
  explicit GlobalAvgPoolLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "global_avgpool ", s.name,
                ": needs one input {C, H, W}");
    const auto& sh = s.in_shapes[0];
    GDL_REQUIRE(numel(s.out_shape) == sh[0], "global_avgpool ", s.name, ": out_shape must have C = ", sh[0], " elements");
    in_.set(s.batch, sh[0], sh[1], sh[2]);
    out_.set(s.batch, sh[0], 1, 1);
    CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_));
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN,
                                            int(sh[1]), int(sh[2]), 0, 0, 1, 1));
  }
  ~GlobalAvgPoolLayer() override { cudnnDestroyPoolingDescriptor(pool_); }
  void forward(const std::vector<const void*>& x, void* y) override {
    CUDNN_CHECK(cudnnPoolingForward(context().cudnn, pool_, &kOne, in_, x[0], &kZero, out_, y));
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    CUDNN_CHECK(cudnnPoolingBackward(context().cudnn, pool_, &kOne, out_, y, out_, dy, in_, x[0], &kOne, in_, dx[0]));
  }

 private:
  TensorDesc in_, out_;
  cudnnPoolingDescriptor_t pool_{};
};
GDL_REGISTER_CUDA_LAYER("global_avgpool", GlobalAvgPoolLayer);

}  // namespace
}  // namespace gdl::cuda
