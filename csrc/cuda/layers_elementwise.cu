// CUDA twins of cpu/activations.cpp and cpu/elementwise.cpp: relu, add, concat, flatten and dropout
// (own kernels: cuDNN's activation ops are deprecated legacy ops in cuDNN 9), plus the accumulate
// kernels every layer uses.
#include "common/dropout.h"
#include "cuda/layer_util.h"

namespace gdl::cuda {

__global__ void accumulate_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void accumulate_2d_kernel(float* __restrict__ dst, int64_t dp, const float* __restrict__ src, int64_t sp,
                                     int64_t width, int64_t rows) {
  const int64_t n = width * rows;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, e = i % width;
    dst[r * dp + e] += src[r * sp + e];
  }
}

void accumulate(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  accumulate_kernel<<<grid_for(n), 256, 0, stream>>>(dst, src, n);
  CUDA_CHECK(cudaGetLastError());
}

void accumulate_2d(float* dst, int64_t dp, const float* src, int64_t sp, int64_t width, int64_t rows,
                   cudaStream_t stream) {
  accumulate_2d_kernel<<<grid_for(width * rows), 256, 0, stream>>>(dst, dp, src, sp, width, rows);
  CUDA_CHECK(cudaGetLastError());
}

namespace {

// The CPU's formulas exactly: y = x > 0 ? x : 0 (NaN -> 0), dx += y > 0 ? dy : 0.
__global__ void relu_fwd(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] > 0.f ? x[i] : 0.f;
}

__global__ void relu_bwd(float* __restrict__ dx, const float* __restrict__ y, const float* __restrict__ dy, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] += y[i] > 0.f ? dy[i] : 0.f;
}

class ReluLayer : public Layer {
 public:
  explicit ReluLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), "relu ", s.name,
                ": out_shape must have as many elements as the input");
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    const int64_t n = out_count();
    relu_fwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<float*>(y), static_cast<const float*>(x[0]), n);
    CUDA_CHECK(cudaGetLastError());
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    const int64_t n = out_count();
    relu_bwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<float*>(dx[0]), static_cast<const float*>(y),
                                                         static_cast<const float*>(dy), n);
    CUDA_CHECK(cudaGetLastError());
  }
};
GDL_REGISTER_CUDA_LAYER("relu", ReluLayer);

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ a, const float* __restrict__ b,
                           int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = a[i] + b[i];
}

class AddLayer : public Layer {
 public:
  explicit AddLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() >= 2, "add ", s.name, ": needs at least two inputs");
    for (const auto& sh : s.in_shapes)
      GDL_REQUIRE(numel(sh) == numel(s.out_shape), "add ", s.name, ": every input must have the output's shape");
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    const int64_t n = out_count();
    auto* out = static_cast<float*>(y);
    add_kernel<<<grid_for(n), 256, 0, context().stream>>>(out, static_cast<const float*>(x[0]),
                                                           static_cast<const float*>(x[1]), n);
    CUDA_CHECK(cudaGetLastError());
    for (std::size_t k = 2; k < x.size(); ++k) accumulate(out, static_cast<const float*>(x[k]), n, context().stream);
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    for (void* d : dx)
      if (d) accumulate(static_cast<float*>(d), static_cast<const float*>(dy), out_count(), context().stream);
  }
};
GDL_REGISTER_CUDA_LAYER("add", AddLayer);

class ConcatLayer : public Layer {
 public:
  explicit ConcatLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    int64_t total = 0, off = 0;
    for (const auto& sh : s.in_shapes) {
      GDL_REQUIRE(sh.size() == s.out_shape.size() && !sh.empty(), "concat ", s.name, ": inputs must have the output's rank");
      for (std::size_t d = 1; d < sh.size(); ++d)
        GDL_REQUIRE(sh[d] == s.out_shape[d], "concat ", s.name, ": inputs differ from the output beyond the channel axis");
      block_.push_back(numel(sh));
      offset_.push_back(off);
      off += numel(sh);
      total += sh[0];
    }
    GDL_REQUIRE(total == s.out_shape[0], "concat ", s.name, ": input channels sum to ", total, ", out_shape has ",
                s.out_shape[0]);
    out_ = numel(s.out_shape);
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    auto* out = static_cast<float*>(y);
    for (std::size_t j = 0; j < x.size(); ++j)  // one strided copy per input: a row per sample
      CUDA_CHECK(cudaMemcpy2DAsync(out + offset_[j], out_ * sizeof(float), x[j], block_[j] * sizeof(float),
                                   block_[j] * sizeof(float), spec_.batch, cudaMemcpyDeviceToDevice, context().stream));
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    const auto* g = static_cast<const float*>(dy);
    for (std::size_t j = 0; j < dx.size(); ++j)
      if (dx[j])
        accumulate_2d(static_cast<float*>(dx[j]), block_[j], g + offset_[j], out_, block_[j], spec_.batch,
                      context().stream);
  }

 private:
  std::vector<int64_t> block_, offset_;
  int64_t out_ = 0;
};
GDL_REGISTER_CUDA_LAYER("concat", ConcatLayer);

class FlattenLayer : public Layer {
 public:
  explicit FlattenLayer(const LayerSpec& s) : Layer(s) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), "flatten ", s.name,
                ": out_shape must have as many elements as the input");
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    CUDA_CHECK(cudaMemcpyAsync(y, x[0], out_count() * sizeof(float), cudaMemcpyDeviceToDevice, context().stream));
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (dx[0]) accumulate(static_cast<float*>(dx[0]), static_cast<const float*>(dy), out_count(), context().stream);
  }
};
GDL_REGISTER_CUDA_LAYER("flatten", FlattenLayer);

__global__ void dropout_fwd(float* __restrict__ y, uint8_t* __restrict__ mask, const float* __restrict__ x, int64_t n,
                            uint64_t seed, float ratio, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = dropout_keep(seed, uint64_t(i), ratio);
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.f;
  }
}

__global__ void dropout_bwd(float* __restrict__ dx, const uint8_t* __restrict__ mask, const float* __restrict__ dy,
                            int64_t n, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (mask[i]) dx[i] += dy[i] * scale;
}

class DropoutLayer : public Layer {
 public:
  explicit DropoutLayer(const LayerSpec& s) : Layer(s), mask_(std::size_t(std::max<int64_t>(1, out_count()))) {
    require_fp32_nchw(s);
    GDL_REQUIRE(s.in_shapes.size() == 1 && numel(s.in_shapes[0]) == numel(s.out_shape), "dropout ", s.name,
                ": out_shape must equal the input shape");
    ratio_ = float(s.attr("ratio", 0.5));
    seed_ = uint64_t(s.attr("seed", 0));
    GDL_REQUIRE(ratio_ >= 0.f && ratio_ < 1.f, "dropout ", s.name, ": ratio must be in [0, 1), got ", ratio_);
  }
  void forward(const std::vector<const void*>& x, void* y) override {
    const int64_t n = out_count();
    dropout_fwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<float*>(y), static_cast<uint8_t*>(mask_.data()),
                                                            static_cast<const float*>(x[0]), n, seed_, ratio_,
                                                            1.f / (1.f - ratio_));
    CUDA_CHECK(cudaGetLastError());
  }
  void backward_data(const std::vector<const void*>& x, const void* y, const void* dy,
                     const std::vector<void*>& dx) override {
    if (!dx[0]) return;
    const int64_t n = out_count();
    dropout_bwd<<<grid_for(n), 256, 0, context().stream>>>(static_cast<float*>(dx[0]),
                                                            static_cast<const uint8_t*>(mask_.data()),
                                                            static_cast<const float*>(dy), n, 1.f / (1.f - ratio_));
    CUDA_CHECK(cudaGetLastError());
  }

 private:
  float ratio_ = 0.5f;
  uint64_t seed_ = 0;
  DeviceBuffer mask_;
};
GDL_REGISTER_CUDA_LAYER("dropout", DropoutLayer);

}  // namespace
}  // namespace gdl::cuda
