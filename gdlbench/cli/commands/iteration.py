"""gdlbench iteration: where an SGD iteration's time goes, phase by phase and composed, against
the model, per strategy."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from ...common import env
from ...common.compare import Compare
from ...common.output import Column, OutputFile, Report, fmt_float, print_table, stdout_console
from ...composed.iteration import NO_PROGRESS_SLOWDOWN, Iteration, IterationRequest, IterationResult
from ...nets.network import net_option
from ...primitives.collectives import DEFAULT_TIMEOUT_S
from .. import common_options, outputs

DEFAULT_STRATEGIES = "serial,prefetch,wfbp,wfbp-fusion"
ONE_WORKER = "serial"  # on one worker: every message is a 1-rank all-reduce, so strategies need several
# Rounds: at least MIN_ROUNDS, then until the error's standard error is TARGET_SE_PCT, the rounds
# have taken BUDGET_S, or MAX_ROUNDS are done (the main job's first screen in under a minute).
MIN_ROUNDS, MAX_ROUNDS, TARGET_SE_PCT, BUDGET_S = 5, 30, 1.0, 20.0
MPI_THREAD_LEVEL = Iteration.MPI_THREAD_LEVEL  # the CLI initialises MPI at this level


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--net", type=net_option, default="resnet50", help="a built-in net (gdlbench nets) or a spec file (default resnet50)")
    p.add_argument("--batch", type=int, help="per-worker batch (default: per net and device; printed)")
    p.add_argument("--strategy", help=f"a preset, a comma-separated list, or all (default {DEFAULT_STRATEGIES}; "
                                      f"on one worker, where they differ only in I/O prefetch, {ONE_WORKER}; "
                                      f"with --full, {DEFAULT_STRATEGIES})")
    p.add_argument("--full", action="store_true",
                   help="every table (phases, layers, strategies, each phase alone vs inside, contention) and, on "
                        f"one worker, the strategies {DEFAULT_STRATEGIES}")
    p.add_argument("--target-se", type=float, metavar="PCT",
                   help=f"stop adding rounds once the model's error has a standard error of at most PCT %% (after "
                        f"--min-rounds; default {TARGET_SE_PCT:g}, or 0 with --iters); 0: run all --iters rounds")
    p.add_argument("--max-seconds", type=float, metavar="S",
                   help=f"stop adding rounds after S seconds of rounds (after --min-rounds; default {BUDGET_S:g}, or "
                        "0 with --iters); 0: off")
    p.add_argument("--min-rounds", type=int, default=MIN_ROUNDS, metavar="R",
                   help=f"rounds before --target-se and --max-seconds may stop the run (default {MIN_ROUNDS})")
    p.add_argument("-T", "--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"abort the job when a message or an iteration makes no progress for this many seconds "
                        f"(a dead or hung rank); default {DEFAULT_TIMEOUT_S:g}, 0: off")
    p.add_argument("--no-io", dest="io", action="store_false", help="leave out the data I/O phase")
    p.add_argument("--io-dir", help="where the JPEG dataset is generated once and reused (default: a temporary one)")
    p.add_argument("--io-threads", type=int, help="threads that read and decode the batch (default: --threads)")
    p.add_argument("--plot", metavar="FILE.png", help="phase breakdown per strategy, predicted (needs gdlbench[plot])")
    p.add_argument("--plot-timeline", metavar="FILE.png",
                   help="measured timeline of one composed iteration of the last WFBP strategy (or the last)")
    p.add_argument("--trace", metavar="FILE.json",
                   help="the traced iterations (every phase on every rank, and the isolated phases as the model "
                        "composes them) in the Chrome trace event format: open it in ui.perfetto.dev")
    # a round: the phases alone, then each composed iteration; warmup: per native call
    common_options(p, iters=None, warmup=1,
                   iters_help=f"rounds, exactly (default: at most {MAX_ROUNDS}, stopped by --target-se and "
                              "--max-seconds)")


def _progress(enabled: bool) -> Callable[[str], None]:
    import sys
    import time

    t0 = time.monotonic()

    def say(msg: str) -> None:
        if enabled:
            print(f"gdlbench iteration: {msg} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)

    return say


PHASE_COLUMNS = [Column("phase", "phase"), Column("median (ms)", "time_ms", fmt_float(2)),
                 Column("p95 (ms)", "p95_ms", fmt_float(2)), Column("cv", "time_cv", fmt_float(3)),
                 Column("share of serial", "share_pct", "{:.1f} %")]
LAYER_COLUMNS = [Column("layer", "layer"), Column("type", "type"), Column("forward (ms)", "forward_ms", fmt_float(2)),
                 Column("backward (ms)", "backward_ms", fmt_float(2)), Column("share", "share_pct", "{:.1f} %")]
PHASE_DIFF_COLUMNS = [Column("strategy", "strategy")] + [
    Column(ph, ph, justify="right") for ph in ("io", "h2d", "forward", "backward", "comm", "update")]
SMALL_PHASE = 0.01  # of the iteration: a phase shorter than this alone gets its difference in ms, not %


def phase_difference(cell: dict[str, float], iteration_us: float) -> str:
    """A phase inside the composed run against the phase alone: in percent of it alone, or in ms
    where it alone is under SMALL_PHASE of the iteration (a 1-rank all-reduce of 10 us that waits
    0.7 ms for its thread is "+7000 %", which says less than "+0.69 ms")."""
    if cell["alone_us"] >= SMALL_PHASE * iteration_us:
        return f"{cell['diff_pct']:+.1f} %"
    return f"{(cell['inside_us'] - cell['alone_us']) / 1e3:+.2f} ms"


# The first screen: where the time goes, the model's error with its noise, what to try next.
FIRST_SCREEN_WIDTH = 100
INSIDE_PHASES = (("io (wait)", "io_wait"), ("h2d", "h2d"), ("forward", "forward"), ("backward", "backward"),
                 ("comm (exposed)", "comm_exposed"), ("update", "update"))
WHERE_COLUMNS = [Column("phase", "phase"), Column("ms", "ms", fmt_float(2)), Column("share", "share", "{:.1f} %")]
MODEL_COLUMNS = [Column("strategy", "strategy"), Column("measured (ms)", "measured_ms", fmt_float(2)),
                 Column("model (ms)", "predicted_ms", fmt_float(2)), Column("error", "error_pct", "{:+.1f} %"),
                 Column("± se", "error_se_pct", "{:.1f} %"), Column("img/s total", "ips_total", fmt_float(1))]


def _say(text: str) -> None:
    """A paragraph, wrapped to the first screen's width."""
    import textwrap

    print(textwrap.fill(text, FIRST_SCREEN_WIDTH, subsequent_indent="  "))


def where_the_time_goes(r: IterationResult) -> tuple[str, list[dict[str, Any]]]:
    """(the fastest strategy, each phase's median inside its composed iteration with its share)."""
    fastest = min(r.runs, key=lambda run: run.composed.median)
    parts = {label: fastest.inside[key].median for label, key in INSIDE_PHASES if key in fastest.inside}
    if "io" not in r.phases:
        parts.pop("io (wait)", None)
    if r.world_size == 1:
        parts.pop("comm (exposed)", None)  # 1-rank all-reduces: nothing crosses a link
    total = sum(parts.values()) or 1.0
    return fastest.strategy.name, [{"phase": k, "ms": v / 1e3, "share": 100 * v / total} for k, v in parts.items()]


def next_step(r: IterationResult, rows: list[dict[str, Any]], net: str) -> str:
    """One line on what to try next, from what takes the most time."""
    share = {row["phase"]: row["share"] for row in rows}
    compute = share.get("forward", 0.0) + share.get("backward", 0.0)
    if r.world_size == 1:
        return (f"next: mpiexec -n 2 gdlbench iteration --net {net} compares the strategies with communication; "
                "--full prints every table, --json FILE keeps all of it")
    if share.get("comm (exposed)", 0.0) >= 20:
        return (f"next: exposed communication is {share['comm (exposed)']:.0f} % of the iteration: try wfbp-fusion, "
                "or price a faster link with gdlbench predict --link-scale 2; --full prints every table")
    if share.get("io (wait)", 0.0) >= 20:
        return (f"next: waiting for data is {share['io (wait)']:.0f} % of the iteration: a prefetching strategy "
                "or more --threads for I/O; --full prints every table")
    return (f"next: compute is {compute:.0f} % of the iteration: a GPU (--device cuda) or a larger --batch moves "
            "it most; gdlbench study predicts the strategies at scale; --full prints every table")


def print_first_screen(r: IterationResult, it: Iteration, chosen: bool) -> None:
    """Where the time goes, the model against the measured iteration with its noise, and one
    line on what to try next, in FIRST_SCREEN_WIDTH columns (print_result: every table)."""
    rounds = len(r.runs[0].composed.samples_us)
    workers = f"{r.world_size} worker{'s' if r.world_size > 1 else ''}"
    _say(f"gdlbench iteration: {r.net}, batch {r.batch} per worker, {workers}, {r.device}, {r.threads} compute "
         f"threads per rank; medians of {rounds} rounds")
    fastest, rows = where_the_time_goes(r)
    t_ms = min(run.composed.median for run in r.runs) / 1e3
    print(f"\nwhere the time goes: one {fastest} iteration, {t_ms:.1f} ms")
    print_table("", WHERE_COLUMNS, rows, context="")
    _say("slowest layers (forward + backward): " + ", ".join(
        f"{la['layer']} ({la['type']}) {la['share_pct']:.1f} %" for la in r.top_layers(3)))
    print("\nthe model (from each phase alone) against the composed iteration")
    print_table("", MODEL_COLUMNS, r.strategy_rows(), context="")
    worst = max(r.runs, key=lambda run: abs(run.error_pct) / max(run.error_se_pct, 1e-9))
    noise = ("within 2 se: noise, not the model" if abs(worst.error_pct) <= 2 * worst.error_se_pct
             else "beyond 2 se: the model misses something here (--full: each phase alone vs inside)")
    _say(f"model error {worst.error_pct:+.1f} % ± {worst.error_se_pct:.1f} % (1 se, {worst.strategy.name}): {noise}")
    if r.world_size == 1 and not chosen:
        _say("one worker: strategies (how gradients are sent, what overlaps) differ only with several workers, "
             f"so only {ONE_WORKER} was measured (--strategy all or --full to compare them here)")
    _say(next_step(r, rows, it.net.origin if it.net.origin != "<dict>" else r.net))


def rounds_run(r: IterationResult, it: Iteration) -> str:
    """The rounds the run made, and of how many at most when it may stop early (--target-se, --max-seconds)."""
    rounds = len(r.runs[0].composed.samples_us)
    return f"{rounds} rounds" + (f" (of at most {it.iters})" if it.may_stop_early and rounds < it.iters else "")


def _print_phases(console: Console, r: IterationResult, it: Iteration, serial: float) -> None:
    """The run's header, then the phases alone and the layers that take the most time."""
    phase_rows = [{"phase": k, "time_ms": m.median / 1e3, "p95_ms": m.p95 / 1e3, "time_cv": m.cv,
                   "share_pct": 100 * m.median / serial, "noisy": m.noisy} for k, m in r.phases.items()]
    console.print(f"gdlbench iteration: {r.net}, batch {r.batch} per worker, {r.world_size} worker(s), device "
                  f"{r.device} ({it.device_why}), {r.threads} compute threads per rank", highlight=False, markup=False)
    if r.conv_algorithms:
        console.print(f"convolution algorithms: {r.conv_algorithms}", highlight=False, markup=False)
    clock = "host steady clock" if r.device == "cpu" else "CUDA events (composed iteration: host steady clock)"
    print_table("phases, each measured alone (medians; comm: see strategies)", PHASE_COLUMNS, phase_rows,
                caption=f"clock: {clock}; the isolated round: one iteration without communication, every phase "
                        f"stamped, one before every composed iteration; {rounds_run(r, it)}, {it.warmup} warm-up "
                        "iteration(s) before each composed one and the run's first isolated one; multi-rank "
                        "phases are the slowest rank's (whose backward ended last)")
    print_table("layers that take the most time", LAYER_COLUMNS,
                [{**la, "forward_ms": la["forward_us"] / 1e3, "backward_ms": la["backward_us"] / 1e3} for la in r.top_layers()])


def _print_strategies(r: IterationResult, serial: float) -> None:
    """The model against the composed iteration per strategy, and each phase alone against inside it."""
    rows = r.strategy_rows()
    notes = "; ".join(f"{run.strategy.name}: {run.strategy.describe()}" for run in r.runs)
    print_table("composed iteration per strategy: the model (from the phases above) against the real run",
                IterationResult.STRATEGY_COLUMNS, rows,
                caption=f"error = (predicted - measured) / measured; se: the error's standard error from "
                        "the rounds' spread (what a perfect model would show here at one sigma; an error within "
                        "about 2 se is noise, not the model); paired: the median over rounds of each round's "
                        "error, the model priced from that round's own phases and messages alone; spread: the "
                        "composed run's interquartile "
                        f"range over the rounds / median. {notes}. Parameter-server strategies run "
                        "each message as one push+pull call. Presets are stated assumptions (gdlbench.model.strategies), "
                        "not reproductions of the frameworks.")
    print_table("each phase alone (isolated round) and inside the composed iteration: difference",
                PHASE_DIFF_COLUMNS,
                [{"strategy": name} | {ph: phase_difference(v, serial) for ph, v in table.items()}
                 for name, table in r.phase_table().items()],
                caption="(inside - alone) / alone, medians over the rounds, the slowest rank's; a phase under "
                        f"{100 * SMALL_PHASE:.0f} % of the iteration alone: inside - alone in ms; comm: the sum of "
                        "the messages' times (alone: each message alone)")


def _print_contention(console: Console, r: IterationResult) -> None:
    """The measured contention: backward beside each set of messages, and the read beside compute."""
    # strategies whose contention was measured with the same messages
    shared: dict[tuple[Sequence[float], Sequence[float], int], list[str]] = {}
    for name, (cm, mm) in r.slowdowns.items():
        shared.setdefault((cm.samples_us, mm.samples_us, r.slowdown_round[name]), []).append(name)
    sharded = {run.strategy.name for run in r.runs if run.strategy.shard}
    for (cs, ms, i), names in shared.items():
        # (strategies whose rounds read the same pair are listed together, sharded or not)
        lane, posted = (("backward", "backward produces") if not sharded & set(names) else
                        ("compute", "their iteration posts") if sharded >= set(names) else
                        ("compute", "each strategy posts"))
        messages = (f"made next to no progress beside {lane}" if ms[i] >= NO_PROGRESS_SLOWDOWN / 2
                    else f"{ms[i]:.3f}x slower beside {lane}")
        console.print(f"contention, measured with the messages of {', '.join(names)} posted as {posted} them: "
                      f"{lane} {cs[i]:.3f}x slower beside them, the messages {messages} (the pair of the "
                      f"round whose prediction is the median of {len(cs)} rounds)", markup=False, highlight=False)
    unread = [run.strategy.name for run in r.runs if run.strategy.shard and run.strategy.overlap == "wfbp"
              and run.strategy.name not in r.slowdowns]
    if unread and r.world_size > 1:
        slow = 2.0 - r.overlap_efficiency
        console.print(f"contention of {', '.join(unread)}: no round could be read; while their messages and "
                      f"compute overlap, both are priced {slow:g}x slower (2 - overlap efficiency)",
                      markup=False, highlight=False)
    if "read_beside_us" in r.contention:
        rb = r.contention["read_beside_us"]
        console.print(f"the read beside compute, measured: the prefetch thread's read ({r.phases['io'].median / 1e3:.2f} ms "
                      f"alone) cost the compute beside it {rb.median / 1e3:.2f} ms (median of {len(rb.samples_us)} "
                      "rounds); prefetching strategies pay that", markup=False, highlight=False)


def _print_model_notes(console: Console, r: IterationResult, it: Iteration) -> None:
    """The model's overlap efficiency, and what this machine and run leave out or cannot show."""
    eta = r.overlap_efficiency
    console.print(f"model: overlap efficiency {eta:g} ("
                  + ("the compute threads fill every core, so communication and prefetched I/O overlapped with "
                     "compute need the same cores and hide none of their time" if eta == 0 else
                     "overlapped communication and I/O run on resources of their own") + ")", markup=False)
    if r.world_size > 1 and r.device == "cpu":
        console.print(f"MPI: {env.mpi_wait()}", markup=False, highlight=False)
    if eta == 0 and r.world_size > 1 and any(run.strategy.overlap == "wfbp" for run in r.runs):
        console.print("note: the communication thread has no core of its own here. "
                      + ("MPI yields while it waits, so a WFBP message posted during backward mostly waits for "
                         "backward to end. " if env.mpich_yields() else
                         "A WFBP message can stall for tens of ms while both ranks' compute threads hold the cores, "
                         "and which messages stall changes from run to run, and so does the composed time. ")
                      + "The contention rounds price what happens (docs/model.md). Fewer --threads per rank, so that "
                        "the ranks leave a core free, give the messages one.", markup=False)
    if it.skipped:
        console.print(f"left out on cuda: {', '.join(it.skipped)} (parameter-server and sharded strategies run on the CPU executor only)",
                      markup=False)
    if r.world_size == 1:
        console.print("one worker: every message is a 1-rank all-reduce, so comm is ~0 and strategies differ "
                      "only in I/O prefetch; run under mpiexec -n N to see communication.", markup=False)


def print_result(r: IterationResult, it: Iteration) -> None:
    """The full report on the terminal (--full)."""
    serial = sum(m.median for k, m in r.phases.items())
    console = stdout_console()
    _print_phases(console, r, it, serial)
    _print_strategies(r, serial)
    _print_contention(console, r)
    _print_model_notes(console, r, it)


def request_from_args(args: argparse.Namespace) -> IterationRequest:
    """What the arguments ask, checked once (to_argv() gives it back). Without --strategy: on one
    worker serial (unless --full), else the default list."""
    world = env.world().Get_size()
    strategy = args.strategy or (ONE_WORKER if world == 1 and not args.full else DEFAULT_STRATEGIES)
    # --iters N asks for N rounds: the early stops only where asked for too (or without --iters)
    adaptive = args.iters is None
    target_se = args.target_se if args.target_se is not None else (TARGET_SE_PCT if adaptive else 0.0)
    max_seconds = args.max_seconds if args.max_seconds is not None else (BUDGET_S if adaptive else 0.0)
    return IterationRequest(args.net, args.batch, args.device, strategy, MAX_ROUNDS if adaptive else args.iters,
                            args.warmup, args.threads, args.io, args.io_dir, args.io_threads, args.timeout, target_se,
                            args.min_rounds, max_seconds)


def run(args: argparse.Namespace) -> int:
    request = request_from_args(args)
    files = outputs(args)
    extra = {opt: OutputFile(path, opt) for opt, path in (("--plot", args.plot), ("--plot-timeline", args.plot_timeline),
                                                           ("--trace", args.trace)) if path}
    if args.plot or args.plot_timeline:
        from ...study.plots import require_matplotlib

        require_matplotlib()
    root = env.rank() == 0
    it = Iteration(request, progress=_progress(root))
    result = it.measure()
    if not root:
        return 0
    if args.full:
        print_result(result, it)
    else:
        print_first_screen(result, it, chosen=args.strategy is not None)
    files.write(_report(result, vars(args) | {"strategy": request.strategy}))
    _write_extras(result, extra)
    return 0


def _report(result: IterationResult, args: dict[str, Any]) -> Report:
    """The JSON document: every row, and the model's predictions and the measured timelines."""
    layer_names = [la["name"] for la in result.layers]
    runs = result.runs
    return Compare([result], args=args | {"net": result.net, "batch": result.batch, "device": result.device},
                   timing={"clock": "steady-clock" if result.device == "cpu" else
                           "cuda-events (phases), steady-clock (messages, composed iteration)",
                           "region": "phases: each alone; iteration: io wait + h2d + forward + backward + "
                                     "exposed comm + update", "rank_reduction": "max"}
                   | ({"conv_algorithms": result.conv_algorithms} if result.conv_algorithms else {}),
                   summary=result.summary | {
                       "rounds": len(runs[0].composed.samples_us),
                       "strategies": {run.strategy.name: run.strategy.to_dict() for run in runs},
                       "top_layers": result.top_layers(),
                       "predictions": {run.strategy.name: run.prediction.to_dict(timeline=True) for run in runs},
                       "measured_timelines": {run.strategy.name: vars(run.measured_timeline(layer_names))
                                              for run in runs},
                       # every rank's traced round as exposed phases (rank 0's is the timeline's)
                       "measured_breakdowns_by_rank": {run.strategy.name: run.breakdowns(layer_names)
                                                       for run in runs}}).report()


def _write_extras(result: IterationResult, extra: dict[str, OutputFile]) -> None:
    """--trace, --plot and --plot-timeline."""
    if "--trace" in extra:
        extra["--trace"].write(json.dumps(result.chrome_trace()))
    if "--plot" in extra:
        from ...study.plots import plot_breakdown

        plot_breakdown([run.prediction for run in result.runs], extra["--plot"].path,
                       title=f"{result.net}, batch {result.batch}, {result.world_size} worker(s): predicted phases")
    if "--plot-timeline" in extra:
        from ...study.plots import plot_timeline

        wfbp = [run for run in result.runs if run.strategy.overlap == "wfbp"]
        run_ = (wfbp or result.runs)[-1]
        plot_timeline(run_.measured_timeline([la["name"] for la in result.layers]), extra["--plot-timeline"].path,
                      title=f"{result.net} measured, {run_.strategy.name}, {result.world_size} worker(s)")
