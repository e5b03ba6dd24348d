// SGD with momentum and weight decay over one flat fp32 parameter buffer, PyTorch's convention
// (torch.optim.SGD with dampening 0, nesterov off):
//   v = momentum * v + (g + wd * w);   w = w - lr * v
// (Caffe folds lr into v instead: v = momentum * v + lr * (g + wd * w); w -= v. The cost is the same.)
// Memory traffic: reads w, g, v and writes w, v: 20 bytes per parameter.
#pragma once
#include <cstdint>

#include "common/timer.h"

namespace gdl::cpu {

void sgd_update(float* w, const float* g, float* v, int64_t n, float lr, float momentum, float wd);

// Bytes one sgd_update of n parameters moves (read w, g, v; write w, v).
inline constexpr int64_t sgd_bytes_per_param() { return 20; }

// Times sgd_update over n parameters on `threads` threads, interleaved per iteration with a
// parallel_copy of 10 bytes per parameter (it reads 10 and writes 10: the update's 20 bytes of
// traffic), so both see the same machine state. Buffers are allocated and touched before timing.
UpdateRun update_bench(int64_t n, float lr, float momentum, float wd, const TimingPlan& plan, int threads);

}  // namespace gdl::cpu
