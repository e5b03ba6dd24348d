"""The `gdlbench` command. Each subcommand is a module in gdlbench/commands with
add_arguments(parser) and run(args) -> exit code; this file holds what they share."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from .._native import THREAD_LEVEL_ENV, THREAD_LEVELS, init_mpi
from ..common.errors import CheckFailed, UsageError
from ..common.measurement import check_threads, check_timing
from ..common.output import Outputs

# subcommand -> (module, one-line help). Modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "env": ("env", "versions of every library, devices, CPU and MPI world"),
    "gemm": ("gemm", "GEMM: OpenBLAS on the CPU, cuBLAS on the GPU"),
    "iteration": ("iteration", "an SGD iteration: every phase alone, composed per strategy, against the model"),
    "nets": ("nets", "the networks: layers, parameters, size, forward FLOPs"),
    "predict": ("predict", "predicted iteration time, throughput and scaling per strategy"),
    "update": ("update", "SGD with momentum over a flat parameter buffer, GB/s vs a copy"),
    "copy": ("copy", "host<->device and device-to-device copy bandwidth (nvbandwidth's method)"),
    "io": ("io", "t_io: read and decode a batch of JPEG files with T threads"),
    "conv": ("conv", "convolution fwd/bwd-data/bwd-filter: im2col + OpenBLAS on the CPU, cuDNN on the GPU"),
    "allreduce": ("allreduce", "all-reduce: MPI library, gdlbench's ring/rd/tree/ps, NCCL (nccl-tests flags)"),
    "reduce_scatter": ("reduce_scatter", "reduce-scatter, MPI or NCCL (size = total buffer)"),
    "allgather": ("allgather", "all-gather, MPI or NCCL (size = total buffer)"),
    "broadcast": ("broadcast", "broadcast, MPI or NCCL"),
    "layer": ("layer", "forward/backward time of one layer other than convolution"),
    "compress": ("compress", "encode cost of gradient compression (top-k sparsification), us per byte"),
    "import-trace": ("import_trace", "a PyTorch job's profiler trace as phases and gradients for predict"),
    "study": ("study", "the whole study: measure, predict, and write one report (HTML, Markdown, JSON)"),
}


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr and exit 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def common_options(p: argparse.ArgumentParser, *, device: bool = True, timing: bool = True,
                   short_iters: bool = True, iters: int | None = 20, warmup: int = 5,
                   iters_help: str = "timed iterations per row") -> None:
    """Options every measuring command shares (-n/-w as in nccl-tests, unless -n means a size);
    iters, warmup: the command's defaults (iters None: the command decides, and iters_help says how)."""
    if device:
        p.add_argument("--device", default="auto", help="auto (cuda when a GPU is visible), cpu or cuda")
    if timing:
        p.add_argument(*(["-n"] if short_iters else []), "--iters", type=int, default=iters,
                       help=iters_help + ("" if iters is None else f" (default {iters})"))
        p.add_argument(*(["-w"] if short_iters else []), "--warmup", type=int, default=warmup,
                       help=f"untimed warm-up iterations (default {warmup})")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU compute threads per rank (default: cores / ranks on the node)")
    ranks_per_node_option(p)
    p.add_argument("--json", metavar="FILE", help="write the whole report as JSON (rank 0)")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV (rank 0)")


def outputs(args: argparse.Namespace) -> Outputs:
    """The --json and --csv files of common_options, checked before anything is measured."""
    return Outputs.of(getattr(args, "json", None), getattr(args, "csv", None))


def _reject_empty(argv: list[str]) -> None:
    """An empty value ('--json ""', '--size=') is a mistake, never a default: say which option."""
    for i, arg in enumerate(argv):
        if arg == "" or (arg.startswith("-") and arg.endswith("=")):
            option = arg[:-1] if arg else (argv[i - 1] if i else "an argument")
            raise UsageError(f"{option}: empty value")


def ranks_per_node_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks-per-node", type=int, metavar="G",
                   help="group ranks into nodes of G consecutive ranks, for layouts MPI cannot see "
                        "(default: the nodes MPI_Comm_split_type shared memory finds)")


def check_common(args: argparse.Namespace) -> None:
    iters, warmup = getattr(args, "iters", None), getattr(args, "warmup", None)  # None: the command's own default
    check_timing(1 if iters is None else iters, 0 if warmup is None else warmup)
    if getattr(args, "ranks_per_node", None) is not None and not 1 <= args.ranks_per_node <= 1_000_000:
        raise UsageError(f"--ranks-per-node must be from 1 to 1,000,000, got {args.ranks_per_node}")
    check_threads(getattr(args, "threads", None))


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="gdlbench", description="Every phase of a data-parallel SGD iteration, timed with "
                            "real kernels and held against analytic models. `gdlbench COMMAND --help` for each.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=ArgumentParser, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(f".commands.{module}", __package__)
        mod.add_arguments(p)
        least = command_thread_level(mod)
        p.add_argument("--mpi-thread-level", choices=THREAD_LEVELS, default=None,
                       help=f"MPI thread support to initialise MPI with (default: {least}, the least this "
                            f"command's threads need, or ${THREAD_LEVEL_ENV}); multiple makes MPICH lock "
                            "around every call")
    return parser


def command_thread_level(module: ModuleType, args: argparse.Namespace | None = None) -> str:
    """The least MPI thread level a command needs: funneled unless its module says otherwise (its
    helper threads, the collectives' watchdog, OpenBLAS and OpenMP workers, never call MPI), by
    MPI_THREAD_LEVEL or, given the run's arguments, by mpi_thread_level(args)."""
    if args is not None and hasattr(module, "mpi_thread_level"):
        return str(module.mpi_thread_level(args))
    return str(getattr(module, "MPI_THREAD_LEVEL", "funneled"))


# Variables that launchers set to each process's rank: a usage error is reported by rank 0 alone,
# without initialising MPI for it.
_LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def _launcher_rank() -> int:
    from .._native import MPI

    if MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank()
    for var in _LAUNCHER_RANK_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "gdlbench"
    try:
        _reject_empty(argv)
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.version:
            from .. import __version__

            print(f"gdlbench {__version__}")
            return 0
        if not args.command:
            parser.print_help()
            return 2
        prog = f"gdlbench {args.command}"
        check_common(args)
        module = importlib.import_module(f".commands.{COMMANDS[args.command][0]}", __package__)
        least = command_thread_level(module, args)
        from ..common.env import choose_mpi_wait

        # serialized or more: the command's communication thread calls MPI beside its compute threads
        choose_mpi_wait(getattr(args, "threads", None),
                        helper_threads=int(THREAD_LEVELS.index(least) >= THREAD_LEVELS.index("serialized")))
        init_mpi(args.mpi_thread_level, least=least, asked_by="--mpi-thread-level")
    except UsageError as exc:  # every rank sees the same argv, so every rank stops here alike
        if _launcher_rank() == 0:
            print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2

    from ..common import env

    rank, size = env.rank(), env.world().Get_size()
    env.local_ranks()  # a collective (cached): every rank takes part now, so rank 0 alone may ask later
    env.set_ranks_per_node(getattr(args, "ranks_per_node", None))
    from ..common.output import set_table_context

    set_table_context(env.shape(env.topology()))  # also a collective the first time: every rank
    warning = env.launcher_mismatch()
    if warning:
        print(warning, file=sys.stderr, flush=True)
    code = 0
    try:
        code = module.run(args)
    except (UsageError, ValueError, OverflowError) as exc:
        code = _fail(prog, exc, 2, rank, size)
    except OSError as exc:  # a path the checks up front could not foresee (a disk that filled, say)
        code = _fail(prog, f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", 2, rank, size)
    except MemoryError as exc:
        code = _fail(prog, f"cannot allocate: {exc or 'out of memory'}", 2, rank, size)
    except CheckFailed as exc:
        code = _fail(prog, exc, 1, rank, size, abort=False)
    except KeyboardInterrupt:
        code = _fail(prog, "interrupted", 130, rank, size)
    except RuntimeError as exc:  # a library or device failure reported by the native code
        code = _fail(prog, exc, 1, rank, size)
    return code


def one_line(message: object) -> str:
    """The message on one line: newlines and other control characters (which a user's input can
    carry into it) are shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(message))


def _fail(prog: str, exc: object, code: int, rank: int, size: int, abort: bool = True) -> int:
    """One line on stderr. In a multi-rank run a failure on one rank ends them all (MPI_Abort),
    so that no rank is left waiting in a collective."""
    prefix = f"[rank {rank}] " if size > 1 else ""
    print(f"{prefix}{prog}: error: {one_line(exc)}", file=sys.stderr, flush=True)
    if abort and size > 1:
        from .._native import MPI

        # The line waits in a pipe until the launcher reads it; aborting at once can lose it
        # (hydra, under load). A moment lets the launcher forward it first.
        time.sleep(0.5)
        MPI.COMM_WORLD.Abort(code)
    return code
