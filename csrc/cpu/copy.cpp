#include "cpu/copy.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "common/fill.h"

namespace gdl::cpu {

void parallel_copy(void* dst, const void* src, std::size_t nbytes, int threads) {
  if (threads <= 1 || nbytes < (1u << 20)) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // Chunks aligned to 4 KiB so no two threads write the same page.
  const std::size_t chunk = ((nbytes / threads) + 4095) & ~std::size_t(4095);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const std::size_t lo = std::min(nbytes, t * chunk), hi = std::min(nbytes, lo + chunk);
    if (hi > lo) std::memcpy(d + lo, s + lo, hi - lo);
  }
}

}  // namespace gdl::cpu

namespace gdl::cpu {

CopyRun copy_bench(std::size_t nbytes, int copies, const TimingPlan& plan, int threads) {
  GDL_REQUIRE(nbytes >= 1, "copy: size must be positive");
  GDL_REQUIRE(copies >= 1, "copy: copies per sample must be >= 1, got ", copies);
  validate(plan);
  PageBuffer src(nbytes), dst(nbytes);
  fill_bytes(src.p, nbytes, 42);
  std::memset(dst.p, 0, nbytes);
  int prepared = 0;
  CopyRun run;
  run.samples_us = time_steady(
      plan, [&] { for (int c = 0; c < copies; ++c) parallel_copy(dst.p, src.p, nbytes, threads); },
      [&] {  // before the first timed sample: clear the destination, so the check sees the timed copies' data
        if (prepared++ == plan.warmup) std::memset(dst.p, 0, nbytes);
      });
  run.wrong_bytes = count_wrong_bytes(src.p, dst.p, nbytes);
  return run;
}

}  // namespace gdl::cpu
