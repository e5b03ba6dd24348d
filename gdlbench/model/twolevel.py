"""The two-level fit of `gdlbench allreduce --fit` on several nodes, as a library call.

The same sweep (library all-reduce, one dtype and op, one buffer mode) on every node's ranks at
once (intra), then among the first rank of each node alone (inter: the link with nobody else on
it), each fitted on its own. With several ranks per node, each level also as hier runs it: its
reduce-scatter + all-gather inside every node at once (intra_rsag: `--algo hier` on each node),
and every local rank's all-reduce across nodes at once (inter_shared: the link shared as hier's
shards and rd's exchanges share it). Then the whole communicator's rows priced by the two-level
model (gdlbench.model.cluster) beside the flat one-level model (the whole communicator's library fit
for every pair of ranks).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._native import MPI, _core
from ..common import env
from ..primitives import collectives as C
from ..primitives import costmodel
from . import cluster

# (level, which sub-communicator, algorithm, whether every rank sweeps, what it is measured on)
_SWEEPS = (("intra", "node", "library", "all", "every node's ranks at once (MPI_Comm_split_type or --ranks-per-node)"),
           ("intra_rsag", "node", "hier", "all", "every node's ranks at once, reduce-scatter + all-gather as hier "
            "runs them (--algo hier on each node)"),
           ("inter", "cross", "library", "leader", "the first rank of every node, the others waiting in MPI_Barrier"),
           ("inter_shared", "cross", "library", "all", "every local rank's all-reduce across nodes at once, each "
            "call started together (a barrier on the whole communicator), as hier's shards cross"))
_SHARED_LEVELS = ("intra_rsag", "inter_shared")  # only with several ranks per node
_MODEL_ALGOS = tuple(a for a in C.ALGOS if a not in C.SERVER_ALGOS)  # what the two-level model prices


@dataclass(frozen=True)
class LevelSweep:
    """What every level sweeps: the flat sweep's sizes, one dtype, op and buffer mode, its timing,
    check and thread (`on`, as the flat sweep's --on), and how its fit is made."""

    sizes: Sequence[int]
    dtype: str
    op: str | None
    inplace: bool
    iters: int
    warmup: int
    check: int
    timeout: float
    rotate_bytes: int = 0
    fit_min: int = 0
    fit_regimes: int = 1
    on: str = "main"


def _sweep_level(sweep: LevelSweep, level: str, sub: MPI.Comm, algo: str, active: bool, comm: MPI.Comm,
                 say: Callable[[str], None]) -> list[C.CollectiveResult]:
    """One level's rows, on the ranks of `sub` that take part (every rank of comm calls it)."""
    rows: list[C.CollectiveResult] = []
    if level == "inter_shared":
        # Started together on every call: left to their own pace, the all-reduces of the local
        # ranks drift apart and overlap only partly (at 1 Gbit/s, 1.1-1.8 x one alone where
        # sharing the link gives 2 x), which is not how hier's shards cross.
        for size in sweep.sizes:
            r = C.run_started_together("allreduce", size, sweep.dtype, sweep.op, algo, sweep.inplace,
                                       iters=sweep.iters, warmup=sweep.warmup, check=sweep.check,
                                       timeout=sweep.timeout, rotate_bytes=sweep.rotate_bytes, on=sweep.on,
                                       comm=sub, start_on=comm)
            if r is not None and r.nranks > 1:
                rows.append(r)
                say(f"{level} level: {r.size_bytes} B: {r.time_us:.1f} us")
    elif active and sub != MPI.COMM_NULL and sub.Get_size() > 1:
        for size in sweep.sizes:
            r = C.run_one("allreduce", size, sweep.dtype, sweep.op, algo, "mpi", sweep.inplace, iters=sweep.iters,
                          warmup=sweep.warmup, check=sweep.check, timeout=sweep.timeout,
                          rotate_bytes=sweep.rotate_bytes, on=sweep.on, comm=sub)
            rows.append(r)
            say(f"{level} level: {r.size_bytes} B: {r.time_us:.1f} us")
    return rows


def _fit_level(sweep: LevelSweep, algo: str, rows: list[C.CollectiveResult], gamma: float | None,
               measured_on: str) -> dict[str, Any] | None:
    # hier's reduce-scatter + all-gather run from HIER_LEADER_BELOW_BYTES; below it, its leader variant
    fit_min = max(sweep.fit_min, costmodel.HIER_LEADER_BELOW_BYTES) if algo == "hier" else sweep.fit_min
    fitted = C.fit_results(rows, gamma_us_per_byte=gamma, gamma_source="measured: local reduction, 16 MiB",
                           min_bytes=fit_min, regimes=sweep.fit_regimes)
    if not fitted:  # nothing swept here, or fewer than 2 sizes from the fit's smallest
        return None
    return fitted[0].to_dict() | {"ranks": rows[0].nranks, "measured_on": measured_on, "on": sweep.on,
                                  "wrong": sum(r.wrong or 0 for r in rows)}


def fit_levels(sweep: LevelSweep, comm: MPI.Comm, results: Sequence[C.CollectiveResult],
               fits: Sequence[C.AlphaBetaFit], say: Callable[[str], None] = lambda _msg: None) -> dict[str, Any]:
    """The two-level fit (module docstring): per level its fit's to_dict() with the ranks, what it
    was measured on and its wrong elements, and `model_check`, the whole communicator's rows
    (`results`, fitted flat as `fits`) priced by both models. Every rank of comm calls it; rank 0
    gets the result, the others {} (as does a run with no inter-node level)."""
    subs = dict(zip(("node", "cross"), _core.level_comms(comm), strict=True))
    topo = env.topology(comm)
    gamma = next((f.gamma_us_per_byte for f in fits if f.gamma_us_per_byte is not None), None)
    leader = _core.topology(comm)["local_rank"] == 0
    several = (topo["min_ranks_per_node"] or 1) > 1
    out: dict[str, Any] = {}
    for level, sub, algo, who, measured_on in _SWEEPS:
        if level in _SHARED_LEVELS and not several:
            continue  # one rank per node: the same as intra's and inter's
        rows = _sweep_level(sweep, level, subs[sub], algo, who == "all" or leader, comm, say)
        comm.Barrier()
        if env.rank() == 0:
            out[level] = _fit_level(sweep, algo, rows, gamma, measured_on)
    if env.rank() != 0 or not out.get("inter"):
        return {}
    per_node = topo["ranks_per_node"] or topo["min_ranks_per_node"]
    model = cluster.from_fit_levels(out, topo["nodes"], per_node, "this run's two-level fit")
    out["model_check"] = model_check(model, sweep, results, fits)
    return out


def model_check(model: cluster.Cluster, sweep: LevelSweep, results: Sequence[C.CollectiveResult],
                fits: Sequence[C.AlphaBetaFit]) -> dict[str, Any]:
    """The whole communicator's rows of the sweep's dtype and op, priced by the two-level model
    and by the flat one (its library fit for every pair of ranks)."""
    flat = next((f for f in fits if f.algo == "library"), fits[0] if fits else None)
    points: list[dict[str, Any]] = []
    for r in results:
        if r.dtype != sweep.dtype or r.op != sweep.op or r.algo not in _MODEL_ALGOS:
            continue
        two = model.time_us(r.algo, r.size_bytes, r.nranks)
        one = cluster.one_level_us(r.algo, r.size_bytes, r.nranks, *flat.params_for(r.size_bytes),
                                   flat.gamma_us_per_byte or 0.0) if flat else None
        points.append({"algo": r.algo, "size_bytes": r.size_bytes, "inplace": r.inplace, "measured_us": r.time_us,
                       "two_level_us": two, "two_level_error": (two - r.time_us) / r.time_us,
                       "flat_us": one, "flat_error": None if one is None else (one - r.time_us) / r.time_us})
    return {"cluster": model.to_dict(),
            "flat_model": f"the whole communicator's {flat.algo} fit for every pair" if flat else None,
            "points": points, "median_abs_error_64k": median_errors(points)}


def median_errors(points: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per algorithm, from 64 KiB up: the median |error| of each model and its worst (a median
    over the sizes hides a range of sizes priced far off)."""
    out: dict[str, dict[str, float | None]] = {}
    for algo in dict.fromkeys(p["algo"] for p in points):
        sel = [p for p in points if p["algo"] == algo and p["size_bytes"] >= 65536]
        if not sel:
            continue
        two = [abs(p["two_level_error"]) for p in sel]
        flat = [abs(p["flat_error"]) for p in sel] if all(p["flat_error"] is not None for p in sel) else None
        out[algo] = {"two_level": statistics.median(two), "two_level_worst": max(two),
                     "flat": statistics.median(flat) if flat else None, "flat_worst": max(flat) if flat else None}
    return out
