// The CUDA twin of common/timer.h: warm-up, then one CUDA-event pair around each timed iteration
// on `stream`. Iterations are queued back to back (as a training step queues kernels); each sample
// is the device time between its two events.
#pragma once
#include <vector>

#include "common/timer.h"
#include "cuda/check.h"

namespace gdl::cuda {

template <class Op>
std::vector<double> time_events(const TimingPlan& plan, cudaStream_t stream, Op&& op) {
  validate(plan);
  for (int i = 0; i < plan.warmup; ++i) op();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> start(plan.iters), stop(plan.iters);
  for (int i = 0; i < plan.iters; ++i) {
    CUDA_CHECK(cudaEventCreate(&start[i]));
    CUDA_CHECK(cudaEventCreate(&stop[i]));
  }
  struct Release {  // events are destroyed on every path, including a failing op()
    std::vector<cudaEvent_t>& a;
    std::vector<cudaEvent_t>& b;
    ~Release() {
      for (auto e : a) cudaEventDestroy(e);
      for (auto e : b) cudaEventDestroy(e);
    }
  } release{start, stop};
  for (int i = 0; i < plan.iters; ++i) {
    CUDA_CHECK(cudaEventRecord(start[i], stream));
    op();
    CUDA_CHECK(cudaEventRecord(stop[i], stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> samples_us(plan.iters);
  for (int i = 0; i < plan.iters; ++i) {
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
    samples_us[i] = 1000.0 * ms;
  }
  return samples_us;
}

}  // namespace gdl::cuda
