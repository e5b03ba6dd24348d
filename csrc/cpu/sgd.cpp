#include "cpu/sgd.h"

#include <cstring>

#include "common/fill.h"
#include "cpu/copy.h"
#include "cpu/layer.h"

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

UpdateRun update_bench(int64_t n, float lr, float momentum, float wd, const TimingPlan& plan, int threads) {
  GDL_REQUIRE(n >= 1, "update: need at least one parameter, got ", n);
  validate(plan);
  set_compute_threads(threads);
  const std::size_t bytes = std::size_t(n) * sizeof(float);
  PageBuffer w(bytes), g(bytes), v(bytes), src(bytes * 5 / 2), dst(bytes * 5 / 2);
  auto *pw = reinterpret_cast<float*>(w.p), *pg = reinterpret_cast<float*>(g.p), *pv = reinterpret_cast<float*>(v.p);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {  // same static schedule as the update: pages land near their thread
    pw[i] = fill_value(1, i);
    pg[i] = fill_value(2, i) * 0.01f;
    pv[i] = 0.f;
  }
  fill_bytes(src.p, src.n, 3);
  std::memset(dst.p, 0, dst.n);
  auto samples = time_steady_each(
      plan, [&] { sgd_update(pw, pg, pv, n, lr, momentum, wd); },
      [&] { parallel_copy(dst.p, src.p, src.n, threads); });
  return UpdateRun{std::move(samples[0]), std::move(samples[1]), std::size_t(n) * 10};
}

}  // namespace gdl::cpu
