// Helpers shared by the CUDA layers: cuDNN descriptor owners, launch shapes, the fp32/NCHW guard and
// a few element-wise kernels (accumulate, strided accumulate).
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/layer.h"

namespace gdl::cuda {

// The layers are fp32 NCHW; other dtypes and layouts are refused rather than computed wrongly.
inline void require_fp32_nchw(const LayerSpec& s) {
  GDL_REQUIRE(s.attr("dtype", 0) == 0, s.type, " ", s.name, ": the CUDA layers are float32 only (attrs.dtype = 0)");
  GDL_REQUIRE(s.attr("nhwc", 0) == 0, s.type, " ", s.name, ": the CUDA layers are NCHW only (attrs.nhwc = 0)");
}

inline int grid_for(int64_t n, int threads = 256) {
  // Grid-stride kernels: enough blocks to fill the GPU, never more than the work needs.
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 1 << 20)));
}

class TensorDesc {
 public:
  TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w) : TensorDesc() { set(n, c, h, w); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void set(int64_t n, int64_t c, int64_t h, int64_t w) {
    GDL_REQUIRE(n * c * h * w < (int64_t(1) << 31), "cuDNN tensor of ", n * c * h * w, " elements is too large");
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, int(n), int(c), int(h), int(w)));
  }
  operator cudnnTensorDescriptor_t() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_{};
};

// {C, H, W} -> (N, C, H, W); {F} -> (N, F, 1, 1); other ranks are flattened after the first axis.
inline void describe(TensorDesc& d, int64_t batch, const Shape& s) {
  const int64_t c = s.empty() ? 1 : s[0];
  const int64_t h = s.size() >= 2 ? s[1] : 1;
  const int64_t w = s.size() >= 3 ? numel(Shape(s.begin() + 2, s.end())) : 1;
  d.set(batch, c, h, w);
}

// dst[i] += src[i]
void accumulate(float* dst, const float* src, int64_t n, cudaStream_t stream);
// dst[r * dst_pitch + e] += src[r * src_pitch + e] for r < rows, e < width (elements)
void accumulate_2d(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width, int64_t rows,
                   cudaStream_t stream);

constexpr float kOne = 1.f, kZero = 0.f;

}  // namespace gdl::cuda
