"""gdlbench compress: the encode cost of gradient compression by top-k sparsification (the k =
n / (2r) largest magnitudes kept as int32 index + fp32 value pairs, so a message shrinks r times),
in microseconds per dense byte: the COST of `gdlbench predict --compress RATIO:COST`."""

from __future__ import annotations

import argparse

from ...common.compare import Compare
from ...common.errors import CheckFailed, UsageError
from ...common.units import parse_count, split_list
from ...primitives.compress import CompressRequest, compress
from .. import common_options, outputs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ratio", default="100", help="compression ratios r, comma-separated (default 100)")
    p.add_argument("--values", default="16M", help="gradient values (fp32) per encode (default 16M)")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the check of a 10,000-value encode against numpy's sort")
    common_options(p, device=False, iters=5, warmup=1)


def requests_from_args(args: argparse.Namespace) -> list[CompressRequest]:
    """One request per ratio, each checked once (to_argv() gives it back)."""
    try:
        ratios = [float(x) for x in split_list(args.ratio, "--ratio")]
    except ValueError:
        raise UsageError(f"--ratio: expected numbers >= 1, got {args.ratio!r}") from None
    n = parse_count(args.values, "--values")
    return [CompressRequest(ratio, n, args.iters, args.warmup, args.check) for ratio in ratios]


def run(args: argparse.Namespace) -> int:
    requests = requests_from_args(args)
    files = outputs(args)
    results = [compress(req) for req in requests]
    rows = [r.to_dict() for r in results]
    Compare(results, title="gdlbench compress: top-k sparsification encode (fp32)",
            caption=f"median of {args.iters} after {args.warmup} warm-up, host steady clock; k = n/(2r) values kept "
                    "as int32 index + fp32 value, so the message is 1/r of the dense bytes; #wrong: a 10,000-value "
                    "encode against numpy's sort",
            args=vars(args),
            timing={"clock": "steady-clock", "region": "one top-k encode: |g|, nth_element, then the pack of "
                                                       "k (index, value) pairs", "rank_reduction": "none (rank 0)"},
            summary={"encode_us_per_byte": {f"{r['ratio']:g}": r["encode_us_per_byte"] for r in rows}}).emit(files)
    if any(r.wrong for r in results):
        raise CheckFailed("top-k encode differs from numpy's selection")
    return 0
