// Host memory copies: the CPU stand-in for host-to-device transfers (a memcpy into the compute
// buffer) and the bandwidth reference of the SGD update.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

#include "common/timer.h"

namespace gdl::cpu {

// memcpy split into `threads` contiguous chunks, one per OpenMP thread (1: a plain memcpy).
void parallel_copy(void* dst, const void* src, std::size_t nbytes, int threads);

// A page-aligned host buffer, for benchmarks that touch every page before timing.
struct PageBuffer {
  explicit PageBuffer(std::size_t nbytes) : n(nbytes), p(static_cast<char*>(std::aligned_alloc(4096, round(nbytes)))) {
    if (!p) throw std::bad_alloc();
  }
  ~PageBuffer() { std::free(p); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  static std::size_t round(std::size_t b) { return ((b ? b : 1) + 4095) & ~std::size_t(4095); }
  std::size_t n;
  char* p;
};

// `copies` back-to-back parallel_copy calls of nbytes per sample between buffers allocated and
// written before timing; the destination is compared with the source after timing (host steady clock).
CopyRun copy_bench(std::size_t nbytes, int copies, const TimingPlan& plan, int threads);

}  // namespace gdl::cpu
