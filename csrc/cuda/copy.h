// Copy bandwidth as nvbandwidth measures it (cudaMemcpyAsync between CUDA events on one stream).
#pragma once
#include <cstddef>
#include <string>

#include "common/timer.h"

namespace gdl::cuda {

// direction: "h2d", "d2h" or "d2d"; pinned: host memory from cudaHostAlloc, else pageable (malloc).
// Every buffer is allocated and written before timing. Pinned and d2d samples start behind a kernel
// that holds the stream until every copy of the sample is queued (nvbandwidth's method), so the
// enqueue cost stays out; pageable copies block the host, so they are timed as queued.
CopyRun copy_bench(const std::string& direction, bool pinned, std::size_t nbytes, int copies, int warmup, int iters);

}  // namespace gdl::cuda
