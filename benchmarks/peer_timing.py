"""How the comparison scripts time their PyTorch peer, so that it is timed as gdlbench is and fed
what gdlbench is fed. On the CPU (conv_vs_torch.py, transformer_layers_vs_torch.py): `time_host`,
time.perf_counter (CLOCK_MONOTONIC, as gdlbench's steady_clock) around each call. On the GPU
(benchmarks/*_gpu.py), below.

gdlbench times a GPU op with CUDA events on its stream: warm-up, then every call queued back to
back with no synchronisation between calls (cuda/cuda_timer.h); a sample is the device time
between the events around one call, and the figure is the median. Timed that way, a PyTorch op
whose Python dispatch takes longer than its kernels shows the dispatch (the device waits for the
host between the events), which gdlbench's C++ loop does not pay. So the peer here is timed as:

- `graph`: `calls` calls captured once in a CUDA graph; a sample is one replay between one pair of
  events, divided by `calls`. No dispatch in the span at all (used for kernels of tens to hundreds
  of microseconds: convolution passes, the SGD step).
- `queued`: `calls` calls queued back to back between one pair of events, no synchronisation
  between them; a sample is that span divided by `calls` (used where the device time per call is
  far above the dispatch: large GEMMs, copies, a whole training step).

Either way `samples` samples, one synchronisation per sample, none per call. Inputs: the peer's
tensors are filled by gdlbench's own generator (`_cuda.fill`, common/fill.h: the values, dtype and
memory order gdlbench's op reads), so that both sides compute on the same values; where gdlbench
can read the peer's tensors (GEMM through raw pointers) both also run on the peer's random data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def time_host(op: Callable[[], object], warmup: int, iters: int) -> list[float]:
    """`iters` samples (us) of op() on the host clock, each one call, after `warmup` untimed calls."""
    for _ in range(warmup):
        op()
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        op()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


METHODS = {
    "graph": "{calls} calls captured in one CUDA graph, one event pair per replay (per call: span / {calls})",
    "queued": "{calls} calls queued back to back between one event pair, no sync between calls (per call: span / {calls})",
}
GDLBENCH_METHOD = "CUDA events around each call, calls queued back to back, no sync between calls (median)"


def describe(method: str, calls: int) -> str:
    return METHODS[method].format(calls=calls)


def fill_like_gdlbench(cuda: Any, tensor: Any, dtype: str, seed: int) -> None:
    """Write gdlbench's fill values (seed) into a contiguous-in-memory torch tensor, in memory order:
    a channels-last tensor gets them in NHWC order, as gdlbench's NHWC buffers do. dtype is
    gdlbench's name of the tensor's element type (float32, tf32, float16, bfloat16)."""
    import torch

    torch.cuda.synchronize()  # the tensor's allocation and any earlier writes are done
    cuda.fill(tensor.data_ptr(), tensor.numel(), dtype, seed)
    cuda.synchronize()  # gdlbench's stream is not torch's: its writes are done before torch reads


def time_peer(torch: Any, op: Callable[[], object], *, method: str, calls: int, samples: int,
              warmup: int) -> list[float]:
    """Per-call device time samples (us) of op, timed by `method` (see the module's docstring)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    if calls < 1 or samples < 1 or warmup < 0:
        raise ValueError("calls and samples must be >= 1, warmup >= 0")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
        for _ in range(max(warmup, 1)):
            op()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if method == "graph":
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                op()
        graph.replay()  # one untimed replay: the graph's first launch uploads it
        torch.cuda.synchronize()
        run = graph.replay
    else:
        def run() -> None:
            for _ in range(calls):
                op()
    out = []
    for _ in range(samples):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) * 1000.0 / calls)
    return out
