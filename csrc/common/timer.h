// The one timing harness: warm-up, then N timed iterations, one sample per iteration.
// The host version uses std::chrono::steady_clock; csrc/cuda/cuda_timer.h is its CUDA-events twin.
#pragma once
#include <array>
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

// Several operations interleaved: per iteration one timed run of each in turn, so that all see
// the same machine state (a kernel and its bandwidth reference, say). One sample vector per op.
template <class... Ops>
std::array<std::vector<double>, sizeof...(Ops)> time_steady_each(const TimingPlan& plan, Ops&&... ops) {
  validate(plan);
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < plan.warmup; ++i) (ops(), ...);
  std::array<std::vector<double>, sizeof...(Ops)> samples_us;
  for (auto& s : samples_us) s.reserve(plan.iters);
  for (int i = 0; i < plan.iters; ++i) {
    std::size_t k = 0;
    auto timed = [&](auto& op) {
      const auto t0 = clock::now();
      op();
      samples_us[k++].push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
    };
    (timed(ops), ...);
  }
  return samples_us;
}

// What the copy and update benchmarks of both backends return.
struct CopyRun {
  std::vector<double> samples_us;  // one per sample: `copies` back-to-back copies
  std::size_t wrong_bytes = 0;     // bytes of the destination that differ from the source afterwards
};

struct UpdateRun {
  std::vector<double> update_us;  // one SGD update per sample
  std::vector<double> copy_us;    // the same-traffic copy timed beside it in the same iteration
  std::size_t copy_bytes = 0;
};

}  // namespace gdl
