"""gdlbench layer: forward and backward time of one non-convolution layer (built-in or a spec)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ...common import env
from ...common.compare import Compare
from ...common.errors import UsageError
from ...primitives.layers import BUILTIN, PASSES, LayerRequest, layer
from .. import common_options, outputs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layer", help=f"built-in layers, comma-separated, or 'all': {', '.join(BUILTIN)}")
    p.add_argument("--spec", help="a layer spec as JSON (type, in_shapes, out_shape, attrs, param_shapes)")
    p.add_argument("-b", "--batch", type=int, default=32, help="batch size (default 32)")
    p.add_argument("--pass", dest="passes", default="fwd,bwd", help=f"comma-separated: {', '.join(PASSES)} (default fwd,bwd)")
    common_options(p)


def request_from_args(args: argparse.Namespace) -> LayerRequest:
    """What the arguments ask, checked once (to_argv() gives it back)."""
    if bool(args.layer) == bool(args.spec):
        raise UsageError("give --layer NAME or --spec JSON (one of them)")
    which: str | dict[str, Any] = args.layer
    if args.spec:
        try:
            which = json.loads(args.spec)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--spec: not JSON: {exc.msg}") from None
        if not isinstance(which, dict) or "type" not in which:
            raise UsageError("--spec: expected a JSON object with a 'type'")
    return LayerRequest(which, args.batch, args.device, args.passes, args.iters, args.warmup, args.threads)


def run(args: argparse.Namespace) -> int:
    request = request_from_args(args)  # bad names fail before any file is checked
    files = outputs(args)
    device, why = env.resolve_device(args.device)
    results = layer(request)
    clock = results[0].measurement.clock
    threads = f", {results[0].threads} threads" if results[0].threads else ""
    caption = (f"device {device} ({why}){threads}; clock {clock}; median of {args.iters} after {args.warmup} warm-up; "
               "bwd = bwd-filter + bwd-data; input GB/s = input activation bytes / time")
    Compare(results, title=f"gdlbench layer (batch {args.batch}, fp32)", caption=caption,
            args=vars(args) | {"device": device}).emit(files)
    return 0
