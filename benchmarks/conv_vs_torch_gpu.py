"""gdlbench's cuDNN convolution (exhaustive search) against PyTorch's with cudnn.benchmark on, on
the ResNet-50 layers, same layout and dtype, one process, runs alternating. GPU machines only.

Ratio = torch time / gdlbench time per pass (goal: >= 0.95 with --algo search). Both sides compute
on the same values: torch's tensors are filled by gdlbench's generator with the seeds of gdlbench's
own buffers (_cuda.CONV_SEEDS), in the same dtype and memory order (channels-last = NHWC). gdlbench
is timed as always (CUDA events around each call, calls queued back to back); torch calls the
aten op of each pass alone (conv2d; convolution_backward with only dx or only dw asked for, not
autograd), captured --iters times in a CUDA graph after its warm-up (which runs cudnn.benchmark's
search), one event pair per replay (benchmarks/peer_timing.py): Python's dispatch, which took
longer than many of these kernels, is in neither figure.

    python benchmarks/conv_vs_torch_gpu.py [--dtype bfloat16|float32|float16|tf32] [--layout nhwc|nchw]
        [--batch 64] [--iters 20] [--rounds 3] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys

from peer_timing import GDLBENCH_METHOD, describe, fill_like_gdlbench, time_peer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "tf32", "float16", "bfloat16"])
    ap.add_argument("--layout", default="nhwc", choices=["nchw", "nhwc"])
    ap.add_argument("--algo", default="search")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", default="fwd,bwd-data,bwd-filter")
    ap.add_argument("--layers", default="", help="comma-separated names (default: every ResNet-50 conv layer)")
    ap.add_argument("--json")
    args = ap.parse_args()

    import numpy as np

    import gdlbench
    from gdlbench._native import require_cuda
    from gdlbench.primitives import conv_layers
    from gdlbench.primitives.conv import ConvShape, conv

    count, why = gdlbench.cuda_status()
    if count == 0:
        print(f"conv_vs_torch_gpu: needs a GPU and gdlbench's CUDA backend: {why}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("conv_vs_torch_gpu: needs PyTorch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("conv_vs_torch_gpu: torch sees no GPU (a CPU-only wheel?)", file=sys.stderr)
        return 2

    torch.backends.cudnn.benchmark = True
    tf32 = args.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    tdtype = {"float32": torch.float32, "tf32": torch.float32, "float16": torch.float16,
              "bfloat16": torch.bfloat16}[args.dtype]
    fmt = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    passes = args.passes.split(",")
    layers = conv_layers.of_net("resnet50")
    if args.layers:
        wanted = {n if "/" in n else f"resnet50/{n}" for n in args.layers.split(",")}
        layers = [lay for lay in layers if lay.name in wanted]
    print(f"gdlbench {gdlbench.__version__} vs torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}) "
          f"on {torch.cuda.get_device_name()}; {args.dtype}, {args.layout}, batch {args.batch}, gdlbench --algo "
          f"{args.algo}, torch cudnn.benchmark=True; {args.rounds} rounds x {args.iters} iterations", flush=True)
    gdlbench.common.env.resolve_device("cuda")
    peer_method = describe("graph", args.iters)
    print(f"gdlbench: {GDLBENCH_METHOD}\ntorch:    aten conv2d / convolution_backward (one gradient each), "
          f"{peer_method}\nboth on gdlbench's fill values (same dtype and memory order)", flush=True)

    cuda = require_cuda()
    seeds = cuda.CONV_SEEDS

    def tensor(shape: tuple[int, ...], seed: int):
        t = torch.empty(*shape, device="cuda", dtype=tdtype).to(memory_format=fmt)
        fill_like_gdlbench(cuda, t, args.dtype, seed)  # gdlbench's values, in its memory order
        return t

    def torch_op(sh: ConvShape, pass_: str):
        x = tensor((sh.n, sh.c, sh.h, sh.w), seeds["x"])
        w = tensor((sh.k, sh.c // sh.groups, sh.r, sh.s), seeds["w"])
        kw = dict(stride=sh.stride, padding=sh.pad, groups=sh.groups)
        if pass_ == "fwd":
            def op():
                with torch.no_grad():
                    torch.nn.functional.conv2d(x, w, **kw)
            return op
        dy = tensor((sh.n, sh.k, sh.p, sh.q), seeds["dy"])
        mask = [pass_ == "bwd-data", pass_ == "bwd-filter", False]

        def back():
            torch.ops.aten.convolution_backward(dy, x, w, None, list(sh.stride), list(sh.pad), [1, 1], False,
                                                [0, 0], sh.groups, mask)
        return back

    def time_torch(op) -> list[float]:
        return time_peer(torch, op, method="graph", calls=args.iters, samples=3, warmup=args.warmup)

    samples: dict[tuple[str, str, str], list[float]] = {}
    algos: dict[tuple[str, str], str] = {}
    failed = False
    for rnd in range(args.rounds):
        for lay in layers:
            sh = lay.shape.with_batch(args.batch)
            for pass_ in passes:
                top = torch_op(sh, pass_)
                for who in (("gdlbench", "torch") if rnd % 2 == 0 else ("torch", "gdlbench")):
                    if who == "torch":
                        got = time_torch(top)
                    else:
                        (r,) = conv(sh.n, sh.c, sh.h, sh.w, sh.k, sh.r, sh.s, sh.stride, sh.pad, 1, sh.groups, pass_,
                                    "cuda", args.dtype, args.layout, args.algo, iters=args.iters,
                                    warmup=args.warmup, check=rnd == 0)
                        algos[(lay.name, pass_)] = f"{r.algo} ({r.workspace_bytes >> 20} MiB)"
                        if not r.passed:
                            print(f"{lay.name} {pass_}: CHECK FAILED {r.check}", flush=True)
                            failed = True
                        got = list(r.measurement.samples_us)
                    samples.setdefault((lay.name, pass_, who), []).extend(got)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    med = {k: float(np.median(v)) for k, v in samples.items()}
    print(f"\n{'layer':<28}{'count':>6}{'pass':>12}{'gdl (us)':>10}{'torch (us)':>11}{'ratio':>7}  gdlbench algo")
    overall = {}
    for pass_ in passes:
        tg = tt = 0.0
        for lay in layers:
            g, t = med[(lay.name, pass_, "gdlbench")], med[(lay.name, pass_, "torch")]
            tg += lay.count * g
            tt += lay.count * t
            print(f"{lay.name:<28}{lay.count:>6}{pass_:>12}{g:>10.1f}{t:>11.1f}{t / g:>7.2f}  {algos[(lay.name, pass_)]}")
        overall[pass_] = tt / tg
    print()
    for pass_, r in overall.items():
        print(f"overall {pass_:<11} ratio (torch/gdlbench time, weighted by count) {r:.3f}"
              f"  goal >= 0.95: {'met' if r >= 0.95 else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "gdlbench_method": GDLBENCH_METHOD, "torch_method": peer_method,
                       "goal": ">= 0.95", "medians_us": {"|".join(k): v for k, v in med.items()},
                       "algos": {"|".join(k): v for k, v in algos.items()}, "overall": overall}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
