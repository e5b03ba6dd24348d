"""gdlbench conv: TFLOP/s of 2-D convolution, forward, backward-data and backward-filter, for one
shape or the real layers of AlexNet, GoogLeNet and ResNet-50 (gdlbench/conv_layers.py).

Options follow DeepBench's names: -n -c -h -w -k -r -s. -h is the input height here, so help is
--help only; -H and -W are accepted as well."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .. import conv_layers, env
from ..cli import common_options
from ..compare import Compare
from ..conv import CPU_DTYPES, CUDA_DTYPES, ConvShape, conv
from ..errors import CheckFailed, UsageError
from ..report import Column, OutputFile, Progress, fmt_float
from ..units import format_bytes, parse_size


def _hw(v: Sequence[int]) -> str:
    return f"{v[0]}x{v[1]}" if v[0] != v[1] else str(v[0])


COLUMNS = [
    Column("layer", "layer"), Column("count", "count"), Column("N", "n"), Column("C", "c"),
    Column("HxW", "hw"), Column("K", "k"), Column("RxS", "rs"), Column("stride", "stride", _hw),
    Column("pad", "pad", _hw), Column("g", "groups"), Column("pass", "pass"), Column("algo", "algo"),
    Column("workspace", "workspace_bytes", lambda b: format_bytes(b) if b else "0"),
    Column("time (us)", "time_us", fmt_float(1)), Column("min", "time_us_min", fmt_float(1)),
    Column("p95", "time_us_p95", fmt_float(1)), Column("cv", "time_cv", fmt_float(3)),
    Column("TFLOP/s", "tflops", fmt_float(3)), Column("max rel err", "max_rel_error", "{:.1e}"),
    Column("#wrong", "wrong"),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    # -h is the height (DeepBench); "resolve" takes -h from the help action and leaves it --help.
    # The parser was made by cli.py, so switch it (and its optionals group, which copied it) here.
    p.conflict_handler = p._optionals.conflict_handler = "resolve"
    p.add_argument("-n", "--batch", type=int, default=None, help="batch size (default 8)")
    p.add_argument("-c", type=int, help="input channels")
    p.add_argument("-h", "-H", "--height", dest="h", type=int, help="input height")
    p.add_argument("-w", "-W", "--width", dest="w", type=int, help="input width (default: the height)")
    p.add_argument("-k", type=int, help="output channels (filters)")
    p.add_argument("-r", type=int, help="filter height (default 3)")
    p.add_argument("-s", type=int, help="filter width (default: r)")
    p.add_argument("--stride", default="1", help="stride: N or HxW (default 1)")
    p.add_argument("--pad", default="0", help="zero padding: N or HxW (default 0)")
    p.add_argument("--dilation", default="1", help="dilation: N or HxW (default 1)")
    p.add_argument("--groups", type=int, default=1, help="channel groups (default 1)")
    p.add_argument("--bias", action="store_true", help="add a bias (and time its gradient with bwd-filter)")
    p.add_argument("--layer", help="built-in layer(s), comma-separated, e.g. resnet50/conv2_3x3 (see --list)")
    p.add_argument("--net", choices=sorted(conv_layers.NETS), help="every distinct conv layer of a network")
    p.add_argument("--list", action="store_true", help="list the built-in layers (of --net X only, when given) and exit")
    p.add_argument("--pass", dest="pass_", default="all", choices=["fwd", "bwd-data", "bwd-filter", "all"],
                   help="which pass to time (default all)")
    p.add_argument("--dtype", default="float32", help="cpu: float32; cuda: float32, tf32, float16, bfloat16")
    p.add_argument("--layout", default="nchw", choices=["nchw", "nhwc"], help="tensor layout (cuda; cpu: nchw)")
    p.add_argument("--algo", default="heuristic",
                   help="cuda: heuristic (cudnnGet*_v7), search (cudnnFind*Ex), a cuDNN algorithm name, or "
                        "fwd:NAME,bwd-data:NAME,bwd-filter:NAME; cpu: im2col")
    p.add_argument("--workspace-limit", default="1GiB", help="largest cuDNN workspace (default 1GiB)")
    p.add_argument("--all-algos", action="store_true", help="cuda: time every cuDNN algorithm of each pass")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the float64 reference check")
    common_options(p, short_iters=False)  # -n is the batch and -w the width here


def _pair_arg(text: str, what: str) -> tuple[int, int]:
    parts = str(text).lower().split("x")
    try:
        vals = [int(x) for x in parts]
    except ValueError:
        raise UsageError(f"{what}: expected N or HxW, got {text!r}") from None
    if len(vals) == 1:
        vals *= 2
    if len(vals) != 2:
        raise UsageError(f"{what}: expected N or HxW, got {text!r}")
    return vals[0], vals[1]


def shapes_from_args(args: argparse.Namespace) -> list[tuple[str, int, ConvShape]]:
    """(layer name, count, shape) for each row set the arguments ask for."""
    batch = 8 if args.batch is None else args.batch
    if batch <= 0:
        raise UsageError(f"-n: the batch must be a positive integer, got {batch}")
    geometry_given = any(getattr(args, a) is not None for a in ("c", "h", "w", "k", "r", "s")) or \
        (args.stride, args.pad, args.dilation, args.groups) != ("1", "0", "1", 1)
    if (args.layer or args.net) and geometry_given:
        raise UsageError("give a shape (-c -h -w -k -r -s ...) or --layer/--net, not both")
    if args.layer and args.net:
        raise UsageError("give --layer or --net, not both")
    if args.layer or args.net or not geometry_given:
        if args.net:
            layers = conv_layers.NETS[args.net]
        else:
            layers = []
            for name in (args.layer or "resnet50/conv2_3x3").split(","):
                if name not in conv_layers.LAYERS:
                    raise UsageError(f"--layer: unknown layer {name!r} (gdlbench conv --list shows them)")
                layers.append(conv_layers.LAYERS[name])
        return [(lay.name, lay.count, ConvShape(batch, lay.c, lay.h, lay.w, lay.k, lay.r, lay.s, (lay.stride,) * 2,
                                                (lay.pad,) * 2, (1, 1), lay.groups, args.bias)) for lay in layers]
    c, h, k = (64 if v is None else v for v in (args.c, args.h, args.k))
    w = h if args.w is None else args.w
    r = 3 if args.r is None else args.r
    s = r if args.s is None else args.s
    sh = ConvShape(batch, c, h, w, k, r, s, _pair_arg(args.stride, "--stride"), _pair_arg(args.pad, "--pad"),
                   _pair_arg(args.dilation, "--dilation"), args.groups, args.bias)
    sh.validate()
    return [("", 1, sh)]


def _list_layers(only: str | None = None) -> int:
    """The built-in layers: every network's, or only those of `only` (--net)."""
    for net, layers in conv_layers.NETS.items():
        if only is not None and net != only:
            continue
        print(f"{net}: {len(layers)} distinct shapes, {conv_layers.total_count(net)} convolutions")
        for lay in layers:
            print(f"  {lay.name:<36} C={lay.c:<5} H=W={lay.h:<4} K={lay.k:<5} {lay.r}x{lay.s} stride {lay.stride} "
                  f"pad {lay.pad} groups {lay.groups}  x{lay.count}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list_layers(args.net)
    rows_in = shapes_from_args(args)
    for _name, _count, sh in rows_in:
        sh.validate()
    limit = parse_size(args.workspace_limit, "--workspace-limit") if args.workspace_limit not in ("0", 0) else 0
    json_out = OutputFile(args.json, "--json") if args.json else None
    csv_out = OutputFile(args.csv, "--csv") if args.csv else None
    device, why = env.resolve_device(args.device)
    allowed = CPU_DTYPES if device == "cpu" else CUDA_DTYPES
    if args.dtype not in allowed:
        raise UsageError(f"--dtype {args.dtype!r} is not available on {device} ({', '.join(allowed)})")
    if args.all_algos and device == "cpu":
        raise UsageError("--all-algos needs --device cuda: the CPU backend has one algorithm (im2col)")
    is_root = env.rank() == 0
    progress = Progress(len(rows_in), "conv", enabled=is_root)
    results = []
    for name, count, sh in rows_in:
        rs = conv(sh.n, sh.c, sh.h, sh.w, sh.k, sh.r, sh.s, sh.stride, sh.pad, sh.dilation, sh.groups, args.pass_,
                  device, args.dtype, args.layout, args.algo, limit, args.all_algos, bias=sh.bias, iters=args.iters,
                  warmup=args.warmup, threads=args.threads, check=args.check, layer=name, count=count)
        results += rs
        progress.step(f"{rs[0].layer}: " + ", ".join(f"{r.pass_} {r.tflops:.3f}" for r in rs) + " TFLOP/s")
    summary = {}
    if args.net:
        for p in {r.pass_ for r in results}:
            best: dict[str, float] = {}
            for r in results:
                if r.pass_ == p:  # with --all-algos: the fastest algorithm of each layer
                    best[r.layer] = min(best.get(r.layer, float("inf")), r.count * r.measurement.median)
            summary[f"{p}_total_us"] = sum(best.values())
    clock = results[0].measurement.clock
    threads = f", {results[0].threads} threads" if device == "cpu" else ""
    chk = next((r.check for r in results if r.check), None)
    caption = (f"device {device} ({why}){threads}; clock {clock}; median of {args.iters} iterations after "
               f"{args.warmup} warm-up; TFLOP/s = 2·N·K·(C/g)·R·S·P·Q/t"
               + (f"; check: all passes vs float64 direct convolution at batch <= {chk['batch']}, "
                  f"max |out-ref|/ref(|in|) <= {chk['tolerance']:g}" if chk else "")
               + "".join(f"; {k.removesuffix('_total_us')} total {v / 1e3:.2f} ms (layers x count)"
                         for k, v in sorted(summary.items())))
    Compare(results, title=f"gdlbench conv ({args.dtype}, {args.layout if device == 'cuda' else 'nchw'})",
            caption=caption, args=vars(args) | {"device": device, "workspace_limit_bytes": limit},
            summary=summary).emit(json_out, csv_out)
    if not all(r.passed for r in results):
        raise CheckFailed("convolution results differ from the float64 reference beyond the tolerance")
    return 0
