// Host memory copies: the CPU stand-in for host-to-device transfers (a memcpy into the compute
// buffer) and the bandwidth reference of the SGD update.
#pragma once
#include <cstddef>

namespace gdl::cpu {

// memcpy split into `threads` contiguous chunks, one per OpenMP thread (1: a plain memcpy).
void parallel_copy(void* dst, const void* src, std::size_t nbytes, int threads);

}  // namespace gdl::cpu
