#include "cuda/cuda_timer.h"
#include "cuda/layer_bench.h"

namespace gdl::cuda {

std::vector<double> DeviceMemory::time(const TimingPlan& plan, const std::function<void()>& pass) {
  return time_events(plan, context().stream, pass);
}

}  // namespace gdl::cuda
