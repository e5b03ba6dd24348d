"""The ResNet-50 skeleton's forward + backward on the GPU against a PyTorch training step on the
same card: same batch (64), fp32 with TF32 off on both sides (gdlbench's CUDA layers are strict
fp32), cudnn.benchmark on, torch in channels-last (the issue's setting) and in NCHW (gdlbench's
layout). Goal: gdlbench <= 1.15 x torch.

  python benchmarks/iteration_vs_torch_gpu.py [--batch 64] [--iters 10] [--json FILE]

gdlbench's figure is the sum of its per-layer forward and backward medians (CUDA events) and,
beside it, its composed serial iteration (one rank: forward + backward + update). torch's is the
median of CUDA-event samples around forward + loss + backward (no optimizer step). The torch model
is torchvision's resnet50 when importable, else the same layout defined below.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

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


def torch_step_samples(torch, batch: int, channels_last: bool, warmup: int, iters: int) -> list[float]:
    model = torch_resnet50(torch).cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        model.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000.0)
    return out


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

    from gdlbench.iteration import Iteration

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    r = Iteration("resnet50", batch=args.batch, device="cuda", strategy="serial", iters=args.iters, warmup=2,
                  io=False).measure()
    ours = r.phases["forward"].median + r.phases["backward"].median
    composed = r.runs[0].composed.median
    rows = {"gdlbench_fwd_bwd_us": ours, "gdlbench_composed_serial_us": composed}
    for name, cl in (("torch_channels_last_us", True), ("torch_nchw_us", False)):
        rows[name] = float(np.median(torch_step_samples(torch, args.batch, cl, 5, args.iters)))
    for name in ("torch_channels_last_us", "torch_nchw_us"):
        print(f"ResNet-50 batch {args.batch} fp32: gdlbench fwd+bwd {ours / 1e3:.2f} ms, {name[:-3]} "
              f"{rows[name] / 1e3:.2f} ms, ratio {ours / rows[name]:.3f} (goal <= 1.15)")
    print(f"gdlbench composed serial iteration (with update): {composed / 1e3:.2f} ms")
    print("slowest layers:", ", ".join(f"{t['layer']} {t['share_pct']:.1f}%" for t in r.top_layers(8)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": args.batch,
                       **rows, "top_layers": r.top_layers(20), "env": gdlbench.env.collect()}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
