"""gdlbench conv: TFLOP/s of 2-D convolution, forward, backward-data and backward-filter, for one
shape or the distinct conv layers of a network (gdlbench/primitives/conv_layers.py reads them from the net:
a built-in one, or a spec file in gdlbench/nets' format).

Options follow DeepBench's names: -n -c -h -w -k -r -s. -h is the input height here, so help is
--help only; -H and -W are accepted as well."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from ...common import env
from ...common.compare import Compare
from ...common.errors import CheckFailed, UsageError
from ...common.output import run_each
from ...common.units import parse_size
from ...nets.network import net_option
from ...primitives import conv_layers
from ...primitives.conv import ConvRequest, ConvShape, format_hw
from ...primitives.conv import run as run_conv
from .. import common_options, outputs

DEFAULT_LAYER = "resnet50/layer1.0.conv2"  # the 3x3 convolution of ResNet-50's first stage


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
    p.add_argument("--layer", help=f"built-in layer(s), comma-separated, e.g. {DEFAULT_LAYER} (see --list)")
    p.add_argument("--net", type=net_option,
                   help="every distinct conv layer of a network: a built-in net or a .json/.py spec file")
    p.add_argument("--list", action="store_true",
                   help=f"list the conv layers of --net (default: {', '.join(conv_layers.LISTED)}) and exit")
    p.add_argument("--pass", dest="pass_", default="all",
                   help="which passes to time: fwd, bwd-data, bwd-filter, a comma list, or all (default)")
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
    geometry_given = any(getattr(args, a) is not None for a in ("c", "h", "w", "k", "r", "s")) or \
        (args.stride, args.pad, args.dilation, args.groups) != ("1", "0", "1", 1)
    if (args.layer or args.net) and geometry_given:
        raise UsageError("give a shape (-c -h -w -k -r -s ...) or --layer/--net, not both")
    if args.layer and args.net:
        raise UsageError("give --layer or --net, not both")
    if args.layer or args.net or not geometry_given:
        layers = (conv_layers.of_net(args.net) if args.net else
                  [conv_layers.find(name) for name in (args.layer or DEFAULT_LAYER).split(",")])
        # the net's own bias, or --bias for every layer
        return [(lay.name, lay.count, replace(lay.shape, n=batch, bias=lay.shape.bias or args.bias))
                for lay in layers]
    c, h, k = (64 if v is None else v for v in (args.c, args.h, args.k))
    w = h if args.w is None else args.w
    r = 3 if args.r is None else args.r
    s = r if args.s is None else args.s
    sh = ConvShape(batch, c, h, w, k, r, s, _pair_arg(args.stride, "--stride"), _pair_arg(args.pad, "--pad"),
                   _pair_arg(args.dilation, "--dilation"), args.groups, args.bias)
    return [("", 1, sh)]


def requests_from_args(args: argparse.Namespace) -> list[ConvRequest]:
    """One request per convolution the arguments ask for, each checked once (to_argv() gives its
    geometry back; layer and count label its rows)."""
    limit = 0 if str(args.workspace_limit) == "0" else parse_size(args.workspace_limit, "--workspace-limit")
    return [ConvRequest(sh, args.pass_, args.device, args.dtype, args.layout, args.algo, limit, args.all_algos,
                        args.iters, args.warmup, args.threads, args.check, name, count)
            for name, count, sh in shapes_from_args(args)]


def _list_layers(nets: Sequence[str]) -> int:
    for net in nets:
        layers = conv_layers.of_net(net)
        print(f"{layers[0].net}: {len(layers)} distinct shapes, {sum(lay.count for lay in layers)} convolutions")
        for lay in layers:
            sh = lay.shape
            print(f"  {lay.name:<36} C={sh.c:<5} HxW={format_hw((sh.h, sh.w)):<7} K={sh.k:<5} {sh.r}x{sh.s} "
                  f"stride {format_hw(sh.stride)} pad {format_hw(sh.pad)} groups {sh.groups}  x{lay.count}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        if args.layer:
            raise UsageError("--list lists a net's layers: give --net NET or nothing, not --layer")
        return _list_layers([args.net] if args.net else conv_layers.LISTED)
    requests = requests_from_args(args)
    files = outputs(args)
    device, why = env.resolve_device(args.device)
    for req in requests:  # before the first row is timed
        req.check_on(device)
    is_root = env.rank() == 0
    per_request = run_each(requests, "conv", run_conv, lambda q, rs: f"{rs[0].layer}: " + ", ".join(
        f"{r.pass_} {r.tflops:.3f}" for r in rs) + " TFLOP/s", is_root)
    results = [r for rs in per_request for r in rs]
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
            caption=caption, args=vars(args) | {"device": device, "workspace_limit_bytes": requests[0].workspace_limit},
            summary=summary).emit(files)
    if not all(r.passed for r in results):
        raise CheckFailed("convolution results differ from the float64 reference beyond the tolerance")
    return 0
