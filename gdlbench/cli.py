"""The `gdlbench` command. Each subcommand is a module in gdlbench/commands with
add_arguments(parser) and run(args) -> exit code; this file holds what they share."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .errors import CheckFailed, UsageError

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
}


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr and exit 2 (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def common_options(p: argparse.ArgumentParser, *, device: bool = True, timing: bool = True,
                   short_iters: bool = True) -> None:
    """Options every measuring command shares (-n/-w as in nccl-tests, unless -n means a size)."""
    if device:
        p.add_argument("--device", default="auto", help="auto (cuda when a GPU is visible), cpu or cuda")
    if timing:
        p.add_argument(*(["-n"] if short_iters else []), "--iters", type=int, default=20,
                       help="timed iterations per row (default 20)")
        p.add_argument(*(["-w"] if short_iters else []), "--warmup", type=int, default=5, help="untimed warm-up iterations (default 5)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU compute threads per rank (default: cores / ranks on the node)")
    ranks_per_node_option(p)
    p.add_argument("--json", metavar="FILE", help="write the whole report as JSON (rank 0)")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV (rank 0)")


def ranks_per_node_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks-per-node", type=int, metavar="G",
                   help="group ranks into nodes of G consecutive ranks, for layouts MPI cannot see "
                        "(default: the nodes MPI_Comm_split_type shared memory finds)")


def check_common(args: argparse.Namespace) -> None:
    if getattr(args, "iters", 1) < 1:
        raise UsageError(f"--iters must be >= 1, got {args.iters}")
    if getattr(args, "warmup", 0) < 0:
        raise UsageError(f"--warmup must be >= 0, got {args.warmup}")
    if getattr(args, "ranks_per_node", None) is not None and args.ranks_per_node < 1:
        raise UsageError(f"--ranks-per-node must be >= 1, got {args.ranks_per_node}")
    if getattr(args, "threads", None) is not None and not 1 <= args.threads <= 1024:
        raise UsageError(f"--threads must be between 1 and 1024, got {args.threads}")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="gdlbench", description="Every phase of a data-parallel SGD iteration, timed with "
                            "real kernels and held against analytic models. `gdlbench COMMAND --help` for each.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=ArgumentParser, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(f".commands.{module}", __package__).add_arguments(p)
    return parser


def _rank_and_size() -> tuple[int, int]:
    try:
        from mpi4py import MPI

        return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    except Exception:  # MPI itself failed to load: report that, not a traceback
        return 0, 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "gdlbench"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.version:
            from . import __version__

            print(f"gdlbench {__version__}")
            return 0
        if not args.command:
            parser.print_help()
            return 2
        prog = f"gdlbench {args.command}"
        check_common(args)
    except UsageError as exc:  # every rank sees the same argv, so every rank stops here alike
        if _rank_and_size()[0] == 0:
            print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2

    from . import env

    rank, size = env.rank(), env.world().Get_size()
    env.local_ranks()  # a collective (cached): every rank takes part now, so rank 0 alone may ask later
    env.set_ranks_per_node(getattr(args, "ranks_per_node", None))
    from .report import set_table_context

    set_table_context(env.shape(env.topology()))  # also a collective the first time: every rank
    warning = env.launcher_mismatch()
    if warning:
        print(warning, file=sys.stderr, flush=True)
    module = importlib.import_module(f".commands.{COMMANDS[args.command][0]}", __package__)
    code = 0
    try:
        code = module.run(args)
    except (UsageError, ValueError, OverflowError) as exc:
        code = _fail(prog, exc, 2, rank, size)
    except MemoryError as exc:
        code = _fail(prog, f"cannot allocate: {exc or 'out of memory'}", 2, rank, size)
    except CheckFailed as exc:
        code = _fail(prog, exc, 1, rank, size, abort=False)
    except KeyboardInterrupt:
        code = _fail(prog, "interrupted", 130, rank, size)
    except RuntimeError as exc:  # a library or device failure reported by the native code
        code = _fail(prog, exc, 1, rank, size)
    return code


def _fail(prog: str, exc: object, code: int, rank: int, size: int, abort: bool = True) -> int:
    """One line on stderr. In a multi-rank run a failure on one rank ends them all (MPI_Abort),
    so that no rank is left waiting in a collective."""
    prefix = f"[rank {rank}] " if size > 1 else ""
    print(f"{prefix}{prog}: error: {exc}", file=sys.stderr, flush=True)
    if abort and size > 1:
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(code)
    return code
