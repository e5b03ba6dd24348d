// The one timing harness: warm-up, then N timed iterations, one sample per iteration.
// The host version uses std::chrono::steady_clock; csrc/cuda/cuda_timer.h is its CUDA-events twin.
#pragma once
#include <chrono>
#include <vector>

#include "common/errors.h"

namespace gdl {

struct TimingPlan {
  int warmup = 5;   // untimed runs before the first sample
  int iters = 20;   // timed runs, one sample each
};

inline void validate(const TimingPlan& plan) {
  GDL_REQUIRE(plan.warmup >= 0, "warmup must be >= 0, got ", plan.warmup);
  GDL_REQUIRE(plan.iters >= 1, "iters must be >= 1, got ", plan.iters);
}

// Runs prepare() untimed before every run (a barrier, say), then op() inside the timed region.
// Returns one sample in microseconds per timed iteration.
template <class Op, class Prepare>
std::vector<double> time_steady(const TimingPlan& plan, Op&& op, Prepare&& prepare) {
  validate(plan);
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < plan.warmup; ++i) {
    prepare();
    op();
  }
  std::vector<double> samples_us;
  samples_us.reserve(plan.iters);
  for (int i = 0; i < plan.iters; ++i) {
    prepare();
    const auto t0 = clock::now();
    op();
    const auto t1 = clock::now();
    samples_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return samples_us;
}

template <class Op>
std::vector<double> time_steady(const TimingPlan& plan, Op&& op) {
  return time_steady(plan, op, [] {});
}

}  // namespace gdl
