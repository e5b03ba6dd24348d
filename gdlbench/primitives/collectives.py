"""Collectives: all-reduce (the MPI library's and gdlbench's own algorithms; NCCL on GPUs),
reduce-scatter, all-gather and broadcast, timed by the native harness and checked exactly; and
the alpha-beta(-gamma) cost model (costmodel.py, docs/model.md) fitted to a size sweep.

Sizes follow nccl-tests: for all-reduce and broadcast the size is each rank's buffer; for
reduce-scatter and all-gather it is the total buffer (N blocks of `count` elements). What each
collective is, for the CLI, the report and the model, is its entry in COLLECTIVES, read from the
native harness's own table (csrc/comm/collective.h): one table for both languages."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._native import MPI, _core, _cuda, require_cuda, require_thread_level
from ..common import env
from ..common.errors import UsageError
from ..common.measurement import MAX_ITERS, Measurement, check_timing
from ..common.output import Column, fmt_float
from ..common.units import parse_size
from . import costmodel, gloo

# What the sweep functions take as sizes: one size or several, each bytes or a string like '64K'.
Sizes = int | str | np.integer | Iterable[int | str | np.integer]

# The all-reduce algorithms, as the native harness names them (csrc/comm/collective.h, kAlgos):
# one table for both languages, so an algorithm added there is here too.
ALGORITHMS: dict[str, dict[str, Any]] = {a["name"]: a for a in _core.algorithms()}
ALGOS = tuple(ALGORITHMS)
SERVER_ALGOS = tuple(a for a, d in ALGORITHMS.items() if d["servers"])  # algorithms with server ranks (--servers P)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32")
OPS = ("sum", "prod", "max", "min")
BACKENDS = ("mpi", "nccl", "gloo")
DTYPE_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4}
DEFAULT_TIMEOUT_S = 300.0
# Where a row's timed loop runs (--on): the calling (main) thread, as nccl-tests; or a thread of its
# own, as the composed iteration's communication thread sends its messages (MPI only): glibc gives
# such a thread a malloc arena of its own, which maps and unmaps MPICH's large temporaries per call.
THREADS = ("main", "comm-thread")
THREAD_NOTE = ("--on comm-thread: each row's timed loop and check ran on a thread of its own, as the composed "
               "iteration sends its messages (its own malloc arena: MPICH's temporaries over 64 MB are mapped "
               "and unmapped on every call, as inside the iteration)")

REGION = {
    "mpi": "per iteration: an untimed MPI_Barrier, then one blocking MPI call",
    "nccl": "per iteration: an untimed MPI_Barrier, then one NCCL call and cudaStreamSynchronize",
    "gloo": gloo.REGION,
}
REGION_OWN = ("per iteration: an untimed MPI_Barrier, then one blocking MPI call (gdlbench's algorithms: "
              "the whole point-to-point exchange and reductions; out of place they first copy the input "
              "into the output buffer)")


def region(backend: str, algos: Iterable[str] = ("library",)) -> str:
    """What the timed region holds, for the report."""
    return REGION_OWN if backend == "mpi" and any(a != "library" for a in algos) else REGION[backend]
CHECK_NOTE = ("#wrong: elements that differ from the exact result, summed over ranks and check "
              "iterations (separate, untimed; inputs are small integers, so every reduction is exact "
              "in every dtype)")
HALF_NOTE = ("float16/bfloat16 on MPI: 2-byte storage reduced by gdlbench's own MPI_Op (widen to float, "
             "reduce, round to nearest even); MPI has no such types")


@dataclass(frozen=True)
class Kind:
    """One collective, as the CLI, the report and the model see it: its entry in the native
    harness's table (csrc/comm/collective.h, kCollectives), read through _core.collectives()."""

    name: str
    reduces: bool  # takes --op
    rooted: bool  # has --root and one buffer: in place only
    size_is_total: bool  # the size is the whole buffer of N blocks (nccl-tests), not each rank's
    bus_factor_formula: str  # nccl-tests' busbw = algbw x this at N ranks
    host_buffers: int  # buffers of the row's size a rank holds (send, receive, scratch), for the memory check
    algos: tuple[str, ...] = ("library",)  # what --algo may name; library: the backend's own call
    cost: str | None = None  # its costmodel entry; None: the entry of the algorithm it runs

    @property
    def fits(self) -> bool:
        """--fit: the alpha-beta model is fitted to its sweep: the collective with algorithms to
        compare (also per level, on several nodes), and the reduce-scatter and all-gather, whose
        fits price the sharded strategies' messages (model.CommModel)."""
        return len(self.algos) > 1 or self.name in ("reduce_scatter", "allgather")

    def bus_factor(self, nranks: int) -> float:
        """nccl-tests' busbw factor at N ranks (0 on one rank wherever it has N-1: no link)."""
        return float(_core.bus_factor(self.name, nranks))

    def cost_name(self, algo: str) -> str:
        """The costmodel entry that prices this collective run with `algo`."""
        return self.cost or algo


COLLECTIVES: dict[str, Kind] = {
    d["name"]: Kind(d["name"], reduces=d["reduces"], rooted=d["rooted"], size_is_total=d["size_is_total"],
                    bus_factor_formula=d["bus_factor_formula"], host_buffers=d["host_buffers"],
                    algos=tuple(d["algos"]), cost=d["cost"])
    for d in _core.collectives()}
# What each backend lacks: a row that asks for it is waived (listed with the reason, not run).
BACKEND_ALGOS = {"mpi": ALGOS, "nccl": ("library",), "gloo": ("library",)}
BACKEND_DTYPES = {"mpi": DTYPES, "nccl": DTYPES, "gloo": gloo.DTYPES}


def kind(collective: str) -> Kind:
    if collective not in COLLECTIVES:
        raise UsageError(f"unknown collective {collective!r} ({', '.join(COLLECTIVES)})")
    return COLLECTIVES[collective]


def bus_factor(collective: str, nranks: int) -> float:
    """nccl-tests' busbw factor: all-reduce 2(N-1)/N, reduce-scatter and all-gather (N-1)/N,
    broadcast 1. With one rank there is no link: 0 for the first three."""
    return kind(collective).bus_factor(nranks)


class _Row:
    """What a timed row and a waived one share: the command whose report lists them (the
    collective's name: gdlbench.Compare groups by it) and their table."""

    collective: str

    @property
    def command(self) -> str:
        return self.collective

    @staticmethod
    def table(results: Sequence[CollectiveResult | WaivedRow]) -> tuple[list[Column], list[dict[str, Any]]]:
        """The CLI's table of these rows (gdlbench.Compare): collectives.table."""
        return table(results)


@dataclass
class CollectiveResult(_Row):
    """One timed row: a collective at one size, dtype, op, algorithm and buffer mode."""

    rank_reduction: ClassVar[str] = "max"  # each iteration's time is the max over ranks

    collective: str
    size_bytes: int
    count: int
    dtype: str
    op: str | None
    algo: str
    backend: str
    inplace: bool
    nranks: int
    measurement: Measurement
    wrong: int | None = None
    root: int | None = None
    servers: int | None = None
    variant: str | None = None  # hier: which of its two variants ran ("leader" or "rs-ag")
    request: CollectiveRequest | None = field(default=None, compare=False)  # what was asked (to_argv())
    on: str = "main"  # the thread its timed loop ran on (THREADS)

    @property
    def time_us(self) -> float:
        return self.measurement.median

    @property
    def algbw_gbs(self) -> float:
        return self.size_bytes / 1e9 / (self.measurement.median * 1e-6)

    @property
    def busbw_gbs(self) -> float:
        return self.algbw_gbs * bus_factor(self.collective, self.nranks)

    @property
    def passed(self) -> bool:
        return not self.wrong

    def to_dict(self) -> dict[str, Any]:
        row = {"collective": self.collective, "size_bytes": self.size_bytes, "count": self.count,
               "dtype": self.dtype, "op": self.op, "algo": self.algo, "backend": self.backend,
               "inplace": self.inplace, "nranks": self.nranks}
        if self.root is not None:
            row["root"] = self.root
        if self.servers is not None:
            row["servers"] = self.servers
        if self.variant is not None:
            row["variant"] = self.variant
        row["on"] = self.on
        row.update(self.measurement.stats())
        row["samples_us"] = list(self.measurement.samples_us)
        row.update(algbw_gbs=self.algbw_gbs, busbw_gbs=self.busbw_gbs, wrong=self.wrong)
        return row


def _as_sizes(sizes: Sizes) -> list[int]:
    items = [sizes] if isinstance(sizes, (int, str, np.integer)) else sizes
    out = [parse_size(int(s) if isinstance(s, np.integer) else s, "size") for s in items]
    if not out:
        raise UsageError("no sizes given")
    return out


def element_count(collective: str, size_bytes: int, dtype: str, nranks: int) -> tuple[int, int]:
    """(count per rank, bytes actually moved) for a requested size: whole elements, and for
    reduce-scatter/all-gather whole blocks of N (at least one element per rank)."""
    es = DTYPE_SIZE[dtype]
    if kind(collective).size_is_total:
        count = max(1, size_bytes // (es * nranks))
        return count, count * es * nranks
    count = max(1, size_bytes // es)
    return count, count * es


def resolve_backend(backend: str, device: str = "auto") -> tuple[str, str]:
    """('mpi' | 'nccl' | 'gloo', why): nccl on a GPU, mpi on the CPU, unless asked (gloo:
    PyTorch's, through torch.distributed, the library DDP uses on CPUs)."""
    if backend not in ("auto", *BACKENDS):
        raise UsageError(f"--backend: expected auto, mpi, nccl or gloo, got {backend!r}")
    if backend == "gloo":
        gloo.torch_or_error()
        return "gloo", "asked for (torch.distributed)"
    dev, why = env.resolve_device(device)
    if backend == "auto":
        return ("nccl", f"auto: device cuda ({why})") if dev == "cuda" else ("mpi", f"auto: device cpu ({why})")
    if backend == "nccl":
        if dev != "cuda":
            raise UsageError(f"--backend nccl needs a GPU (device {dev}: {why})")
        if _cuda is None or not hasattr(_cuda, "nccl_bench"):
            raise UsageError("--backend nccl: the CUDA backend was built without NCCL")
        return "nccl", "asked for"
    return "mpi", "asked for"


@dataclass(frozen=True)
class CollectiveRequest:
    """One row to time, checked once when made (what needs no MPI traffic: the same verdict on
    every rank; the rank counts when it runs): what run_one times, what its CollectiveResult
    carries, and with to_argv() the gdlbench command that times it again. A collective that
    does not reduce has op None; a rooted one runs in place (one buffer)."""

    collective: str
    size_bytes: int
    dtype: str = "float32"
    op: str | None = "sum"
    algo: str = "library"
    backend: str = "mpi"
    inplace: bool = False
    iters: int = 20
    warmup: int = 5
    check: int = 1
    servers: int = 1
    root: int = 0
    timeout: float = DEFAULT_TIMEOUT_S
    rotate_bytes: int = 0
    on: str = "main"  # THREADS: where the timed loop runs

    def __post_init__(self) -> None:
        k = kind(self.collective)
        if not k.reduces:
            object.__setattr__(self, "op", None)
        if k.rooted or self.backend == "gloo":  # MPI_Bcast and ncclBroadcast: one buffer; torch.distributed
            object.__setattr__(self, "inplace", True)
        if self.backend == "gloo" and self.collective not in gloo.COLLECTIVES:
            raise UsageError(f"--backend gloo times {', '.join(gloo.COLLECTIVES)}, not {self.collective}")
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r} ({', '.join(DTYPES)})")
        if k.reduces and self.op not in OPS:
            raise UsageError(f"unknown op {self.op!r} ({', '.join(OPS)})")
        if self.algo not in k.algos:
            raise UsageError(f"{self.collective} has no algorithm {self.algo!r} ({', '.join(k.algos)})")
        if (why := waived(self.backend, self.algo, self.dtype)) is not None:
            raise UsageError(f"--algo {self.algo}: {why} (add --backend mpi, or use --algo library)")
        check_timing(self.iters, self.warmup)
        if not 0 <= self.check <= MAX_ITERS:
            raise UsageError(f"--check must be from 0 to {MAX_ITERS}, got {self.check}")
        if not (self.timeout >= 0 and math.isfinite(self.timeout)):
            raise UsageError(f"--timeout must be a number of seconds >= 0 (0: off), got {self.timeout}")
        if self.on not in THREADS:
            raise UsageError(f"--on: expected {' or '.join(THREADS)}, got {self.on!r}")
        if self.on != "main" and self.backend != "mpi":
            raise UsageError(f"--on {self.on}: MPI only (--backend {self.backend} runs on the calling thread)")

    def check_ranks(self, nranks: int) -> None:
        """What depends on the communicator: the servers and the root among its ranks."""
        if not 1 <= self.servers <= nranks:  # checked for every algorithm: a bad value is a mistake, used or not
            raise UsageError(f"--servers must be between 1 and the number of ranks ({nranks}), got {self.servers}")
        if kind(self.collective).rooted and not 0 <= self.root < nranks:
            raise UsageError(f"--root must be between 0 and {nranks - 1}, got {self.root}")

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time this row again (under the same launcher and ranks)."""
        k = kind(self.collective)
        argv = [self.collective, "--size", str(self.size_bytes), "-d", self.dtype]
        if self.op is not None:
            argv += ["-o", self.op]
        if len(k.algos) > 1:
            argv += ["--algo", self.algo, "--servers", str(self.servers)]
        argv += ["-r", str(self.root)] if k.rooted else ["--mode", "in" if self.inplace else "out"]
        return argv + ["--backend", self.backend, "-n", str(self.iters), "-w", str(self.warmup), "-c",
                       str(self.check), "-T", f"{self.timeout:g}", "--rotate", str(self.rotate_bytes),
                       "--on", self.on]


def validate(collective: str, dtype: str, op: str | None, algo: str, backend: str, nranks: int,
             servers: int, root: int, iters: int, warmup: int, check: int, timeout: float) -> None:
    """Every argument check that does not need MPI traffic (CollectiveRequest's): the same verdict
    on every rank."""
    CollectiveRequest(collective, 0, dtype, op, algo, backend, False, iters, warmup, check, servers, root,
                      timeout).check_ranks(nranks)


def algo_label(algo: str, servers: int | None, variant: str | None = None) -> str:
    """The algorithm as tables show it: ps(P=2) for one with server ranks, hier(leader) for the
    variant a hierarchical one ran."""
    if algo in SERVER_ALGOS:
        return f"{algo}(P={servers})"
    return f"{algo}({variant})" if variant else algo


def waived(backend: str, algo: str, dtype: str = "float32") -> str | None:
    """Why `backend` cannot run `algo` on `dtype` (the row is waived), or None when it can."""
    if algo not in BACKEND_ALGOS[backend]:
        return f"{backend} has no algorithm {algo} (gdlbench's own algorithms run on MPI point-to-point)"
    if dtype not in BACKEND_DTYPES[backend]:
        return f"{backend} has no {dtype}"
    return None


@dataclass
class WaivedRow(_Row):
    """A row asked for that the backend cannot run: listed with the reason, not timed."""

    collective: str
    dtype: str
    op: str | None
    algo: str
    backend: str
    waived: str

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "dtype": self.dtype, "op": self.op, "algo": self.algo,
                "backend": self.backend, "waived": self.waived}


def _columns(collective: str, modes: tuple[bool, ...]) -> list[Column]:
    k = kind(collective)
    cols = [Column("size (B)", "size_bytes"), Column("count", "count"), Column("type", "dtype")]
    if k.reduces:
        cols.append(Column("redop", "op"))
    if k.rooted:
        cols.append(Column("root", "root"))
    if len(k.algos) > 1:
        cols.append(Column("algo", "algo"))
    for mode in modes:
        tag = "in" if mode else "out"
        label = "in-place" if mode else "out-of-place"
        if k.rooted:  # one buffer: no mode to name
            label = ""
        pre = f"{label} " if label else ""
        cols += [Column(f"{pre}time (us)", f"{tag}_time_us", fmt_float(1)),
                 Column("p95", f"{tag}_time_us_p95", fmt_float(1)),
                 Column("algbw (GB/s)", f"{tag}_algbw_gbs", fmt_float(3)),
                 Column("busbw (GB/s)", f"{tag}_busbw_gbs", fmt_float(3)),
                 Column("#wrong", f"{tag}_wrong", lambda v: "N/A" if v is None else str(v))]
    return cols


def _table_rows(results: list[CollectiveResult], waived: list[WaivedRow]) -> list[dict[str, Any]]:
    merged: dict[tuple[int, str, str | None, str], dict[str, Any]] = {}
    for r in results:
        key = (r.size_bytes, r.dtype, r.op, r.algo)
        row = merged.setdefault(key, {"size_bytes": r.size_bytes, "count": r.count, "dtype": r.dtype, "op": r.op,
                                      "algo": algo_label(r.algo, r.servers, r.variant), "root": r.root})
        tag = "in" if r.inplace else "out"
        row.update({f"{tag}_time_us": r.time_us, f"{tag}_noisy": r.measurement.noisy,
                    f"{tag}_time_us_p95": r.measurement.p95,
                    f"{tag}_algbw_gbs": r.algbw_gbs, f"{tag}_busbw_gbs": r.busbw_gbs, f"{tag}_wrong": r.wrong})
        row.setdefault("out_wrong", None) if not r.inplace else row.setdefault("in_wrong", None)
    return list(merged.values()) + [{"dtype": w.dtype, "op": w.op, "algo": f"{w.algo} (waived)"} for w in waived]


def table(results: Sequence[CollectiveResult | WaivedRow]) -> tuple[list[Column], list[dict[str, Any]]]:
    """The nccl-tests table: out-of-place and in-place side by side, then the waived rows
    (gdlbench.Compare's hook)."""
    measured = [r for r in results if isinstance(r, CollectiveResult)]
    waived = [r for r in results if isinstance(r, WaivedRow)]
    modes = tuple(sorted({r.inplace for r in measured}))
    return _columns(results[0].collective, modes), _table_rows(measured, waived)


def run_one(collective: str, size_bytes: int, dtype: str = "float32", op: str | None = "sum",
            algo: str = "library", backend: str = "mpi", inplace: bool = False, *, iters: int = 20,
            warmup: int = 5, check: int = 1, servers: int = 1, root: int = 0,
            timeout: float = DEFAULT_TIMEOUT_S, rotate_bytes: int = 0, on: str = "main",
            comm: MPI.Comm | None = None) -> CollectiveResult:
    """Time one row. Every rank of comm must call it with the same arguments. rotate_bytes > 0
    (MPI only): successive iterations use different buffers spread over that many bytes, as
    nccl-tests does, so that sizes below the cache are not timed from cache. on="comm-thread"
    (MPI only): the timed loop and the check run on a thread of their own, as the composed
    iteration sends its messages (THREADS)."""
    return run(CollectiveRequest(collective, size_bytes, dtype, op, algo, backend, inplace, iters, warmup, check,
                                 servers, root, timeout, rotate_bytes, on), comm)


def run(request: CollectiveRequest, comm: MPI.Comm | None = None) -> CollectiveResult:
    """Time one row (run_one's request). Every rank of comm calls it with the same request."""
    res = _run(request, comm or env.world(), None)
    assert res is not None  # a member of comm always gets its row
    return res


def run_started_together(collective: str, size_bytes: int, dtype: str = "float32", op: str | None = "sum",
                         algo: str = "library", inplace: bool = False, *, iters: int = 20, warmup: int = 5,
                         check: int = 1, timeout: float = DEFAULT_TIMEOUT_S, rotate_bytes: int = 0, on: str = "main",
                         comm: MPI.Comm, start_on: MPI.Comm) -> CollectiveResult | None:
    """run_one on MPI with every warm-up and timed call started by a barrier on start_on, a
    communicator over comm's ranks and others: the same row run at once on the other
    sub-communicators of start_on starts each call together with this one (as a hierarchical
    all-reduce's shards cross between nodes). Every rank of start_on calls it with the same
    arguments; a rank in none of the sub-communicators passes comm=MPI.COMM_NULL and gets None."""
    request = CollectiveRequest(collective, size_bytes, dtype, op, algo, "mpi", inplace, iters, warmup, check,
                                timeout=timeout, rotate_bytes=rotate_bytes, on=on)
    return _run(request, comm, start_on)


def _run(req: CollectiveRequest, comm: MPI.Comm, start_on: MPI.Comm | None) -> CollectiveResult | None:
    member = comm != MPI.COMM_NULL
    group = comm if member else start_on
    assert group is not None, "a rank outside comm takes part only through start_on"
    nranks = group.Get_size()
    req.check_ranks(nranks)
    if req.on != "main":
        require_thread_level("serialized", f"--on {req.on}")
    count, nbytes = element_count(req.collective, req.size_bytes, req.dtype, nranks)
    if req.backend == "gloo":
        if start_on is not None:
            raise UsageError("--backend gloo: calls started together run on MPI only")
        samples, wrong = gloo.bench(req.collective, count, req.dtype, req.op, req.root, req.warmup, req.iters,
                                    req.check, req.timeout, req.rotate_bytes, comm)
        return CollectiveResult(req.collective, nbytes, count, req.dtype, req.op, req.algo, req.backend, True,
                                nranks, Measurement(samples, "steady-clock", gloo.REGION),
                                None if wrong < 0 else wrong, req.root if kind(req.collective).rooted else None,
                                request=req)
    native = require_cuda() if req.backend == "nccl" else _core
    bench = native.nccl_bench if req.backend == "nccl" else native.comm_bench
    spec = native.BenchSpec(collective=req.collective, count=count, dtype=req.dtype, op=req.op or "sum",
                            inplace=req.inplace, algo=req.algo, root=req.root, servers=req.servers,
                            warmup=req.warmup, iters=req.iters, check_iters=req.check, timeout_s=req.timeout,
                            rotate_bytes=int(req.rotate_bytes) if req.backend == "mpi" else 0, on=req.on)
    res = bench(comm, spec) if start_on is None else _core.comm_bench_started_together(comm, spec, start_on)
    if not member:
        return None
    meas = Measurement(res.samples_us, "steady-clock", region(req.backend, (req.algo,)))
    rooted = kind(req.collective).rooted
    return CollectiveResult(req.collective, nbytes, count, req.dtype, req.op, req.algo, req.backend, req.inplace,
                            nranks, meas, None if res.wrong < 0 else int(res.wrong), req.root if rooted else None,
                            req.servers if req.algo in SERVER_ALGOS else None,
                            VARIANTS[req.algo](nbytes) if req.algo in VARIANTS else None, request=req, on=req.on)


def hier_variant(size_bytes: int) -> str:
    """The variant `--algo hier` runs at this size per rank: 'leader' (reduce to each node's
    first rank, all-reduce among those, broadcast) below HIER_LEADER_BELOW_BYTES, else 'rs-ag'
    (intra-node reduce-scatter, inter-node all-reduce of each shard, intra-node all-gather)."""
    return _core.hier_variant(int(size_bytes))


# Algorithms whose steps change with the size: the variant a row ran, for its algo column.
VARIANTS: dict[str, Callable[[int], str]] = {"hier": hier_variant}


def _modes(inplace: bool | None) -> tuple[bool, ...]:
    return (False, True) if inplace is None else (bool(inplace),)


def collective(name: str, sizes: Sizes, dtype: str = "float32", op: str | None = "sum", algo: str = "library",
               backend: str = "auto", iters: int = 20, warmup: int = 5, check: int = 1,
               inplace: bool | None = None, *, servers: int = 1, root: int = 0, device: str = "auto",
               timeout: float = DEFAULT_TIMEOUT_S, on: str = "main", comm: MPI.Comm | None = None) -> list[CollectiveResult]:
    """Time `name` at every size; inplace None runs out-of-place then in-place rows (broadcast has
    one buffer: in place only)."""
    be, _ = resolve_backend(backend, device)
    modes = (True,) if kind(name).rooted else _modes(inplace)
    out = []
    for size in _as_sizes(sizes):
        for mode in modes:
            out.append(run_one(name, size, dtype, op, algo, be, mode, iters=iters, warmup=warmup, check=check,
                               servers=servers, root=root, timeout=timeout, on=on, comm=comm))
    return out


def allreduce(sizes: Sizes, dtype: str = "float32", op: str = "sum", algo: str = "library", backend: str = "auto",
              iters: int = 20, warmup: int = 5, check: int = 1, inplace: bool | None = None, *,
              servers: int = 1, device: str = "auto", timeout: float = DEFAULT_TIMEOUT_S,
              on: str = "main", comm: MPI.Comm | None = None) -> list[CollectiveResult]:
    """All-reduce at each size (bytes per rank; ints or strings such as '64MB'). algo: library
    (MPI_Allreduce or ncclAllReduce), ring, rd, tree, ps (with `servers` server ranks), hier
    (two levels: inside each node, then across nodes; env.topology says what a node is)."""
    return collective("allreduce", sizes, dtype, op, algo, backend, iters, warmup, check, inplace,
                      servers=servers, device=device, timeout=timeout, on=on, comm=comm)


def reduce_scatter(sizes: Sizes, dtype: str = "float32", op: str = "sum", backend: str = "auto", iters: int = 20,
                   warmup: int = 5, check: int = 1, inplace: bool | None = None, *, device: str = "auto",
                   timeout: float = DEFAULT_TIMEOUT_S, on: str = "main", comm: MPI.Comm | None = None) -> list[CollectiveResult]:
    """Reduce-scatter; each size is the total buffer (N blocks)."""
    return collective("reduce_scatter", sizes, dtype, op, "library", backend, iters, warmup, check, inplace,
                      device=device, timeout=timeout, on=on, comm=comm)


def allgather(sizes: Sizes, dtype: str = "float32", backend: str = "auto", iters: int = 20, warmup: int = 5,
              check: int = 1, inplace: bool | None = None, *, device: str = "auto",
              timeout: float = DEFAULT_TIMEOUT_S, on: str = "main", comm: MPI.Comm | None = None) -> list[CollectiveResult]:
    """All-gather; each size is the total (gathered) buffer."""
    return collective("allgather", sizes, dtype, None, "library", backend, iters, warmup, check, inplace,
                      device=device, timeout=timeout, on=on, comm=comm)


def broadcast(sizes: Sizes, dtype: str = "float32", root: int = 0, backend: str = "auto", iters: int = 20,
              warmup: int = 5, check: int = 1, *, device: str = "auto", timeout: float = DEFAULT_TIMEOUT_S,
              on: str = "main", comm: MPI.Comm | None = None) -> list[CollectiveResult]:
    """Broadcast from `root`; each size is the buffer."""
    return collective("broadcast", sizes, dtype, None, "library", backend, iters, warmup, check, True,
                      root=root, device=device, timeout=timeout, on=on, comm=comm)


def allreduce_array(array: np.ndarray, op: str = "sum", algo: str = "library", *, servers: int = 1,
                    dtype: str | None = None, comm: MPI.Comm | None = None) -> np.ndarray:
    """In-place all-reduce of a numpy array (float32, float64, int32, float16; bfloat16 as uint16
    with dtype='bfloat16') with one of the algorithms. Returns the array."""
    if not isinstance(array, np.ndarray):
        raise UsageError("allreduce_array: expected a numpy array")
    _core.allreduce(comm=comm or env.world(), array=array, op=op, algo=algo, servers=servers, dtype=dtype or "")
    return array


def reduction_gamma_us_per_byte(dtype: str = "float32", op: str = "sum", nbytes: int = 16 * 2**20,
                                iters: int = 10) -> float:
    """The cost model's gamma: microseconds per byte of the local reduction a op= b (median)."""
    count = max(1, nbytes // DTYPE_SIZE[dtype])
    samples = _core.reduce_time(count=count, dtype=dtype, op=op, warmup=2, iters=iters)
    return float(np.median(samples)) / (count * DTYPE_SIZE[dtype])


# --- the alpha-beta(-gamma) fit (formulas: costmodel.py) ------------------------------------
FIT_ALGOS = tuple(n for n in costmodel.COSTS if not n.startswith("ps_"))


@dataclass
class AlphaBetaFit:
    """alpha (us per message step), beta (us per byte on the link) and gamma (us per byte reduced,
    None when it was not separated from beta) for one algorithm, fitted by least squares."""

    algo: str
    nranks: int
    alpha_us: float
    beta_us_per_byte: float
    gamma_us_per_byte: float | None
    servers: int = 1
    gamma_source: str = "not separated: beta includes the reduction"
    sizes_bytes: list[int] = field(default_factory=list)
    measured_us: list[float] = field(default_factory=list)
    group: dict[str, Any] = field(default_factory=dict)  # what the rows had in common (dtype, op, inplace)
    fit_min_bytes: int = 0  # sizes below this were measured but not fitted
    # Piecewise regimes [(from_bytes, alpha, beta), ...], ascending: a size uses the last regime
    # that starts at or below it; alpha_us/beta_us_per_byte are the largest regime's. Empty: one.
    regimes: list[costmodel.Regime] = field(default_factory=list)

    def params_for(self, size_bytes: float) -> tuple[float, float]:
        """(alpha_us, beta_us_per_byte) of the regime that holds this size."""
        return costmodel.regime_params(self.alpha_us, self.beta_us_per_byte, self.regimes, size_bytes)

    def predict_us(self, size_bytes: float, nranks: int | None = None) -> float:
        a, b, g = costmodel.coefficients(self.algo, nranks or self.nranks, self.servers)
        alpha, beta = self.params_for(size_bytes)
        return a * alpha + size_bytes * (b * beta + g * (self.gamma_us_per_byte or 0.0))

    @property
    def predicted_us(self) -> list[float]:
        return [self.predict_us(m) for m in self.sizes_bytes]

    def rel_errors(self) -> list[float]:
        return [abs(p - t) / t for p, t in zip(self.predicted_us, self.measured_us, strict=True)]

    def median_rel_error(self, min_bytes: int = 0) -> float | None:
        errs = [e for e, m in zip(self.rel_errors(), self.sizes_bytes, strict=True) if m >= min_bytes]
        return float(np.median(errs)) if errs else None

    @property
    def link_gbs(self) -> float | None:
        """1/beta in GB/s (1e9 B/s)."""
        return 1e-3 / self.beta_us_per_byte if self.beta_us_per_byte > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "algo": self.algo, **self.group, "nranks": self.nranks, "servers": self.servers if self.algo in SERVER_ALGOS else None,
            "formula": costmodel.formula(self.algo), "alpha_us": self.alpha_us,
            "beta_us_per_byte": self.beta_us_per_byte, "gamma_us_per_byte": self.gamma_us_per_byte,
            "gamma_source": self.gamma_source, "link_gbs": self.link_gbs, "fit_min_bytes": self.fit_min_bytes,
            "regimes": costmodel.regimes_to_json(self.regimes),
            "median_rel_error": self.median_rel_error(),
            "median_rel_error_64k": self.median_rel_error(65536),
            "points": [{"size_bytes": m, "measured_us": t, "predicted_us": p, "rel_error": e}
                       for m, t, p, e in zip(self.sizes_bytes, self.measured_us, self.predicted_us,
                                             self.rel_errors(), strict=True)],
        }


def _check_fit_input(m: np.ndarray, t: np.ndarray, nranks: int) -> None:
    """fit_alpha_beta's arguments, checked before anything is fitted."""
    if m.shape != t.shape or m.ndim != 1:
        raise UsageError("fit: sizes and times must be two lists of the same length")
    if m.size < 2 or np.unique(m).size < 2:
        raise UsageError("fit: needs at least two different sizes")
    if nranks < 2:
        raise UsageError("fit: needs at least 2 ranks (with one rank nothing is communicated)")
    if not (np.all(t > 0) and np.all(np.isfinite(t)) and np.all(m > 0)):
        raise UsageError("fit: sizes and times must be positive")


def _fit_line(cols: np.ndarray, target: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, float]:
    """(alpha, beta) >= 0 of the least-squares fit of cols @ (alpha, beta) to target, each point
    weighted by 1/time, and the sum of the squared relative errors. A coefficient that comes out
    negative is dropped and the other one refitted alone."""
    w = 1.0 / times

    def solve(mask: list[bool]) -> np.ndarray:
        x = np.zeros(2)
        idx = [i for i, keep in enumerate(mask) if keep]
        sol, *_ = np.linalg.lstsq(cols[:, idx] * w[:, None], target * w, rcond=None)
        x[idx] = sol
        return x

    x = solve([True, True])
    if x[0] < 0:
        x = solve([False, True])
    if x[1] < 0:
        x = solve([True, False])
    x = np.maximum(x, 0.0)
    return x, float((((cols @ x) - target) * w) ** 2 @ np.ones(len(times)))


def _best_regimes(fit: Callable[[np.ndarray], tuple[np.ndarray, float]], mu: np.ndarray,
                  k: int) -> list[tuple[int, float, float]]:
    """The split of the sorted sizes into k consecutive regimes (at least two sizes each) whose
    total error is least, by dynamic programming: [(from_bytes, alpha, beta), ...], the first
    from 0. fit: a selection of the points -> ((alpha, beta), error)."""
    sizes = np.unique(mu)
    n = sizes.size
    cost = {}
    for i in range(n):
        for j in range(i + 2, n + 1):
            sel = (mu >= sizes[i]) & (mu <= sizes[j - 1])
            cost[i, j] = fit(sel)
    best: dict[tuple[int, int], tuple[float, list[int]]] = {(0, 0): (0.0, [])}  # (regimes used, sizes covered) -> (error, cut points)
    for r in range(1, k + 1):
        for j in range(2 * r, n + 1):
            options = [(best[r - 1, i][0] + cost[i, j][1], best[r - 1, i][1] + [i])
                       for i in range(2 * (r - 1), j - 1) if (r - 1, i) in best]
            if options:
                best[r, j] = min(options, key=lambda o: o[0])
    cuts = best[k, n][1]
    bounds = cuts + [n]
    found = []
    for r, start in enumerate(cuts):
        line = cost[start, bounds[r + 1]][0]
        found.append((0 if r == 0 else int(sizes[start]), float(line[0]), float(line[1])))
    return found


def fit_alpha_beta(sizes_bytes: Sequence[float], times_us: Sequence[float], algo: str, nranks: int, *,
                   servers: int = 1, gamma_us_per_byte: float | None = None,
                   gamma_source: str | None = None, min_bytes: int = 0, regimes: int = 1) -> AlphaBetaFit:
    """Least-squares fit of `algo`'s cost formula (costmodel.COSTS) to a size sweep.

    The fit minimises the relative error (each point weighted by 1/t), so small latency-bound and
    large bandwidth-bound sizes count alike; alpha and beta are kept >= 0. Over one sweep at a fixed
    N, beta and gamma multiply the same m and cannot be told apart: give gamma_us_per_byte (e.g.
    reduction_gamma_us_per_byte(), a separate measurement) to hold it fixed, otherwise gamma is None
    and beta carries the reduction too. min_bytes: fit only the sizes >= min_bytes (e.g. 64 KiB, to
    leave out the eager-protocol latency regime); the error is still reported for every size.
    regimes=k: piecewise, one (alpha, beta) per range of consecutive sizes, the ranges chosen where
    the total error is least (at least two sizes each). MPI libraries switch protocol and algorithm
    with the size, and on one node the link is memory whose bandwidth drops once a message leaves
    the caches: one line cannot follow every regime."""
    if algo not in FIT_ALGOS:
        raise UsageError(f"fit: unknown algorithm {algo!r} ({', '.join(FIT_ALGOS)})")
    if isinstance(regimes, bool) or not isinstance(regimes, int) or not 1 <= regimes <= 8:
        raise UsageError(f"fit: regimes must be an integer from 1 to 8, got {regimes!r}")
    m = np.asarray(sizes_bytes, dtype=np.float64)
    t = np.asarray(times_us, dtype=np.float64)
    _check_fit_input(m, t, nranks)
    a_c, b_c, g_c = costmodel.coefficients(algo, nranks, servers)
    gamma = gamma_us_per_byte if (gamma_us_per_byte is not None and g_c > 0) else None
    used = m >= min_bytes
    if np.unique(m[used]).size < 2:
        raise UsageError(f"fit: needs at least two different sizes >= {min_bytes} bytes")
    mu, tu = m[used], t[used]
    target = tu - (mu * g_c * gamma if gamma is not None else 0.0)

    def fit(sel: np.ndarray) -> tuple[np.ndarray, float]:
        """(alpha, beta) over the selected points, and the sum of their squared relative errors."""
        cols = np.column_stack([np.full(int(sel.sum()), a_c), mu[sel] * b_c])
        return _fit_line(cols, target[sel], tu[sel])

    x, _ = fit(np.ones(mu.size, dtype=bool))
    found: list[tuple[int, float, float]] = []
    k = min(regimes, np.unique(mu).size // 2)  # at least two sizes in every regime
    if k > 1:
        found = _best_regimes(fit, mu, k)
        x = np.array(found[-1][1:])
    return AlphaBetaFit(algo, nranks, float(x[0]), float(x[1]), gamma, servers,
                        gamma_source or ("given" if gamma is not None else
                                         "not separated: beta includes the reduction"),
                        [int(v) for v in m], [float(v) for v in t], fit_min_bytes=int(min_bytes), regimes=found)


def fit_sweep_for_messages(largest_bytes: int, start: int = 4096, factor: int = 4,
                           least: int = 256 << 20) -> list[str]:
    """`allreduce` arguments for a fit that `predict` prices a network's messages with. The sweep
    reaches the first start * factor^k at or above the largest message (some strategies send the
    whole gradient as one), so that none is priced from an extrapolation. In place, as the
    iteration reduces its gradients; the buffers rotate over the sweep's last size, because an
    iteration's message starts from memory: its gradient was written a whole pass of other
    layers ago. (On the 2-core machine, ResNet-101's 209 parameter-server messages took 39.1 ms
    in the iteration; a fit swept from cache priced them at 24.9 ms, a rotated one at 38.6.)"""
    end = start
    while end < max(largest_bytes, least):
        end *= factor
    return ["-b", str(start), "-e", str(end), "-f", str(factor), "--mode", "in", "--rotate", str(end)]


def fit_results(results: Iterable[CollectiveResult], *, gamma_us_per_byte: float | None = None,
                gamma_source: str | None = None, min_bytes: int = 0, regimes: int = 1) -> list[AlphaBetaFit]:
    """One fit per (collective/algorithm, dtype, op, mode) group of rows that has >= 2 sizes."""
    groups: dict[tuple[Any, ...], list[CollectiveResult]] = {}
    for r in results:
        groups.setdefault((r.collective, r.algo, r.dtype, r.op, r.inplace, r.servers, r.backend, r.on), []).append(r)
    fits = []
    for (coll, algo, dtype, op, inplace, _servers, _backend, on), rows in groups.items():
        if len({r.size_bytes for r in rows if r.size_bytes >= min_bytes}) < 2:
            continue
        # gloo's own all-reduce is a ring (gloo/allreduce.cc: an unspecified algorithm runs ring)
        name = "ring" if rows[0].backend == "gloo" and coll == "allreduce" else kind(coll).cost_name(algo)
        fit = fit_alpha_beta([r.size_bytes for r in rows], [r.time_us for r in rows], name,
                             rows[0].nranks, servers=rows[0].servers or 1,
                             gamma_us_per_byte=gamma_us_per_byte, gamma_source=gamma_source,
                             min_bytes=min_bytes, regimes=regimes)
        fit.group = {"collective": coll, "dtype": dtype, "op": op, "inplace": inplace, "on": on}
        fits.append(fit)
    return fits
