"""What the run ran on: versions, devices, CPU, MPI world; thread and device defaults."""

from __future__ import annotations

import os
import platform
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import __version__
from .._native import MPI, _core, _cuda, cuda_status, init_mpi, require_cuda
from .errors import UsageError

# Variables that launchers set to the number of processes they started.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS")


def world() -> MPI.Intracomm:
    """MPI_COMM_WORLD, MPI initialised first if it is not yet (init_mpi)."""
    init_mpi()
    return MPI.COMM_WORLD


def rank() -> int:
    return world().Get_rank()


# Variables that launchers set to the number of this job's processes on this node.
_LAUNCHER_LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")


@lru_cache(maxsize=1)
def _node_rank_and_size() -> tuple[int, int]:
    """(this rank among the job's ranks on this node, how many there are); collective."""
    if world().Get_size() == 1:
        return 0, 1
    node = world().Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), node.Get_size()
    finally:
        node.Free()


def set_ranks_per_node(ranks_per_node: int | None) -> None:
    """Group ranks into nodes of this many consecutive ranks (--ranks-per-node), for layouts MPI
    cannot see; None or 0: the nodes MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) finds."""
    g = ranks_per_node or 0
    if isinstance(g, bool) or not isinstance(g, int) or g < 0:
        raise UsageError(f"--ranks-per-node must be a positive integer, got {ranks_per_node!r}")
    _core.set_ranks_per_node(g)
    if _cuda is not None and hasattr(_cuda, "set_ranks_per_node"):
        _cuda.set_ranks_per_node(g)  # its own copy, for the NCCL hierarchical all-reduce


def topology(comm: MPI.Comm | None = None) -> dict[str, Any]:
    """Nodes x ranks per node of comm (default the world): {"nodes", "ranks_per_node" (None when
    nodes differ in size), "min_ranks_per_node", "max_ranks_per_node", "found_by", "shape"}.
    Collective the first time on a communicator (cached on it)."""
    t = _core.topology(comm or world())
    g = _core.ranks_per_node_setting()
    return {"nodes": t["nodes"], "ranks_per_node": t["min_local"] if t["min_local"] == t["max_local"] else None,
            "min_ranks_per_node": t["min_local"], "max_ranks_per_node": t["max_local"],
            "found_by": f"--ranks-per-node {g} (blocks of consecutive ranks)" if g
            else "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)"}


def shape(t: dict[str, Any]) -> str:
    """'2 nodes x 2 ranks per node', or '2 nodes of 1-2 ranks' when they differ."""
    nodes = f"{t['nodes']} node{'s' if t['nodes'] != 1 else ''}"
    if t["ranks_per_node"] is not None:
        per = t["ranks_per_node"]
        return f"{nodes} x {per} rank{'s' if per != 1 else ''} per node"
    return f"{nodes} of {t['min_ranks_per_node']}-{t['max_ranks_per_node']} ranks"


def _launcher_count(names: tuple[str, ...]) -> int | None:
    """The first of these launcher variables that holds a count (None: none does)."""
    for var in names:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) >= 1:
            return int(value)
    return None


def local_ranks() -> int:
    """Ranks of this job on this node: as the launcher says (hydra, Open MPI, MVAPICH), so that
    one rank may ask alone (a study's rank 0 writing its report); else the node split, a
    collective over COMM_WORLD that every rank must then enter."""
    local = _launcher_count(_LAUNCHER_LOCAL_SIZE_VARS)
    if local is not None and local <= MPI.COMM_WORLD.Get_size():
        return local
    return _node_rank_and_size()[1]


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """C cores shared by R ranks on the node: C // R compute threads each (at least 1)."""
    return max(1, usable_cores() // local_ranks())


# MPICH (ch4) spins in every blocking call while it waits. Where a command's threads outnumber the
# cores (the ranks' compute threads plus each rank's communication thread), a spinning
# communication thread takes its core from a compute thread, and the peer it waits for is often
# off its own: measured on 2 ranks x (1 compute + 1 communication thread) on 2 cores, WFBP messages
# stalled for tens of ms at random and the composed iteration moved by up to 11 % between runs, by
# up to 6 % with these (docs/model.md). They make a waiting call yield its core after a poll that
# found nothing to do, as Open MPI does by itself when it sees more processes than cores.
MPICH_YIELD = {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "1",
               "MPIR_CVAR_POLLS_BEFORE_YIELD": "1"}
_wait_policy = "the MPI library's default"


def choose_mpi_wait(threads: int | None, helper_threads: int) -> str:
    """Before MPI is initialised: under MPICH, when this node's ranks x (`threads` compute threads,
    default cores // ranks, + `helper_threads` communication threads) outnumber its cores, set
    MPICH_YIELD in the environment, unless the caller set MPIR_CVAR_CH4_PROGRESS_THROTTLE (0 keeps
    it spinning). The ranks are the launcher's counts (all on this node where it gives no local
    count). Returns how MPI waits, for the report (mpi_wait)."""
    global _wait_policy
    if MPI.Is_initialized() or "MPICH" not in MPI.Get_library_version():
        return _wait_policy
    if "MPIR_CVAR_CH4_PROGRESS_THROTTLE" in os.environ:
        _wait_policy = ("MPICH's progress throttle as the environment sets it (MPIR_CVAR_CH4_PROGRESS_THROTTLE="
                        f"{os.environ['MPIR_CVAR_CH4_PROGRESS_THROTTLE']})")
        return _wait_policy
    world_size = _launcher_count(_LAUNCHER_SIZE_VARS) or 1
    local = min(world_size, _launcher_count(_LAUNCHER_LOCAL_SIZE_VARS) or world_size)
    cores = usable_cores()
    compute = threads if threads else max(1, cores // local)
    if world_size > 1 and local * (compute + helper_threads) > cores:
        os.environ.update(MPICH_YIELD)
        helpers = f" + {helper_threads} communication" if helper_threads else ""
        _wait_policy = (f"MPICH yields while it waits: {local} ranks x {compute + helper_threads} threads ({compute} "
                        f"compute{helpers}) on {cores} cores (MPIR_CVAR_CH4_PROGRESS_THROTTLE=0 keeps it spinning)")
    else:
        _wait_policy = "MPICH spins while it waits (its default)"
    return _wait_policy


def mpi_wait() -> str:
    """How MPI waits in this run (choose_mpi_wait)."""
    return _wait_policy


def mpich_yields() -> bool:
    """MPICH's progress throttle is on (choose_mpi_wait set it, or the environment did)."""
    return os.environ.get("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "0").strip() not in ("", "0")


def launcher_mismatch() -> str | None:
    """The most common nccl-tests mistake: N processes started, each its own 1-rank MPI world."""
    size = world().Get_size()
    for var in _LAUNCHER_SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 1 and size == 1:
            advice = ("Under Slurm, start it with `srun --mpi=pmi2` (the mpich wheel speaks PMI2; "
                      "srun's default may start no PMI at all)" if "SLURM_JOB_ID" in os.environ or
                      var == "SLURM_NTASKS" else "Use the mpiexec of the venv gdlbench is installed in")
            return (
                f"WARNING: the launcher started {value} processes ({var}={value}) but this MPI world has "
                f"1 rank: every process runs alone. Is gdlbench's MPI (the mpich wheel) the launcher's MPI? "
                f"{advice}."
            )
    return None


def assign_gpus(visible: list[list[str]]) -> list[int | None]:
    """Per local rank, the index (in that rank's own device list) of a GPU no other rank of the node
    takes, or None for a rank left without one; `visible` holds, per local rank, the PCI bus ids of
    the GPUs that rank sees, in its own CUDA order.

    Bus ids name physical devices, so this works whatever each rank's CUDA_VISIBLE_DEVICES is: all
    ranks seeing all GPUs (local rank r -> its device r), one GPU each (Slurm's --gpus-per-task,
    torchrun setups: each rank its device 0), or anything between. A maximum matching (ranks in
    order, each rank's devices in its own order), so a rank is left out only when no assignment
    serves them all.
    """
    lists = [[b.strip().lower() for b in ids] for ids in visible]
    owner: dict[str, int] = {}  # bus id -> local rank

    def place(r: int, seen: set[str]) -> bool:
        for bus in lists[r]:  # a free GPU first: with equal lists, local rank r takes its device r
            if bus not in owner:
                owner[bus] = r
                return True
        for bus in lists[r]:  # else one whose owner can move to another (an augmenting path)
            if bus in seen:
                continue
            seen.add(bus)
            if place(owner[bus], seen):
                owner[bus] = r
                return True
        return False

    for r in range(len(lists)):
        place(r, set())
    got: list[int | None] = [None] * len(lists)
    for bus, r in owner.items():
        got[r] = lists[r].index(bus)
    return got


def device_rule(requested: str, why_none: str, local_rank: int, visible: list[list[str]]
                ) -> tuple[str, int | None, str]:
    """(device, GPU index or None, why): the one rule for which device a rank uses.

    `visible` holds, per local rank (the ranks sharing this node), the PCI bus ids of the GPUs that
    rank sees (what CUDA_VISIBLE_DEVICES leaves it). Each rank takes a GPU of its own (assign_gpus).
    'auto' picks cuda only when every rank of the node gets one, else the CPU (ranks sharing one
    GPU would measure each other, and NCCL refuses two ranks on one device); 'cuda' then is a usage
    error. Every rank of the node computes the same answer from the same lists.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device: expected auto, cpu or cuda, got {requested!r}")
    if requested == "cpu":
        return "cpu", None, "asked for"
    mine = visible[local_rank]
    if not mine:
        if requested == "cuda":
            raise UsageError(f"--device cuda: no usable GPU: {why_none}")
        return "cpu", None, f"auto: {why_none}"
    assigned = assign_gpus(visible)
    left_out = [r for r, index in enumerate(assigned) if index is None]
    if left_out:
        gpus = len({b.strip().lower() for ids in visible for b in ids})
        shared = (f"{len(visible)} ranks on this node but {gpus} distinct GPU(s) among those they see "
                  f"(local rank(s) {', '.join(map(str, left_out))} would share one)")
        if requested == "cuda":
            raise UsageError(f"--device cuda: {shared}; start at most {gpus} rank(s) per node, give each rank "
                             "a GPU of its own (CUDA_VISIBLE_DEVICES), or use --device cpu")
        return "cpu", None, f"auto: {shared}"
    index = assigned[local_rank]
    assert index is not None
    how = "asked for" if requested == "cuda" else f"auto: {len(mine)} GPU(s) visible"
    return "cuda", index, f"{how}; local rank {local_rank} -> GPU {index} of those it sees ({mine[index]})"


def visible_gpus() -> tuple[list[str], str]:
    """(the PCI bus ids of the GPUs this process sees, in CUDA's order; why there are none)."""
    count, why = cuda_status()
    if not count:
        return [], why
    cuda = require_cuda()
    ids = []
    for i in range(count):
        bus = cuda.device_properties(i).get("pci_bus_id")
        ids.append(str(bus) if bus else f"unknown-bus-id-{i}")  # cannot be matched across ranks: distinct
    return ids, ""


@lru_cache(maxsize=4)
def _node_visible(mine: tuple[str, ...]) -> tuple[int, list[list[str]]]:
    """(this rank's local rank, per local rank what it sees); collective over the world (cached)."""
    if world().Get_size() == 1:
        return 0, [list(mine)]
    node = world().Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank(), [list(ids) for ids in node.allgather(list(mine))]
    finally:
        node.Free()


def resolve_device(requested: str) -> tuple[str, str]:
    """('cpu' | 'cuda', why), by device_rule over what every rank of the node sees; on cuda, this
    rank's GPU is made current before any CUDA work (stream, handles, buffers) so that all of it
    lands there. Collective over the world when this rank sees a GPU (as every rank of a job
    normally does, or none)."""
    mine, why = visible_gpus() if requested != "cpu" else ([], "")
    local_rank, visible = _node_visible(tuple(mine)) if mine else (0, [[]])
    device, index, reason = device_rule(requested, why, local_rank, visible)
    if index is not None:
        require_cuda().set_device(index)
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


REPORTING_ORDER = "module/page_reporting/parameters/page_reporting_order"


def memory_note(sysfs: str = "/sys", proc: str = "/proc") -> str | None:
    """Says when this machine is a VM that hands freed memory back to its host (virtio-balloon
    free page reporting, feature bit 5): memory first touched after a few idle seconds then
    faults on the host too. On the development VM a fresh process took 4.8 s to touch 2 GB after
    15 s idle and 0.24 s right after another had done the same (benchmarks/first_touch.py). The
    guest reports free blocks of page_reporting_order and above; an order above the largest the
    buddy allocator has (its columns in /proc/buddyinfo) reports none: then the note says so."""
    import glob

    for path in glob.glob(f"{sysfs}/bus/virtio/drivers/virtio_balloon/virtio*/features"):
        try:
            with open(path) as f:
                bits = f.read().strip()
        except OSError:
            continue
        if len(bits) <= 5 or bits[5] != "1":
            continue
        try:
            order: int | None = int(Path(sysfs, REPORTING_ORDER).read_text())
        except (OSError, ValueError):
            order = None
        try:  # "Node 0, zone Normal" and a count per order
            orders: int | None = len(Path(proc, "buddyinfo").read_text().splitlines()[0].split()) - 4
        except (OSError, IndexError):
            orders = None
        if order is not None and orders is not None and order >= orders:
            return (f"this VM's balloon can hand freed memory back to its host (virtio-balloon free page "
                    f"reporting), switched off here (page_reporting_order {order}, above the largest order "
                    f"{orders - 1}): a first touch after a pause faults in the guest alone")
        return ("this VM hands freed memory back to its host (virtio-balloon free page reporting): memory "
                "touched first after a few idle seconds faults on the host too (20x on gdlbench's development "
                "VM), so a run that allocates fresh memory is slower after a pause than right after another "
                f"run; as root, `echo {orders or 11} > {sysfs}/{REPORTING_ORDER}` "
                "switches it off (docs/report.md)")
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


def collect(comm: MPI.Comm | None = None) -> dict[str, Any]:
    """The env block of every report (docs/report.md); its topology is comm's (default the
    world), which every rank of comm must have asked for once first (topology() is collective)."""
    from importlib import metadata

    def pkg(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    info: dict[str, Any] = {
        "gdlbench": __version__,
        "gdlbench_path": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "mpi": MPI.Get_library_version().strip().splitlines()[0],
        "mpi4py": pkg("mpi4py"),
        "blas": f"{_core.blas_config().strip()} (core {_core.blas_corename()}, scipy-openblas32 {pkg('scipy-openblas32')})",
        "blas_threads": _core.blas_threads(),
        "blas_note": blas_note(),
        "memory_note": memory_note(),
        "cpu": _cpu_model(),
        "cpu_cores": usable_cores(),
        "world_size": world().Get_size(),
        "mpi_thread_level": init_mpi().level,
        "mpi_thread_level_how": init_mpi().how,
        "mpi_wait": mpi_wait(),
        "local_ranks": local_ranks(),
        "topology": topology(comm) | {"shape": shape(topology(comm))},
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
