// The CUDA twin of common/timer.h: warm-up, then one CUDA-event pair around each timed iteration
// on `stream`. Iterations are queued back to back (as a training step queues kernels); each sample
// is the device time between its two events.
#pragma once
#include <array>
#include <vector>

#include "common/timer.h"
#include "cuda/check.h"

namespace gdl::cuda {

// Several operations interleaved: per iteration each op in turn between its own pair of events,
// so that all see the same device state. One sample vector per op.
template <class... Ops>
std::array<std::vector<double>, sizeof...(Ops)> time_events_each(const TimingPlan& plan, cudaStream_t stream,
                                                                  Ops&&... ops) {
  constexpr std::size_t K = sizeof...(Ops);
  validate(plan);
  for (int i = 0; i < plan.warmup; ++i) (ops(), ...);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> ev(2 * K * plan.iters);  // per iteration and op: start, stop
  struct Release {  // events are destroyed on every path, including a failing op()
    std::vector<cudaEvent_t>& ev;
    ~Release() {
      for (auto e : ev)
        if (e) cudaEventDestroy(e);
    }
  } release{ev};
  for (auto& e : ev) {
    e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
  }
  for (int i = 0; i < plan.iters; ++i) {
    std::size_t k = 0;
    auto timed = [&](auto& op) {
      const std::size_t at = 2 * (K * i + k++);
      CUDA_CHECK(cudaEventRecord(ev[at], stream));
      op();
      CUDA_CHECK(cudaEventRecord(ev[at + 1], stream));
    };
    (timed(ops), ...);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::array<std::vector<double>, K> samples_us;
  for (std::size_t k = 0; k < K; ++k) {
    for (int i = 0; i < plan.iters; ++i) {
      float ms = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * (K * i + k)], ev[2 * (K * i + k) + 1]));
      samples_us[k].push_back(1000.0 * ms);
    }
  }
  return samples_us;
}

template <class Op>
std::vector<double> time_events(const TimingPlan& plan, cudaStream_t stream, Op&& op) {
  return std::move(time_events_each(plan, stream, op)[0]);
}

}  // namespace gdl::cuda
