// One CUDA layer on its own (common/layer_bench.h): device buffers, the same test data, seeds and
// labels as the CPU's, each pass timed with CUDA events (cuda/cuda_timer.h).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "common/layer_bench.h"
#include "common/timer.h"
#include "cuda/device.h"
#include "cuda/layer.h"

namespace gdl::cuda {

struct DeviceMemory {
  using Elem = void;
  using Buffer = DeviceBuffer;
  static std::unique_ptr<Layer> make_layer(const LayerSpec& spec) { return cuda::make_layer(spec); }
  static void copy(void* dst, const void* src, std::size_t n) { copy_now(dst, src, n); }
  static void zero(void* dst, std::size_t n) { zero_now(dst, n); }
  static std::vector<double> time(const TimingPlan& plan, const std::function<void()>& pass);
};

using LayerBench = LayerBenchOn<DeviceMemory>;

}  // namespace gdl::cuda
