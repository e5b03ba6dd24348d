"""gdlbench gemm: TFLOP/s of C = op(A) @ op(B) over one shape, a list, or a square sweep."""

from __future__ import annotations

import argparse

from ...common import env
from ...common.compare import Compare
from ...common.errors import CheckFailed, UsageError
from ...common.output import run_each
from ...primitives.gemm import GemmRequest
from ...primitives.gemm import run as run_gemm
from .. import common_options, outputs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", type=int, help="rows of C (default 2048)")
    p.add_argument("-n", type=int, help="columns of C (default 2048)")
    p.add_argument("-k", type=int, help="inner dimension (default 2048)")
    p.add_argument("--shapes", help="list of MxNxK, comma-separated: 1024x1024x1024,4096x512x1000")
    p.add_argument("--sweep", help="square sizes MIN:MAX[:FACTOR], e.g. 256:4096:2")
    p.add_argument("--dtype", default="float32", help="cpu: float32, float64; cuda: float32, tf32, float16, bfloat16, float64")
    p.add_argument("--ta", action="store_true", help="use A transposed")
    p.add_argument("--tb", action="store_true", help="use B transposed")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the float64 reference check")
    p.add_argument("--seed", type=int, default=1, help="test-data seed")
    common_options(p, short_iters=False)  # -n is the column count here, as in BLAS


def parse_shapes(args: argparse.Namespace) -> list[tuple[int, int, int]]:
    given = [x for x in (args.shapes, args.sweep) if x]
    if len(given) > 1 or (given and any(v is not None for v in (args.m, args.n, args.k))):
        raise UsageError("give -m/-n/-k, --shapes or --sweep, not several")
    if args.shapes:
        shapes = []
        for item in args.shapes.split(","):
            parts = item.lower().split("x")
            try:
                m, n, k = (int(x) for x in parts)
            except ValueError:
                raise UsageError(f"--shapes: cannot read {item!r} as MxNxK") from None
            shapes.append((m, n, k))
    elif args.sweep:
        parts = args.sweep.split(":")
        try:
            lo, hi, factor = (int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) > 2 else 2)
        except (ValueError, IndexError):
            raise UsageError(f"--sweep: expected MIN:MAX[:FACTOR], got {args.sweep!r}") from None
        if lo < 1 or hi < lo or factor < 2:
            raise UsageError(f"--sweep: need 1 <= MIN <= MAX and FACTOR >= 2, got {args.sweep!r}")
        shapes, s = [], lo
        while s <= hi:
            shapes.append((s, s, s))
            s *= factor
    else:
        m, n, k = (2048 if v is None else v for v in (args.m, args.n, args.k))
        shapes = [(m, n, k)]
    return shapes


def requests_from_args(args: argparse.Namespace) -> list[GemmRequest]:
    """One request per shape the arguments ask for, each checked once (to_argv() gives it back)."""
    return [GemmRequest(m, n, k, args.dtype, args.device, args.iters, args.warmup, args.threads, args.check,
                        args.ta, args.tb, args.seed) for m, n, k in parse_shapes(args)]


def run(args: argparse.Namespace) -> int:
    requests = requests_from_args(args)
    files = outputs(args)
    device, why = env.resolve_device(args.device)
    is_root = env.rank() == 0
    results = run_each(requests, "gemm", run_gemm, lambda q, r: f"{q.m}x{q.n}x{q.k}: {r.tflops:.3f} TFLOP/s", is_root)
    clock = results[0].measurement.clock
    threads = f", {results[0].threads} BLAS threads" if device == "cpu" else ""
    check = results[0].check
    tol = check["tolerance"] if check else None
    caption = (f"device {device} ({why}){threads}; clock {clock}; median of {args.iters} iterations "
               f"after {args.warmup} warm-up; TFLOP/s = 2mnk/t"
               + (f"; check: max |C-R|/(|A||B|) <= {tol:g} vs float64, {check['checked_rows']} rows" if check and tol else ""))
    Compare(results, title=f"gdlbench gemm ({args.dtype}, {'A^T' if args.ta else 'A'} @ {'B^T' if args.tb else 'B'})",
            caption=caption, args=vars(args) | {"device": device}).emit(files)
    if not all(r.passed for r in results):
        raise CheckFailed("GEMM results differ from the float64 reference beyond the tolerance")
    return 0
