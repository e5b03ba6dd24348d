"""gdlbench update: SGD with momentum over a flat fp32 buffer, GB/s against a copy of the same
traffic measured in the same run."""

from __future__ import annotations

import argparse

from ...common import env
from ...common.compare import Compare
from ...common.errors import CheckFailed
from ...common.units import parse_count
from ...primitives.update import UpdateRequest, update
from .. import common_options, outputs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default="25.6M", help="parameters (fp32): 25.6M (ResNet-50), 61M, 1000 ... (default 25.6M)")
    p.add_argument("--lr", type=float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--momentum", type=float, default=0.9, help="momentum (default 0.9)")
    p.add_argument("--weight-decay", type=float, default=5e-4, help="weight decay (default 5e-4)")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the numpy check")
    common_options(p)


def request_from_args(args: argparse.Namespace) -> UpdateRequest:
    """What the arguments ask, checked once (to_argv() gives it back)."""
    return UpdateRequest(parse_count(args.params, "--params"), args.device, args.lr, args.momentum, args.weight_decay,
                         args.iters, args.warmup, args.threads, args.check)


def run(args: argparse.Namespace) -> int:
    request = request_from_args(args)
    n = request.params
    files = outputs(args)
    device, why = env.resolve_device(args.device)
    r = update(request)
    threads = f", {r.threads} threads" if r.threads else ""
    caption = (f"device {device} ({why}){threads}; clock {r.update.clock}; median of {args.iters} after {args.warmup} "
               "warm-up, update and copy interleaved. v = mu*v + (g + wd*w); w -= lr*v (PyTorch). Bytes moved: "
               "20 per parameter (read w, g, v; write w, v); the copy moves the same bytes (10n read + 10n written). "
               f"Update reaches {r.ratio:.2f} x the copy bandwidth.")
    if r.check:
        caption += f" Check vs float64 numpy on {r.check['checked']} params: max rel err {r.check['max_rel_error']:.1e}."
    Compare([r], title="gdlbench update (SGD with momentum, fp32)", caption=caption,
            args=vars(args) | {"device": device, "params": n},
            timing={"clock": r.update.clock, "region": f"update: {r.update.region}; reference: {r.copy.region}",
                    "rank_reduction": "none (this rank)"},
            summary={"update_gbs": r.update_gbs, "copy_gbs": r.copy_gbs, "ratio": r.ratio,
                     "convention": "v = momentum*v + (g + wd*w); w -= lr*v (PyTorch)"}).emit(files)
    if not r.passed:
        raise CheckFailed("the SGD update differs from the numpy reference")
    return 0
