"""Model accuracy on this machine, repetition after repetition. For each rank count, net and
repetition, one `mpiexec -n N gdlbench iteration` run measures the phases alone and the composed
iteration of every strategy in alternating rounds; the model's prediction from those phases
(with each message's measured time and the measured contention) is held against the composed
run. Then `gdlbench predict`, fed that run's phases JSON and an alpha-beta fit from
`gdlbench allreduce --fit` measured on the same ranks (once per rank count), predicts the
N-worker iteration again, its communication from the fit alone. With a sharded strategy (ZeRO,
FSDP), `reduce_scatter --fit` and `allgather --fit` are measured too, and the sharded strategies
are predicted twice: from the all-reduce fit alone (their messages by formula, "predict") and
with the fits of their own collectives ("rs/ag fit"), timed on a communication thread as the
iteration sends them (`--on comm-thread`); --fits-on-main-too also fits them on the main thread,
as before 2026-12-07, and predicts a third time from those ("on main").

  python benchmarks/iteration_model.py [--ranks 1,2] [--nets alexnet,googlenet,resnet50]
      [--strategy all] [--reps 5] [--iters 10] [--batch 8 | --batch alexnet=8,resnet50=1]
      [--threads T] [--out DIR] [--explain] [--noise] [--fits-on-main-too]

Prints, per rank count, net and strategy: the composed run's median over the repetitions and
its spread between repetitions ((max - min) / median), and for the model and for predict the
median and the worst |error| over the repetitions, and the error's standard error from the
rounds' spread (se: what a perfect model would show at one sigma); then one summary line per
rank count for benchmarks/RESULTS.md. The goal: median |error| <= 3 % and no error above 5 %;
bias: the median signed error over the repetitions; a bias beyond twice its standard error
(1.25 se / sqrt(reps)) is the model's, not the machine's noise. "paired": per repetition, the
median over rounds of each round's own error (the model priced from that round's isolated phases,
messages alone and contention against that round's composed iteration, seconds apart), held to
the same goal: where the machine switches between a fast and a slow state, the medians of the
parts and of the whole can fall in different states.
--noise only times, on one rank, the same iteration (no communication) 30 times in a row, at 1
thread and at --threads: its coefficient of variation is the machine's noise, which no model can
beat (an A/A test), then stops.
Around each iteration process the load average and the /proc/vmstat counters' deltas (page faults,
compaction, huge pages, reclaim) are printed with the comm phase alone / inside per strategy, and
kept in rows.json ("machine").
--explain first times, on one rank, the passes repeated alone (the old way) against the
isolated round and the composed serial iteration, in alternation: the bias it removed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gdlbench.composed.iteration import default_batch
from gdlbench.model.strategies import get_strategies
from gdlbench.nets.network import load_network
from gdlbench.primitives.collectives import fit_sweep_for_messages

BIN = Path(sys.executable).parent
GOAL_MEDIAN, GOAL_WORST = 3.0, 5.0


# /proc/vmstat counters read around each iteration process (Linux): page faults, compaction,
# transparent huge pages, reclaim; what the machine's memory did while the rounds ran.
VMSTAT_KEYS = ("pgfault", "pgmajfault", "compact_stall", "compact_migrate_scanned", "thp_fault_alloc",
               "thp_collapse_alloc", "pgsteal_direct", "pgscan_kswapd", "numa_pages_migrated")


def vmstat() -> dict[str, int]:
    try:
        pairs = (line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    except OSError:
        return {}
    return {k: int(v) for k, v in pairs if k in VMSTAT_KEYS}


def run(cmd: list[str]) -> None:
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}):\n{p.stderr[-3000:]}")


def batches(text: str | None, nets: list[str]) -> dict[str, int]:
    """--batch 8 (every net) or alexnet=8,resnet50=1 (the rest: the CPU defaults, halved per rank)."""
    out = {net: default_batch(load_network(net).name, "cpu") for net in nets}
    if text:
        if "=" not in text:
            return {net: int(text) for net in nets}
        for item in text.split(","):
            name, value = item.split("=")
            out[name] = int(value)
    return out


def noise(net: str, batch: int, threads: int, count: int = 30) -> None:
    """The same isolated iteration `count` times on one rank (one warm-up before each, as
    `iteration` runs it): the spread a perfect model would still see."""
    from mpi4py import MPI

    from gdlbench import _core

    _core.set_blas_threads(threads)
    _core.set_compute_threads(threads)
    _core.keep_freed_memory(1 << 30)
    exe = _core.Net(load_network(net).layer_specs(), batch)
    times = []
    for _ in range(count):
        _, t = exe.time_iteration(messages=[], overlap=False, algo="library", servers=1, comm=MPI.COMM_SELF,
                                  io=None, prefetch=False, warmup=1, iters=1)
        times.append(t["update_end_us"])
    mean = statistics.mean(times)
    q = statistics.quantiles(times, n=4)
    print(f"noise: {net} batch {batch}, {threads} thread(s), {count} iterations: median "
          f"{statistics.median(times) / 1e3:.1f} ms, cv {100 * statistics.stdev(times) / mean:.1f} %, "
          f"IQR / median {100 * (q[2] - q[0]) / statistics.median(times):.1f} %, min {min(times) / 1e3:.1f} ms, "
          f"max {max(times) / 1e3:.1f} ms", flush=True)


def explain(net: str, batch: int, threads: int, rounds: int) -> None:
    """The passes repeated alone (backward after backward, one forward before them) against the
    same passes inside the isolated round (backward right after its forward) and the composed
    serial iteration, alternating A B C A B C on one rank."""
    from mpi4py import MPI

    from gdlbench import _core
    from gdlbench.composed.iteration import phase_times

    _core.set_blas_threads(threads)
    _core.set_compute_threads(threads)
    spec = load_network(net)
    exe = _core.Net(spec.layer_specs(), batch)
    full = [(0, exe.param_count, 0)]
    rep_f, rep_b, iso_f, iso_b, com_f, com_b = [], [], [], [], [], []
    for _ in range(rounds):
        rep_f.append(statistics.median(exe.time_forward_pass(1, 3)))
        rep_b.append(statistics.median(exe.time_backward_pass(1, 3)))
        _, t = exe.time_iteration(messages=[], overlap=False, algo="library", servers=1, comm=MPI.COMM_SELF,
                                  io=None, prefetch=False, warmup=1, iters=1)
        iso_f.append(phase_times(t)["forward"])
        iso_b.append(phase_times(t)["backward"])
        _, t = exe.time_iteration(messages=full, overlap=False, algo="library", servers=1, comm=MPI.COMM_SELF,
                                  io=None, prefetch=False, warmup=1, iters=1)
        com_f.append(phase_times(t)["forward"])
        com_b.append(phase_times(t)["backward"])
    med = statistics.median
    print(f"\n{net} batch {batch}, {threads} thread(s), 1 rank, {rounds} alternating rounds (ms, medians):")
    print(f"{'pass':9s} {'repeated alone':>15s} {'isolated round':>15s} {'composed serial':>16s}")
    for name, a, b, c in (("forward", rep_f, iso_f, com_f), ("backward", rep_b, iso_b, com_b)):
        print(f"{name:9s} {med(a) / 1e3:15.1f} {med(b) / 1e3:15.1f} {med(c) / 1e3:16.1f}   "
              f"repeated/composed {100 * (med(a) / med(c) - 1):+.1f} %, isolated/composed {100 * (med(b) / med(c) - 1):+.1f} %")


def fits(mpi: list[str], ranks: int, nets: list[str], strategies: list, out: Path,
         on_main_too: bool = False) -> dict[str, list[Path]]:
    """The all-reduce fit (library, and ps with P = N as the presets run it, where a strategy uses
    it) into fit-N.json; with a sharded strategy also the reduce-scatter's and all-gather's fits,
    timed on a communication thread as the iteration sends them (--on comm-thread), their files
    under "comm-thread"; on_main_too: also on the main thread (as before 2026-12-07, files
    *-main.json, under "main"), each right before its comm-thread twin, so that the machine's
    load drifts over both alike. In place, from memory, up to the whole gradient."""
    largest = max(load_network(net).param_bytes() for net in nets)
    sweep = [*fit_sweep_for_messages(largest), "--fit", "-n", "10", "-w", "2", "-c", "1"]
    algos = "library" + (",ps" if any(s.collective == "ps" for s in strategies) else "")
    run(mpi + ["allreduce", *sweep, "--algo", algos, "--servers", str(ranks), "--json", str(out / f"fit-{ranks}.json")])
    if not any(s.shard for s in strategies):
        return {}
    files: dict[str, list[Path]] = {}
    for c in ("reduce_scatter", "allgather"):
        for on in ("main", "comm-thread") if on_main_too else ("comm-thread",):
            f = out / f"{c}-fit-{ranks}{'-main' if on == 'main' else ''}.json"
            run(mpi + [c, *sweep, "--on", on, "--json", str(f)])
            files.setdefault(on, []).append(f)
    return files


def predicted(net: str, it_json: Path, ranks: int, strategies: list, fit_files: list[Path], out: Path,
              tag: str) -> dict[str, dict]:
    """`gdlbench predict`'s row at N = ranks per strategy, each strategy priced with the fit of the
    algorithm the executor sends it with (fit_files: the all-reduce's, then any rs/ag fits; none
    on one rank)."""
    pred: dict[str, dict] = {}
    for algo, names in (("library", [s.name for s in strategies if s.collective != "ps"]),
                        ("ps", [s.name for s in strategies if s.collective == "ps"])):
        if not names:
            continue
        comm = (["--from", ",".join(map(str, fit_files)), "--algo", algo] if fit_files
                else ["--alpha", "0", "--beta", "0"])
        pred_json = out / f"predict-{tag}-{algo}.json"
        run([str(BIN / "gdlbench"), "predict", "--net", net, "--phases", str(it_json), *comm,
             "--workers", str(ranks), "--strategy", ",".join(names), "--servers", str(ranks),
             "--json", str(pred_json)])
        pred |= {r["strategy"]: r for r in json.loads(pred_json.read_text())["rows"] if r.get("workers") == ranks}
    return pred


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2", help="rank counts, comma-separated (default 2)")
    ap.add_argument("--nets", default="alexnet,googlenet,resnet50")
    ap.add_argument("--strategy", default="all")
    ap.add_argument("--reps", type=int, default=5, help="repetitions of every run (default 5)")
    ap.add_argument("--iters", type=int, default=10,
                    help="rounds per run (isolated, then composed; default 10: with 5, on the 2-core VM, noise "
                         "of 2-4 se and medians on stalled rounds decided single rows; RESULTS.md section 3)")
    ap.add_argument("--batch", help="per-rank batch: N for every net, or net=N,... (default: the CPU default "
                                    "of each net, / ranks)")
    ap.add_argument("--threads", type=int, help="compute threads per rank (default: 2 cores / ranks)")
    ap.add_argument("--out", default=None, help="folder for the JSON files (default: a temporary one)")
    ap.add_argument("--explain", action="store_true", help="first show the bias of passes repeated alone")
    ap.add_argument("--noise", action="store_true", help="only time the same iteration again and again (A/A), then stop")
    ap.add_argument("--fits-on-main-too", action="store_true",
                    help="with a sharded strategy, also fit the reduce-scatter and all-gather on the main thread "
                         "(each right before its comm-thread twin) and predict from those too (column 'on main')")
    args = ap.parse_args()
    if args.reps < 1 or args.iters < 1:
        ap.error("--reps and --iters must be at least 1")
    out = Path(args.out or tempfile.mkdtemp(prefix="gdl-model-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "dataset").mkdir(exist_ok=True)  # the JPEGs, generated once
    nets = args.nets.split(",")
    strategies = get_strategies(args.strategy)
    given = batches(args.batch, nets)
    t_start = time.monotonic()
    if args.noise:
        for net in nets:
            for threads in sorted({1, args.threads or 2}):
                noise(net, given[net], threads)
        return
    if args.explain:
        for net in nets:
            explain(net, given[net], args.threads or 2, 5)

    rows: list[dict] = []
    for ranks in (int(r) for r in args.ranks.split(",")):
        mpi = [str(BIN / "mpiexec"), "-n", str(ranks), str(BIN / "gdlbench")]
        threads = args.threads or max(1, 2 // ranks)
        fit_json = out / f"fit-{ranks}.json"
        shard_fits = fits(mpi, ranks, nets, strategies, out, args.fits_on_main_too) if ranks > 1 else {}
        for net in nets:
            batch = given[net] if args.batch else max(1, given[net] // ranks)
            for rep in range(args.reps):
                it_json = out / f"iteration-{ranks}-{net}-{rep}.json"
                before, load_before = vmstat(), os.getloadavg()[0]
                run(mpi + ["iteration", "--net", net, "--batch", str(batch), "--strategy", args.strategy,
                           "--iters", str(args.iters), "--warmup", "1", "--threads", str(threads),
                           # every --iters round, not iteration's adaptive stop (its 20 s budget cut the
                           # transformer runs of 2026-12-06/07 to 5 rounds whatever --iters said)
                           "--target-se", "0", "--max-seconds", "0", "--io-dir", str(out / "dataset"),
                           "--json", str(it_json), "--trace", str(out / f"trace-{ranks}-{net}-{rep}.json")])
                after = vmstat()
                machine = {"load_before": load_before, "load_after": os.getloadavg()[0],
                           "vmstat_delta": {k: after[k] - before[k] for k in after if k in before}}
                it = json.loads(it_json.read_text())
                comm = {name: (t["comm"]["alone_us"], t["comm"]["inside_us"])
                        for name, t in it["summary"].get("phase_table", {}).items() if "comm" in t}
                print(f"  rep {rep}: load {load_before:.1f} -> {machine['load_after']:.1f}; vmstat "
                      + ", ".join(f"{k} {v}" for k, v in machine["vmstat_delta"].items() if v) + "; comm alone / inside (ms): "
                      + ", ".join(f"{n} {a / 1e3:.0f}/{b / 1e3:.0f}" for n, (a, b) in comm.items()), flush=True)
                tag = f"{ranks}-{net}-{rep}"
                pred = predicted(net, it_json, ranks, strategies, [fit_json] if ranks > 1 else [], out, tag)
                # the sharded strategies again, their messages priced by the rs/ag fits themselves
                sharded = [s for s in strategies if s.shard]
                own = predicted(net, it_json, ranks, sharded, [fit_json, *shard_fits["comm-thread"]], out,
                                f"{tag}-own") if shard_fits else {}
                own_main = predicted(net, it_json, ranks, sharded, [fit_json, *shard_fits["main"]], out,
                                     f"{tag}-own-main") if "main" in shard_fits else {}
                for r in it["rows"]:
                    if r["phase"] != "iteration":
                        continue
                    fit_us = pred[r["strategy"]]["t_iter_us"]
                    own_us = own[r["strategy"]]["t_iter_us"] if r["strategy"] in own else None
                    main_us = own_main[r["strategy"]]["t_iter_us"] if r["strategy"] in own_main else None
                    rows.append({"ranks": ranks, "net": net, "batch": batch, "rep": rep, "strategy": r["strategy"],
                                 "rounds": it["summary"]["rounds"], "machine": machine,
                                 "measured_us": r["time_us"], "spread_in_run_pct": r["spread_pct"],
                                 "model_us": r["predicted_us"], "model_err": r["error_pct"],
                                 "error_se": r["error_se_pct"], "paired_err": r["paired_error_pct"],
                                 "paired_se": r["paired_error_se_pct"], "predict_us": fit_us,
                                 "predict_err": 100 * (fit_us - r["time_us"]) / r["time_us"],
                                 "own_fit_us": own_us,
                                 "own_fit_err": None if own_us is None else 100 * (own_us - r["time_us"]) / r["time_us"],
                                 "main_fit_us": main_us,
                                 "main_fit_err": None if main_us is None else 100 * (main_us - r["time_us"]) / r["time_us"]})
                print(f"  {time.monotonic() - t_start:.0f} s so far", flush=True)
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    summarise(rows, args, out)


def summarise(rows: list[dict], args: argparse.Namespace, out: Path) -> None:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["ranks"], r["net"], r["strategy"]), []).append(r)
    ran = sorted({r["rounds"] for r in rows})
    print(f"\n{args.reps} repetition(s) of {'-'.join(map(str, ran))} rounds (asked: {args.iters}); JSON in {out}")
    print(f"{'ranks':>5s} {'net':12s} {'batch':>5s} {'strategy':12s} {'measured':>9s} {'spread':>7s} "
          f"{'model med':>9s} {'worst':>7s} {'bias':>7s} {'se':>6s} {'paired med':>10s} {'worst':>7s} {'bias':>7s} "
          f"{'predict med':>11s} {'worst':>7s}"
          + (f"   {'rs/ag fit med':>13s} {'worst':>7s}" if any(r.get("own_fit_err") is not None for r in rows) else "")
          + (f"   {'on main med':>11s} {'worst':>7s}" if any(r.get("main_fit_err") is not None for r in rows) else "")
          + "   (ms; |error| in %)")
    per_ranks: dict[int, dict[str, list[float]]] = {}
    for (ranks, net, strategy), rs in groups.items():
        measured = [r["measured_us"] for r in rs]
        med = statistics.median(measured)
        spread = 100 * (max(measured) - min(measured)) / med
        m_err = [abs(r["model_err"]) for r in rs]
        p_err = [abs(r["predict_err"]) for r in rs]
        se = statistics.median(r["error_se"] for r in rs)
        bias = statistics.median(r["model_err"] for r in rs)  # signed: a bias keeps its sign rep after rep
        pa_err = [abs(r["paired_err"]) for r in rs]
        pa_bias = statistics.median(r["paired_err"] for r in rs)
        o_err = [abs(r["own_fit_err"]) for r in rs if r.get("own_fit_err") is not None]
        own = f"   {statistics.median(o_err):12.1f}% {max(o_err):6.1f}%" if o_err else ""
        main_err = [abs(r["main_fit_err"]) for r in rs if r.get("main_fit_err") is not None]
        own += f"   {statistics.median(main_err):10.1f}% {max(main_err):6.1f}%" if main_err else ""
        print(f"{ranks:5d} {net:12s} {rs[0]['batch']:5d} {strategy:12s} {med / 1e3:9.1f} {spread:6.1f}% "
              f"{statistics.median(m_err):8.1f}% {max(m_err):6.1f}% {bias:+6.1f}% {se:5.1f}% "
              f"{statistics.median(pa_err):9.1f}% {max(pa_err):6.1f}% {pa_bias:+6.1f}% {statistics.median(p_err):10.1f}% "
              f"{max(p_err):6.1f}%{own}")
        acc = per_ranks.setdefault(ranks, {"model_med": [], "model_worst": [], "predict_med": [],
                                           "predict_worst": [], "spread": [], "se": [], "beyond": [],
                                           "paired_med": [], "paired_worst": [], "paired_beyond": []})
        acc["model_med"].append(statistics.median(m_err))
        acc["model_worst"].append(max(m_err))
        acc["predict_med"].append(statistics.median(p_err))
        acc["predict_worst"].append(max(p_err))
        acc["spread"].append(spread)
        acc["se"].append(se)
        # the median of the reps' signed errors has standard error 1.25 se / sqrt(reps)
        acc["beyond"].append(abs(bias) > 2 * 1.2533 * se / math.sqrt(len(rs)))
        acc["paired_med"].append(statistics.median(pa_err))
        acc["paired_worst"].append(max(pa_err))
        pa_ses = [r["paired_se"] for r in rs if r["paired_se"] is not None]  # None from one round
        acc["paired_beyond"].append(bool(pa_ses) and abs(pa_bias) > 2 * 1.2533 * statistics.median(pa_ses)
                                    / math.sqrt(len(rs)))
    print()
    for ranks, acc in per_ranks.items():
        n = len(acc["model_med"])
        ok_model = sum(m <= GOAL_MEDIAN and w <= GOAL_WORST for m, w in zip(acc["model_med"], acc["model_worst"], strict=True))
        ok_paired = sum(m <= GOAL_MEDIAN and w <= GOAL_WORST
                        for m, w in zip(acc["paired_med"], acc["paired_worst"], strict=True))
        ok_pred = sum(m <= GOAL_MEDIAN and w <= GOAL_WORST for m, w in zip(acc["predict_med"], acc["predict_worst"], strict=True))
        print(f"RESULTS: {ranks} rank(s), {args.nets}, {args.reps} reps x {'-'.join(map(str, ran))} rounds: model median |err| "
              f"{statistics.median(acc['model_med']):.1f} % (worst row median {max(acc['model_med']):.1f} %, worst "
              f"single {max(acc['model_worst']):.1f} %), goal met {ok_model}/{n}; predict median |err| "
              f"{statistics.median(acc['predict_med']):.1f} % (worst single {max(acc['predict_worst']):.1f} %), goal "
              f"met {ok_pred}/{n}; composed run's spread between reps: median {statistics.median(acc['spread']):.1f} %, "
              f"max {max(acc['spread']):.1f} %; the error's standard error from the rounds' spread (a perfect "
              f"model's noise): median {statistics.median(acc['se']):.1f} %; rows whose bias (median signed error) "
              f"exceeds twice its standard error (a bias beyond the noise): {sum(acc['beyond'])}/{n}; paired "
              f"(each round's model from its own parts against its composed iteration, median over rounds) median "
              f"|err| {statistics.median(acc['paired_med']):.1f} % (worst row median {max(acc['paired_med']):.1f} %, "
              f"worst single {max(acc['paired_worst']):.1f} %), goal met {ok_paired}/{n}, bias beyond 2 se "
              f"{sum(acc['paired_beyond'])}/{n}")


if __name__ == "__main__":
    main()
