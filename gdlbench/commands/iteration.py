"""gdlbench iteration: where an SGD iteration's time goes, phase by phase and composed, against
the model, per strategy."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence

from .. import env
from ..cli import common_options
from ..collectives import DEFAULT_TIMEOUT_S
from ..compare import Compare
from ..errors import UsageError
from ..iteration import NO_PROGRESS_SLOWDOWN, Iteration, IterationResult
from ..network import net_option
from ..report import Column, OutputFile, fmt_float, print_table, stdout_console
from ..strategies import get_strategies

DEFAULT_STRATEGIES = "serial,prefetch,wfbp,wfbp-fusion"
MPI_THREAD_LEVEL = Iteration.MPI_THREAD_LEVEL  # the CLI initialises MPI at this level


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--net", type=net_option, default="resnet50", help="a built-in net (gdlbench nets) or a spec file (default resnet50)")
    p.add_argument("--batch", type=int, help="per-worker batch (default: per net and device; printed)")
    p.add_argument("--strategy", default=DEFAULT_STRATEGIES,
                   help=f"a preset, a comma-separated list, or all (default {DEFAULT_STRATEGIES})")
    p.add_argument("-T", "--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"abort the job when a message or an iteration makes no progress for this many seconds "
                        f"(a dead or hung rank); default {DEFAULT_TIMEOUT_S:g}, 0: off")
    p.add_argument("--no-io", dest="io", action="store_false", help="leave out the data I/O phase")
    p.add_argument("--io-dir", help="where the JPEG dataset is generated once and reused (default: a temporary one)")
    p.add_argument("--plot", metavar="FILE.png", help="phase breakdown per strategy, predicted (needs gdlbench[plot])")
    p.add_argument("--plot-timeline", metavar="FILE.png",
                   help="measured timeline of one composed iteration of the last WFBP strategy (or the last)")
    p.add_argument("--trace", metavar="FILE.json",
                   help="the traced iterations (every phase on every rank, and the isolated phases as the model "
                        "composes them) in the Chrome trace event format: open it in ui.perfetto.dev")
    common_options(p)
    p.set_defaults(iters=5, warmup=1)  # iters: rounds (isolated, then composed); warmup: per native call


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
def print_result(r: IterationResult, it: Iteration) -> None:
    serial = sum(m.median for k, m in r.phases.items())
    phase_rows = [{"phase": k, "time_ms": m.median / 1e3, "p95_ms": m.p95 / 1e3, "time_cv": m.cv,
                   "share_pct": 100 * m.median / serial, "noisy": m.noisy} for k, m in r.phases.items()]
    console = stdout_console()
    console.print(f"gdlbench iteration: {r.net}, batch {r.batch} per worker, {r.world_size} worker(s), device "
                  f"{r.device} ({it.device_why}), {r.threads} compute threads per rank", highlight=False, markup=False)
    clock = "host steady clock" if r.device == "cpu" else "CUDA events (composed iteration: host steady clock)"
    print_table("phases, each measured alone (medians; comm: see strategies)", PHASE_COLUMNS, phase_rows,
                caption=f"clock: {clock}; the isolated round: one iteration without communication, every phase "
                        f"stamped, one before every composed iteration; {it.iters} rounds, {it.warmup} warm-up "
                        "iteration(s) before each composed one and the run's first isolated one; multi-rank "
                        "phases are the slowest rank's (whose backward ended last)")
    print_table("layers that take the most time", LAYER_COLUMNS,
                [{**la, "forward_ms": la["forward_us"] / 1e3, "backward_ms": la["backward_us"] / 1e3} for la in r.top_layers()])
    rows = r.strategy_rows()
    notes = "; ".join(f"{run.strategy.name}: {run.strategy.describe()}" for run in r.runs)
    print_table("composed iteration per strategy: the model (from the phases above) against the real run",
                IterationResult.STRATEGY_COLUMNS, rows,
                caption=f"error = (predicted - measured) / measured; se: the error's standard error from "
                        "the rounds' spread (what a perfect model would show here at one sigma; an error within "
                        "about 2 se is noise, not the model); spread: the composed run's interquartile "
                        f"range over the rounds / median. {notes}. Parameter-server strategies run "
                        "each message as one push+pull call. Presets are stated assumptions (gdlbench.strategies), "
                        "not reproductions of the frameworks.")
    print_table("each phase alone (isolated round) and inside the composed iteration: difference",
                PHASE_DIFF_COLUMNS,
                [{"strategy": name} | {ph: phase_difference(v, serial) for ph, v in table.items()}
                 for name, table in r.phase_table().items()],
                caption="(inside - alone) / alone, medians over the rounds, the slowest rank's; a phase under "
                        f"{100 * SMALL_PHASE:.0f} % of the iteration alone: inside - alone in ms; comm: the sum of "
                        "the messages' times (alone: each message alone)")
    # strategies whose contention was measured with the same messages
    shared: dict[tuple[Sequence[float], Sequence[float], int], list[str]] = {}
    for name, (cm, mm) in r.slowdowns.items():
        shared.setdefault((cm.samples_us, mm.samples_us, r.slowdown_round[name]), []).append(name)
    for (cs, ms, i), names in shared.items():
        messages = ("made next to no progress beside backward" if ms[i] >= NO_PROGRESS_SLOWDOWN / 2
                    else f"{ms[i]:.3f}x slower beside backward")
        console.print(f"contention, measured with the messages of {', '.join(names)} posted as backward produces "
                      f"them: backward {cs[i]:.3f}x slower beside them, the messages {messages} (the pair of the "
                      f"round whose prediction is the median of {len(cs)} rounds)", markup=False, highlight=False)
    if "read_beside_us" in r.contention:
        rb = r.contention["read_beside_us"]
        console.print(f"the read beside compute, measured: the prefetch thread's read ({r.phases['io'].median / 1e3:.2f} ms "
                      f"alone) cost the compute beside it {rb.median / 1e3:.2f} ms (median of {len(rb.samples_us)} "
                      "rounds); prefetching strategies pay that", markup=False, highlight=False)
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
        console.print(f"left out on cuda: {', '.join(it.skipped)} (parameter servers run on the CPU executor only)",
                      markup=False)
    if r.world_size == 1:
        console.print("one worker: every message is a 1-rank all-reduce, so comm is ~0 and strategies differ "
                      "only in I/O prefetch; run under mpiexec -n N to see communication.", markup=False)


def run(args: argparse.Namespace) -> int:
    get_strategies(args.strategy)  # bad names fail before any work
    outputs = {opt: OutputFile(path, opt) for opt, path in (("--json", args.json), ("--csv", args.csv),
               ("--plot", args.plot), ("--plot-timeline", args.plot_timeline),
               ("--trace", args.trace)) if path}
    if args.plot or args.plot_timeline:
        from ..plots import require_matplotlib

        require_matplotlib()
    if args.batch is not None and args.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {args.batch}")
    root = env.rank() == 0
    it = Iteration(args.net, args.batch, args.device, args.strategy, iters=args.iters, warmup=args.warmup,
                   threads=args.threads, io=args.io, io_dir=args.io_dir, progress=_progress(root),
                   timeout=args.timeout)
    result = it.measure()
    if not root:
        return 0
    print_result(result, it)
    layer_names = [la["name"] for la in result.layers]
    report = Compare([result], args=vars(args) | {"net": result.net, "batch": result.batch, "device": result.device},
                     timing={"clock": "steady-clock" if result.device == "cpu" else
                             "cuda-events (phases), steady-clock (messages, composed iteration)",
                             "region": "phases: each alone; iteration: io wait + h2d + forward + backward + "
                                       "exposed comm + update", "rank_reduction": "max"},
                     summary=result.summary | {"strategies": {run.strategy.name: run.strategy.to_dict() for run in result.runs},
                                              "top_layers": result.top_layers(),
                                              "predictions": {run.strategy.name: run.prediction.to_dict(timeline=True)
                                                              for run in result.runs},
                                              "measured_timelines": {
                                                  run.strategy.name: vars(run.measured_timeline(layer_names))
                                                  for run in result.runs}}).report()
    report.write(outputs.get("--json"), outputs.get("--csv"))
    if args.trace:
        outputs["--trace"].write(json.dumps(result.chrome_trace()))
    if args.plot:
        from ..plots import plot_breakdown

        plot_breakdown([run.prediction for run in result.runs], outputs["--plot"].path,
                       title=f"{result.net}, batch {result.batch}, {result.world_size} worker(s): predicted phases")
    if args.plot_timeline:
        from ..plots import plot_timeline

        wfbp = [run for run in result.runs if run.strategy.overlap == "wfbp"]
        run_ = (wfbp or result.runs)[-1]
        plot_timeline(run_.measured_timeline(layer_names), outputs["--plot-timeline"].path,
                      title=f"{result.net} measured, {run_.strategy.name}, {result.world_size} worker(s)")
    return 0
