"""gdlbench import-trace: a PyTorch job's profiler trace (torch.profiler's Chrome JSON) as the
phases `gdlbench predict --phases` reads (gdlbench.model.torch_trace says what is read and how)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ...common import env
from ...common.errors import UsageError
from ...common.output import Column, Outputs, Report, fmt_float, print_table, stdout_console
from ...common.units import parse_size
from ...model.phases import plan_messages
from ...model.strategies import get_strategies
from ...model.torch_trace import ImportedTrace, import_trace
from ...nets.network import load_network

PHASE_COLUMNS = [Column("phase", "phase"), Column("median (ms)", "median_ms", fmt_float(2)),
                 Column("min (ms)", "min_ms", fmt_float(2)), Column("max (ms)", "max_ms", fmt_float(2)),
                 Column("% of step", "share", "{:.1%}")]
PHASES = (("io", "io_us"), ("h2d", "h2d_us"), ("forward", "forward_us"), ("backward", "backward_us"),
          ("exposed comm", "exposed_comm_us"), ("update", "update_us"), ("step", "total_us"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="the Chrome trace JSON (.json or .json.gz) torch.profiler exported")
    p.add_argument("--batch", type=int, required=True,
                   help="the per-worker batch the job ran (the trace does not record it)")
    p.add_argument("--name", help="the job's name in the phases (default: the trace file's name)")
    p.add_argument("--step-ms", type=float,
                   help="the job's step time without the profiler (its log's, on the traced configuration): "
                        "the profiler's own cost is taken out of the phases")
    p.add_argument("--bucket", help="the job's DDP bucket_cap_mb as a size (e.g. 10MiB), if not the default: "
                                    "the check of the ddp preset's buckets uses it")
    p.add_argument("--json", metavar="FILE", help="write the phases (what `predict --phases` reads)")
    p.add_argument("--csv", metavar="FILE", help="write the per-step phases as CSV")


def rows(trace: ImportedTrace) -> list[dict[str, Any]]:
    step = trace.median("total_us")
    out = []
    for label, key in PHASES:
        values = [float(getattr(s, key)) for s in trace.steps]
        med = trace.median(key)
        out.append({"phase": label, "median_ms": med / 1e3, "min_ms": min(values) / 1e3, "max_ms": max(values) / 1e3,
                    "share": med / step if step > 0 else 0.0})
    return out


def bucket_check(trace: ImportedTrace, bucket: int | None = None) -> tuple[list[int], list[int]]:
    """(the all-reduce sizes the job sent in its last profiled step, what the ddp preset plans
    with the job's bucket cap)."""
    net = load_network(trace.network_spec())
    planned = [m["bytes"] for m in plan_messages(net, get_strategies("ddp", bucket_bytes=bucket)[0])]
    return [m.bytes for m in trace.steps[-1].messages], planned


def run(args: argparse.Namespace) -> int:
    files = Outputs.of(args.json, args.csv)
    if args.step_ms is not None and not (math.isfinite(args.step_ms) and args.step_ms > 0):
        raise UsageError(f"--step-ms must be a positive number of milliseconds, got {args.step_ms:g}")
    bucket = parse_size(args.bucket, "--bucket") if args.bucket else None
    trace = import_trace(args.trace, args.batch, args.name, None if args.step_ms is None else args.step_ms * 1e3)
    if env.rank() != 0:
        return 0
    doc = trace.phases_doc()
    sent, planned = bucket_check(trace, bucket)
    report = Report("import-trace", doc["args"], doc["env"],
                    {"clock": "the traced job's (torch.profiler, us)",
                     "region": "per profiled step (ProfilerStep#); phases are medians over the steps",
                     "rank_reduction": "none: one rank's trace"},
                    rows=doc["rows"], summary=doc["summary"] | {"network": doc["network"], "trace": doc["trace"],
                                                                "ddp_buckets": {"sent": sent, "ddp_preset": planned}},
                    notes=["phases as gdlbench.model.torch_trace defines them; the network holds the job's gradients "
                           "in forward order, one 'params' layer each"] + trace.notes)
    print_table(f"gdlbench import-trace: {trace.name} ({len(trace.steps)} profiled steps, batch {trace.batch}, "
                f"{trace.world_size} rank{'s' if trace.world_size > 1 else ''}"
                f"{', ' + trace.backend if trace.backend else ''})", PHASE_COLUMNS, rows(trace),
                caption="exposed comm: the main thread idle between the end of backward and the optimizer step")
    console = stdout_console()
    grads = trace.gradients
    console.print(f"{len(grads)} gradients, {sum(g.bytes for g in grads):,} B, in the order they became ready",
                  highlight=False)
    if sent:
        same = "the same" if sent == planned else "NOT the same"
        console.print(f"all-reduces the job sent per step: {len(sent)} ({', '.join(f'{b:,}' for b in sent)} B); "
                      f"the ddp preset plans {len(planned)}: {same}", highlight=False)
    for note in trace.notes:
        console.print(f"note: {note}", highlight=False)
    steps = [dict(step=s.step, **{key: getattr(s, key) for _, key in PHASES}) for s in trace.steps]
    files.write(report, Report("import-trace", {}, {}, {}, rows=steps))
    if files.json:
        console.print(f"wrote {files.json.path}: predict with `gdlbench predict --phases {files.json.path} "
                      f"--strategy ddp{f' --bucket {args.bucket}' if args.bucket else ''} --from FIT.json` (or "
                      "--cluster / --nodes ... for a cluster)", highlight=False)
    return 0
