// Deterministic pseudo-random test data, the same on host and device: element i of stream `seed`
// is k/128 for an integer k in [-128, 128], so it is exact in fp64, fp32, tf32, fp16 and bf16.
// The host can regenerate any device buffer bit for bit and compute a float64 reference.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define GDL_HD __host__ __device__ __forceinline__
#else
#define GDL_HD inline
#endif

namespace gdl {

GDL_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

GDL_HD float fill_value(uint64_t seed, uint64_t index) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ index);
  const int k = static_cast<int>(h % 257u) - 128;  // [-128, 128]
  return static_cast<float>(k) * (1.0f / 128.0f);
}

}  // namespace gdl
