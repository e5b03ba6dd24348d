// Gradient compression by top-k sparsification: the encode step a what-if of the study prices.
// At ratio r a message of n fp32 values keeps its k = n / (2r) largest magnitudes as
// (int32 index, fp32 value) pairs, so it sends 8k = 4n / r bytes: the dense message over r.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/timer.h"

namespace gdl::cpu {

// k for n values at ratio r (>= 1; at least one value is kept).
std::size_t topk_count(std::size_t n, double ratio);

// The k largest |g[i]| as ascending indices and their values (ties broken by the lower index).
// scratch holds n floats.
void topk_encode(const float* g, std::size_t n, std::size_t k, float* scratch, int32_t* indices, float* values);

// What the timed loop's buffers hold after it: its gradient and the last encode's output.
struct TopkTimedOutput {
  std::vector<float> g, values;
  std::vector<int32_t> indices;
};

// Encode a touched gradient of n values at ratio r, one sample per encode (host steady clock).
// out: when given, the buffers are copied there after the loop, so a check can read them.
std::vector<double> time_topk_encode(std::size_t n, double ratio, const TimingPlan& plan,
                                     TopkTimedOutput* out = nullptr);

}  // namespace gdl::cpu
