#include "cpu/compress.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/errors.h"
#include "common/fill.h"

namespace gdl::cpu {

std::size_t topk_count(std::size_t n, double ratio) {
  GDL_REQUIRE(ratio >= 1.0 && std::isfinite(ratio), "compression ratio must be >= 1, got ", ratio);
  GDL_REQUIRE(n >= 1, "compression: the gradient must hold at least one value");
  const auto k = static_cast<std::size_t>(static_cast<double>(n) / (2.0 * ratio));
  return std::clamp<std::size_t>(k, 1, n);
}

void topk_encode(const float* g, std::size_t n, std::size_t k, float* scratch, int32_t* indices, float* values) {
  GDL_REQUIRE(k >= 1 && k <= n, "topk_encode: k must be in [1, n], got ", k);
  GDL_REQUIRE(n <= static_cast<std::size_t>(std::numeric_limits<int32_t>::max()),
              "topk_encode: more values than an int32 index holds");
  for (std::size_t i = 0; i < n; ++i) scratch[i] = std::fabs(g[i]);
  std::nth_element(scratch, scratch + (n - k), scratch + n);
  const float threshold = scratch[n - k];
  std::size_t above = 0;  // values strictly above the threshold all go; ties fill the rest in index order
  for (std::size_t i = 0; i < n; ++i) above += std::fabs(g[i]) > threshold;
  std::size_t ties = k - above, out = 0;
  for (std::size_t i = 0; i < n && out < k; ++i) {
    const float a = std::fabs(g[i]);
    if (a > threshold || (a == threshold && ties > 0)) {
      if (a == threshold) --ties;
      indices[out] = static_cast<int32_t>(i);
      values[out] = g[i];
      ++out;
    }
  }
}

std::vector<double> time_topk_encode(std::size_t n, double ratio, const TimingPlan& plan, TopkTimedOutput* out) {
  const std::size_t k = topk_count(n, ratio);
  std::vector<float> g(n), scratch(n), values(k);
  std::vector<int32_t> indices(k);
  for (std::size_t i = 0; i < n; ++i) g[i] = fill_value(7, i) + 1e-6f * static_cast<float>(i % 1000);
  std::vector<double> samples =
      time_steady(plan, [&] { topk_encode(g.data(), n, k, scratch.data(), indices.data(), values.data()); });
  if (out != nullptr) *out = TopkTimedOutput{std::move(g), std::move(values), std::move(indices)};
  return samples;
}

}  // namespace gdl::cpu
