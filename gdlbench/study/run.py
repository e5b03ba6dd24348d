"""The study in one command (`gdlbench study`): measure on this machine what it can measure, predict
what it cannot, and write one report that says where the time goes, which strategy wins and what
would make it faster.

A study is a directory:
    study.json      the index: the study's options, provenance, every cell's state and command,
                    and the analysis (predictions, verdicts, what-ifs) every report number comes from
    cells/*.json    one measurement per cell, each the JSON of the gdlbench command that made it
                    (`gdlbench allreduce --fit`, with a sharded strategy `reduce_scatter --fit` and
                    `allgather --fit`, `compress`, `iteration`), with its text output (.log)
    report.html     self-contained (images embedded), readable on a phone
    report.md, img/ the same content as Markdown with PNG files
Every file is written whole or not at all (a temporary file renamed into place), so a study killed
at any point resumes with --resume DIR: finished cells are kept, the others run.

Each cell runs the very command its `command` field quotes (the CLI layer runs them: it hands
run_study a `Commands`, as the library does not import it), and each prediction is a PredictRequest
whose `gdlbench predict` command the report prints beside it, so every number can be reproduced
one by one.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import math
import os
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..common import env
from ..common.errors import UsageError
from ..common.measurement import median_se
from ..common.paths import write_atomic
from ..common.units import number_text, parse_size
from ..composed.iteration import default_batch, traced_breakdown
from ..model import memory
from ..model.phases import SHARD_COLLECTIVES
from ..model.strategies import Strategy, get_strategies
from ..nets.network import load_network
from ..primitives.collectives import fit_sweep_for_messages
from ..whatif.prediction import CommSource, PredictRequest, evaluate
from ..whatif.scaling import DEFAULT_WORKERS as PREDICT_WORKERS

INDEX = "study.json"
FORMAT = 1
DEFAULT_NETS = "alexnet,googlenet,resnet50"
DEFAULT_STRATEGIES = "caffe-mpi,cntk,mxnet,tensorflow,serial,wfbp-fusion"
DEFAULT_WORKERS = ",".join(map(str, PREDICT_WORKERS))
DEFAULT_SCALES = (16, 128, 1024)  # besides the measured one
BUCKETS_MIB = (1, 4, 16, 25, 64, 256)
COMPRESS_RATIO = 100.0
DEFAULT_MEMORY_LIMIT = "80GB"  # an H100's or A100's 80 GB
PHASE_GROUPS = {"I/O": ("io", "h2d"), "compute": ("forward", "backward"), "communication": ("comm",),
                "update": ("update",)}


@dataclass(frozen=True)
class Commands:
    """How the study runs the gdlbench commands of its cells, handed in by the CLI layer
    (gdlbench.cli.commands.study): run(argv) runs one in this process and returns its exit code."""

    run: Callable[[list[str]], int]


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Config:
    """What the study measures and predicts; saved in the index so --resume continues the same one."""

    nets: list[str]
    strategies: list[str]
    batch: dict[str, int]
    workers: list[int]
    scales: list[int]
    world_size: int
    device: str
    iters: int
    warmup: int
    threads: int | None
    quick: bool
    link: str | None = None  # "ALPHA_US:GBS": predict with this link instead of the measured fit
    cluster: str | None = None  # a cluster file (its copy in the study): predict on its two levels instead
    nodes: int = 1  # nodes the measuring ranks span: on several, the fit has two levels and prices the scales
    io_dir: str | None = None
    compress_ratio: float = COMPRESS_RATIO
    net_specs: dict[str, str] = field(default_factory=dict)  # name -> built-in name or spec file
    memory_limit: str = DEFAULT_MEMORY_LIMIT  # per device, for the memory answer
    optimizer: str = "adam"  # optimizer states in the memory answer
    # a validation beyond the measured scale (attach_validation): {"iteration", "fit"}, paths in the study
    validation: dict[str, str] | None = None
    memory_at: dict[str, Any] | None = None  # the memory answer's shape, if not the measured one (parse_memory_at)

    def net_spec(self, name: str) -> str:
        return self.net_specs.get(name, name)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Config:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in doc.items() if k in known})


def _parse_batch(text: str | None, nets: list[str], device: str, quick: bool) -> dict[str, int]:
    """'8' for every net, or 'alexnet=16,resnet50=4' (the others at their defaults)."""
    out = {n: 1 if quick else default_batch(n, device) for n in nets}
    if not text:
        return out
    for item in str(text).split(","):
        name, eq, value = item.strip().rpartition("=")
        try:
            b = int(value)
        except ValueError:
            raise UsageError(f"--batch: expected B or NET=B,..., got {text!r}") from None
        if b < 1:
            raise UsageError(f"--batch must be >= 1, got {b}")
        if not eq:
            out = dict.fromkeys(nets, b)
        elif name not in out:
            raise UsageError(f"--batch: {name!r} is not one of the study's nets ({', '.join(nets)})")
        else:
            out[name] = b
    return out


def config_from_args(args: argparse.Namespace, world_size: int, nodes: int = 1) -> Config:
    from ..common.units import parse_int_list
    from ..model import cluster

    quick = bool(args.quick)
    specs = {}
    for spec in (x.strip() for x in (args.nets or DEFAULT_NETS).split(",")):
        if spec:  # a spec file by its absolute path: the cells run in the study's directory
            specs[load_network(spec).name] = str(Path(spec).resolve()) if Path(spec).is_file() else spec
    nets = list(specs)
    if not nets:
        raise UsageError("--nets: give at least one network")
    strategies = [s.name for s in get_strategies(args.strategies or DEFAULT_STRATEGIES)]
    device, _why = env.resolve_device(args.device or "auto")
    workers = sorted(set(parse_int_list(args.workers or DEFAULT_WORKERS, "--workers")))
    if max(workers) > 1_000_000:
        raise UsageError(f"--workers: at most 1,000,000, got {max(workers)}")
    scales = (sorted(set(parse_int_list(args.scales, "--scales"))) if args.scales else
              sorted({world_size, *(n for n in DEFAULT_SCALES if n <= max(workers))}))
    workers = sorted(set(workers) | set(scales) | {1, world_size})
    cluster_file = getattr(args, "cluster", None)
    if args.link is not None and cluster_file:
        raise UsageError("give --link (one level) or --cluster (two levels), not both")
    if args.link is not None:
        _link(args.link)
    elif cluster_file:
        cluster.load_cluster(cluster_file)  # its errors now, not after the measurements
        cluster_file = str(Path(cluster_file).resolve())  # the predictions run in the study's directory
    elif world_size == 1:
        raise UsageError("one rank measures no link to predict with: run the study under mpiexec -n 2 (or more), "
                         "or give --link ALPHA_US:GBS or --cluster FILE")
    ratio = COMPRESS_RATIO if args.compress_ratio is None else args.compress_ratio
    if not ratio >= 1:
        raise UsageError(f"--compress-ratio must be >= 1, got {ratio}")
    iters = args.iters if args.iters is not None else (2 if quick else 5)
    warmup = args.warmup if args.warmup is not None else (0 if quick else 1)
    if iters < 1 or warmup < 0:
        raise UsageError(f"need --iters >= 1 and --warmup >= 0, got {iters} and {warmup}")
    limit = getattr(args, "memory_limit", None) or DEFAULT_MEMORY_LIMIT
    parse_size(limit, "--memory-limit")
    return Config(nets, strategies, _parse_batch(args.batch, nets, device, quick), workers, scales, world_size,
                  device, iters, warmup, args.threads, quick, args.link, cluster_file, nodes,
                  str(Path(args.io_dir).resolve()) if args.io_dir else None, float(ratio), specs, limit,
                  getattr(args, "optimizer", None) or "adam",
                  parse_memory_at(getattr(args, "memory_at", None), list(specs.values())))


MEMORY_AT_KEYS = ("seq", "batch", "precision", "checkpointing")


def parse_memory_at(text: str | None, specs: list[str]) -> dict[str, Any] | None:
    """--memory-at 'seq=1024,batch=16,precision=mixed,checkpointing=yes' (any of the keys): the
    shape at which the memory answer is modelled, while time is measured at the study's own.
    Every net must take the sequence given (a transformer's NAME:seq=S)."""
    if text is None:
        return None
    out: dict[str, Any] = {}
    for item in (x.strip() for x in str(text).split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in MEMORY_AT_KEYS or key in out:
            raise UsageError(f"--memory-at: expected KEY=VALUE,... with keys {', '.join(MEMORY_AT_KEYS)} "
                             f"(each once), got {text!r}")
        if key in ("seq", "batch"):
            if not value.isdigit() or int(value) < 1:
                raise UsageError(f"--memory-at: {key} must be an integer >= 1, got {value!r}")
            out[key] = int(value)
        elif key == "precision":
            if value not in memory.PRECISIONS:
                raise UsageError(f"--memory-at: precision is one of {', '.join(memory.PRECISIONS)}, got {value!r}")
            out[key] = value
        elif value not in ("yes", "no"):
            raise UsageError(f"--memory-at: checkpointing is yes or no, got {value!r}")
        else:
            out[key] = value == "yes"
    for spec in specs:
        at_shape(spec, out.get("seq"))  # its errors now, not after the measurements
    return out


def at_shape(spec: str, seq: int | None) -> str:
    """The net spec `spec` at sequence `seq` (None: as it is): 'gpt2-medium:seq=64' -> ':seq=1024'."""
    if seq is None:
        return spec
    base, _, params = spec.partition(":")
    keep = [p for p in params.split(":") if p and not p.startswith("seq=")]
    target = ":".join([base, *keep, f"seq={seq}"])
    try:
        if Path(spec).is_file() or spec.endswith((".json", ".py")):
            raise UsageError("a spec file")
        load_network(target)
    except UsageError as exc:
        raise UsageError(f"--memory-at seq={seq}: the net {spec} takes no sequence length ({exc})") from None
    return target


def _link(text: str) -> tuple[float, float]:
    a, _, g = str(text).partition(":")
    try:
        alpha, gbs = float(a), float(g)
    except ValueError:
        raise UsageError(f"--link: expected ALPHA_US:GBS, e.g. 5:12.5, got {text!r}") from None
    if not (math.isfinite(alpha) and alpha >= 0 and math.isfinite(gbs) and gbs > 0):
        raise UsageError(f"--link: need alpha >= 0 us and bandwidth > 0 GB/s, got {text!r}")
    return alpha, gbs


# ---------------------------------------------------------------------------------------------
# Cells: one measurement each, the command that makes it, and how long it is expected to take


@dataclass
class Cell:
    name: str
    kind: str  # fit, compress, iteration
    argv: list[str]  # gdlbench's arguments, paths relative to the study directory
    weight: float  # relative cost, for the estimate of the time left
    launcher: bool = True  # run under mpiexec -n N (every rank takes part)

    @property
    def json(self) -> str:
        return f"cells/{self.name}.json"

    @property
    def outputs(self) -> list[str]:
        """Every file the command writes (after its --json or --trace), the JSON first."""
        return [self.argv[i + 1] for i, a in enumerate(self.argv) if a in ("--json", "--trace")]

    def command(self, world_size: int) -> str:
        return command_line(self.argv, world_size if self.launcher else 1)


def command_line(argv: list[str], ranks: int = 1, launcher: str = "mpiexec") -> str:
    """The shell command of `gdlbench ARGV`, under the launcher on more than one rank."""
    return (f"{launcher} -n {ranks} " if ranks > 1 else "") + "gdlbench " + shlex.join(argv)


def _common(cfg: Config) -> list[str]:
    return (["--iters", str(cfg.iters), "--warmup", str(cfg.warmup)]
            + (["--threads", str(cfg.threads)] if cfg.threads else []))


def _shard_fits(cfg: Config) -> bool:
    """Whether the study measures the reduce-scatter and all-gather fits: on several ranks, when
    a sharded strategy (ZeRO, FSDP) is among its strategies."""
    return cfg.world_size > 1 and any(s.shard for s in get_strategies(",".join(cfg.strategies)))


def _shard_fit_cells(cfg: Config, sizes: list[str]) -> list[Cell]:
    """The fits of the sharded strategies' collectives, over the all-reduce fit's sizes (a whole
    gradient is one reduce-scatter for ZeRO-1/2), in place and on a communication thread as the
    executor sends them (--on comm-thread: that thread's malloc arena maps MPICH's large
    temporaries afresh on every call, the main thread's heap keeps them)."""
    if not _shard_fits(cfg):
        return []
    return [Cell(f"{c}-fit", "fit", [c, *sizes, "--on", "comm-thread", "--fit", "-c", "1",
                                     "-n", "3" if cfg.quick else "10",
                                     "-w", "1" if cfg.quick else "2", "--json", f"cells/{c}-fit.json"],
                 weight=10.0 if cfg.quick else 30.0) for c in SHARD_COLLECTIVES]


def _in_host_memory(sweep: list[str], cfg: Config) -> list[str]:
    """The fit's sweep, its last size lowered (by its factor) until its buffers (three per rank,
    rotated over the last size) take at most half of this node's memory: GPT-2 medium's 1.4 GB
    gradient asks a 4 GiB sweep, 24 GiB on 2 ranks. Larger messages follow the fit's formula (the
    report's scope says so). Physical memory, not what is free: every rank plans the same cells."""
    arg = dict(zip(sweep[::2], sweep[1::2], strict=True))
    start, end, factor = int(arg["-b"]), int(arg["-e"]), int(arg["-f"])
    per_node = -(-cfg.world_size // max(cfg.nodes, 1))
    budget = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    while end > start * factor and 3 * end * per_node > budget:
        end //= factor
    return [*sweep[:2], "-e", str(end), *sweep[4:8], "--rotate", str(end)]


def plan_cells(cfg: Config) -> list[Cell]:
    cells = []
    strategies = get_strategies(",".join(cfg.strategies))
    if cfg.world_size > 1:
        algos = ["library"] + (["ps"] if any(s.collective == "ps" for s in strategies) else [])
        # up to the largest message: a whole gradient, which some strategies send at once
        sizes = (fit_sweep_for_messages(0, factor=16, least=16 << 20) if cfg.quick
                 else _in_host_memory(fit_sweep_for_messages(
                     max(load_network(cfg.net_spec(n)).param_bytes() for n in cfg.nets)), cfg))
        cells.append(Cell("allreduce-fit", "fit",
                          ["allreduce", *sizes, "--algo", ",".join(algos), "--servers", str(cfg.world_size),
                           "--fit", "-c", "1", "-n", "3" if cfg.quick else "10",
                           "-w", "1" if cfg.quick else "2", "--json", "cells/allreduce-fit.json"],
                          weight=20.0 if cfg.quick else 60.0))
        cells += _shard_fit_cells(cfg, sizes)
    values = "4M" if cfg.quick else "16M"
    cells.append(Cell("compress", "compress",
                      ["compress", "--ratio", f"{cfg.compress_ratio:g}", "--values", values, *_common(cfg),
                       "--json", "cells/compress.json"], weight=1.0, launcher=False))
    for net_name in cfg.nets:
        net = load_network(cfg.net_spec(net_name))
        b = cfg.batch[net_name]
        argv = ["iteration", "--net", cfg.net_spec(net_name), "--batch", str(b), "--strategy", ",".join(cfg.strategies),
                *_common(cfg), "--target-se", "0",  # every round the study asks for
                "--device", cfg.device, *(["--io-dir", cfg.io_dir] if cfg.io_dir else []),
                "--json", f"cells/iteration-{net_name}.json", "--trace", f"cells/trace-{net_name}.json"]
        # forward + backward ~ 3 x forward MACs, timed per layer, per pass and per strategy
        work = 3 * net.fwd_macs * b / 1e9 * (cfg.iters + cfg.warmup) * (3 + len(cfg.strategies))
        cells.append(Cell(f"iteration-{net_name}", "iteration", argv, weight=work + 0.05 * net.params / 1e6))
    return cells


# ---------------------------------------------------------------------------------------------
# Files written whole or not at all


def remove_partial(root: Path) -> list[str]:
    """The temporary files a killed study left behind (never a finished file)."""
    gone = []
    for p in [root, *(d for d in root.iterdir() if d.is_dir())] if root.is_dir() else []:
        for f in p.glob(".*.tmp*"):
            f.unlink(missing_ok=True)
            gone.append(str(f.relative_to(root)))
    return gone


def cell_done(root: Path, cell: Cell) -> bool:
    """Every file of the cell is there (each was written whole or not at all)."""
    try:
        doc = json.loads((root / cell.json).read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(doc, dict) and doc.get("tool") == "gdlbench" and isinstance(doc.get("rows"), list)
            and all((root / f).is_file() for f in cell.outputs))


# ---------------------------------------------------------------------------------------------
# Progress with an estimate of the time left


class Eta:
    """Seconds per unit of weight, per kind of cell, learnt from the cells that finished (in this
    run or the one before a resume); until one of a kind has finished, a rough prior (a quiet
    2-core CPU)."""

    PRIOR = {"fit": 1.0, "compress": 2.0, "iteration": 0.15}

    def __init__(self) -> None:
        self.rate: dict[str, list[float]] = {}

    def learn(self, cell: Cell, seconds: float) -> None:
        self.rate.setdefault(cell.kind, []).append(seconds / cell.weight)

    def left_s(self, pending: list[Cell]) -> tuple[float, bool]:
        """(estimated seconds, whether a prior stands in for a kind not yet measured)."""
        total, rough = 0.0, False
        for c in pending:
            rates = self.rate.get(c.kind)
            if rates:
                total += c.weight * sorted(rates)[len(rates) // 2]
            else:
                total += c.weight * self.PRIOR[c.kind]
                rough = True
        return total, rough


def fmt_duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


# ---------------------------------------------------------------------------------------------
# Running the cells


def _run_command(runner: Commands, argv: list[str], root: Path, log: Path | None) -> None:
    """A gdlbench command in this process, in the study directory; its table goes to `log` (rank 0)."""
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out):
            code = runner.run(argv)
    finally:
        os.chdir(cwd)
    if code:
        raise RuntimeError(f"`{command_line(argv)}` exited with {code}")
    if log is not None:
        write_atomic(log, out.getvalue())


def provenance(argv: list[str]) -> dict[str, str | int]:
    """How this study was launched: command line, launcher, ranks, host."""
    import platform

    launcher = ("srun (Slurm)" if "SLURM_JOB_ID" in os.environ and "SLURM_PROCID" in os.environ else
                "mpiexec (Hydra)" if "PMI_RANK" in os.environ or "HYDRA_CONTROL_FD" in os.environ else
                "mpiexec (Open MPI)" if "OMPI_COMM_WORLD_RANK" in os.environ else "none (one process)")
    n = env.world().Get_size()
    return {"command": command_line(argv, n, "srun" if launcher.startswith("srun") else "mpiexec"),
            "launcher": launcher, "world_size": n,
            "host": platform.node(), "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gdlbench": __version__}


def run_study(root: Path, cfg: Config, resume: bool, argv: list[str],
              say: Callable[[str], None], runner: Commands) -> dict[str, Any]:
    """Measure the pending cells (every rank), then analyse and write the report (rank 0).
    Returns the index on rank 0 ({} elsewhere)."""
    comm = env.world()
    is_root = comm.Get_rank() == 0
    cells = plan_cells(cfg)
    index = _open_index(root, cfg, cells, resume, argv) if is_root else {}
    pending = comm.bcast([r["name"] for r in index["cells"] if r["state"] == "pending"] if is_root else [], root=0)
    todo = [c for c in cells if c.name in pending]
    if is_root:
        kept = len(cells) - len(pending)
        say(f"{len(cells)} cells, {kept} already measured" + (" (kept, not measured again)" if kept else "")
            + f"; {len(pending)} to run")
    _measure(root, cfg, cells, todo, index, say, runner)
    if not is_root:
        return {}
    say("analysing: predictions, verdicts and what-ifs")
    index["analysis"] = analyse(root, cfg)
    write_atomic(root / INDEX, json.dumps(index, indent=1, allow_nan=False))
    say("writing the report")
    from .report import write_report

    index["report"] = write_report(root, index)
    write_atomic(root / INDEX, json.dumps(index, indent=1, allow_nan=False))
    return index


def _open_index(root: Path, cfg: Config, cells: list[Cell], resume: bool, argv: list[str]) -> dict[str, Any]:
    """The index as the study starts (rank 0): the earlier run's kept on --resume, each cell's state."""
    index = _load_index(root) if resume else {}
    index.update({"tool": "gdlbench", "version": __version__, "command": "study", "format": FORMAT,
                  "config": cfg.to_dict()})
    index.setdefault("provenance", provenance(argv))
    index.setdefault("resumes", [])
    if resume:
        index["resumes"].append({"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "removed_partial": remove_partial(root)})
    index["env"] = env.collect()
    old = {c["name"]: c for c in index.get("cells", [])}
    index["cells"] = []
    for c in cells:
        done = cell_done(root, c)
        index["cells"].append({"name": c.name, "kind": c.kind, "json": c.json, "files": c.outputs,
                               "log": f"cells/{c.name}.log", "command": c.command(cfg.world_size),
                               "state": "done" if done else "pending",
                               "seconds": old.get(c.name, {}).get("seconds") if done else None,
                               "kept_from_earlier_run": done})
    write_atomic(root / INDEX, json.dumps(index, indent=1))
    return index


def _measure(root: Path, cfg: Config, cells: list[Cell], todo: list[Cell], index: dict[str, Any],
             say: Callable[[str], None], runner: Commands) -> None:
    """Run the pending cells (every rank), with an estimate of the time left; rank 0 records each
    one done in the index as it ends."""
    is_root = env.world().Get_rank() == 0
    eta = Eta()
    if is_root:
        for rec, c in zip(index["cells"], cells, strict=True):
            if rec["seconds"]:
                eta.learn(c, rec["seconds"])
    for i, cell in enumerate(todo):
        if is_root:
            left, rough = eta.left_s(todo[i:])
            estimate = f"about {fmt_duration(left)} left" + (" (rough: a prior until a cell of each kind has run)"
                                                             if rough else "")
            say(f"[{i + 1}/{len(todo)}] {cell.name}: {cell.command(cfg.world_size)} ({estimate})")
        t0 = time.monotonic()
        _run_command(runner, cell.argv, root, (root / f"cells/{cell.name}.log") if is_root else None)
        env.world().Barrier()
        seconds = time.monotonic() - t0
        if is_root:
            eta.learn(cell, seconds)
            rec = next(r for r in index["cells"] if r["name"] == cell.name)
            rec.update(state="done", seconds=seconds)
            write_atomic(root / INDEX, json.dumps(index, indent=1))
            say(f"[{i + 1}/{len(todo)}] {cell.name} done in {fmt_duration(seconds)}")


def _load_index(root: Path) -> dict[str, Any]:
    try:
        doc = json.loads((root / INDEX).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume {root}: no readable {INDEX} ({exc})") from None
    if not isinstance(doc, dict) or doc.get("command") != "study" or not isinstance(doc.get("config"), dict):
        raise UsageError(f"--resume {root}: {INDEX} is not a gdlbench study index")
    return doc


def load_config(root: Path) -> Config:
    return Config.from_dict(_load_index(root)["config"])


# ---------------------------------------------------------------------------------------------
# Analysis: predictions, measured against predicted, verdicts and optimisation directions


@functools.lru_cache(maxsize=16)
def _read_cached(path: str, option: str, mtime_ns: int) -> Any:
    from ..common.paths import read_json

    return read_json(path, option)


def _load(path: str, option: str) -> Any:
    """paths.read_json, cached: the analysis reads the same phases and fit files many times."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = 0  # read_json reports it
    return _read_cached(os.path.abspath(path), option, mtime)


def _rows(root: Path, request: PredictRequest) -> list[dict[str, Any]]:
    """The rows of a prediction, evaluated in the study directory (its paths are relative to it)."""
    cwd = os.getcwd()
    os.chdir(root)
    try:
        return evaluate(request, _load).rows
    finally:
        os.chdir(cwd)


def _strategy_algo(s: Strategy) -> str:
    return "ps" if s.collective == "ps" else "library"


def _comm_source(cfg: Config, strategy: Strategy) -> CommSource:
    """The predictions' communication model: the link or cluster given, else the fit measured here
    (on several nodes its two levels: the fit's JSON is a cluster file), with the reduce-scatter's
    and all-gather's fits for a sharded strategy on one node (the cluster model has none)."""
    if cfg.link:
        alpha, gbs = _link(cfg.link)
        return CommSource(alpha=alpha, bandwidth=number_text(gbs))
    if cfg.cluster:
        return CommSource(cluster=cfg.cluster)
    if cfg.world_size == 1:
        raise UsageError("one rank measures no link: run the study under mpiexec -n 2 (or more), or give "
                         "--link ALPHA_US:GBS or --cluster FILE for the predictions")
    if cfg.nodes > 1:
        return CommSource(cluster="cells/allreduce-fit.json")
    # a sharded strategy's messages: the reduce-scatter's and all-gather's own fits, where measured
    shard = [f"cells/{c}-fit.json" for c in SHARD_COLLECTIVES] if strategy.shard and _shard_fits(cfg) else []
    return CommSource(from_file=",".join(["cells/allreduce-fit.json", *shard]), algo=_strategy_algo(strategy))


def breakdown_of(pred: Mapping[str, Any]) -> dict[str, float]:
    """The predicted iteration's phases as a traced iteration shows them (measured_breakdown):
    backward as it runs beside the messages, then the wait for the messages after it; the wait
    for a prefetched batch, its cost beside compute in forward. Not
    backward alone and comm_exposed_us: that puts backward's slowdown beside the messages into
    communication, which a trace shows in backward (and can exceed all the messages' time)."""
    # a prefetched read's cost beside compute shows as slower forward (the read starts with it)
    beside = pred.get("io_beside_us", 0.0)
    return {"io": pred["io_exposed_us"] - beside, "h2d": pred["h2d_us"], "forward": pred["forward_us"] + beside,
            "backward": pred["backward_beside_us"], "comm": pred["comm_wait_us"], "update": pred["update_us"]}


def measured_breakdown(tl: Mapping[str, Any]) -> dict[str, float]:
    """Exposed time of each phase in a measured iteration (gdlbench.composed.iteration.traced_breakdown)."""
    return traced_breakdown(dict(tl))


def median_breakdown(ranks: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the ranks' breakdowns of the same traced round."""
    import numpy as np

    return {k: float(np.median([b[k] for b in ranks])) for k in ranks[0]}


def bound_by(parts: dict[str, float]) -> tuple[str, float]:
    """(the phase group that takes the most time, its share of the iteration in %)."""
    groups = {g: sum(parts.get(p, 0.0) for p in ps) for g, ps in PHASE_GROUPS.items()}
    total = sum(groups.values()) or 1.0
    name = max(groups, key=lambda g: groups[g])
    return name, 100.0 * groups[name] / total


def analyse(root: Path, cfg: Config) -> dict[str, Any]:
    strategies = get_strategies(",".join(cfg.strategies))
    encode = None
    comp_doc = json.loads((root / "cells/compress.json").read_text())
    for row in comp_doc["rows"]:
        if abs(row["ratio"] - cfg.compress_ratio) < 1e-9:
            encode = row["encode_us_per_byte"]
    fit_summary = None
    if (root / "cells/allreduce-fit.json").is_file():
        fit_doc = json.loads((root / "cells/allreduce-fit.json").read_text())
        fits = fit_doc["summary"].get("fit", [])
        if isinstance(fits, dict):  # several nodes: the whole communicator's fits beside the levels
            levels = fits.get("levels") or {}
            fits = [*fits.get("whole", []),
                    *({**f, "algo": f"{level} (library, {level}-node level)"} for level in ("intra", "inter")
                      if isinstance(f := levels.get(level), dict))]
        for c in SHARD_COLLECTIVES:  # the sharded strategies' collectives, where the study fitted them
            if (root / f"cells/{c}-fit.json").is_file():
                fits = [*fits, *json.loads((root / f"cells/{c}-fit.json").read_text())["summary"].get("fit", [])]
        fit_summary = [{**{k: f.get(k) for k in ("algo", "alpha_us", "beta_us_per_byte", "gamma_us_per_byte",
                                                   "link_gbs", "median_rel_error")},
                        "regimes": len(f.get("regimes") or []) or 1}
                       for f in fits]
    nets: dict[str, dict[str, Any]] = {}
    for net_name in cfg.nets:
        nets[net_name] = analyse_net(root, cfg, net_name, strategies, encode)
    return {"nets": nets, "fit": fit_summary, "validation": validation_analysis(root, cfg, strategies), "compress": {"ratio": cfg.compress_ratio,
                                                           "encode_us_per_byte": encode,
                                                           "source": "cells/compress.json"},
            "measured_workers": cfg.world_size,
            "notes": ["t_iter predicted by `gdlbench predict` from the measured phases and the alpha-beta fit "
                      "(or --link, or the two-level cluster of --cluster or of the fit across nodes); measured: "
                      "median of the composed iteration, max over ranks",
                      "the measured breakdown bars and timelines are one traced iteration, the median round on "
                      "rank 0 (each compare row's traced_round), whose length differs from the median over "
                      "rounds (max over ranks) by the run's spread"],
            "strategies": [{"name": s.name, "describe": s.describe(), "assumptions": s.assumptions,
                            "source": s.source, **({"servers": s.servers or "N",
                                                    "servers_assumption": servers_of(s, 0)["servers_assumption"]}
                                                   if s.collective == "ps" else {})}
                           for s in strategies],
            "scope": scope(root, cfg), "tie_se": TIE_SE, "robust_factor": ROBUST,
            "tie_rule": {"measured": f"margin < {TIE_SE:g} x sqrt(se_winner^2 + se_other^2), se the standard error "
                                     "of each median over the rounds",
                         "predicted": "margin < |error_winner| + |error_other|, the model's errors at the measured "
                                      "scale",
                         "robust": f"margin > {ROBUST:g} x that threshold"}}


def scope(root: Path, cfg: Config) -> dict[str, Any]:
    """What was measured and what the predictions assume beyond it."""
    sizes: list[int] = []
    if (root / "cells/allreduce-fit.json").is_file():
        rows = json.loads((root / "cells/allreduce-fit.json").read_text()).get("rows", [])
        sizes = sorted({int(r["size_bytes"]) for r in rows if isinstance(r.get("size_bytes"), (int, float))})
    link = (f"given on the command line: {cfg.link} (alpha us : GB/s)" if cfg.link else
            f"the cluster file {cfg.cluster}" if cfg.cluster else
            f"the alpha-beta fit of this machine's all-reduce between {cfg.world_size} ranks on {cfg.nodes} node(s)"
            + (" (shared memory inside one node)" if cfg.nodes == 1 else ""))
    return {"device": cfg.device, "ranks": cfg.world_size, "nodes": cfg.nodes, "rounds": cfg.iters,
            "warmup": cfg.warmup, "link": link, "fit_min_bytes": sizes[0] if sizes else None,
            "fit_max_bytes": sizes[-1] if sizes else None, "measured_workers": cfg.world_size,
            "largest_predicted_workers": max(cfg.workers),
            "assumed": [f"every N other than {cfg.world_size} is extrapolated by the model: each worker's phases as "
                        f"measured here on {cfg.device}, the messages priced by {link}",
                        "messages larger than the fit's range or over more ranks than measured follow the fit's "
                        "formula (alpha + size x beta per algorithm step), not a measurement",
                        f"parameter-server strategies: {PS_SERVERS_ASSUMED}",
                        "no stragglers, no failures, no contention between jobs; the network's topology is "
                        "the formula's (a single level unless a cluster is given)"]}


def analyse_net(root: Path, cfg: Config, net_name: str, strategies: list[Strategy],
                encode: float | None) -> dict[str, Any]:
    phases_file = f"cells/iteration-{net_name}.json"
    doc = json.loads((root / phases_file).read_text())
    summary = doc["summary"]
    n_meas = cfg.world_size
    spec = cfg.net_spec(net_name)
    # Predictions per strategy, each from the fit of the algorithm the executor sends it with.
    requests = {s.name: PredictRequest(phases=phases_file, net=spec if spec != net_name else None,
                                       comm=_comm_source(cfg, s), strategy=s.name, workers=tuple(cfg.workers))
                for s in strategies}
    rows = [row for r in requests.values() for row in _rows(root, r)]
    compare = [compare_row(s, n_meas, doc, next(r for r in rows if r["strategy"] == s.name and r["workers"] == n_meas),
                           replace(requests[s.name], workers=(n_meas,)))
               for s in strategies if s.name in summary.get("measured_us", {})]  # not: left out on this device
    verdicts, whatifs = [], []
    for r in rows:  # the parameter-server rows say how many servers they were priced with
        r.update(servers_of(next(s for s in strategies if s.name == r["strategy"]), r["workers"]))
    model_err = {c["strategy"]: abs(c["error_pct"]) for c in compare}
    for n in cfg.scales:
        v = decide(n, n_meas, compare, [r for r in rows if r["workers"] == n], model_err)
        verdicts.append(v)
        winner = next(s for s in strategies if s.name == v["winner"])
        whatifs.append(what_ifs(root, cfg, winner, replace(requests[winner.name], workers=(n,)), summary, encode))
    components = validate_components(compare, cfg.workers, n_meas)
    for v in verdicts:
        v["leans_on_failed"] = leans_on_failed(v, components)
    memory = memory_answer(root, cfg, net_name, phases_file, strategies, rows, summary["batch"])
    return {"batch": summary["batch"], "params": load_network(cfg.net_spec(net_name)).params, "memory": memory,
            "phases_file": phases_file, "measured_workers": n_meas, "predictions": rows,
            "predict_commands": {name: r.command() for name, r in requests.items()}, "compare": compare, "verdicts": verdicts, "what_ifs": whatifs,
            "io_threads": summary.get("io_threads"), "overlap_efficiency": summary.get("overlap_efficiency"),
            "rounds": cfg.iters, "components": components}


def memory_answer(root: Path, cfg: Config, net_name: str, phases_file: str, strategies: list[Strategy],
                  rows: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """Does the job fit in cfg.memory_limit per device, and at what cost: the study's strategies and
    the sharded ones (ZeRO-1/2/3, FSDP; priced from the same phases) at every N, each with its
    memory per worker (gdlbench.model.memory) and whether it fits; per N the fastest that fits and the
    lowest ZeRO stage that fits. fp32 (the study's gradients), cfg.optimizer's states; with
    cfg.memory_at the memory at that shape (sequence, batch, precision, checkpointing) while the
    times stay those of the measured shape ('at' says both)."""
    from ..model.strategies import SHARDED

    spec = cfg.net_spec(net_name)
    extra = [s for name, s in SHARDED.items() if name not in cfg.strategies]
    requests = {s.name: PredictRequest(phases=phases_file, net=spec if spec != net_name else None,
                                       comm=_comm_source(cfg, s), strategy=s.name, workers=tuple(cfg.workers))
                for s in extra}
    table = [{k: r[k] for k in ("strategy", "workers", "t_iter_us", "images_per_s")}
             for r in [*rows, *(row for q in requests.values() for row in _rows(root, q))]]
    limit = parse_size(cfg.memory_limit, "--memory-limit")
    at = dict(cfg.memory_at or {})
    target, at_batch = at_shape(spec, at.get("seq")), at.get("batch", batch)
    summary = memory.fits(load_network(target), [*strategies, *extra], table, at_batch, limit, cfg.optimizer,
                          at.get("precision", "fp32"), at.get("checkpointing", False))
    shape = {"net": target, "batch": at_batch, "measured_net": spec, "measured_batch": batch} if at else None
    return {**summary, "rows": table, "predict_commands": {n: q.command() for n, q in requests.items()},
            "sharded_predicted_only": [s.name for s in extra], "at": shape}


def compare_row(s: Strategy, n_meas: int, doc: Mapping[str, Any], pred: Mapping[str, Any],
                request: PredictRequest) -> dict[str, Any]:
    """A measured strategy at the measured scale (the iteration cell `doc`) against its prediction."""
    summary = doc["summary"]
    meas = summary["measured_us"][s.name]
    tl = summary.get("measured_timelines", {}).get(s.name)
    by_rank = summary.get("measured_breakdowns_by_rank", {}).get(s.name)
    row: dict[str, Any] = next((r for r in doc["rows"]
                                if r.get("phase") == "iteration" and r.get("strategy") == s.name), {})
    return {"strategy": s.name, "workers": n_meas, "measured_us": meas,
            **measured_spread(row.get("samples_us") or [meas]),
            **servers_of(s, n_meas),
            "measured_images_per_s": n_meas * summary["batch"] / (meas * 1e-6),
            "predicted_us": pred["t_iter_us"], "error_pct": 100 * (pred["t_iter_us"] - meas) / meas,
            # what a perfect model would still show at one sigma (gdlbench iteration's error_se_pct)
            "error_se_pct": row.get("error_se_pct"),
            "model_from_messages_us": summary["predicted_us"][s.name],
            "model_from_messages_error_pct": summary["error_pct"][s.name],
            "predicted_breakdown_us": breakdown_of(pred),
            "predicted_comm_us": pred["comm_us"], "predicted_comm_hidden_us": pred["comm_hidden_us"],
            # which contention priced the prediction's messages (measured on their link, or assumed)
            "predicted_contention": pred.get("contention", ""),
            "measured_breakdown_us": measured_breakdown(tl) if tl else None,
            # the components' measured side: each phase's median over the ranks (a cell made before
            # every rank's breakdown was kept: rank 0's, measured_breakdown_us)
            "measured_breakdown_ranks_us": median_breakdown(by_rank) if by_rank else None,
            "measured_breakdown_ranks": len(by_rank) if by_rank else 1,
            "traced_round": traced_round(row.get("samples_us") or [meas], tl),
            "predict_command": request.command()}


# ---------------------------------------------------------------------------------------------
# The model's components against the measured ones

COMPONENT_THRESHOLD_PCT = 5.0  # a component whose |predicted - measured| exceeds this share of the iteration
COMPONENTS = {"compute": "forward + backward (backward as it ran beside the messages)",
              "comm_exposed": "the wait for the messages after backward (what a trace shows idle)",
              "overlap": "the messages' time hidden behind backward (before its end)",
              "io": "I/O wait + the batch's copy", "update": "the update"}
GROWS_WITH_N = ("comm_exposed", "overlap")  # a prediction beyond the measured scale leans on these


def components_of(parts: Mapping[str, float], hidden: float) -> dict[str, float]:
    """COMPONENTS from a breakdown (breakdown_of, measured_breakdown) and the hidden messages' time."""
    return {"compute": parts["forward"] + parts["backward"], "comm_exposed": parts["comm"], "overlap": hidden,
            "io": parts["io"] + parts["h2d"], "update": parts["update"]}


def component_row(c: Mapping[str, Any]) -> dict[str, Any]:
    """One compare row's components, measured (its traced round) against predicted; a component
    whose |difference| exceeds COMPONENT_THRESHOLD_PCT of the measured iteration did not validate."""
    mb, ref = c.get("measured_breakdown_ranks_us") or c["measured_breakdown_us"], c["measured_us"]
    measured = components_of(mb, mb["comm_hidden"])
    predicted = components_of(c["predicted_breakdown_us"], c["predicted_comm_hidden_us"])
    parts = {k: {"measured_us": measured[k], "predicted_us": predicted[k], "diff_us": predicted[k] - measured[k],
                 "diff_pct": 100 * (predicted[k] - measured[k]) / ref,
                 "validated": abs(predicted[k] - measured[k]) <= COMPONENT_THRESHOLD_PCT / 100 * ref}
             for k in COMPONENTS}
    ranks = c.get("measured_breakdown_ranks", 1) if c.get("measured_breakdown_ranks_us") else 1
    return {"strategy": c["strategy"], "workers": c["workers"], "measured_us": ref, "error_pct": c["error_pct"],
            "measured_from": (f"the traced median round, each phase the median over {ranks} ranks" if ranks > 1
                              else "the traced median round, rank 0"),
            "predicted_comm_us": c["predicted_comm_us"], "components": parts,
            "failed": [k for k, p in parts.items() if not p["validated"]]}


def validate_components(compare: list[dict[str, Any]], workers: list[int], n_meas: int) -> dict[str, Any]:
    """The component table of the measured strategies (those with a traced round), and the
    predictions beyond the measured scale that lean on a component that did not validate."""
    rows = [component_row(c) for c in compare if c.get("measured_breakdown_us")]
    flagged = [{"strategy": r["strategy"], "workers": n, "leans_on": leans}
               for r in rows if (leans := [k for k in r["failed"] if k in GROWS_WITH_N])
               for n in sorted(workers) if n > n_meas]
    return {"threshold_pct": COMPONENT_THRESHOLD_PCT, "components": COMPONENTS, "grows_with_n": list(GROWS_WITH_N),
            "rows": rows, "flagged_predictions": flagged}


# ---------------------------------------------------------------------------------------------
# Validation beyond the measured scale: the composed iteration measured on more nodes (the
# emulated cluster: scripts/study-validate.sh), against the model fed this study's phases and
# the all-reduce fit of the link that run crossed

VALIDATION_DIR = "validation"


def _validation_iteration(cfg: Config, path: str) -> tuple[dict[str, Any], str]:
    """The `gdlbench iteration --json` report of --validate, checked against the study: (doc, net)."""
    from ..common.paths import read_json

    doc = read_json(path, "--validate")
    summary = doc.get("summary") if isinstance(doc, dict) else None
    if not isinstance(summary, dict) or not isinstance(summary.get("measured_us"), dict) or not summary["measured_us"]:
        raise UsageError(f"--validate {path}: not a `gdlbench iteration --json` report (no summary.measured_us)")
    net = (doc.get("args") or {}).get("net")
    if net not in cfg.nets:
        raise UsageError(f"--validate {path}: measures {net!r}, not one of the study's nets ({', '.join(cfg.nets)})")
    if summary.get("batch") != cfg.batch[net]:
        raise UsageError(f"--validate {path}: {net} at batch {summary.get('batch')}; the study runs it at batch "
                         f"{cfg.batch[net]}")
    nodes = ((doc.get("env") or {}).get("topology") or {}).get("nodes")
    if not isinstance(nodes, int) or nodes <= cfg.nodes:
        raise UsageError(f"--validate {path}: measured on {nodes} node(s); a validation beyond the measured scale "
                         f"needs more nodes than the study's {cfg.nodes}")
    if not any(s in summary["measured_us"] for s in cfg.strategies):
        raise UsageError(f"--validate {path}: none of the study's strategies ({', '.join(cfg.strategies)}) measured")
    return doc, net


CLUSTER_FILE = "cells/cluster.json"


def attach_cluster(root: Path, cluster_file: str) -> str:
    """A copy of --cluster FILE in the study (DIR/cells/cluster.json), so that the study is whole
    where it is moved and its predict commands name the copy; returns that path (in DIR)."""
    write_atomic(root / CLUSTER_FILE, Path(cluster_file).read_bytes())
    return CLUSTER_FILE


def attach_validation(root: Path, cfg: Config, iteration_file: str, fit_file: str) -> dict[str, str]:
    """Check --validate (the composed iteration of one of the study's nets measured on more nodes
    than the study) and --validate-fit (the `allreduce --fit --json` of the same nodes: the link
    it crossed), then copy both into DIR/validation/; returns Config.validation (paths in DIR)."""
    from ..model import cluster

    doc, net = _validation_iteration(cfg, iteration_file)
    try:
        c = cluster.load_cluster(fit_file)
    except UsageError as exc:
        raise UsageError(f"--validate-fit {fit_file}: not the fit of a multi-node run ({exc})") from None
    topo = doc["env"]["topology"]
    if (c.nodes, c.per_node) != (topo["nodes"], topo.get("ranks_per_node")):
        raise UsageError(f"--validate-fit {fit_file}: fitted on {c.nodes} node(s) x {c.per_node}, but --validate "
                         f"{iteration_file} ran on {topo['nodes']} x {topo.get('ranks_per_node')}")
    out = {"iteration": f"{VALIDATION_DIR}/iteration-{net}.json", "fit": f"{VALIDATION_DIR}/allreduce-fit.json"}
    for src, key in ((iteration_file, "iteration"), (fit_file, "fit")):
        if Path(src).resolve() != (root / out[key]).resolve():
            write_atomic(root / out[key], Path(src).read_bytes())
    return out


def validation_analysis(root: Path, cfg: Config, strategies: list[Strategy]) -> dict[str, Any] | None:
    """The validation point: per strategy measured on the other cluster, the model's prediction
    for it from this study's phases and that cluster's fitted link, the error per component."""
    if not cfg.validation:
        return None
    doc = json.loads((root / cfg.validation["iteration"]).read_text())
    net, summary = doc["args"]["net"], doc["summary"]
    n = int(doc["env"]["world_size"])
    spec = cfg.net_spec(net)
    compare, commands = [], {}
    for s in strategies:
        if s.name not in summary["measured_us"]:
            continue
        request = PredictRequest(phases=f"cells/iteration-{net}.json", net=spec if spec != net else None,
                                 comm=CommSource(cluster=cfg.validation["fit"]), strategy=s.name, workers=(n,))
        compare.append(compare_row(s, n, doc, _rows(root, request)[0], request))
        commands[s.name] = request.command()
    topo = doc["env"]["topology"]
    inter = json.loads((root / cfg.validation["fit"]).read_text())["summary"]["fit"]["levels"]["inter"]
    return {"net": net, "workers": n, "nodes": topo["nodes"], "ranks_per_node": topo.get("ranks_per_node"),
            "shape": env.shape(topo), "iteration_file": cfg.validation["iteration"], "fit_file": cfg.validation["fit"],
            "inter_alpha_us": inter["alpha_us"], "inter_gbs": inter.get("link_gbs"),
            "command": doc.get("command"), "compare": compare,
            "components": validate_components(compare, [], n), "predict_commands": commands}


def leans_on_failed(verdict: Mapping[str, Any], components: Mapping[str, Any]) -> dict[str, list[str]]:
    """The components that did not validate at the measured scale and that a predicted verdict's
    strategies (winner, tied, runner-up) lean on at its N: {strategy: [component, ...]}."""
    at_n = {f["strategy"]: f["leans_on"] for f in components["flagged_predictions"]
            if f["workers"] == verdict["workers"]}
    named = [verdict["winner"], *verdict.get("tied", []), verdict.get("runner_up")]
    return {s: at_n[s] for s in dict.fromkeys(named) if s in at_n}


# ---------------------------------------------------------------------------------------------
# Noise, ties and the reason behind each verdict

TIE_SE = 2.0  # a measured margin under TIE_SE x the combined standard error is a tie
ROBUST = 2.0  # a margin over ROBUST x the tie threshold (measured) or the band (predicted) is robust
PS_SERVERS_ASSUMED = ("servers = workers (P = N): assumed, as the strategy leaves P unset; one server per "
                      "worker; incast priced (a server hears from each of the N-1 other workers in turn, N-1 latencies), "
                      "contention for a server's CPU not")


def measured_spread(samples: list[float]) -> dict[str, Any]:
    """The spread over rounds of a measured time: its samples, range and the standard error of the
    median (common.measurement.median_se; 0 for one round)."""
    return {"measured_samples_us": [float(x) for x in samples], "measured_rounds": len(samples),
            "measured_min_us": float(min(samples)), "measured_max_us": float(max(samples)),
            "measured_se_us": median_se(samples)}


def servers_of(s: Strategy, workers: int) -> dict[str, Any]:
    """How many parameter servers a PS strategy is priced with at `workers`, and on what ground
    ({} for an all-reduce strategy)."""
    if s.collective != "ps":
        return {}
    if s.servers is None:
        return {"servers": workers, "servers_assumption": PS_SERVERS_ASSUMED}
    return {"servers": s.servers, "servers_assumption": f"servers fixed at {s.servers} by the strategy; "
                                                        "incast priced (N-1 latencies per push and pull), server CPU contention not"}


def traced_round(samples: list[float], tl: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Which round the timeline shows: the median round (the lower median for an even count, as
    gdlbench iteration picks it), rank 0's trace of it."""
    if not tl:
        return None
    order = sorted(range(len(samples)), key=samples.__getitem__)
    k = order[(len(order) - 1) // 2]
    return {"round": k + 1, "of": len(samples), "rank": 0, "t_iter_us": tl["t_iter_us"],
            "round_t_iter_us": samples[k], "name": f"the median round (round {k + 1} of {len(samples)}), rank 0"}


def group_times(parts: Mapping[str, float]) -> dict[str, float]:
    return {g: sum(parts.get(p, 0.0) for p in ps) for g, ps in PHASE_GROUPS.items()}


def why(best: Mapping[str, Any], second: Mapping[str, Any] | None, key: str) -> dict[str, Any] | None:
    """The phase group that separates the winner from the runner-up: the largest difference of
    their breakdowns (`key`), runner-up minus winner."""
    if second is None or not best.get(key) or not second.get(key):
        return None
    a, b = group_times(best[key]), group_times(second[key])
    g = max(a, key=lambda k: b[k] - a[k])
    return {"group": g, "winner_us": a[g], "runner_up_us": b[g], "difference_us": b[g] - a[g]}


def decide(n: int, n_meas: int, compare: list[dict[str, Any]], at_n: list[dict[str, Any]],
           model_err: Mapping[str, float]) -> dict[str, Any]:
    """The verdict at n workers. Measured (n = the ranks the study ran): strategy j ties with the
    fastest if t_j - t_best < TIE_SE x sqrt(se_best^2 + se_j^2), se the standard error of each median
    over the rounds. Predicted: the margin's band is the model's |error| at the measured scale of
    the two strategies, added (a strategy not measured takes the largest); j ties if its margin is
    inside that band. A margin over ROBUST x the threshold is robust."""
    worst = max(model_err.values(), default=0.0)
    if n == n_meas and compare:
        ranked = sorted(compare, key=lambda c: c["measured_us"])
        best = ranked[0]
        t_best = best["measured_us"]

        def threshold_pct(c: Mapping[str, Any]) -> float:
            return float(100 * TIE_SE * math.hypot(best["measured_se_us"], c["measured_se_us"]) / t_best)

        times = [c["measured_us"] for c in ranked]
        source, noise_known = "measured", min(c["measured_rounds"] for c in ranked) > 1
        ips = best["measured_images_per_s"]  # the very figure the comparison table shows
        parts_key = "measured_breakdown_us"
    else:
        ranked = sorted(({**r, "predicted_breakdown_us": breakdown_of(r)} for r in at_n), key=lambda r: r["t_iter_us"])
        best = ranked[0]
        t_best = best["t_iter_us"]

        def threshold_pct(c: Mapping[str, Any]) -> float:
            return model_err.get(best["strategy"], worst) + model_err.get(c["strategy"], worst)

        times = [r["t_iter_us"] for r in ranked]
        source, noise_known = "predicted", bool(model_err)
        ips = best["images_per_s"]
        parts_key = "predicted_breakdown_us"
    second = ranked[1] if len(ranked) > 1 else None
    margin = 100 * (times[1] / t_best - 1) if second else None
    band = threshold_pct(second) if second else None
    tied = [c["strategy"] for c, t in zip(ranked, times, strict=True)
            if c is best or (noise_known and 100 * (t / t_best - 1) < threshold_pct(c))]
    parts = best.get(parts_key) or best.get("predicted_breakdown_us") or breakdown_of(best)
    bound, bound_pct = bound_by(parts)
    total = sum(group_times(parts).values()) or 1.0
    state = ("tie" if len(tied) > 1 else "untested" if not noise_known or second is None else
             "robust" if margin is not None and band is not None and margin > ROBUST * band else "winner")
    return {"workers": n, "source": source, "winner": best["strategy"], "winner_t_iter_us": t_best,
            "winner_images_per_s": ips, "runner_up": second["strategy"] if second else None,
            "margin_pct": margin, "margin_band_pct": band, "state": state, "tied": tied if len(tied) > 1 else [],
            "rule": (f"tie: margin < {TIE_SE:g} x the combined standard error of the two medians over "
                     "the rounds" if source == "measured" else
                     "tie: margin < the model's |error| at the measured scale of the two strategies, added"),
            "why": why(best, second, parts_key if second and second.get(parts_key) else "predicted_breakdown_us"),
            **{f"winner_{k}": v for k, v in servers_of_row(best).items()},
            **({f"runner_up_{k}": v for k, v in servers_of_row(second).items()} if second else {}),
            "bound_by": bound, "bound_share_pct": bound_pct,
            "comm_exposed_pct": 100 * parts.get("comm", 0.0) / total}


def servers_of_row(r: Mapping[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("servers", "servers_assumption") if k in r}



def what_ifs(root: Path, cfg: Config, winner: Strategy, base: PredictRequest, summary: Mapping[str, Any],
             encode: float | None) -> dict[str, Any]:
    """The predicted gain of each change that applies to the winning strategy at the base
    request's worker count, ranked; each with the `gdlbench predict` command that shows it."""

    def t_iter(request: PredictRequest) -> tuple[float, float]:
        row = _rows(root, request)[0]
        return row["t_iter_us"], row["images_per_s"]

    base_t, base_ips = t_iter(base)
    options: list[tuple[str, PredictRequest]] = []
    # a sharded winner (ZeRO, FSDP) has its own overlap and units: the next stage is its what-if
    replicated = winner.collective == "allreduce" and not winner.shard
    if winner.overlap != "wfbp" and not winner.shard:
        options.append(("turn on WFBP (overlap communication with backward)", replace(base, overlap="wfbp")))
    sweep: list[dict[str, Any]] = []
    if replicated:
        for mib in BUCKETS_MIB:
            t, ips = t_iter(replace(base, fuse_bytes=mib * 2**20))
            sweep.append({"bucket_mib": mib, "t_iter_us": t, "images_per_s": ips})
        best = min(sweep, key=lambda b: b["t_iter_us"])["bucket_mib"]  # the first of the fastest
        options.append((f"fusion buckets of {best} MiB (best of {', '.join(map(str, BUCKETS_MIB))} MiB)",
                        replace(base, fuse_bytes=int(best) * 2**20)))
    options += [("twice the link bandwidth", replace(base, link_scale="2")),
                ("half the link latency", replace(base, link_scale="1:0.5")),
                ("fp16/bf16 gradients (half the bytes)", replace(base, grad_dtype="bfloat16"))]
    if encode is not None and not winner.shard:
        options.append((f"top-k compression at ratio {cfg.compress_ratio:g} (measured encode "
                        f"{encode * 1e3:.3g} ns/B)", replace(base, compress=f"{cfg.compress_ratio:g}:{encode:.4g}")))
    options.append((f"twice the batch per worker ({2 * summary['batch']})", replace(base, batch=2 * summary["batch"])))
    if summary.get("io_threads"):
        options.append((f"twice the I/O threads ({2 * summary['io_threads']})",
                        replace(base, io_threads=2 * summary["io_threads"])))
    rows: list[dict[str, Any]] = []
    for label, request in options:
        t, ips = t_iter(request)
        rows.append({"what": label, "t_iter_us": t, "images_per_s": ips, "gain_pct": 100 * (ips / base_ips - 1),
                     "command": request.command()})
    rows.sort(key=lambda r: r["gain_pct"], reverse=True)
    assert base.workers is not None
    out = {"workers": base.workers[0], "strategy": winner.name, "base_t_iter_us": base_t,
           "base_images_per_s": base_ips, "base_command": base.command(), "ranked": rows}
    if replicated:
        out["bucket_sweep"] = sweep
    return out
