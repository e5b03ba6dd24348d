"""The ResNet-50 skeleton's forward + backward on the GPU against a PyTorch training step on the
same card: same batch (64), fp32 with TF32 off on both sides (gdlbench's CUDA layers are strict
fp32), convolution algorithms searched per shape on both sides (gdlbench's executor when it builds
the net, torch's cudnn.benchmark), torch in channels-last (the issue's setting) and in NCHW (gdlbench's
layout), on the same input batch and labels. Goal: gdlbench <= 1.05 x torch.

  python benchmarks/iteration_vs_torch_gpu.py [--batch 64] [--iters 10] [--json FILE]

gdlbench's figure is the sum of its per-layer forward and backward medians (CUDA events) and,
beside it, its composed serial iteration (one rank: forward + backward + update). torch's is the
per-step time of forward + loss + backward (no optimizer step), --iters steps queued back to back
between one pair of CUDA events, no synchronisation between steps (benchmarks/peer_timing.py). The torch model
is torchvision's resnet50 when importable, else the same layout defined below.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from peer_timing import describe, fill_like_gdlbench, time_peer

import gdlbench


def torch_resnet50(torch):
    try:
        import torchvision

        return torchvision.models.resnet50()
    except ImportError:
        pass
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.c1, self.b1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
            self.c2, self.b2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
            self.c3, self.b3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x):
            r = self.down(x) if self.down is not None else x
            y = torch.relu(self.b1(self.c1(x)))
            y = torch.relu(self.b2(self.c2(y)))
            return torch.relu(self.b3(self.c3(y)) + r)

    layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def torch_step_samples(torch, cuda, batch: int, channels_last: bool, warmup: int, iters: int) -> list[float]:
    """Forward + loss + backward of torch's ResNet-50 on gdlbench's input batch (fill seed 3, NCHW
    values: cuda/net.cu) and labels (common/fill.h test_labels); steps queued back to back between
    one event pair, no synchronisation between them (benchmarks/peer_timing.py)."""
    model = torch_resnet50(torch).cuda()
    x = torch.empty(batch, 3, 224, 224, device="cuda")
    fill_like_gdlbench(cuda, x, "float32", 3)
    y = torch.tensor([(i * 7919) % 1000 for i in range(batch)], device="cuda")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        model.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()

    return time_peer(torch, step, method="queued", calls=iters, samples=3, warmup=warmup)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    if gdlbench.cuda_status()[0] == 0:
        print(f"iteration_vs_torch_gpu: needs a GPU: {gdlbench.cuda_status()[1]}", file=sys.stderr)
        return 2
    import torch

    from gdlbench._native import require_cuda
    from gdlbench.composed.iteration import Iteration

    gdlbench.common.env.resolve_device("cuda")
    cuda = require_cuda()
    peer_method = describe("queued", args.iters)
    print("gdlbench: per layer, CUDA events around each call, calls queued back to back (medians summed)\n"
          f"torch:    forward + loss + backward, {peer_method}\nthe same input batch and labels", flush=True)

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    r = Iteration("resnet50", batch=args.batch, device="cuda", strategy="serial", iters=args.iters, warmup=2,
                  io=False).measure()
    ours = r.phases["forward"].median + r.phases["backward"].median
    composed = r.runs[0].composed.median
    rows = {"gdlbench_fwd_bwd_us": ours, "gdlbench_composed_serial_us": composed,
            "gdlbench_conv_algorithms": r.conv_algorithms}
    print(f"gdlbench convolution algorithms: {r.conv_algorithms}; torch: cudnn.benchmark", flush=True)
    for name, cl in (("torch_channels_last_us", True), ("torch_nchw_us", False)):
        rows[name] = float(np.median(torch_step_samples(torch, cuda, args.batch, cl, 5, args.iters)))
    for name in ("torch_channels_last_us", "torch_nchw_us"):
        print(f"ResNet-50 batch {args.batch} fp32: gdlbench fwd+bwd {ours / 1e3:.2f} ms, {name[:-3]} "
              f"{rows[name] / 1e3:.2f} ms, ratio {ours / rows[name]:.3f} (goal <= 1.05)")
    print(f"gdlbench composed serial iteration (with update): {composed / 1e3:.2f} ms")
    print("slowest layers:", ", ".join(f"{t['layer']} {t['share_pct']:.1f}%" for t in r.top_layers(8)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": args.batch,
                       "goal": "<= 1.05", "torch_method": peer_method,
                       **rows, "top_layers": r.top_layers(20), "env": gdlbench.common.env.collect()}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
