"""gdlbench copy: host<->device and device-to-device copy bandwidth, as nvbandwidth reports it."""

from __future__ import annotations

import argparse

from ...common import env
from ...common.compare import Compare
from ...common.errors import CheckFailed
from ...common.output import run_each
from ...common.units import SIZE_CONVENTION, format_bytes, parse_size
from ...primitives.copy import CPU_NOTE, CopyRequest, copy, plan
from .. import common_options, outputs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="1GB", help="bytes per copy: 1GB, 512MiB, 64M ... (default 1GB)")
    p.add_argument("--direction", default="h2d", help="h2d, d2h, d2d or all (default h2d)")
    p.add_argument("--memory", default="pinned", help="host memory: pinned, pageable or both (default pinned)")
    p.add_argument("--copies", type=int, default=4, help="copies per sample (default 4; nvbandwidth uses 16)")
    common_options(p, iters=10, warmup=2)


def requests_from_args(args: argparse.Namespace, device: str) -> list[CopyRequest]:
    """One request per direction and host memory the arguments ask for, each checked once
    (to_argv() gives it back). On the CPU pinned and pageable are the same memcpy: one row each."""
    pairs = plan(args.direction, args.memory)
    if device == "cpu":
        pairs = list(dict.fromkeys((d, "pinned") for d, _ in pairs))
    size = parse_size(args.size, "--size")
    return [CopyRequest(size, d, m, args.device, args.copies, args.iters, args.warmup, args.threads) for d, m in pairs]


def run(args: argparse.Namespace) -> int:
    device, why = env.resolve_device(args.device)
    requests = requests_from_args(args, device)
    size = requests[0].size_bytes
    files = outputs(args)
    is_root = env.rank() == 0
    results = run_each(requests, "copy", copy, lambda q, r: f"{q.direction} {r.memory}: {r.gbs:.2f} GB/s", is_root)
    clock = results[0].measurement.clock
    region = ("one sample = --copies back-to-back copies between CUDA events, queued behind a kernel that holds the "
              "stream until all are enqueued (nvbandwidth's method)" if device == "cuda"
              else f"one sample = --copies memcpys between touched host buffers ({results[0].threads} threads)")
    caption = (f"device {device} ({why}); clock {clock}; median of {args.iters} samples after {args.warmup} warm-up; "
               f"GB/s = bytes x copies / 1e9 / s (nvbandwidth); data verified after the timed copies; {SIZE_CONVENTION}")
    if device == "cpu":
        caption += f". {CPU_NOTE} (the same memcpy for every direction)"
    Compare(results, title=f"gdlbench copy ({format_bytes(size)})", caption=caption,
            args=vars(args) | {"device": device, "size_bytes": size}, notes=[CPU_NOTE] if device == "cpu" else [],
            timing={"clock": clock, "region": region, "rank_reduction": "none (this rank)"}).emit(files)
    if not all(r.passed for r in results):
        raise CheckFailed("copied data differ from the source")
    return 0
