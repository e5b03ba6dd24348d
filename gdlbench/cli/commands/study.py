"""gdlbench study: the whole study in one command (under mpiexec/srun like the others). Measures
the alpha-beta fit, the encode cost of compression and, per net, every phase alone and the
composed iteration per strategy; predicts the same strategies up to 1024 workers; writes one
report (HTML, Markdown, JSON) to --out DIR. --resume DIR finishes an interrupted study."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from ...common import env
from ...common.errors import UsageError
from ...composed.iteration import Iteration
from ...study.run import (
    DEFAULT_NETS,
    DEFAULT_STRATEGIES,
    DEFAULT_WORKERS,
    INDEX,
    Commands,
    Config,
    attach_cluster,
    attach_validation,
    config_from_args,
    fmt_duration,
    load_config,
    run_study,
)

# the study runs composed iterations, whose communication thread calls MPI: the CLI initialises
# MPI at their level
MPI_THREAD_LEVEL = Iteration.MPI_THREAD_LEVEL

STUDY_OPTIONS = ("nets", "strategies", "batch", "workers", "scales", "link", "cluster", "compress_ratio", "quick",
                 "iters", "warmup", "threads", "device", "io_dir")


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help="write the study here (created; must not hold another study)")
    where.add_argument("--resume", metavar="DIR",
                       help="finish the study in DIR with its own options: finished cells are kept, not measured again")
    p.add_argument("--nets", help=f"networks, comma-separated (default {DEFAULT_NETS})")
    p.add_argument("--strategies", help=f"strategies, comma-separated, or all (default {DEFAULT_STRATEGIES})")
    p.add_argument("--batch", help="per-worker batch: B for every net, or NET=B,... (default: per net and device; "
                                   "--quick: 1)")
    p.add_argument("--workers", help=f"worker counts to predict (default {DEFAULT_WORKERS})")
    p.add_argument("--scales", help="worker counts with a verdict and what-ifs (default: the measured one, 16, 128, 1024)")
    p.add_argument("--link", metavar="ALPHA_US:GBS",
                   help="predict the scales with this link (e.g. 5:12.5, a 100 Gb/s fabric) instead of the fit "
                        "measured here")
    p.add_argument("--cluster", metavar="FILE",
                   help="predict the scales on this two-level cluster (a file as `gdlbench predict --cluster` takes: "
                        "nodes, per_node, intra and inter links) instead of the one-level fit; on several nodes the "
                        "study uses its own two-level fit")
    p.add_argument("--compress-ratio", type=float, help="compression ratio of the compression what-if (default 100)")
    p.add_argument("--quick", action="store_true",
                   help="batch 1, 2 iterations, a short sweep: checks the whole pipeline in about a minute (for CI)")
    p.add_argument("--iters", type=int, help="timed iterations per measurement (default 5; --quick 2)")
    p.add_argument("--warmup", type=int, help="warm-up iterations (default 1)")
    p.add_argument("--threads", type=int, help="CPU compute threads per rank (default: cores / ranks on the node)")
    p.add_argument("--device", help="auto (default), cpu or cuda")
    p.add_argument("--memory-limit", metavar="SIZE",
                   help="memory per device for the memory answer (default 80GB): per N the fastest strategy that "
                        "fits and the lowest ZeRO stage that fits, the sharded strategies priced beside the others")
    p.add_argument("--optimizer", choices=("sgd", "adam"),
                   help="optimizer states in the memory answer (default adam)")
    p.add_argument("--memory-at", metavar="KEY=VALUE,...",
                   help="model the memory answer at the job's own shape while timing the study's smaller one: "
                        "seq=S (a transformer's sequence), batch=B (per worker), precision=fp32|mixed, "
                        "checkpointing=yes|no; e.g. seq=1024,batch=16,precision=mixed (default: the measured shape, "
                        "fp32)")
    p.add_argument("--io-dir", help="where the JPEG dataset is generated once and reused (default: a temporary one)")
    p.add_argument("--validate", metavar="FILE",
                   help="a validation point beyond the measured scale: the `gdlbench iteration --json` of one of the "
                        "study's nets (same batch) measured on more nodes (scripts/study-validate.sh runs it on an "
                        "emulated cluster); the report sets it beside the model's prediction for those nodes, from "
                        "this study's phases and --validate-fit's link. Also with --resume")
    p.add_argument("--validate-fit", metavar="FILE",
                   help="with --validate: the `gdlbench allreduce --fit --json` measured on the same nodes (its link)")


def _run_argv(argv: list[str]) -> int:
    """A gdlbench command in this process, parsed by the CLI's own parser (a study's cell)."""
    from ... import cli

    args = cli.build_parser().parse_args(argv)
    cli.check_common(args)
    module = importlib.import_module(f"gdlbench.cli.commands.{cli.COMMANDS[args.command][0]}")
    return int(module.run(args))


COMMANDS = Commands(run=_run_argv)


def _prepare(args: argparse.Namespace, world_size: int, nodes: int) -> tuple[Path, Config, bool]:
    from ...study.plots import require_matplotlib

    require_matplotlib()  # the report's figures: fail now, not after the measurements
    if bool(args.validate) != bool(args.validate_fit):
        raise UsageError("--validate FILE and --validate-fit FILE go together (the run and the link it crossed)")
    root, cfg, resume = _plan(args, world_size, nodes)
    if cfg.cluster and not resume:
        cfg.cluster = attach_cluster(root, cfg.cluster)
    if args.validate:
        cfg.validation = attach_validation(root, cfg, args.validate, args.validate_fit)
    return root, cfg, resume


def _plan(args: argparse.Namespace, world_size: int, nodes: int) -> tuple[Path, Config, bool]:
    if args.resume:
        root = Path(args.resume)
        given = [f"--{o.replace('_', '-')}" for o in STUDY_OPTIONS if getattr(args, o) not in (None, False)]
        if given:
            raise UsageError(f"--resume takes the study's options from {root / INDEX}; leave out {', '.join(given)}")
        cfg = load_config(root)
        if cfg.world_size != world_size:
            raise UsageError(f"--resume {root}: the study was measured on {cfg.world_size} rank(s); resume it "
                             f"under mpiexec -n {cfg.world_size} (this run has {world_size})")
        return root, cfg, True
    if not args.out:
        raise UsageError("give --out DIR (a new study) or --resume DIR (finish one)")
    root = Path(args.out)
    if (root / INDEX).exists():
        raise UsageError(f"--out {root}: holds a study already; --resume {root} finishes it, or choose another DIR")
    if root.exists() and not root.is_dir():
        raise UsageError(f"--out {root}: not a directory")
    cfg = config_from_args(args, world_size, nodes)
    try:
        (root / "cells").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {root}: cannot create it ({exc.strerror})") from None
    return root, cfg, False


def run(args: argparse.Namespace) -> int:
    comm = env.world()
    is_root = comm.Get_rank() == 0
    nodes = env.topology(comm)["nodes"]  # collective: every rank, before rank 0 plans alone
    plan: tuple[Path, Config, bool] | str
    try:
        plan = _prepare(args, comm.Get_size(), nodes) if is_root else ""
    except UsageError as exc:
        plan = str(exc)
    plan = comm.bcast(plan, root=0)
    if isinstance(plan, str):  # rank 0 found the options wrong: every rank stops, rank 0 says why
        if is_root:
            print(f"gdlbench study: error: {plan}", file=sys.stderr, flush=True)
        return 2
    root, cfg, resume = plan
    t0 = time.monotonic()

    def say(msg: str) -> None:
        if is_root:
            print(f"gdlbench study: {msg} ({fmt_duration(time.monotonic() - t0)})", file=sys.stderr, flush=True)

    index = run_study(root, cfg, resume, sys.argv[1:] if sys.argv[0].endswith("gdlbench") else ["study"], say,
                      COMMANDS)
    if is_root:
        print(f"gdlbench study: {root / 'report.html'} (and report.md, {INDEX}, cells/) in "
              f"{fmt_duration(time.monotonic() - t0)}")
        for net, na in index["analysis"]["nets"].items():
            for v in na["verdicts"]:
                margin = (f"(runner-up {v['runner_up']}: margin {v['margin_pct']:.1f} %, band "
                          f"{v['margin_band_pct']:.1f} %)" if v["runner_up"] else "")
                who = (f"tie {', '.join(v['tied'])}" if v.get("state") == "tie" else
                       f"{v.get('state', 'winner')} {v['winner']}")
                print(f"  {net:10s} N={v['workers']:<5d} {v['source']:9s} {who} {margin}; "
                      f"bound by {v['bound_by']} ({v['bound_share_pct']:.0f} %), comm exposed "
                      f"{v['comm_exposed_pct']:.0f} %")
    return 0
