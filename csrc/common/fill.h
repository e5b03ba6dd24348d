// Deterministic pseudo-random test data, the same on host and device: element i of stream `seed`
// is k/128 for an integer k in [-128, 128], so it is exact in fp64, fp32, tf32, fp16 and bf16.
// The host can regenerate any device buffer bit for bit and compute a float64 reference.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

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

// Host byte patterns for copy checks: a value that differs per 8 bytes, so a copy that misses
// or shifts data is caught, and the count of bytes that differ.
// (OpenMP where the including module has it: _core does, _cuda's host code does not.)
inline void fill_bytes(char* p, std::size_t n, uint64_t seed) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (std::size_t i = 0; i < n / 8; ++i) {
    const uint64_t v = splitmix64(seed + i);
    std::memcpy(p + 8 * i, &v, 8);
  }
  for (std::size_t i = n / 8 * 8; i < n; ++i) p[i] = char(seed + i);
}

inline std::size_t count_wrong_bytes(const char* a, const char* b, std::size_t n) {
  std::size_t wrong = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(+ : wrong)
#endif
  for (std::size_t i = 0; i < n; ++i) wrong += a[i] != b[i];
  return wrong;
}

// The labels of the test data, for the loss layer: sample i has class (i * 7919) mod classes.
inline std::vector<int32_t> test_labels(int batch, int64_t classes) {
  std::vector<int32_t> l(batch > 0 ? batch : 0);
  const int64_t c = classes > 1 ? classes : 1;
  for (int i = 0; i < batch; ++i) l[i] = static_cast<int32_t>((int64_t(i) * 7919) % c);
  return l;
}

}  // namespace gdl
