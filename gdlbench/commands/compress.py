"""gdlbench compress: the encode cost of gradient compression by top-k sparsification (the k =
n / (2r) largest magnitudes kept as int32 index + fp32 value pairs, so a message shrinks r times),
in microseconds per dense byte: the COST of `gdlbench predict --compress RATIO:COST`."""

from __future__ import annotations

import argparse

from .. import env
from ..cli import common_options, outputs
from ..compress import CompressResult, compress
from ..errors import CheckFailed, UsageError
from ..report import Report, print_table
from ..units import parse_count


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ratio", default="100", help="compression ratios r, comma-separated (default 100)")
    p.add_argument("--values", default="16M", help="gradient values (fp32) per encode (default 16M)")
    common_options(p, device=False)
    p.set_defaults(iters=5, warmup=1)


def run(args: argparse.Namespace) -> int:
    try:
        ratios = [float(x) for x in str(args.ratio).split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--ratio: expected numbers >= 1, got {args.ratio!r}") from None
    if not ratios or any(not r >= 1 for r in ratios):
        raise UsageError(f"--ratio: expected numbers >= 1, got {args.ratio!r}")
    n = parse_count(args.values, "--values")
    files = outputs(args)
    rows = [compress(ratio, n, iters=args.iters, warmup=args.warmup).to_dict() for ratio in ratios]
    if env.rank() == 0:
        report = Report("compress", vars(args), env.collect(),
                        {"clock": "steady-clock", "region": "one top-k encode: |g|, nth_element, then the pack of "
                                                            "k (index, value) pairs", "rank_reduction": "none (rank 0)"},
                        rows=rows, summary={"encode_us_per_byte": {f"{r['ratio']:g}": r["encode_us_per_byte"]
                                                                   for r in rows}})
        print_table("gdlbench compress: top-k sparsification encode (fp32)", CompressResult.COLUMNS, rows,
                    caption=f"median of {args.iters} after {args.warmup} warm-up, host steady clock; k = n/(2r) "
                            "values kept as int32 index + fp32 value, so the message is 1/r of the dense bytes; "
                            "#wrong: a 10,000-value encode against numpy's sort")
        files.write(report)
    if any(r["wrong"] for r in rows):
        raise CheckFailed("top-k encode differs from numpy's selection")
    return 0
