// SGD with momentum and weight decay on device buffers (twin of cpu/sgd.h, same convention):
//   v = momentum * v + (g + wd * w);   w = w - lr * v        20 bytes moved per fp32 parameter.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/timer.h"

namespace gdl::cuda {

void sgd_update(float* w, const float* g, float* v, int64_t n, float lr, float momentum, float wd, cudaStream_t stream);

// One sgd_update on host arrays (copied to the device and back), for checks against numpy.
void sgd_update_host(float* w, const float* g, float* v, int64_t n, float lr, float momentum, float wd);

// Times sgd_update over n parameters, interleaved per iteration with a device-to-device copy of 10
// bytes per parameter (10 read + 10 written = the update's 20 bytes of traffic), each between its
// own pair of CUDA events on the process's stream.
UpdateRun update_bench(int64_t n, float lr, float momentum, float wd, const TimingPlan& plan);

}  // namespace gdl::cuda
