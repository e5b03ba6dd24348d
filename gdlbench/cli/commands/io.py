"""gdlbench io: t_io, reading (and decoding) a batch of JPEG files from a file-backed dataset."""

from __future__ import annotations

import argparse

from ...common import env
from ...common.compare import Compare
from ...primitives.io import DEFAULT_SIZE, IoRequest, parse_image_size, read_rows
from .. import common_options, outputs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help="dataset directory: generated once, reused when its manifest matches "
                                 "(default: a temporary directory, removed afterwards)")
    p.add_argument("--images", type=int, default=256, help="images in the dataset (default 256)")
    p.add_argument("--batch", type=int, default=64, help="images per timed batch (default 64)")
    p.add_argument("--size", default=f"{DEFAULT_SIZE[0]}x{DEFAULT_SIZE[1]}", help="image WIDTHxHEIGHT (default 500x375)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--decode", dest="decode", action="store_const", const=True, default=None,
                   help="time read + decode only (default: both rows)")
    g.add_argument("--no-decode", dest="decode", action="store_const", const=False, help="time reading only")
    common_options(p, device=False, iters=10, warmup=2)


def requests_from_args(args: argparse.Namespace) -> list[IoRequest]:
    """One request per row (read + decode and read alone, unless --decode/--no-decode picks one),
    each checked once (to_argv() gives it back)."""
    modes = [True, False] if args.decode is None else [args.decode]
    size = parse_image_size(args.size)
    return [IoRequest(args.batch, args.threads, d, args.images, size, args.dir, args.iters, args.warmup) for d in modes]


def run(args: argparse.Namespace) -> int:
    requests = requests_from_args(args)
    size = requests[0].size
    files = outputs(args)
    threads = args.threads or env.usable_cores()
    ds, results = read_rows(requests)
    where = f"{args.dir} ({'generated' if ds.generated else 'reused'})" if args.dir else "a temporary directory"
    caption = (f"{len(ds.files)} JPEG files of {size[0]}x{size[1]} in {where}, mean {ds.mean_bytes / 1e3:.1f} KB; "
               f"timed in Python threads (Pillow's libjpeg decode releases the GIL); files in the page cache; "
               f"median of {args.iters} batches after {args.warmup} warm-up; MB/s = file bytes / 1e6 / s")
    Compare(results, title="gdlbench io (t_io)", caption=caption, args=vars(args) | {"threads": threads},
            timing={"clock": "steady-clock", "region": results[0].measurement.region + " (Python time.perf_counter)",
                    "rank_reduction": "none (this rank)"},
            summary={"dataset": str(args.dir) if args.dir else "temporary", "generated": ds.generated,
                     "images": len(ds.files), "total_bytes": ds.total_bytes}).emit(files)
    return 0
