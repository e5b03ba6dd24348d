"""gdlbench's CPU convolution (im2col + OpenBLAS) against PyTorch's (oneDNN) on the 3x3 and 1x1
layers of ResNet-50, forward, backward-data and backward-filter, same thread count, one process.

Calls alternate one by one (gdlbench, torch, torch, gdlbench, ...) so that the machine's slow and
fast phases hit both alike; each figure is the median of every sample of every round.
Ratio = torch time / gdlbench time, i.e. gdlbench's speed as a fraction of torch's (goal for fwd:
>= 0.5). The overall ratio weighs each layer by how often it occurs in ResNet-50 (total conv time).

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (set on some machines) make OpenBLAS run older
kernels; oneDNN ignores them. The script re-executes itself without both unless --keep-env.

    python benchmarks/conv_vs_torch.py [--batch 8] [--threads 2] [--iters 5] [--rounds 3] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from peer_timing import time_host  # the peer on the host clock, as gdlbench's steady_clock

_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _reexec_without_blas_vars(argv: list[str]) -> None:
    if "--keep-env" in argv or not any(v in os.environ for v in _BLAS_VARS):
        return
    env = {k: v for k, v in os.environ.items() if k not in _BLAS_VARS}
    print(f"unsetting {', '.join(v + '=' + os.environ[v] for v in _BLAS_VARS if v in os.environ)} and re-running",
          file=sys.stderr, flush=True)
    os.execve(sys.executable, [sys.executable, *argv], env)


def main() -> int:
    _reexec_without_blas_vars(sys.argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: usable cores)")
    ap.add_argument("--iters", type=int, default=5, help="timed runs per pass per round")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", default="fwd,bwd-data,bwd-filter")
    ap.add_argument("--layers", default="", help="comma-separated names (default: every 3x3 and 1x1 layer)")
    ap.add_argument("--json", help="write every sample here")
    ap.add_argument("--keep-env", action="store_true", help="keep OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE")
    args = ap.parse_args()

    import numpy as np
    import torch

    import gdlbench
    from gdlbench import _core
    from gdlbench.primitives import conv_layers
    from gdlbench.primitives.conv import ConvShape, check_cpu

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    _core.set_blas_threads(threads)
    _core.set_compute_threads(threads)
    passes = args.passes.split(",")
    layers = [lay for lay in conv_layers.of_net("resnet50") if lay.shape.r in (1, 3)]
    if args.layers:
        wanted = {n if "/" in n else f"resnet50/{n}" for n in args.layers.split(",")}
        layers = [lay for lay in layers if lay.name in wanted]

    blas_vars = ", ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in _BLAS_VARS)
    print(f"gdlbench {gdlbench.__version__}: OpenBLAS core {_core.blas_corename()} "
          f"({blas_vars}); "
          f"torch {torch.__version__}, oneDNN {torch.backends.mkldnn.is_available()}; threads {threads} both; "
          f"batch {args.batch}; {args.rounds} rounds x {args.iters} iterations, medians", flush=True)

    shapes = {lay.name: lay.shape.with_batch(args.batch) for lay in layers}
    # Correctness first, untimed, small batch (every pass against float64).
    for name, sh in shapes.items():
        chk = check_cpu(sh.with_batch(1))
        if not chk["passed"]:
            print(f"{name}: CHECK FAILED {chk}", flush=True)
            return 1

    def torch_op(sh: ConvShape, pass_: str):
        x = torch.randn(sh.n, sh.c, sh.h, sh.w, requires_grad=pass_ == "bwd-data")
        w = torch.randn(sh.k, sh.c // sh.groups, sh.r, sh.s, requires_grad=pass_ == "bwd-filter")
        kw = dict(stride=sh.stride, padding=sh.pad, groups=sh.groups)
        if pass_ == "fwd":
            def op():
                with torch.no_grad():
                    torch.nn.functional.conv2d(x, w, **kw)
            return op
        y = torch.nn.functional.conv2d(x, w, **kw)
        dy = torch.randn_like(y)
        target = x if pass_ == "bwd-data" else w
        return lambda: torch.autograd.grad(y, target, dy, retain_graph=True)

    # Paired samples: within a round, one gdlbench call and one torch call alternate (the order
    # flips each time), so a slow phase of the machine lands on both alike.
    samples: dict[tuple[str, str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for name, sh in shapes.items():
            bench = _core.LayerBench(sh.spec(name), sh.n)
            for pass_ in passes:
                top = torch_op(sh, pass_)
                bench.time(pass_, args.warmup, 1)
                time_host(top, args.warmup, 1)
                for i in range(args.iters):
                    order = ("gdlbench", "torch") if (i + rnd) % 2 == 0 else ("torch", "gdlbench")
                    for who in order:
                        got = bench.time(pass_, 0, 1) if who == "gdlbench" else time_host(top, 0, 1)
                        samples.setdefault((name, pass_, who), []).extend(got)
        print(f"round {rnd + 1}/{args.rounds} done (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)

    med = {key: float(np.median(v)) for key, v in samples.items()}
    mins = {key: float(np.min(v)) for key, v in samples.items()}
    print(f"\n{'layer':<28}{'count':>6}{'pass':>12}{'gdl (us)':>12}{'torch (us)':>12}{'gdl GF/s':>10}"
          f"{'torch GF/s':>11}{'ratio':>8}")
    overall = {}
    for pass_ in passes:
        tot_g = tot_t = 0.0
        logs = []
        for lay in layers:
            sh = shapes[lay.name]
            g, t = med[(lay.name, pass_, "gdlbench")], med[(lay.name, pass_, "torch")]
            tot_g += lay.count * g
            tot_t += lay.count * t
            logs.append(np.log(t / g))
            print(f"{lay.name:<28}{lay.count:>6}{pass_:>12}{g:>12.0f}{t:>12.0f}{sh.flops / g / 1e3:>10.1f}"
                  f"{sh.flops / t / 1e3:>11.1f}{t / g:>8.2f}")
        min_g = sum(lay.count * mins[(lay.name, pass_, "gdlbench")] for lay in layers)
        min_t = sum(lay.count * mins[(lay.name, pass_, "torch")] for lay in layers)
        overall[pass_] = {"weighted": tot_t / tot_g, "geomean": float(np.exp(np.mean(logs))),
                          "gdl_us": tot_g, "torch_us": tot_t, "weighted_min": min_t / min_g}
    print()
    for pass_, o in overall.items():
        print(f"overall {pass_:<11} ratio (torch/gdlbench time) weighted by count {o['weighted']:.2f}, "
              f"geometric mean {o['geomean']:.2f}  (ResNet-50 conv time at batch {args.batch}: "
              f"gdlbench {o['gdl_us'] / 1e3:.0f} ms, torch {o['torch_us'] / 1e3:.0f} ms); from the fastest "
              f"samples instead: {o['weighted_min']:.2f}")
    if "fwd" in overall:
        r = overall["fwd"]["weighted"]
        print(f"forward goal >= 0.5x torch: {'met' if r >= 0.5 else 'NOT met'} ({r:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "blas_core": _core.blas_corename(), "threads": threads,
                       "medians_us": {"|".join(k): v for k, v in med.items()},
                       "min_us": {"|".join(k): v for k, v in mins.items()},
                       "samples_us": {"|".join(k): v for k, v in samples.items()}, "overall": overall}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
