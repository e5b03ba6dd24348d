// SGD with momentum and weight decay on device buffers (twin of cpu/sgd.h, same convention):
//   v = momentum * v + (g + wd * w);   w = w - lr * v        20 bytes moved per fp32 parameter.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace gdl::cuda {

void sgd_update(float* w, const float* g, float* v, int64_t n, float lr, float momentum, float wd, cudaStream_t stream);

}  // namespace gdl::cuda
