"""gdlbench allreduce (and reduce_scatter, allgather, broadcast): nccl-tests-compatible sweeps of
the MPI library's collectives, gdlbench's own all-reduce algorithms and NCCL, with exact checks
and the alpha-beta fit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TypedDict

from ..._native import MPI, _core
from ...common import env
from ...common.compare import Compare
from ...common.errors import CheckFailed, UsageError
from ...common.output import Column, Outputs, Progress, Report, fmt_float, print_table
from ...common.units import SIZE_CONVENTION, format_bytes, parse_size, split_list
from ...model.twolevel import LevelSweep, fit_levels
from ...primitives import collectives as C
from ...primitives import costmodel
from .. import common_options, one_line, outputs

MAX_ROWS = 4096


class Plan(TypedDict):
    """What a sweep runs, from the options (checked the same on every rank)."""

    sizes: list[int]
    dtypes: list[str]
    ops: list[str | None]  # [None]: a collective that does not reduce
    algos: list[str]
    combos: list[tuple[str, str | None, str]]  # (dtype, op, algo) rows to run
    waived: list[C.WaivedRow]
    modes: tuple[bool, ...]  # in place or not
    backend: str
    backend_why: str
    servers: int
    root: int
    fit: bool
    fit_min: int
    fit_regimes: int
    rotate: int
    on: str  # the thread the timed loops run on (C.THREADS)
    outputs: Outputs  # --json, --csv


def _list(text: str, allowed: tuple[str, ...], what: str, alias: Callable[[str], str] = lambda x: x) -> list[str]:
    """The items of a comma list, each in `allowed` (after `alias`), or every one for "all"."""
    items = [alias(x) for x in split_list(text, what)]
    if items == ["all"]:
        return list(allowed)
    bad = [x for x in items if x not in allowed]
    if not items or bad:
        raise UsageError(f"{what}: unknown {', '.join(bad) or repr(text)} (choose from {', '.join(allowed)}, or all)")
    return list(dict.fromkeys(items))


def _short_algo(name: str) -> str:
    """The short name of an algorithm given in its long form (recursive_doubling: rd)."""
    return costmodel.canonical(name) if costmodel.known(name) else name


def _size_options(p: argparse.ArgumentParser) -> None:
    """The sweep's sizes, as nccl-tests takes them."""
    g = p.add_argument_group("sizes (nccl-tests: K/M/G are 1024-based; KB/MB/GB 1000-based)")
    g.add_argument("--size", help="one size or a comma-separated list: 100MB or 8,4K,1M")
    g.add_argument("-b", "--min-bytes", "--minbytes", dest="min_bytes", help="smallest size of the sweep (default 32M)")
    g.add_argument("-e", "--max-bytes", "--maxbytes", dest="max_bytes", help="largest size of the sweep (default 32M)")
    g.add_argument("-f", "--step-factor", "--stepfactor", dest="step_factor", type=float, default=1.0,
                   help="multiply the size by this each step (default 1: add --step-bytes)")
    g.add_argument("-i", "--step-bytes", "--stepbytes", dest="step_bytes", default="1M",
                   help="add this each step when -f is 1 (default 1M)")


def _row_options(p: argparse.ArgumentParser, kind: C.Kind) -> None:
    """What each row runs: the check, the dtypes, the ops and the algorithms."""
    p.add_argument("-c", "--check", type=int, default=1,
                   help="exact correctness checks per row, untimed (default 1; 0: off)")
    p.add_argument("-d", "--dtype", "--datatype", dest="dtype", default="float32",
                   help=f"{', '.join(C.DTYPES)}; a comma list or all (default float32)")
    if kind.reduces:
        p.add_argument("-o", "--op", default="sum", help=f"{', '.join(C.OPS)}; a comma list or all (default sum)")
    if len(kind.algos) > 1:
        p.add_argument("--algo", default="library",
                       help=", ".join(f"{a} ({d['about']})" for a, d in C.ALGORITHMS.items() if a in kind.algos)
                       + "; the algo column says which variant ran; a comma list or all (what the backend "
                         "lacks is listed as waived)")
        p.add_argument("--servers", type=int, default=1, help="parameter-server ranks P for --algo ps (default 1)")


def _fit_options(p: argparse.ArgumentParser, kind: C.Kind) -> None:
    """--fit and its options (the collectives the model fits), and the all-reduce's --beside-compute."""
    p.add_argument("--fit", action="store_true",
                   help="fit alpha, beta (and gamma, measured separately) per algorithm; print the error")
    p.add_argument("--fit-regimes", type=int, default=4, metavar="K",
                   help="piecewise fit: K ranges of sizes, each with its own alpha and beta, placed where "
                        "the error is least (latency, eager/in-cache and memory-bound regimes; default 4; 1: one "
                        "line for every size)")
    p.add_argument("--fit-min", default="0", metavar="BYTES",
                   help="fit only the sizes >= BYTES (e.g. 64K: leave out the eager-protocol latency "
                        "regime); errors are printed for every size (default 0: fit all)")
    if kind.name != "allreduce":
        return
    p.add_argument("--beside-compute", action="store_true",
                   help="gloo: also measure how a compute thread and the all-reduce slow each other "
                        "(at the sweep's largest size up to 25 MiB, a DDP bucket); predict --from this "
                        "report applies it while backward and the messages overlap")


def _run_options(p: argparse.ArgumentParser, kind: C.Kind) -> None:
    """The root or the mode, the buffers' rotation, the backend and the timeout."""
    if kind.rooted:
        p.add_argument("-r", "--root", type=int, default=0, help="root rank (default 0)")
    else:
        p.add_argument("--mode", choices=("both", "out", "in"), default="both",
                       help="out-of-place, in-place or both (default both, as nccl-tests)")
    p.add_argument("--rotate", default="0", metavar="BYTES",
                   help="MPI and gloo: cycle the iterations through buffers spread over BYTES (as nccl-tests), so "
                        "sizes that fit in the CPU caches are not timed from cache (default 0: off; e.g. 256M)")
    p.add_argument("--on", choices=C.THREADS, default="main",
                   help="MPI: the thread each row's timed loop (and check) runs on: main (default, as "
                        "nccl-tests) or comm-thread, a thread of its own as the composed iteration sends its "
                        "messages (its own malloc arena, which maps MPICH's large temporaries afresh on every "
                        "call); the fits that price the iteration's sharded messages use comm-thread")
    p.add_argument("--backend", default="auto",
                   help="mpi, nccl or gloo (default: nccl on a GPU, mpi on the CPU; gloo: PyTorch's, the "
                        "library DDP uses on CPUs, through torch.distributed: needs gdlbench[torch])")
    p.add_argument("-T", "--timeout", type=float, default=C.DEFAULT_TIMEOUT_S,
                   help=f"abort the job when one collective makes no progress for this many seconds "
                        f"(a dead or hung rank); default {C.DEFAULT_TIMEOUT_S:g}, 0: off")


def make(collective: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]:
    """The (add_arguments, run) pair of one collective's subcommand."""
    kind = C.kind(collective)

    def add_arguments(p: argparse.ArgumentParser) -> None:
        _size_options(p)
        _row_options(p, kind)
        if kind.fits:
            _fit_options(p, kind)
        _run_options(p, kind)
        common_options(p)

    def run(args: argparse.Namespace) -> int:
        comm = env.world()
        nranks = comm.Get_size()
        try:
            plan = _plan(collective, args, nranks)
            _check_memory(collective, plan, nranks, comm)
        except UsageError as exc:  # argv and N are the same on every rank: all stop here, rank 0 says why
            if env.rank() == 0:
                print(f"gdlbench {collective}: error: {one_line(exc)}", file=sys.stderr, flush=True)
            return 2
        return _run(collective, args, plan, comm)

    return add_arguments, run


def sweep_sizes(args: argparse.Namespace) -> list[int]:
    factor = args.step_factor
    if not 1 <= factor < float("inf"):
        raise UsageError(f"--step-factor must be a finite number >= 1, got {factor}")
    if args.size is not None:
        if args.min_bytes is not None or args.max_bytes is not None:
            raise UsageError("give --size or -b/-e, not both")
        sizes = [parse_size(x, "--size") for x in split_list(args.size, "--size")]
        if not sizes:
            raise UsageError("--size: no size given")
        return sizes
    default = 32 * 2**20
    lo = parse_size(args.min_bytes, "--min-bytes") if args.min_bytes is not None else None
    hi = parse_size(args.max_bytes, "--max-bytes") if args.max_bytes is not None else None
    lo = lo if lo is not None else min(hi or default, default)
    hi = hi if hi is not None else max(lo, default)
    if hi < lo:
        raise UsageError(f"--max-bytes ({hi}) is smaller than --min-bytes ({lo})")
    step = parse_size(args.step_bytes, "--step-bytes")
    sizes, s = [], lo
    while s <= hi:
        sizes.append(int(s))
        if len(sizes) > MAX_ROWS:
            raise UsageError(f"the sweep has more than {MAX_ROWS} sizes: use a larger -f or -i")
        s = s * factor if factor > 1 else s + step
        if s > hi:  # also a factor so large that s overflows to inf
            break
        if int(s) == sizes[-1]:
            s = sizes[-1] + 1
    return sizes


def _plan(collective: str, args: argparse.Namespace, nranks: int) -> Plan:
    kind = C.kind(collective)
    sizes = sweep_sizes(args)
    dtypes = _list(args.dtype, C.DTYPES, "--dtype")
    ops: list[str | None] = [*_list(args.op, C.OPS, "--op")] if kind.reduces else [None]
    algos = (_list(args.algo, kind.algos, "--algo", _short_algo) if len(kind.algos) > 1
             else list(kind.algos))
    servers: int = getattr(args, "servers", 1)
    root: int = getattr(args, "root", 0)
    mode: str = getattr(args, "mode", "in")
    modes = (True,) if kind.rooted else {"both": (False, True), "out": (False,), "in": (True,)}[mode]
    if args.on != "main" and args.backend in ("gloo", "nccl"):  # before resolving it needs torch or a GPU
        raise UsageError(f"--on {args.on}: MPI only (--backend {args.backend} runs on the calling thread)")
    backend, why = C.resolve_backend(args.backend, args.device)
    if backend == "gloo":
        modes = (True,)  # torch.distributed reduces in place
    combos: list[tuple[str, str | None, str]] = []
    waived: list[C.WaivedRow] = []
    for dtype in dtypes:
        for op in ops:
            for algo in algos:
                if (reason := C.waived(backend, algo, dtype)) is not None:
                    waived.append(C.WaivedRow(collective, dtype, op, algo, backend, reason))
                    continue
                C.validate(collective, dtype, op, algo, backend, nranks, servers, root, args.iters, args.warmup,
                           args.check, args.timeout)
                combos.append((dtype, op, algo))
    if not combos:
        raise UsageError(f"nothing to run: {waived[0].waived}")
    rotate = 0 if str(args.rotate).strip() == "0" else parse_size(args.rotate, "--rotate")
    if args.on != "main" and backend != "mpi":
        raise UsageError(f"--on {args.on}: MPI only (--backend {backend} runs on the calling thread)")
    fit: bool = getattr(args, "fit", False)
    fit_min = 0
    if kind.fits and str(args.fit_min).strip() != "0":
        fit_min = parse_size(args.fit_min, "--fit-min")
    if fit and len({s for s in sizes if s >= fit_min}) < 2:
        raise UsageError("--fit needs a sweep of at least two sizes (above --fit-min; e.g. -b 8 -e 64M -f 4)")
    if kind.fits and not 1 <= args.fit_regimes <= 8:
        raise UsageError(f"--fit-regimes must be between 1 and 8, got {args.fit_regimes}")
    if getattr(args, "beside_compute", False) and (backend != "gloo" or nranks < 2):
        raise UsageError("--beside-compute goes with --backend gloo on 2 or more ranks")
    if fit and nranks < 2:
        raise UsageError("--fit needs at least 2 ranks (run under mpiexec -n N)")
    files = outputs(args)
    return {"sizes": sizes, "dtypes": dtypes, "ops": ops, "algos": algos, "combos": combos, "waived": waived,
            "modes": modes, "backend": backend,
            "backend_why": why, "servers": servers, "root": root, "fit": fit, "fit_min": fit_min,
            "fit_regimes": getattr(args, "fit_regimes", 1), "rotate": rotate, "on": args.on, "outputs": files}


def _check_memory(collective: str, plan: Plan, nranks: int, comm: MPI.Comm) -> None:
    """Host buffers of the largest row times the ranks on this node must fit; rank 0 decides."""
    if plan["backend"] != "mpi":
        return
    biggest = max(max(plan["sizes"]), plan["rotate"])  # bytes of one buffer (pool, when rotating)
    per_rank = C.kind(collective).host_buffers * biggest
    need = per_rank * env.local_ranks()
    local = None
    if env.rank() == 0:
        from ...common.hostmem import host_available

        local = host_available()
    available: int = comm.bcast(local, root=0)
    if need > available:
        raise UsageError(f"the largest row needs {format_bytes(need)} of host memory on this node "
                         f"({env.local_ranks()} ranks), {format_bytes(available)} available")


def _sweep(collective: str, args: argparse.Namespace, plan: Plan, comm: MPI.Comm,
           progress: Progress) -> list[C.CollectiveResult]:
    """One row per (dtype, op, algo), size and mode, in that order."""
    results: list[C.CollectiveResult] = []
    for dtype, op, algo in plan["combos"]:
        for size in plan["sizes"]:
            for mode in plan["modes"]:
                r = C.run_one(collective, size, dtype, op, algo, plan["backend"], mode, iters=args.iters,
                              warmup=args.warmup, check=args.check, servers=plan["servers"], root=plan["root"],
                              timeout=args.timeout, rotate_bytes=plan["rotate"], on=plan["on"], comm=comm)
                results.append(r)
                progress.step(f"{dtype} {op or ''} {algo} {r.size_bytes} B {'in' if mode else 'out'}: "
                              f"{r.time_us:.1f} us")
    return results


def _fit_with_levels(collective: str, args: argparse.Namespace, plan: Plan, comm: MPI.Comm, progress: Progress,
                     results: list[C.CollectiveResult]) -> tuple[list[C.AlphaBetaFit], str | None, dict[str, Any] | None]:
    """--fit: (the fits, the note on gamma, and on several nodes over MPI the fit per level, else
    None); without --fit nothing."""
    if not plan["fit"]:
        return [], None, None
    fits, gamma_note = _fit(results, plan, comm)
    levels: dict[str, Any] | None = None
    # the levels are the all-reduce's (the two-level model's); other collectives fit the whole communicator
    if collective == "allreduce" and env.topology(comm)["nodes"] > 1 and plan["backend"] == "mpi":
        mode = True if True in plan["modes"] else plan["modes"][0]  # in place if asked
        sweep = LevelSweep(plan["sizes"], plan["dtypes"][0], plan["ops"][0], mode, args.iters, args.warmup,
                           args.check, args.timeout, plan["rotate"], plan["fit_min"], plan["fit_regimes"], args.on)
        levels = fit_levels(sweep, comm, results, fits, progress.step)
    return fits, gamma_note, levels


def _beside_compute(args: argparse.Namespace, plan: Plan, comm: MPI.Comm, progress: Progress) -> dict[str, Any] | None:
    """--beside-compute: how a compute thread and gloo's all-reduce slow each other (else None)."""
    if not getattr(args, "beside_compute", False):
        return None
    from ...primitives import gloo

    size = max([s for s in plan["sizes"] if s <= 25 * 2**20] or [min(plan["sizes"])])
    contention: dict[str, Any] = gloo.contention(size, max(3, min(args.iters, 10)), comm)
    progress.step(f"beside compute: compute-bound x {contention['compute_slowdown']:.3f}, memory-bound x "
                  f"{contention['memory_slowdown']:.3f}, all-reduce x {contention['comm_slowdown']:.3f}")
    return contention


def _notes(collective: str, plan: Plan, nranks: int, gamma_note: str | None) -> list[str]:
    """The report's notes: conventions, what the backend does, what was waived."""
    notes = [f"sizes: {SIZE_CONVENTION}"]
    if C.kind(collective).size_is_total:
        notes.append("size = the total buffer (N blocks of count elements), as nccl-tests; count is per rank")
    if nranks == 1:
        notes.append("busbw is 0: with 1 rank nothing crosses a link (run under mpiexec -n N; "
                     "see the launcher warning if there is one)")
    if plan["backend"] == "mpi" and any(d in ("float16", "bfloat16") for d in plan["dtypes"]):
        notes.append(C.HALF_NOTE)
    if plan["backend"] == "mpi":
        notes.append("glibc keeps freed blocks up to 1 GiB (mallopt), so MPI's per-call temporary buffers "
                     "are not page-faulted in again on every call")
    if plan["rotate"] and plan["backend"] == "mpi":
        notes.append(f"buffers rotate over {format_bytes(plan['rotate'])} per row (--rotate): each iteration "
                     "starts from memory, not from cache")
    if plan["on"] != "main":
        notes.append(C.THREAD_NOTE)
    if gamma_note:
        notes.append(gamma_note)
    return notes + [f"waived (not run): {why}" for why in dict.fromkeys(w.waived for w in plan["waived"])]


def _summary(plan: Plan, args: argparse.Namespace, nranks: int, results: list[C.CollectiveResult],
             fits: list[C.AlphaBetaFit], levels: dict[str, Any] | None, contention: dict[str, Any] | None) -> dict[str, Any]:
    """The report's summary: the backend, wrong and waived rows, the mean busbw, the fits."""
    wrong_rows = sum(1 for r in results if r.wrong)
    return {"nranks": nranks, "backend": plan["backend"], "backend_why": plan["backend_why"],
            "rows_with_wrong": wrong_rows if args.check else None,
            "rows_waived": len(plan["waived"]),
            "avg_busbw_gbs": sum(r.busbw_gbs for r in results) / len(results),
            **({"contention": contention} if contention else {}),
            **({"fit": [f.to_dict() for f in fits]} if plan["fit"] and not levels else {}),
            **({"fit": {"whole": [f.to_dict() for f in fits], "levels": levels}} if levels else {})}


def _run(collective: str, args: argparse.Namespace, plan: Plan, comm: MPI.Comm) -> int:
    """Sweep, fit, report (rank 0 prints and writes it); 1 or CheckFailed on a wrong row."""
    nranks = comm.Get_size()
    is_root = env.rank() == 0
    env.local_ranks()  # collective (Split_type), cached: env.collect() on rank 0 alone must not call it first
    if plan["backend"] == "mpi":
        _core.keep_freed_memory(1 << 30)
    total = len(plan["combos"]) * len(plan["sizes"]) * len(plan["modes"])
    progress = Progress(total, collective, enabled=is_root)
    results = _sweep(collective, args, plan, comm, progress)
    fits, gamma_note, levels = _fit_with_levels(collective, args, plan, comm, progress, results)
    contention = _beside_compute(args, plan, comm, progress)
    report = Compare(
        [*results, *plan["waived"]], args=vars(args) | {"backend": plan["backend"], "sizes": plan["sizes"]},
        timing={"clock": "steady-clock", "region": C.region(plan["backend"], [a for _, _, a in plan["combos"]]),
                "rank_reduction": "max",
                "rank_reduction_detail": "each iteration's time is the max over ranks (MPI_Allreduce MAX)",
                "busbw_factor": C.kind(collective).bus_factor_formula},
        summary=_summary(plan, args, nranks, results, fits, levels, contention),
        notes=_notes(collective, plan, nranks, gamma_note), comm=comm).report()
    if is_root:
        _print(collective, args, plan, results, fits, report, nranks)
        if levels:
            _print_levels(levels)
        plan["outputs"].write(report)
    wrong_rows = sum(1 for r in results if r.wrong)
    if wrong_rows:
        if not is_root:
            return 1
        raise CheckFailed(f"{wrong_rows} row(s) with wrong elements (see the #wrong column)")
    return 0


def _fit(results: list[C.CollectiveResult], plan: Plan, comm: MPI.Comm) -> tuple[list[C.AlphaBetaFit], str | None]:
    gamma = None
    gamma_note = None
    if plan["backend"] == "mpi" and plan["ops"][0] is not None:  # (an all-gather reduces nothing)
        # gamma from a separate measurement of the local reduction (max over ranks), so that beta is
        # the link alone; with one sweep at fixed N the two cannot be separated otherwise.
        dtype, op = plan["dtypes"][0], plan["ops"][0] or "sum"
        local = C.reduction_gamma_us_per_byte(dtype, op)
        gamma = comm.allreduce(local, op=MPI.MAX)
        gamma_note = (f"gamma measured separately: local {dtype} {op} reduction of 16 MiB, "
                      f"{gamma * 1e3:.4f} ns/B (max over ranks); beta is fitted with gamma held fixed")
        fits = C.fit_results([r for r in results if r.dtype == dtype and r.op == plan["ops"][0]],
                             gamma_us_per_byte=gamma, gamma_source="measured: local reduction, 16 MiB",
                             min_bytes=plan["fit_min"], regimes=plan["fit_regimes"])
        fits += C.fit_results([r for r in results if not (r.dtype == dtype and r.op == plan["ops"][0])],
                              min_bytes=plan["fit_min"], regimes=plan["fit_regimes"])
    else:
        fits = C.fit_results(results, min_bytes=plan["fit_min"], regimes=plan["fit_regimes"])
    return fits, gamma_note


def _print_levels(levels: dict[str, Any]) -> None:
    rows = []
    for level in ("intra", "intra_rsag", "inter", "inter_shared"):
        f = levels.get(level)
        if not f:
            continue
        rows.append({"level": level, "ranks": f["ranks"], "alpha": f["alpha_us"], "link": f["link_gbs"],
                     "err64": None if f["median_rel_error_64k"] is None else 100 * f["median_rel_error_64k"],
                     "wrong": f["wrong"], "on": f["measured_on"]})
    print_table("two-level fit (library all-reduce on each level's sub-communicator)",
                [Column("level", "level"), Column("ranks", "ranks"), Column("alpha (us)", "alpha", fmt_float(2)),
                 Column("1/beta (GB/s)", "link", fmt_float(3)),
                 Column("median err % (>= 64 KiB)", "err64", fmt_float(1)), Column("#wrong", "wrong"),
                 Column("measured on", "on")], rows)
    check = levels.get("model_check")
    if not check:
        return
    pts = [p | {"two_pct": 100 * p["two_level_error"],
                "flat_pct": None if p["flat_error"] is None else 100 * p["flat_error"],
                "mode": "in" if p["inplace"] else "out"} for p in check["points"]]
    print_table("the whole communicator: two-level model vs flat one-level model",
                [Column("algo", "algo"), Column("mode", "mode"), Column("size (B)", "size_bytes"),
                 Column("measured (us)", "measured_us", fmt_float(1)),
                 Column("two-level (us)", "two_level_us", fmt_float(1)), Column("error %", "two_pct", fmt_float(1)),
                 Column("flat (us)", "flat_us", fmt_float(1)), Column("flat error %", "flat_pct", fmt_float(1))],
                pts, caption=f"flat: {check['flat_model']}")
    for algo, e in check["median_abs_error_64k"].items():
        flat = "n/a" if e["flat"] is None else f"{100 * e['flat']:.1f} % (worst {100 * e['flat_worst']:.1f} %)"
        print(f"# {algo}: median |error| >= 64 KiB: two-level {100 * e['two_level']:.1f} % "
              f"(worst {100 * e['two_level_worst']:.1f} %), flat {flat}")


def _print(collective: str, args: argparse.Namespace, plan: Plan, results: list[C.CollectiveResult],
           fits: list[C.AlphaBetaFit], report: Report, nranks: int) -> None:
    title = (f"gdlbench {collective} ({plan['backend']}, {nranks} rank{'s' if nranks > 1 else ''}; "
             f"{args.iters} iters, {args.warmup} warm-up, {args.check} check)")
    caption = (f"time: median and p95 over iterations of the max over ranks, host steady clock; "
               f"busbw = algbw x {report.timing['busbw_factor']}; GB/s = 1e9 B/s")
    print_table(title, *C.table([*results, *plan["waived"]]), caption=caption)
    bad = sum(1 for r in results if r.wrong)
    lines = [f"backend {plan['backend']} ({plan['backend_why']})",
             f"timed region: {report.timing['region']}",
             C.CHECK_NOTE if args.check else "#wrong N/A: no check (-c 0)", *report.notes,
             f"Out of bounds values : {bad} {'OK' if not bad else 'FAILED'}",
             f"Avg bus bandwidth    : {report.summary['avg_busbw_gbs']:.4f} GB/s (mean over every row, "
             "latency-bound sizes included; read the table)"]
    for line in lines:
        print(f"# {line}")
    if fits:
        _print_fits(fits)


def _size(n: int) -> str:
    for unit, scale in (("M", 2**20), ("K", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def _print_fits(fits: list[C.AlphaBetaFit]) -> None:
    rows = []
    for f in fits:
        d = f.to_dict()
        rows.append({"name": C.algo_label(f.algo, f.servers),
                     "type": f"{f.group.get('dtype')} {f.group.get('op') or ''} "
                             f"{'in' if f.group.get('inplace') else 'out'}",
                     "regimes": "; ".join(f">= {_size(m0)}: a {a:.2f} us, {1e-3 / b if b else float('inf'):.2f} GB/s"
                                          for m0, a, b in f.regimes[:-1]) or None,
                     "knee": f.regimes[-1][0] if f.regimes else None,
                     "alpha": f.alpha_us, "beta": f.beta_us_per_byte * 1e3, "link": f.link_gbs,
                     "gamma": None if f.gamma_us_per_byte is None else f.gamma_us_per_byte * 1e3,
                     "err": 100 * d["median_rel_error"], "err64": None if d["median_rel_error_64k"] is None
                     else 100 * d["median_rel_error_64k"],
                     "max": 100 * max(f.rel_errors())})
    cols = [Column("algo", "name"), Column("type", "type"),
            *([Column("smaller regimes", "regimes"), Column("last regime from (B)", "knee")]
              if any(f.regimes for f in fits) else []),
            Column("alpha (us)", "alpha", fmt_float(3)),
            Column("beta (ns/B)", "beta", "{:.5f}"), Column("1/beta (GB/s)", "link", fmt_float(3)),
            Column("gamma (ns/B)", "gamma", "{:.5f}"), Column("median err %", "err", fmt_float(1)),
            Column("median err % (>= 64 KiB)", "err64", fmt_float(1)), Column("max err %", "max", fmt_float(1))]
    print_table("alpha-beta fit (least squares on relative error; formulas: docs/model.md)", cols, rows,
                caption="; ".join([f"fitted on sizes >= {fits[0].fit_min_bytes} B" if fits[0].fit_min_bytes
                                   else "fitted on every size"]
                                  + [f"{a}: t = {costmodel.formula(a)}" for a in dict.fromkeys(f.algo for f in fits)]))
    pts = []
    for f in fits:
        for m, t, p, e in zip(f.sizes_bytes, f.measured_us, f.predicted_us, f.rel_errors(), strict=True):
            pts.append({"name": f.algo, "type": f.group.get("dtype"), "size": m, "measured": t, "predicted": p,
                        "err": 100 * e, "mode": "in" if f.group.get("inplace") else "out"})
    print_table("predicted vs measured", [Column("algo", "name"), Column("type", "type"), Column("mode", "mode"),
                                          Column("size (B)", "size"), Column("measured (us)", "measured", fmt_float(1)),
                                          Column("predicted (us)", "predicted", fmt_float(1)),
                                          Column("error %", "err", fmt_float(1))], pts)


def mpi_thread_level(args: argparse.Namespace) -> str:
    """The least MPI thread level this run needs (cli.command_thread_level): --on comm-thread
    calls MPI from a second thread (serialized; the CLI then counts it as a communication thread
    beside the compute ones, as for the iteration: env.choose_mpi_wait)."""
    return "serialized" if getattr(args, "on", "main") == "comm-thread" else "funneled"


add_arguments, run = make("allreduce")
