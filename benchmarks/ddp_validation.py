"""gdlbench's prediction of a real PyTorch DDP job (gloo, CPU) from its own profiler trace, held
against the job itself on every configuration (issue 31's validation; figures in RESULTS.md).

Per net (torchvision's resnet50, and a GPT-2-style decoder built from torch.nn layers):
1. per configuration with communication, measure gloo's all-reduce on that link with gdlbench
   (`gdlbench allreduce --backend gloo --fit --beside-compute`, the ranks placed as the job's);
2. then --reps repetitions, each of which first profiles the job on 1 rank (benchmarks/ddp_job.py:
   --steps timed steps, then 5 profiled) and imports the trace (`gdlbench import-trace --step-ms`,
   the median of that run's unprofiled steps, as a user's training log gives it: the profiler's
   own cost is taken out), then runs the real job on every configuration (--steps timed steps
   after --warmup, each step the slowest rank's, ending with --profile-steps profiled steps that
   say what communication it waited for) and predicts each of them from that trace and the
   link's fit (`gdlbench predict --strategy ddp`). The 1-rank row is therefore a replay of the
   traced configuration, held against a separate run; the others are predictions. A trace taken
   once at the start carried the machine's drift (its speed moves by 10-20 % over minutes) into
   every later row: each repetition's runs follow their own trace;
3. per configuration: the measured step (the median over every run's timed steps; the spread
   between the runs' medians), the predicted (the median of the repetitions' predictions), the
   error (the median of each run's error against its own repetition's prediction); the exposed
   communication compared is the step's wait after backward's last layer (the prediction's
   comm_wait_us; in the trace, the main thread's idle time before the optimizer), the median over
   every run's profiled steps;
4. beside them, gdlbench's own composed skeleton of the same net with the ddp preset (`gdlbench
   iteration --strategy ddp`, ResNet-50 only).

--strategies ddp,fsdp also holds PyTorch FSDP (FULL_SHARD, one unit per block; the gpt net) the same
way: its job profiled on 1 rank in each repetition, the reduce-scatter and all-gather fitted on gloo beside the
all-reduce (`gdlbench reduce_scatter|allgather --backend gloo --fit`), predicted with
benchmarks/fsdp_gloo.json (FSDP's plan, every collective blocking as it does on CPU tensors; the fsdp
preset's overlapped prediction beside it), the measured exposed communication the time its
collectives ran while the job's thread ran no operator (import-trace's comm_blocked_us).

Configurations: 1 rank; 2 ranks on one node (loopback); 2 nodes x 1 rank on the emulated cluster
(scripts/emulated-cluster.sh, root) at each --rates rate. Run it with the python of a venv that
has gdlbench, torch and torchvision (`pip install ".[torch]" torchvision`):

    sudo .venv/bin/python benchmarks/ddp_validation.py [--nets resnet50,gpt] [--rates 1gbit,200mbit]
        [--strategies ddp,fsdp] [--batch 4] [--reps 2] [--steps 10] [--out DIR]

Prints one table per net (measured step, predicted step, error, exposed communication measured and
predicted as a share of the step, the skeleton) and the goal's verdict: median |error| over the
configurations <= 5 %, worst <= 10 %, exposed communication within 5 % of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gdlbench.model.torch_trace import StepPhases, import_trace

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PY, GDL, MPIEXEC = sys.executable, str(BIN / "gdlbench"), str(BIN / "mpiexec")
JOB = str(ROOT / "benchmarks" / "ddp_job.py")
CLUSTER = str(ROOT / "scripts" / "emulated-cluster.sh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(config: str, cmd: list[str], timeout: float = 3600) -> str:
    """Runs cmd as the configuration's ranks; returns stderr's emulated-cluster line (or '')."""
    env = os.environ | {"MASTER_PORT": str(free_port())}
    if config == "1 rank":
        full = cmd
        env |= {"RANK": "0", "WORLD_SIZE": "1"}
    elif config == "2 ranks, 1 node":
        full = [MPIEXEC, "-n", "2", *cmd]
    else:
        rate = config.split(" at ")[1]
        full = ["bash", CLUSTER, "--nodes", "2", "--per-node", "1", "--rate", rate, "--mpiexec", MPIEXEC, "--", *cmd]
    p = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir())
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(full)}\n{p.stderr[-3000:]}")
    return next((ln for ln in p.stderr.splitlines() if ln.startswith("emulated-cluster:")), "")


def job_args(args: argparse.Namespace, net: str, strategy: str = "ddp") -> list[str]:
    return [PY, JOB, "--net", net, "--batch", str(args.batch), "--strategy", strategy, *args.job_args.split()]


def gdl_json(cmd: list[str], path: Path) -> dict[str, Any]:
    p = subprocess.run([GDL, *cmd, "--json", str(path)], capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        sys.exit(f"gdlbench {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(path.read_text())


def ranks(config: str) -> int:
    return 1 if config == "1 rank" else 2


def measure_run(args: argparse.Namespace, net: str, config: str, out: Path, strategy: str, rep: int) -> dict[str, Any]:
    """One run of the real job: --steps timed steps after --warmup, ending with --profile-steps
    profiled steps that say what communication it waited for (import-trace)."""
    tag = net if strategy == "ddp" else f"{net}-{strategy}"
    path = out / f"job-{tag}-{slug(config)}-{rep}.json"
    trace = out / f"trace-{tag}-{slug(config)}-{rep}.json"
    launch(config, [*job_args(args, net, strategy), "--steps", str(args.steps), "--warmup", str(args.warmup),
                    "--json", str(path), "--profile", str(args.profile_steps), "--trace", str(trace)])
    if rep == 0:  # the first run's, as a user would see it
        gdl_json(["import-trace", str(trace), "--batch", str(args.batch)], out / f"imported-{tag}-{slug(config)}.json")
    doc = json.loads(path.read_text())
    return {"samples": doc["step_us"]["samples"], "median": doc["step_us"]["median"],
            "traced": import_trace(trace, batch=args.batch).steps}


def summarise_runs(runs: list[dict[str, Any]], strategy: str) -> dict[str, Any]:
    """A configuration's runs together: the median over every timed step, the spread between the
    runs' medians, and from the profiled steps of every run the median communication waited for
    (one step's swings by 20-30 % of itself: the link-bound part splits between a slower backward
    and a shorter wait). DDP's is the wait after backward; FSDP's (whose collectives block where
    they are issued, forward and backward) the time its communication spans ran while the job's
    thread ran no operator."""
    steps = [t for r in runs for t in r["samples"]]
    medians = [r["median"] for r in runs]
    traced = [s for r in runs for s in r["traced"]]
    med = statistics.median(steps)
    key = "exposed_comm_us" if strategy == "ddp" else "comm_blocked_us"
    return {"step_us": med, "spread": (max(medians) - min(medians)) / med,
            "exposed_us": statistics.median(getattr(s, key) for s in traced),
            "traced_step_us": statistics.median(s.total_us for s in traced),
            "allgather_us": statistics.median(_on_link(s, "allgather") for s in traced),
            "reduce_scatter_us": statistics.median(_on_link(s, "reduce_scatter") for s in traced)}


def _on_link(step: StepPhases, collective: str) -> float:
    """A profiled step's time in one collective's calls: its spans on the communication threads and
    its launches' own spans on the job's thread (gloo's reduce-scatter clones its input there)."""
    return sum(m.end_us - m.start_us + m.launch_dur_us for m in step.messages
               if collective in m.name.replace("_base_", "") and m.start_us is not None and m.end_us is not None)


def components(measured: dict[str, Any], pred: dict[str, Any], phases: Path, fits: list[Path]) -> str:
    """Where an FSDP prediction's error sits: the all-gathers', the reduce-scatters' time on the link
    (the profiled steps' spans against the messages as predict prices them: plan_sharded's messages
    of the imported net, each at its collective's fit) and the rest (the step less the communication
    waited for: compute and FSDP's own work)."""
    from gdlbench.model.phases import load_comm_model, plan_sharded, sharded_message_us
    from gdlbench.model.strategies import load_strategy
    from gdlbench.nets.network import load_network

    net = load_network(json.loads(phases.read_text())["summary"]["network"])
    comm = load_comm_model(fits)
    priced = {c: sum(sharded_message_us(comm, c, m["bytes"], 2) for m in plan_sharded(net, load_strategy(FSDP_GLOO))
                     if m["collective"] == c) for c in ("allgather", "reduce_scatter")}
    rest_m = measured["step_us"] - measured["exposed_us"]
    rest_p = pred["t_iter_us"] - pred["comm_wait_us"]
    return (f"all-gathers {measured['allgather_us'] / 1e3:.0f} ms measured / {priced['allgather'] / 1e3:.0f} "
            f"predicted, reduce-scatters {measured['reduce_scatter_us'] / 1e3:.0f} / "
            f"{priced['reduce_scatter'] / 1e3:.0f}, the rest of the step {rest_m / 1e3:.0f} / {rest_p / 1e3:.0f} ms")


def slug(config: str) -> str:
    return config.replace(" ", "").replace(",", "-")


def fit(config: str, out: Path, args: argparse.Namespace) -> Path:
    path = out / f"fit-{slug(config)}.json"
    launch(config, [GDL, "allreduce", "--backend", "gloo", "-b", "256K", "-e", args.fit_max, "-f", "2", "--fit",
                    "--fit-min", "256K", "--fit-regimes", "2", "-n", "8", "-w", "2", "--beside-compute",
                    "--json", str(path)])
    return path


def sharded_fits(config: str, out: Path, args: argparse.Namespace) -> list[Path]:
    """gloo's reduce-scatter and all-gather on the configuration's link, in the forms FSDP calls
    (gdlbench.primitives.gloo), fitted as the all-reduce is; no --beside-compute: FSDP's calls on
    CPU tensors block the job's thread, so nothing runs beside them. The buffers rotate over 128 MiB
    (--rotate): FSDP gathers each unit into storage it has just allocated, never a buffer still in
    cache (without it the sweep's fit took 12 MiB all-gathers at the cached regime's 7 ms, where the
    job's took 20-50 ms: 2026-12-07, RESULTS section 8)."""
    paths = []
    for coll in ("reduce_scatter", "allgather"):
        path = out / f"fit-{coll}-{slug(config)}.json"
        launch(config, [GDL, coll, "--backend", "gloo", "-b", "256K", "-e", args.fit_max, "-f", "2", "--fit",
                        "--fit-min", "256K", "--fit-regimes", "2", "-n", "8", "-w", "2", "--rotate", "128M",
                        "--json", str(path)])
        paths.append(path)
    return paths


def skeleton(args: argparse.Namespace, config: str, out: Path) -> float:
    path = out / f"skeleton-{slug(config)}.json"
    launch(config, [GDL, "iteration", "--net", "resnet50", "--batch", str(args.batch), "--strategy", "ddp",
                    "--threads", "1", "--no-io", "--iters", "3", "--json", str(path)])
    doc = json.loads(path.read_text())
    return float(doc["summary"]["measured_us"]["ddp"])


FSDP_GLOO = str(ROOT / "benchmarks" / "fsdp_gloo.json")


def profile(args: argparse.Namespace, net: str, strategy: str, out: Path, rep: int) -> Path:
    """Profiles the job on 1 rank and imports the trace with the step time its own log gives."""
    tag = net if strategy == "ddp" else f"{net}-{strategy}"
    trace, logged = out / f"profile-{tag}-{rep}.json", out / f"profile-{tag}-{rep}-steps.json"
    launch("1 rank", [*job_args(args, net, strategy), "--steps", str(args.steps), "--warmup", str(args.warmup),
                      "--profile", "5", "--trace", str(trace), "--json", str(logged)])
    step_ms = json.loads(logged.read_text())["step_us"]["median"] / 1e3  # the job's log: its step unprofiled
    phases = out / f"phases-{tag}-{rep}.json"
    gdl_json(["import-trace", str(trace), "--batch", str(args.batch), "--name", net, "--step-ms",
              f"{step_ms:.3f}"], phases)
    return phases


def predict(phases: Path, strategy: str, config: str, fits: dict[str, list[Path]], out: Path) -> dict[str, Any]:
    cmd = ["predict", "--phases", str(phases), "--strategy", strategy, "--workers", str(ranks(config))]
    if config in fits:
        cmd += ["--from", ",".join(map(str, fits[config]))]
    else:
        cmd += ["--alpha", "0", "--beta", "0"]
    name = Path(strategy).stem
    return dict(gdl_json(cmd, out / f"predict-{phases.stem}-{name}-{slug(config)}.json")["rows"][0])


def median_row(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in ("t_iter_us", "comm_wait_us")}


def run_net(args: argparse.Namespace, net: str, strategy: str, configs: list[str],
            fits: dict[str, list[Path]], out: Path) -> bool:
    """One net and job strategy: its table and the goal's verdict. Each repetition profiles the job
    on 1 rank, then runs every configuration, each predicted from the trace just taken (the
    machine's speed drifts over minutes: a trace from the start of the session carried the drift
    into every row). fsdp is predicted as it runs on gloo (benchmarks/fsdp_gloo.json: nothing
    overlaps), the fsdp preset (overlapped, as on GPUs) beside it."""
    model = "ddp" if strategy == "ddp" else FSDP_GLOO
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    preds: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    presets: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    phases = Path()
    for rep in range(args.reps):
        phases = profile(args, net, strategy, out, rep)
        for config in configs:
            runs[config].append(measure_run(args, net, config, out, strategy, rep))
            preds[config].append(predict(phases, model, config, fits, out))
            if strategy != "ddp":
                presets[config].append(predict(phases, "fsdp", config, fits, out))
    print(f"\n## {net}, {strategy}, batch {args.batch} per rank, 1 torch thread per rank; {args.reps} repetition(s), "
          f"each profiled on 1 rank (5 steps) right before its runs and predicting them ({Path(model).stem})", flush=True)
    print("| configuration | measured step (ms) | spread | predicted (ms) | error | error per run | exposed comm "
          "measured | predicted | diff (% of step) | " + ("gdlbench skeleton, ddp (ms) |" if strategy == "ddp"
                                                           else "fsdp preset, overlapped (ms) |"))
    print("|---|---|---|---|---|---|---|---|---|---|")
    errors, comm_diffs, overhead, parts = [], [], [], []
    for config in configs:
        measured = summarise_runs(runs[config], strategy)
        pred = median_row(preds[config])
        per_run = [(p["t_iter_us"] - r["median"]) / r["median"] for p, r in zip(preds[config], runs[config], strict=True)]
        err = statistics.median(per_run)
        diff = (pred["comm_wait_us"] - measured["exposed_us"]) / measured["step_us"]
        overhead.append(f"{config} {100 * (measured['traced_step_us'] / measured['step_us'] - 1):+.1f} %")
        errors.append(abs(err))
        comm_diffs.append(abs(diff))
        if strategy != "ddp":
            extra = f"{median_row(presets[config])['t_iter_us'] / 1e3:.0f}"
            if config in fits:
                parts.append(f"{config}: {components(measured, pred, phases, fits[config])}")
        else:
            extra = "-" if net != "resnet50" or args.no_skeleton else f"{skeleton(args, config, out) / 1e3:.0f}"
        print(f"| {config} | {measured['step_us'] / 1e3:.0f} | {100 * measured['spread']:.1f} % | "
              f"{pred['t_iter_us'] / 1e3:.0f} | {100 * err:+.1f} % | {', '.join(f'{100 * e:+.1f}' for e in per_run)} | "
              f"{measured['exposed_us'] / 1e3:.0f} ms | {pred['comm_wait_us'] / 1e3:.0f} ms | {100 * diff:+.1f} % | "
              f"{extra} |", flush=True)
    print(f"\nthe profiled steps of each run against its unprofiled median (the profiler's cost, and the "
          f"run's drift): {', '.join(overhead)}")
    if parts:
        print("\nwhere the time goes (the profiled steps' medians against the prediction): " + "; ".join(parts))
    med, worst, comm_worst = statistics.median(errors), max(errors), max(comm_diffs)
    ok = med <= 0.05 and worst <= 0.10 and comm_worst <= 0.05
    print(f"\n{net} {strategy}: median |error| {100 * med:.1f} %, worst {100 * worst:.1f} %, exposed communication "
          f"worst {100 * comm_worst:.1f} % of the step: goal (5 % / 10 % / 5 %) {'met' if ok else 'NOT met'}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", default="resnet50,gpt")
    ap.add_argument("--strategies", default="ddp", help="the jobs' strategies: ddp, fsdp (gpt only), or both")
    ap.add_argument("--rates", default="1gbit,200mbit", help="the emulated cluster's rates ('' for none)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile-steps", type=int, default=3, help="profiled steps at the end of every run")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--job-args", default="", help="more options for ddp_job.py (e.g. the decoder's sizes)")
    ap.add_argument("--fit-max", default="64M", help="the largest message of the fits' sweep")
    ap.add_argument("--no-skeleton", action="store_true", help="leave out gdlbench's own composed skeleton")
    ap.add_argument("--out", help="keep every JSON here (default: a temporary folder)")
    args = ap.parse_args()
    for name in ("batch", "reps", "steps", "profile_steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    strategies = args.strategies.split(",")
    if set(strategies) - {"ddp", "fsdp"}:
        ap.error("--strategies: ddp and/or fsdp")
    out = Path(args.out or tempfile.mkdtemp(prefix="ddp-validation-"))
    out.mkdir(parents=True, exist_ok=True)
    configs = ["1 rank", "2 ranks, 1 node"] + [f"2 x 1 at {r}" for r in args.rates.split(",") if r]
    start = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    fits = {c: [fit(c, out, args)] + (sharded_fits(c, out, args) if "fsdp" in strategies else [])
            for c in configs if ranks(c) > 1}
    print(f"# {start}; JSON in {out}", flush=True)
    verdicts = [run_net(args, net, strategy, configs, fits, out) for net in args.nets.split(",")
                for strategy in strategies if strategy == "ddp" or net == "gpt"]
    print(f"\n# {start} - {time.strftime('%H:%M:%S UTC', time.gmtime())}")
    sys.exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
