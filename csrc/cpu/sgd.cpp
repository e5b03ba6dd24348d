#include "cpu/sgd.h"

namespace gdl::cpu {

void sgd_update(float* __restrict w, const float* __restrict g, float* __restrict v, int64_t n, float lr,
                float momentum, float wd) {
  // Static schedule: each thread streams one contiguous range (the prefetchers' best case).
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float vi = momentum * v[i] + (g[i] + wd * w[i]);
    v[i] = vi;
    w[i] -= lr * vi;
  }
}

}  // namespace gdl::cpu
