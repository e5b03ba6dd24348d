"""Collectives through PyTorch's gloo backend (torch.distributed), the library DDP uses on CPUs:
`gdlbench allreduce --backend gloo`. Needs torch (the optional extra `gdlbench[torch]`).

The ranks are MPI's (mpiexec or srun start them, as for every gdlbench command): rank 0 opens a
torch TCPStore on a free port and tells the others through MPI, so no MASTER_PORT is needed. The
store's address: MASTER_ADDR if set; else the IPv4 address of GLOO_SOCKET_IFNAME's interface
(scripts/emulated-cluster.sh sets both); else loopback when every rank runs on one host, else
the host name's address. Timed as the MPI harness times: per iteration an untimed MPI_Barrier,
then one blocking torch.distributed call, on time.perf_counter (the steady clock); each
iteration's time is the max over ranks. Checked exactly as the harness checks: separate,
untimed iterations on small integers (rank + 1), every element compared with the exact result.
The group is destroyed at exit, after every rank is done (a gloo group left to the interpreter's
teardown aborts the process now and then: "terminate called without an active exception").

reduce_scatter and allgather are timed in the forms PyTorch FSDP calls on CPU tensors (torch 2.x,
torch/distributed/fsdp/_flat_param.py): dist.reduce_scatter_tensor of the whole buffer into the
rank's 1/N (c10d::_reduce_scatter_base_; gloo runs it as an all-reduce of the whole buffer, its
profiler span `gloo:all_reduce`, then keeps the rank's chunk), and, for CPU tensors, dist.all_gather
into N views of one whole buffer (c10d::allgather_, `gloo:all_gather`), not all_gather_into_tensor.
Their size is the whole buffer (count elements per rank), as for MPI.
"""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

from ..common.errors import UsageError

COLLECTIVES = ("allreduce", "broadcast", "reduce_scatter", "allgather")
DTYPES = ("float32", "float64", "int32")
REGION = "per iteration: an untimed MPI_Barrier, then one blocking torch.distributed call (gloo)"
_state: dict[str, Any] = {}


def torch_or_error() -> Any:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise UsageError("--backend gloo needs PyTorch: pip install 'gdlbench[torch]' (or torch)") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise UsageError(f"--backend gloo: this torch ({torch.__version__}) has no gloo backend")
    return torch


def _interface_address(name: str) -> str | None:
    """The IPv4 address of a network interface (Linux's SIOCGIFADDR), or None."""
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    except (OSError, ImportError):
        return None


def _store_address(comm: Any) -> str:
    import os

    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    iface = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    if iface and (addr := _interface_address(iface)):
        return addr
    hosts = comm.allgather(socket.gethostname())
    return "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(socket.gethostname())


def init(comm: Any, timeout_s: float) -> Any:
    """torch.distributed's default group over comm's ranks (gloo), made once per process."""
    torch = torch_or_error()
    import torch.distributed as dist

    if "size" in _state:
        if _state["size"] != comm.Get_size():
            raise UsageError("--backend gloo runs on the whole MPI world only")
        return torch
    rank, size = comm.Get_rank(), comm.Get_size()
    timeout = timedelta(seconds=timeout_s if timeout_s > 0 else 24 * 3600)
    host = _store_address(comm)  # on every rank: it may ask them all for their host names
    store = port = error = None
    if rank == 0:
        try:
            store = dist.TCPStore(host, 0, size, True, timeout=timeout, wait_for_workers=False)
            port = store.port
        except Exception as exc:  # noqa: BLE001 (torch raises several kinds): said on every rank below
            error = f"--backend gloo: cannot open the rendezvous store on {host}: {exc}"
    host, port, error = comm.bcast((host, port, error), root=0)
    if error:
        raise UsageError(error)
    if rank != 0:
        store = dist.TCPStore(host, port, size, False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)
    _state.update(size=size, store=store, comm=comm)
    import atexit

    atexit.register(shutdown)  # runs while MPI is still up: mpi4py finalises it later (Py_AtExit)
    return torch


def shutdown() -> None:
    """Destroy the gloo group made by init, on every rank together: a barrier first (no rank still
    in a gloo call), then the group, then a barrier before rank 0 drops the store the others
    rendezvoused through. Safe to call twice. A failed rank never gets here: it ends the run with
    MPI_Abort, so the barriers cannot wait for a rank that is gone."""
    if "comm" not in _state:
        return
    import torch.distributed as dist
    from mpi4py import MPI

    comm = _state.pop("comm")
    together = not MPI.Is_finalized()  # a program that finalised MPI itself: no barriers left
    if together:
        comm.Barrier()
    if dist.is_initialized():
        dist.destroy_process_group()
    if together:
        comm.Barrier()
    _state.clear()


def _expected(op: str, nranks: int) -> float:
    """The exact result of op over the inputs rank + 1."""
    return {"sum": nranks * (nranks + 1) / 2, "prod": float(math.factorial(nranks)),
            "max": float(nranks), "min": 1.0}[op]


def _wrong(torch: Any, collective: str, full: Any, shard: Any, op: str, root: int, size: int) -> int:
    """The elements that differ from the exact result of a check iteration (inputs rank + 1)."""
    if collective == "allreduce":
        return int((full != _expected(op, size)).sum())
    if collective == "broadcast":
        return int((full != float(root + 1)).sum())
    if collective == "reduce_scatter":
        return int((shard != _expected(op, size)).sum())
    want = torch.arange(1, size + 1, dtype=full.dtype).repeat_interleave(shard.numel())  # chunk r from rank r
    return int((full != want).sum())


def bench(collective: str, count: int, dtype: str, op: str | None, root: int, warmup: int, iters: int,
          check: int, timeout_s: float, rotate_bytes: int, comm: Any) -> tuple[list[float], int]:
    """(per-iteration times in us, max over ranks; wrong elements summed over ranks and check
    iterations, or -1 without a check) of one row."""
    if collective not in COLLECTIVES:
        raise UsageError(f"--backend gloo times {', '.join(COLLECTIVES)}, not {collective}")
    if dtype not in DTYPES:
        raise UsageError(f"--backend gloo: dtype {dtype} is not timed on gloo ({', '.join(DTYPES)})")
    torch = init(comm, timeout_s)
    import torch.distributed as dist

    tdtype = getattr(torch, dtype)
    rank, size = comm.Get_rank(), comm.Get_size()
    reduce_op = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
                 "min": dist.ReduceOp.MIN}[op or "sum"]
    sharded = collective in ("reduce_scatter", "allgather")  # count: per rank; the buffer holds N x count
    whole = count * size if sharded else count
    nbytes = whole * torch.tensor([], dtype=tdtype).element_size()
    buffers = [(torch.ones(whole, dtype=tdtype), torch.ones(count if sharded else 1, dtype=tdtype))
               for _ in range(max(1, min(64, rotate_bytes // max(1, nbytes))))]

    def call(pair: tuple[Any, Any]) -> None:
        full, shard = pair
        if collective == "allreduce":
            dist.all_reduce(full, op=reduce_op)
        elif collective == "broadcast":
            dist.broadcast(full, src=root)
        elif collective == "reduce_scatter":
            dist.reduce_scatter_tensor(shard, full, op=reduce_op)
        else:
            dist.all_gather(list(torch.chunk(full, size)), shard)

    wrong = 0
    for _ in range(check):
        full, shard = buffers[0]
        full.fill_(0 if collective == "allgather" else rank + 1)  # all-gather: every chunk must be written
        shard.fill_(rank + 1)
        comm.Barrier()
        call(buffers[0])
        wrong += _wrong(torch, collective, full, shard, op or "sum", root, size)
    samples = []
    for i in range(warmup + iters):
        pair = buffers[i % len(buffers)]
        comm.Barrier()
        t0 = time.perf_counter()
        call(pair)
        elapsed = (time.perf_counter() - t0) * 1e6
        if i >= warmup:
            samples.append(elapsed)
    slowest = np.empty(len(samples))
    from mpi4py import MPI

    comm.Allreduce(np.asarray(samples, dtype=np.float64), slowest, op=MPI.MAX)
    total_wrong = comm.allreduce(wrong, op=MPI.SUM)
    return slowest.tolist(), total_wrong if check else -1


def _rate_beside(work: Callable[[], Any], run: Callable[[], Any], comm: Any) -> tuple[float, Any]:
    """(work's calls per second on a thread of its own while run() runs, run()'s result)."""
    import threading

    stop = threading.Event()
    done = [0]

    def compute() -> None:
        while not stop.is_set():
            work()
            done[0] += 1

    worker = threading.Thread(target=compute, daemon=True)
    comm.Barrier()
    t0 = time.perf_counter()
    worker.start()
    result = run()
    elapsed = time.perf_counter() - t0
    stop.set()
    worker.join()
    return done[0] / elapsed, result


def contention(size_bytes: int, iters: int, comm: Any, seconds: float = 1.0, rounds: int = 3) -> dict[str, Any]:
    """How much compute on one torch thread and gloo all-reduces of size_bytes slow each other on
    every rank at once, for the two kinds of compute a CPU job's backward runs (as
    gdlbench.model.torch_trace splits it): compute_slowdown for the compute-bound kind (torch.mm of 512 x
    512 fp32, in cache), memory_slowdown for the memory-bound kind (an elementwise add over 64 MiB
    tensors, beyond the caches), each = the rate alone / the rate beside the all-reduces, the median
    over `rounds` rounds of the two windows back to back (one window of each swings by 10-30 % on a
    small VM); comm_slowdown = the all-reduce's median time beside either / alone. What `predict`
    applies to backward and the messages while they overlap (gdlbench.model.phases.schedule_shared)."""
    torch = init(comm, 0)
    import torch.distributed as dist
    from mpi4py import MPI

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    x, y, z = (torch.ones(16 * 2**20) for _ in range(3))
    kinds = {"compute_slowdown": lambda: torch.mm(a, a), "memory_slowdown": lambda: torch.add(x, y, out=z)}
    buf = torch.ones(max(1, size_bytes // 4))

    def reduces() -> list[float]:
        out = []
        for _ in range(iters):
            comm.Barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            out.append((time.perf_counter() - t0) * 1e6)
        return out

    measured: dict[str, float] = {}
    beside_us: list[float] = []
    try:
        comm.Barrier()
        alone_us = float(np.median(reduces()))
        for key, work in kinds.items():
            ratios = []
            for _ in range(rounds):
                alone_rate, _ = _rate_beside(work, lambda: time.sleep(seconds), comm)
                beside_rate, beside = _rate_beside(work, reduces, comm)
                beside_us += beside
                ratios.append(alone_rate / max(beside_rate, 1e-9))
            measured[key] = comm.allreduce(float(np.median(ratios)), op=MPI.MAX)
    finally:
        torch.set_num_threads(threads)
    measured["comm_slowdown"] = comm.allreduce(float(np.median(beside_us)) / alone_us, op=MPI.MAX)
    return {**{k: max(1.0, v) for k, v in measured.items()}, "size_bytes": int(buf.numel() * 4),
            "measured": {**measured, "allreduce_alone_us": alone_us},
            "method": f"on one torch thread, torch.mm 512x512 fp32 (compute-bound) and an add over 64 MiB fp32 "
                      f"tensors (memory-bound), each alone and beside gloo all-reduces of size_bytes, every rank "
                      f"at once, the median of {rounds} rounds; the max over ranks; the model takes values below 1 "
                      "as 1"}
