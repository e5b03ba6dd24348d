// The dropout mask, a pure function of (seed, element index), identical on host and device: the
// CPU and CUDA layers drop the same elements, so their results compare exactly.
#pragma once
#include <cstdint>

#include "common/fill.h"

namespace gdl {

GDL_HD bool dropout_keep(uint64_t seed, uint64_t index, float ratio) {
  const uint64_t h = splitmix64(splitmix64(seed ^ 0xD1B54A32D192ED03ull) ^ index);
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
  return u >= ratio;
}

}  // namespace gdl
