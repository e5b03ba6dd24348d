#include "cuda/check.h"
#include "cuda/layer_util.h"
#include "cuda/sgd.h"

namespace gdl::cuda {
namespace {

__device__ __forceinline__ void step(float& w, float g, float& v, float lr, float mu, float wd) {
  v = mu * v + (g + wd * w);
  w -= lr * v;
}

// 16-byte loads and stores (float4) over the aligned bulk; the caller handles the tail.
__global__ void sgd_vec4(float4* __restrict__ w, const float4* __restrict__ g, float4* __restrict__ v, int64_t n4,
                         float lr, float mu, float wd) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    float4 wi = w[i], vi = v[i];
    const float4 gi = g[i];
    step(wi.x, gi.x, vi.x, lr, mu, wd);
    step(wi.y, gi.y, vi.y, lr, mu, wd);
    step(wi.z, gi.z, vi.z, lr, mu, wd);
    step(wi.w, gi.w, vi.w, lr, mu, wd);
    w[i] = wi;
    v[i] = vi;
  }
}

__global__ void sgd_scalar(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v, int64_t n,
                           float lr, float mu, float wd) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    step(w[i], g[i], v[i], lr, mu, wd);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void sgd_update(float* w, const float* g, float* v, int64_t n, float lr, float momentum, float wd,
                cudaStream_t stream) {
  if (n <= 0) return;
  int64_t bulk = 0;
  if (aligned16(w) && aligned16(g) && aligned16(v)) {
    const int64_t n4 = n / 4;
    if (n4 > 0) {
      sgd_vec4<<<grid_for(n4), 256, 0, stream>>>(reinterpret_cast<float4*>(w), reinterpret_cast<const float4*>(g),
                                                 reinterpret_cast<float4*>(v), n4, lr, momentum, wd);
      CUDA_CHECK(cudaGetLastError());
    }
    bulk = n4 * 4;
  }
  if (bulk < n) {
    sgd_scalar<<<grid_for(n - bulk), 256, 0, stream>>>(w + bulk, g + bulk, v + bulk, n - bulk, lr, momentum, wd);
    CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace gdl::cuda
