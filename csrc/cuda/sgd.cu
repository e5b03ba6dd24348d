#include "cuda/check.h"
#include "cuda/cuda_timer.h"
#include "cuda/device.h"
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


void sgd_update_host(float* w, const float* g, float* v, int64_t n, float lr, float momentum, float wd) {
  const cudaStream_t st = default_stream();
  const std::size_t bytes = std::size_t(n) * sizeof(float);
  DeviceBuffer dw(bytes), dg(bytes), dv(bytes);
  CUDA_CHECK(cudaMemcpyAsync(dw.data(), w, bytes, cudaMemcpyHostToDevice, st));
  CUDA_CHECK(cudaMemcpyAsync(dg.data(), g, bytes, cudaMemcpyHostToDevice, st));
  CUDA_CHECK(cudaMemcpyAsync(dv.data(), v, bytes, cudaMemcpyHostToDevice, st));
  sgd_update(static_cast<float*>(dw.data()), static_cast<const float*>(dg.data()), static_cast<float*>(dv.data()), n,
             lr, momentum, wd, st);
  CUDA_CHECK(cudaMemcpyAsync(w, dw.data(), bytes, cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaMemcpyAsync(v, dv.data(), bytes, cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
}

UpdateRun update_bench(int64_t n, float lr, float momentum, float wd, const TimingPlan& plan) {
  GDL_REQUIRE(n >= 1, "update: need at least one parameter, got ", n);
  validate(plan);
  const std::size_t copy_bytes = std::size_t(n) * 10;
  const cudaStream_t st = default_stream();
  DeviceBuffer w(n * sizeof(float)), g(n * sizeof(float)), v(n * sizeof(float)), src(copy_bytes), dst(copy_bytes);
  fill(w.data(), n, DType::f32, 1);
  fill(g.data(), n, DType::f32, 2);
  CUDA_CHECK(cudaMemsetAsync(v.data(), 0, v.nbytes(), st));
  CUDA_CHECK(cudaMemsetAsync(src.data(), 1, copy_bytes, st));
  CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, copy_bytes, st));
  auto *pw = static_cast<float*>(w.data()), *pg = static_cast<float*>(g.data()), *pv = static_cast<float*>(v.data());
  auto samples = time_events_each(
      plan, st, [&] { sgd_update(pw, pg, pv, n, lr, momentum, wd, st); },
      [&] { CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, st)); });
  return UpdateRun{std::move(samples[0]), std::move(samples[1]), copy_bytes};
}

}  // namespace gdl::cuda
