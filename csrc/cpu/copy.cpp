#include "cpu/copy.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

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
