"""What the run ran on: versions, devices, CPU, MPI world; thread and device defaults."""

from __future__ import annotations

import os
import platform
import sys
from functools import lru_cache

from . import __version__
from ._native import MPI, _core, _cuda, cuda_status
from .errors import UsageError

# Variables that launchers set to the number of processes they started.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS")


def world() -> MPI.Intracomm:
    return MPI.COMM_WORLD


def rank() -> int:
    return MPI.COMM_WORLD.Get_rank()


@lru_cache(maxsize=1)
def _node_rank_and_size() -> tuple[int, int]:
    """(this rank among the job's ranks on this node, how many there are); collective."""
    if MPI.COMM_WORLD.Get_size() == 1:
        return 0, 1
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def local_ranks() -> int:
    """Ranks of this job on this node."""
    return _node_rank_and_size()[1]


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """C cores shared by R ranks on the node: C // R compute threads each (at least 1)."""
    return max(1, usable_cores() // local_ranks())


def launcher_mismatch() -> str | None:
    """The most common nccl-tests mistake: N processes started, each its own 1-rank MPI world."""
    size = MPI.COMM_WORLD.Get_size()
    for var in _LAUNCHER_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 1 and size == 1:
            return (
                f"WARNING: the launcher started {value} processes ({var}={value}) but this MPI world has "
                "1 rank: every process runs alone. Is gdlbench's MPI (the mpich wheel) the launcher's MPI? "
                "Use the mpiexec of the venv gdlbench is installed in."
            )
    return None


def device_rule(requested: str, gpus: int, why_none: str, local_rank: int, local_size: int
                ) -> tuple[str, int | None, str]:
    """(device, GPU index or None, why): the one rule for which device a rank uses.

    Each rank on a node takes its own GPU, GPU = local rank (among the ranks sharing the node).
    'auto' picks cuda only when every rank of the node gets a GPU of its own, else the CPU (ranks
    sharing one GPU would measure each other, and NCCL refuses two ranks on one device); 'cuda'
    with more ranks on the node than GPUs is a usage error.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device: expected auto, cpu or cuda, got {requested!r}")
    if requested == "cpu":
        return "cpu", None, "asked for"
    if gpus == 0:
        if requested == "cuda":
            raise UsageError(f"--device cuda: no usable GPU: {why_none}")
        return "cpu", None, f"auto: {why_none}"
    if local_size > gpus:
        shared = f"{local_size} ranks on this node but {gpus} GPU(s) visible"
        if requested == "cuda":
            raise UsageError(f"--device cuda: {shared}; start at most {gpus} rank(s) per node, or use --device cpu")
        return "cpu", None, f"auto: {shared}"
    how = "asked for" if requested == "cuda" else f"auto: {gpus} GPU(s) visible"
    return "cuda", local_rank, f"{how}; local rank {local_rank} -> GPU {local_rank}"


def resolve_device(requested: str) -> tuple[str, str]:
    """('cpu' | 'cuda', why), by device_rule; on cuda, this rank's GPU is made current before any
    CUDA work (stream, handles, buffers) so that all of it lands there."""
    count, why = cuda_status() if requested != "cpu" else (0, "")
    local_rank, local_size = _node_rank_and_size() if count else (0, 1)
    device, index, reason = device_rule(requested, count, why, local_rank, local_size)
    if index is not None:
        _cuda.set_device(index)
    return device, reason


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def blas_note() -> str | None:
    """Says when OpenBLAS runs kernels below what the CPU supports (OPENBLAS_CORETYPE, say)."""
    core = _core.blas_corename()
    flags = _cpu_flags()
    if "avx512f" in flags and core.lower() in ("haswell", "zen", "sandybridge", "prescott", "nehalem"):
        forced = os.environ.get("OPENBLAS_CORETYPE")
        why = f"OPENBLAS_CORETYPE={forced}" if forced else "its own detection"
        return f"OpenBLAS runs {core} (AVX2) kernels on an AVX-512 CPU ({why})"
    return None


def _version_str(code: int, kind: str) -> str:
    if code is None or code < 0:
        return "unknown"
    if code == 0:
        return "none"
    if kind == "cuda":  # 13020 -> 13.2
        return f"{code // 1000}.{(code % 1000) // 10}"
    if kind == "cudnn":  # 92801 -> 9.28.1
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    if kind == "nccl":  # 23203 -> 2.32.3
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    if kind == "cublas":  # 130401 -> 13.4.1
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return str(code)


def collect() -> dict:
    """The env block of every report (DESIGN.md section 6)."""
    from importlib import metadata

    def pkg(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    info: dict = {
        "gdlbench": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "mpi": MPI.Get_library_version().strip().splitlines()[0],
        "mpi4py": pkg("mpi4py"),
        "blas": f"{_core.blas_config().strip()} (core {_core.blas_corename()}, scipy-openblas32 {pkg('scipy-openblas32')})",
        "blas_threads": _core.blas_threads(),
        "blas_note": blas_note(),
        "cpu": _cpu_model(),
        "cpu_cores": usable_cores(),
        "world_size": MPI.COMM_WORLD.Get_size(),
        "local_ranks": local_ranks(),
        "default_threads": default_threads(),
        "cuda_backend": "built" if _cuda is not None else "not available",
        "devices": [{"index": 0, "kind": "cpu", "name": _cpu_model(), "cores": usable_cores()}],
    }
    count, why = cuda_status()
    if _cuda is not None:
        v = _cuda.versions()
        info.update(
            cuda_runtime=_version_str(v["cuda_runtime"], "cuda"),
            driver=_version_str(v["driver"], "cuda"),
            cublas=_version_str(v["cublas"], "cublas"),
            cudnn=_version_str(v["cudnn"], "cudnn"),
            nccl=_version_str(v["nccl"], "nccl"),
        )
        for i in range(count):
            info["devices"].append({"kind": "cuda", **_cuda.device_properties(i)})
    if count == 0:
        info["gpu"] = f"none: {why}"
    return info
