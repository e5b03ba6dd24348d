"""cuBLAS GEMM through gdlbench against torch.matmul on the same card, the same tensors, shape and
dtype, alternating rounds. Both sides multiply the very same device tensors (gdlbench reads
torch's through their pointers), filled either by gdlbench's generator (`--data fill`: common/fill.h,
k/128 values) or by one seeded torch generator (`--data randn`); tensor-core throughput depends on
the data, so both kinds are measured by default. gdlbench is timed as always (CUDA events around
each call, calls queued back to back); torch as benchmarks/peer_timing.py says (calls queued between
one event pair). Each result is checked against float64 on spread rows, both sides'. Prints
TFLOP/s of each, the ratio of medians and what each side timed; goal: gdlbench >= 0.95 x torch.

  python benchmarks/gemm_vs_torch_gpu.py [--size 8192] [--dtypes float32,tf32,bfloat16] [--data fill,randn] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
from peer_timing import GDLBENCH_METHOD, describe, fill_like_gdlbench, time_peer

import gdlbench
from gdlbench._native import require_cuda
from gdlbench.primitives.gemm import check_rows, compare

TORCH_DTYPE = {"float32": "float32", "tf32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def host_rows(t: Any, rows: np.ndarray | None = None) -> np.ndarray:
    x = t if rows is None else t[rows.tolist()]
    return x.float().cpu().numpy().astype(np.float64)


def measure(torch: Any, cuda: Any, args: argparse.Namespace, dtype: str, tdt: Any, kind: str,
            peer_method: str) -> dict[str, Any]:
    """One dtype and data kind: both sides on the same tensors, alternating rounds, both checked."""
    n, flop = args.size, 2.0 * args.size**3
    a = torch.empty(n, n, device="cuda", dtype=tdt)
    b = torch.empty(n, n, device="cuda", dtype=tdt)
    if kind == "fill":  # gdlbench's values (its gemm fills A with seed, B with seed + 1)
        fill_like_gdlbench(cuda, a, dtype, args.seed)
        fill_like_gdlbench(cuda, b, dtype, args.seed + 1)
    else:
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        a.copy_(torch.randn(n, n, device="cuda", generator=gen))
        b.copy_(torch.randn(n, n, device="cuda", generator=gen))
    c_ours = torch.empty(n, n, device="cuda", dtype=tdt)
    c_torch = torch.empty(n, n, device="cuda", dtype=tdt)
    torch.cuda.synchronize()
    ours: list[float] = []
    theirs: list[float] = []
    for rnd in range(args.rounds):
        for who in (("gdlbench", "torch") if rnd % 2 == 0 else ("torch", "gdlbench")):
            if who == "gdlbench":
                ours += cuda.gemm_time(a=a.data_ptr(), b=b.data_ptr(), c=c_ours.data_ptr(), m=n, n=n, k=n, dtype=dtype,
                                       trans_a=False, trans_b=False, warmup=2, iters=args.iters)
                cuda.synchronize()
            else:
                theirs += time_peer(torch, lambda: torch.matmul(a, b, out=c_torch), method="queued",
                                    calls=args.iters, samples=3, warmup=2)
    check_at = check_rows(n)
    ha, hb, at = host_rows(a, check_at), host_rows(b), np.arange(check_at.size)
    checks = {who: compare(host_rows(c, check_at), ha, hb, at, False, False, dtype)
              for who, c in (("gdlbench", c_ours), ("torch", c_torch))}
    t_ours, t_torch = float(np.median(ours)), float(np.median(theirs))
    row = {"dtype": dtype, "data": kind, "size": n, "gdlbench_us": t_ours, "torch_us": t_torch,
           "gdlbench_tflops": flop / t_ours / 1e6, "torch_tflops": flop / t_torch / 1e6,
           "ratio": t_torch / t_ours, "goal": ">= 0.95", "wrong": checks["gdlbench"]["wrong"],
           "torch_wrong": checks["torch"]["wrong"], "checks": checks,
           "gdlbench_method": GDLBENCH_METHOD, "torch_method": peer_method}
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--dtypes", default="float32,tf32,bfloat16")
    ap.add_argument("--data", default="fill,randn", help="fill (gdlbench's generator), randn (torch's), or both")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    if gdlbench.cuda_status()[0] == 0:
        print(f"gemm_vs_torch_gpu: needs a GPU: {gdlbench.cuda_status()[1]}", file=sys.stderr)
        return 2
    kinds = args.data.split(",")
    if not set(kinds) <= {"fill", "randn"}:
        print(f"gemm_vs_torch_gpu: --data takes fill and/or randn, got {args.data!r}", file=sys.stderr)
        return 2
    import torch

    gdlbench.common.env.resolve_device("cuda")
    cuda = require_cuda()
    n = args.size
    peer_method = describe("queued", args.iters)
    print(f"gdlbench: {GDLBENCH_METHOD}\ntorch:    {peer_method}\nboth on the same tensors, {n}^3", flush=True)
    rows = []
    for dtype in args.dtypes.split(","):
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        tdt = getattr(torch, TORCH_DTYPE[dtype])
        for kind in kinds:
            row = measure(torch, cuda, args, dtype, tdt, kind, peer_method)
            rows.append(row)
            print(f"{dtype:9s} {kind:5s} {n}^3: gdlbench {row['gdlbench_tflops']:7.1f} TFLOP/s  torch "
                  f"{row['torch_tflops']:7.1f} TFLOP/s  ratio {row['ratio']:.3f} (goal >= 0.95)  #wrong gdlbench "
                  f"{row['wrong']} torch {row['torch_wrong']}", flush=True)
            torch.cuda.empty_cache()
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "env": gdlbench.common.env.collect(),
            "gdlbench_method": GDLBENCH_METHOD, "torch_method": peer_method, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    return 0 if all(r["wrong"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
