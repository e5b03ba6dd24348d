"""Loads the native modules: _core (CPU + MPI, always there) and _cuda (optional), and
initialises MPI at the thread level a run needs (init_mpi)."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# OpenMP (element-wise kernels) and OpenBLAS (GEMM) keep separate thread pools on the same cores.
# Spinning idle OpenMP threads steal whole scheduler slices from OpenBLAS's (layers then take
# multiples of ~4-8 ms), so they sleep at once. libgomp reads this when it loads, hence here.
# (OPENBLAS_THREAD_TIMEOUT stays at its default: a short one made skinny GEMMs 3x slower.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import mpi4py  # noqa: E402


def _started_as_command() -> bool:
    """This process is the `gdlbench` command (console script or `python -m gdlbench`): the
    command line, once parsed, chooses MPI's thread level."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    as_module = any(a == "-m" and b in ("gdlbench", "gdlbench.cli", "gdlbench.__main__")
                    for a, b in zip(argv, argv[1:], strict=False))
    return as_module or os.path.basename(sys.argv[0] if sys.argv else "") == "gdlbench"


# mpi4py would initialise MPI at its import with MPI_THREAD_MULTIPLE, and MPICH then takes a lock
# around every call (an 8-byte all-reduce 0.3 -> 2.3 us). gdlbench initialises MPI itself, at the
# least level the run needs (init_mpi): the command once its options are parsed, a program that
# imports gdlbench at the end of this import (unless it told mpi4py not to initialise MPI).
# mpi4py still finalises MPI at exit.
_INIT_AT_IMPORT = "mpi4py.MPI" not in sys.modules and mpi4py.rc.initialize not in (False, "no") \
    and not _started_as_command()
if "mpi4py.MPI" not in sys.modules:
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = True
from mpi4py import MPI  # noqa: E402  -- loads libmpi first, so _core binds to the same library

from . import _core  # noqa: E402
from .common.errors import UsageError  # noqa: E402

CUDA_IMPORT_ERROR: str | None = None
_cuda: ModuleType | None
if importlib.util.find_spec(f"{__package__}._cuda") is None:
    _cuda = None
    CUDA_IMPORT_ERROR = "not built: reinstall with GDL_ENABLE_CUDA=ON pip install '.[cuda]'"
else:
    try:
        from . import _cuda
    except ImportError as exc:  # built, but the [cuda] runtime wheels are missing
        _cuda = None
        CUDA_IMPORT_ERROR = f"{exc} (pip install 'gdlbench[cuda]')"

__all__ = ["MPI", "THREAD_LEVELS", "THREAD_LEVEL_ENV", "MpiInit", "_core", "_cuda", "cuda_status",
           "init_mpi", "require_cuda", "require_thread_level"]

# --- MPI initialisation and its thread level ---------------------------------------------------
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")  # MPI_THREAD_*, in order
THREAD_LEVEL_ENV = "GDLBENCH_MPI_THREAD_LEVEL"
_LEVEL_CODES = {"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED,
                "serialized": MPI.THREAD_SERIALIZED, "multiple": MPI.THREAD_MULTIPLE}
# The library's default: gdlbench's composed iteration calls MPI from its communication thread
# (never at the same time as the main thread), which SERIALIZED allows.
LIBRARY_LEVEL = "serialized"


@dataclass(frozen=True)
class MpiInit:
    """How MPI was initialised: `level` is the thread level MPI provides (MPI_Query_thread),
    `how` says where it came from."""

    level: str
    requested: str | None  # None: MPI was already initialised when gdlbench first needed it
    how: str


_state: MpiInit | None = None


def _level_name(code: int) -> str:
    return next(name for name, c in _LEVEL_CODES.items() if c == code)


def check_thread_level(level: str, what: str = "--mpi-thread-level") -> str:
    if level not in THREAD_LEVELS:
        raise UsageError(f"{what}: expected one of {', '.join(THREAD_LEVELS)}, got {level!r}")
    return level


def init_mpi(level: str | None = None, *, least: str = LIBRARY_LEVEL, asked_by: str = "init_mpi") -> MpiInit:
    """Initialise MPI once and return how. The level requested is `level` if given, else the
    environment variable GDLBENCH_MPI_THREAD_LEVEL, else `least` (the least the caller's threads
    need). If MPI is already initialised (by the program that imported gdlbench, or an earlier
    call) nothing is initialised: the level it has is kept and reported. Call it before anything
    else touches MPI to choose the level; gdlbench's own functions call it when they need MPI."""
    global _state
    if _state is not None:
        return _state
    if MPI.Is_initialized():
        if MPI.Is_finalized():
            raise RuntimeError("MPI has been finalised: gdlbench cannot run MPI after MPI_Finalize")
        _state = MpiInit(_level_name(MPI.Query_thread()), None,
                         "MPI was already initialised (by the program): its level is used")
        return _state
    if level is not None:
        source = asked_by
    elif os.environ.get(THREAD_LEVEL_ENV):
        level, source = os.environ[THREAD_LEVEL_ENV].strip().lower(), THREAD_LEVEL_ENV
    else:
        level, source = least, ""
    check_thread_level(level, source or asked_by)
    how = f"asked for ({source})" if source else "the least this run's threads need"
    provided = _level_name(MPI.Init_thread(_LEVEL_CODES[level]))
    if provided != level:
        how += f"; {level} requested, the MPI library provides {provided}"
    _state = MpiInit(provided, level, how)
    return _state


def require_thread_level(least: str, what: str) -> None:
    """UsageError when MPI runs below `least`: `what` calls MPI from a second thread."""
    state = init_mpi(least=least)
    if THREAD_LEVELS.index(state.level) < THREAD_LEVELS.index(least):
        raise UsageError(f"{what} calls MPI from a second thread and needs MPI thread level {least} or more; "
                         f"MPI runs at {state.level} ({state.how})")


def cuda_status() -> tuple[int, str]:
    """(number of usable GPUs, why there are none)."""
    if _cuda is None:
        return 0, f"the CUDA backend is not available ({CUDA_IMPORT_ERROR})"
    count, why = _cuda.device_status()
    return count, why


def require_cuda() -> Any:
    """The _cuda module, or a UsageError saying why CUDA cannot be used."""
    count, why = cuda_status()
    if count == 0:
        raise UsageError(f"--device cuda: no usable GPU: {why}")
    return _cuda


if _INIT_AT_IMPORT:
    init_mpi()
