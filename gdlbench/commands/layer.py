"""gdlbench layer: forward and backward time of one non-convolution layer (built-in or a spec)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import env
from ..cli import common_options, outputs
from ..compare import Compare
from ..errors import UsageError
from ..layers import BUILTIN, PASSES, layer, resolve


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layer", help=f"built-in layers, comma-separated, or 'all': {', '.join(BUILTIN)}")
    p.add_argument("--spec", help="a layer spec as JSON (type, in_shapes, out_shape, attrs, param_shapes)")
    p.add_argument("-b", "--batch", type=int, default=32, help="batch size (default 32)")
    p.add_argument("--pass", dest="passes", default="fwd,bwd", help=f"comma-separated: {', '.join(PASSES)} (default fwd,bwd)")
    common_options(p)


def run(args: argparse.Namespace) -> int:
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
    resolve(which)  # bad names fail before any file is checked
    if args.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {args.batch}")
    files = outputs(args)
    device, why = env.resolve_device(args.device)
    results = layer(which, args.batch, device, args.passes, iters=args.iters, warmup=args.warmup,
                    threads=args.threads)
    clock = results[0].measurement.clock
    threads = f", {results[0].threads} threads" if results[0].threads else ""
    caption = (f"device {device} ({why}){threads}; clock {clock}; median of {args.iters} after {args.warmup} warm-up; "
               "bwd = bwd-filter + bwd-data; input GB/s = input activation bytes / time")
    Compare(results, title=f"gdlbench layer (batch {args.batch}, fp32)", caption=caption,
            args=vars(args) | {"device": device}).emit(files)
    return 0
