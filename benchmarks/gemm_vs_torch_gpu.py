"""cuBLAS GEMM through gdlbench against torch.matmul on the same card, same shape and dtype,
alternating rounds, both timed with CUDA events (one event pair per matmul). Prints TFLOP/s of
each and the ratio of medians; the goal is gdlbench >= 0.95 x torch.

  python benchmarks/gemm_vs_torch_gpu.py [--size 8192] [--dtypes float32,tf32,bfloat16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

import gdlbench


def torch_samples(torch, n: int, dtype: str, warmup: int, iters: int) -> list[float]:
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    tdt = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    a = torch.randn(n, n, device="cuda", dtype=tdt)
    b = torch.randn(n, n, device="cuda", dtype=tdt)
    c = torch.empty(n, n, device="cuda", dtype=tdt)
    for _ in range(warmup):
        torch.matmul(a, b, out=c)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, stop in events:
        start.record()
        torch.matmul(a, b, out=c)
        stop.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(stop) * 1000.0 for start, stop in events]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--dtypes", default="float32,tf32,bfloat16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    if gdlbench.cuda_status()[0] == 0:
        print(f"gemm_vs_torch_gpu: needs a GPU: {gdlbench.cuda_status()[1]}", file=sys.stderr)
        return 2
    import torch

    n, flop = args.size, 2.0 * args.size**3
    rows = []
    for dtype in args.dtypes.split(","):
        ours, theirs, wrong = [], [], 0
        for _ in range(args.rounds):
            r = gdlbench.gemm(n, n, n, dtype, "cuda", iters=args.iters, warmup=2, check=not ours)
            wrong += r.check["wrong"] if r.check else 0
            ours += r.measurement.samples_us
            theirs += torch_samples(torch, n, dtype, 2, args.iters)
        t_ours, t_torch = float(np.median(ours)), float(np.median(theirs))
        row = {"dtype": dtype, "size": n, "gdlbench_us": t_ours, "torch_us": t_torch,
               "gdlbench_tflops": flop / t_ours / 1e6, "torch_tflops": flop / t_torch / 1e6,
               "ratio": t_torch / t_ours, "wrong": wrong}
        rows.append(row)
        print(f"{dtype:9s} {n}^3: gdlbench {row['gdlbench_tflops']:7.1f} TFLOP/s  torch {row['torch_tflops']:7.1f} "
              f"TFLOP/s  ratio {row['ratio']:.3f} (goal >= 0.95)  #wrong {wrong}")
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "env": gdlbench.env.collect(),
            "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    return 0 if all(r["wrong"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
