// One CUDA layer on its own, the twin of cpu/layer_bench.h: the same test data, seeds and labels
// on device buffers, each pass timed with CUDA events (cuda/cuda_timer.h), or run once on host
// arrays (copied in and back) for the checks against the CPU backend.
#pragma once
#include <memory>
#include <vector>

#include "common/layer_bench.h"
#include "common/timer.h"
#include "cuda/device.h"
#include "cuda/layer.h"

namespace gdl::cuda {

class LayerBench {
 public:
  explicit LayerBench(const LayerSpec& spec);

  std::vector<double> time(LayerPass pass, const TimingPlan& plan);
  LayerRun run(const std::vector<Floats>& xs, Floats dy, const std::vector<Floats>& params,
               const std::vector<int32_t>& labels, const std::vector<Floats>& dx_init);

  int64_t param_count() const { return param_count_; }

 private:
  void set_labels(const std::vector<int32_t>& l);
  std::vector<const void*> inputs() const;
  std::vector<void*> input_grads();

  std::unique_ptr<Layer> layer_;
  std::vector<std::unique_ptr<DeviceBuffer>> x_, dx_;
  std::vector<int64_t> counts_;
  std::unique_ptr<DeviceBuffer> y_, dy_, params_, grads_, labels_;
  int64_t param_count_ = 0;
};

}  // namespace gdl::cuda
