// One CPU layer on its own: built from a spec with its own buffers filled with gdlbench's test
// data (common/fill.h), timed per pass on the host steady clock, or run once on given arrays so
// tests can compare it with a numpy reference. Both paths use the same Layer object.
#pragma once
#include <memory>
#include <vector>

#include "common/layer_bench.h"
#include "common/timer.h"
#include "cpu/layer.h"

namespace gdl::cpu {

class LayerBench {
 public:
  explicit LayerBench(const LayerSpec& spec);

  std::vector<double> time(LayerPass pass, const TimingPlan& plan);

  // Forward + backward on these arrays (sizes checked). labels: empty keeps the test labels;
  // dx_init: empty starts the input gradients at zero (backward_data accumulates onto them).
  LayerRun run(const std::vector<Floats>& xs, Floats dy, const std::vector<Floats>& params,
               const std::vector<int32_t>& labels, const std::vector<Floats>& dx_init);

  int64_t param_count() const { return layer_->param_count(); }

 private:
  std::vector<const float*> inputs() const;
  std::vector<float*> input_grads();

  std::unique_ptr<Layer> layer_;
  std::vector<std::vector<float>> x_, dx_;
  std::vector<float> y_, dy_, params_, grads_;
  std::vector<int32_t> labels_;
};

}  // namespace gdl::cpu
