"""Copies and the SGD update through gdlbench against PyTorch on the same card, alternating rounds,
both timed with CUDA events:
  - host<->device and device-to-device copies (gdlbench copy, nvbandwidth's method) against
    tensor.copy_(..., non_blocking=True) between the same kinds of buffers (pinned host, device);
  - the SGD update (gdlbench update: 20 bytes per fp32 parameter) against torch.optim.SGD.step() on
    one flat parameter of the same size, the same starting values and hyper-parameters, steps queued
    back to back with no synchronisation between them (benchmarks/peer_timing.py; the earlier
    version synchronised every step), and against the device-to-device copy of the same traffic
    measured in the same run.
Prints GB/s of each and the ratios.

  python benchmarks/copy_update_vs_torch_gpu.py [--size 1GB] [--params 25.6M] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from peer_timing import GDLBENCH_METHOD, describe, fill_like_gdlbench, time_peer

import gdlbench
from gdlbench._native import require_cuda
from gdlbench.common.units import parse_count, parse_size
from gdlbench.primitives.copy import copy as gdl_copy
from gdlbench.primitives.update import BYTES_PER_PARAM
from gdlbench.primitives.update import update as gdl_update

LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4  # both sides


def torch_copy_samples(torch, direction: str, nbytes: int, copies: int, iters: int) -> list[float]:
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dev2 = torch.empty(nbytes, dtype=torch.uint8, device="cuda") if direction == "d2d" else None
    host.fill_(1), dev.fill_(2)
    dst, src = {"h2d": (dev, host), "d2h": (host, dev), "d2d": (dev2, dev)}[direction]
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(copies):
            dst.copy_(src, non_blocking=True)
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000.0)
    return out


def torch_sgd_samples(torch, cuda, n: int, calls: int) -> tuple[list[float], str]:
    """torch.optim.SGD.step() on one flat parameter of n, the update's hyper-parameters and starting
    values gdlbench's (w seed 1, g seed 2: cuda/sgd.cu); steps queued back to back, no sync between."""
    p = torch.empty(n, device="cuda", requires_grad=True)
    p.grad = torch.empty(n, device="cuda")
    fill_like_gdlbench(cuda, p.data, "float32", 1)
    fill_like_gdlbench(cuda, p.grad, "float32", 2)
    kind = "fused"
    hyper = dict(lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    try:
        opt = torch.optim.SGD([p], **hyper, fused=True)
    except (TypeError, RuntimeError):
        opt, kind = torch.optim.SGD([p], **hyper, foreach=True), "foreach"
    return time_peer(torch, opt.step, method="queued", calls=calls, samples=3, warmup=3), kind


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1GB")
    ap.add_argument("--params", default="25.6M")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    if gdlbench.cuda_status()[0] == 0:
        print(f"copy_update_vs_torch_gpu: needs a GPU: {gdlbench.cuda_status()[1]}", file=sys.stderr)
        return 2
    import torch

    gdlbench.common.env.resolve_device("cuda")
    cuda = require_cuda()
    print(f"gdlbench: copies {args.copies} per event pair; update {GDLBENCH_METHOD}\n"
          f"torch:    copies {args.copies} per event pair (copy_, non_blocking); SGD.step() "
          f"{describe('queued', args.iters * 4)}\nthe update: the same starting values and hyper-parameters",
          flush=True)
    size, n = parse_size(args.size), parse_count(args.params)
    rows, failed = [], False
    for direction in ("h2d", "d2h", "d2d"):
        ours, theirs, wrong = [], [], 0
        for _ in range(args.rounds):
            r = gdl_copy(size, direction, "pinned", "cuda", copies=args.copies, iters=args.iters, warmup=1)
            wrong += r.wrong
            ours += list(r.measurement.samples_us)
            theirs += torch_copy_samples(torch, direction, size, args.copies, args.iters)  # already copies per event pair
        g = args.copies * size / (np.median(ours) * 1e-6) / 1e9
        t = args.copies * size / (np.median(theirs) * 1e-6) / 1e9
        rows.append({"op": f"copy {direction} pinned", "size_bytes": size, "gdlbench_gbs": g, "torch_gbs": t,
                     "ratio": g / t, "wrong": wrong})
        failed |= wrong > 0
    ours_u, ours_c, theirs_u, kind = [], [], [], ""
    for _ in range(args.rounds):
        r = gdl_update(n, "cuda", lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, iters=args.iters * 4,
                       warmup=2, check=not ours_u)
        failed |= not r.passed
        ours_u += list(r.update.samples_us)
        ours_c += list(r.copy.samples_us)
        s, kind = torch_sgd_samples(torch, cuda, n, args.iters * 4)
        theirs_u += s
    moved = BYTES_PER_PARAM * n
    g = moved / (np.median(ours_u) * 1e-6) / 1e9
    c = moved / (np.median(ours_c) * 1e-6) / 1e9  # the d2d copy of 10n bytes: 10n read + 10n written
    t = moved / (np.median(theirs_u) * 1e-6) / 1e9
    rows.append({"op": "sgd update", "params": n, "gdlbench_gbs": g, "torch_gbs": t, "ratio": g / t,
                 "d2d_copy_gbs": c, "vs_copy": g / c, "torch_sgd": kind, "gdlbench_method": GDLBENCH_METHOD,
                 "torch_method": describe("queued", args.iters * 4)})
    for row in rows:
        extra = f"  vs d2d copy {row['vs_copy']:.3f} (copy {row['d2d_copy_gbs']:.1f} GB/s)" if "vs_copy" in row else ""
        print(f"{row['op']:18s} gdlbench {row['gdlbench_gbs']:8.2f} GB/s  torch {row['torch_gbs']:8.2f} GB/s  "
              f"ratio {row['ratio']:.3f}{extra}  #wrong {row.get('wrong', 0)}")
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "env": gdlbench.common.env.collect(),
            "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
