// Pooling on the GPU with Caffe's geometry (common/pooling.h): our own kernels, the twins of
// cpu/pooling.cpp. Not cuDNN's: its pooling is a deprecated legacy op in cuDNN 9, computes only
// floor-mode sizes (Caffe's ceil mode, e.g. GoogLeNet, needs these kernels anyway), and its MAX
// backward sends the gradient of a tied maximum to any one of the tied inputs, where the CPU layer
// sends it to the first (row-major) one. Here the forward keeps the first maximum (strict >, the
// CPU's scan order) and the backward routes the gradient through that saved index.
#include "common/pooling.h"
#include "cuda/layer_util.h"

namespace gdl::cuda {
namespace {

__global__ void maxpool_fwd(const float* __restrict__ x, float* __restrict__ y, int32_t* __restrict__ arg,
                            int64_t planes, PoolGeom g) {
  const int64_t n = planes * g.oh * g.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    y[i] = g.window_max(x + p * g.h * g.w, oy, ox, arg[i]);
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

__global__ void avgpool_fwd(const float* __restrict__ x, float* __restrict__ y, int64_t planes, PoolGeom g) {
  const int64_t n = planes * g.oh * g.ow;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    int64_t y0, y1, x0, x1;
    const float div = PoolGeom::window(oy, g.sh, g.ph, g.kh, g.h, y0, y1) * PoolGeom::window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
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
    const float div = PoolGeom::window(oy, g.sh, g.ph, g.kh, g.h, y0, y1) * PoolGeom::window(ox, g.sw, g.pw, g.kw, g.w, x0, x1);
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
    if (max_) arg_ = std::make_unique<DeviceBuffer>(std::size_t(out_count()) * sizeof(int32_t));
  }

  void forward(const std::vector<const void*>& x, void* y) override {
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
  bool max_;
  std::unique_ptr<DeviceBuffer> arg_;  // per output, the input offset (within its plane) of the first maximum
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

// One warp per plane: the plane's mean (lane-strided sum, then a shuffle reduction).
__global__ void global_avgpool_fwd(const float* __restrict__ x, float* __restrict__ y, int64_t planes, int64_t hw) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; p < planes; p += warps) {
    const float* in = x + p * hw;
    float s = 0.f;
    for (int64_t i = lane; i < hw; i += 32) s += in[i];
    for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) y[p] = s / float(hw);
  }
}

__global__ void global_avgpool_bwd(float* __restrict__ dx, const float* __restrict__ dy, int64_t planes, int64_t hw) {
  const int64_t n = planes * hw;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] += dy[i / hw] / float(hw);
}

class GlobalAvgPoolLayer : public Layer {
 public:
  explicit GlobalAvgPoolLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && s.in_shapes[0].size() == 3, "global_avgpool ", s.name,
                ": needs one input {C, H, W}");
    const auto& sh = s.in_shapes[0];
    GDL_REQUIRE(numel(s.out_shape) == sh[0], "global_avgpool ", s.name, ": out_shape must have C = ", sh[0], " elements");
    planes_ = s.batch * sh[0];
    hw_ = sh[1] * sh[2];
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    global_avgpool_fwd<<<grid_for(planes_ * 32), 256, 0, context().stream>>>(static_cast<const float*>(x[0]),
                                                                             static_cast<float*>(y), planes_, hw_);
    CUDA_CHECK(cudaGetLastError());
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    global_avgpool_bwd<<<grid_for(planes_ * hw_), 256, 0, context().stream>>>(static_cast<float*>(dx[0]),
                                                                              static_cast<const float*>(dy), planes_, hw_);
    CUDA_CHECK(cudaGetLastError());
  }

 private:
  int64_t planes_ = 0, hw_ = 0;
};
GDL_REGISTER_CUDA_LAYER("global_avgpool", GlobalAvgPoolLayer);

}  // namespace
}  // namespace gdl::cuda
