// The standalone cuDNN convolution benchmark: the "conv" layer on its own device buffers, filled
// with cuda::fill test data, each pass timed with CUDA events (cuda/cuda_timer.h), or every
// algorithm of a pass; and one run of the three passes for the host's float64 check.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/timer.h"
#include "cuda/conv.h"
#include "cuda/device.h"

namespace gdl::cuda {

// Seeds of the test data; gdlbench/primitives/conv.py regenerates the same values on the host.
constexpr uint64_t kConvSeedX = 11, kConvSeedW = 5, kConvSeedB = 6, kConvSeedDy = 7, kConvSeedDx0 = 13;

// The layer plus device buffers for every tensor, filled with test data.
struct ConvRig {
  std::unique_ptr<ConvLayer> layer;
  std::unique_ptr<DeviceBuffer> x, y, dy, dx, params, grads;
  std::size_t es = 4, w_count = 0;

  explicit ConvRig(const LayerSpec& spec);
  void run(ConvPass p);
};

struct ConvTiming {
  ConvPass pass;
  std::string algo;
  int algo_id = 0;
  std::size_t workspace_bytes = 0;
  std::string selection;           // heuristic / search / named
  std::vector<double> samples_us;  // empty when the algorithm cannot run
  std::string status;              // ok, or why not
};

// Times each pass with the layer's chosen algorithm, or (all_algos) every algorithm of it.
std::vector<ConvTiming> conv_time(const LayerSpec& spec, const std::vector<ConvPass>& passes, bool all_algos,
                                  const TimingPlan& plan);

struct ConvCheckRun {
  std::vector<uint8_t> y, dx, dw, db;  // raw bytes in the layout's memory order; db empty without bias
  std::map<std::string, std::string> algos;  // per pass
};

// Runs forward, backward-filter and backward-data once (dx starts at the dx0 test data: it must
// accumulate) and returns the results.
ConvCheckRun conv_check(const LayerSpec& spec);

}  // namespace gdl::cuda
