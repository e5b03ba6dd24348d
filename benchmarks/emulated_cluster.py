"""The multi-node figures on an emulated cluster (scripts/emulated-cluster.sh; root):

1. per layout (2 x 1, 2 x 2) and inter-node rate: `allreduce --algo all --fit` across the emulated
   nodes: #wrong of every algorithm, the two-level fit's median error per level (>= 64 KiB; with
   several ranks per node also each level as hier runs it, intra_rsag and inter_shared), and the
   two-level model against the flat one-level model on the whole communicator (library, ring,
   hier; median |error| >= 64 KiB);
2. with --iteration: `iteration --net alexnet --strategy all` on 2 x 1, then `predict --cluster`
   fed that run's phases and the measured two-level fit, per strategy against the composed run.

    python benchmarks/emulated_cluster.py [--rates 1gbit,10gbit] [--layouts 2x1,2x2] [--iteration]

Prints the tables to paste into RESULTS.md; the JSON of each run goes to --out (default a
temporary folder). The machine's cores are shared by every rank of every emulated node: with
more ranks than cores the layout is oversubscribed, and the output says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "emulated-cluster.sh"
BIN = Path(sys.executable).parent
GDL = str(BIN / "gdlbench")


def emulated(nodes: int, per_node: int, rate: str, *cmd: str, timeout: float = 1800) -> str:
    """Runs cmd on the emulated cluster; returns the script's line that says how (link, TCP, cores)."""
    p = subprocess.run(["bash", str(SCRIPT), "--nodes", str(nodes), "--per-node", str(per_node), "--rate", rate,
                        "--mpiexec", str(BIN / "mpiexec"), "--", *cmd], capture_output=True, text=True,
                       timeout=timeout, cwd=tempfile.gettempdir())
    if p.returncode != 0:
        sys.exit(f"emulated run failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return next((ln for ln in p.stderr.splitlines() if ln.startswith("emulated-cluster:")), "")


def allreduce_run(out: Path, layout: str, rate: str, args: argparse.Namespace) -> dict:
    nodes, per_node = (int(x) for x in layout.split("x"))
    path = out / f"allreduce-{layout}-{rate}.json"
    how = emulated(nodes, per_node, rate, GDL, "allreduce", "--algo", "all", "--servers", str(nodes * per_node),
             "-b", "8", "-e", args.max_size, "-f", str(args.factor), "--mode", "in", "-n", str(args.iters), "-w", str(args.warmup),
             "--fit", "--fit-min", "64K", "--fit-regimes", str(args.regimes), "--json", str(path))
    print(f"# {how}", flush=True)
    return json.loads(path.read_text())


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def iteration_check(out: Path, fit_json: Path, rate: str, args: argparse.Namespace) -> list[str]:
    it = out / f"iteration-2x1-{rate}.json"
    emulated(2, 1, rate, GDL, "iteration", "--net", "alexnet", "--strategy", "all", "--iters", str(args.it_iters),
             "--json", str(it), timeout=3600)
    pr = out / f"predict-2x1-{rate}.json"
    p = subprocess.run([GDL, "predict", "--phases", str(it), "--cluster", str(fit_json), "--workers", "2",
                        "--strategy", "all", "--json", str(pr)], capture_output=True, text=True,
                       cwd=tempfile.gettempdir())
    if p.returncode != 0:
        sys.exit(f"predict failed: {p.stderr}")
    measured = json.loads(it.read_text())["summary"]["measured_us"]
    lines = [f"### iteration --net alexnet --strategy all, 2 x 1 at {rate}: composed run vs "
             f"predict --cluster (the measured two-level fit, the run's own phases)", "",
             "| strategy | composed (ms) | predict --cluster (ms) | error |", "|---|---|---|---|"]
    for row in json.loads(pr.read_text())["rows"]:
        if row["workers"] != 2:
            continue
        m = measured.get(row["strategy"])
        if m:
            lines.append(f"| {row['strategy']} | {m / 1e3:.1f} | {row['t_iter_us'] / 1e3:.1f} | "
                         f"{100 * (row['t_iter_us'] - m) / m:+.1f} % |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="1gbit,10gbit")
    ap.add_argument("--layouts", default="2x1,2x2")
    ap.add_argument("--max-size", default="16M")
    ap.add_argument("--factor", type=int, default=2, help="size step factor of the sweep from 8 B (default 2)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2, help="warm-up calls per size and algorithm (default 2)")
    ap.add_argument("--regimes", type=int, default=2, help="--fit-regimes of each fit (default 2)")
    ap.add_argument("--iteration", action="store_true", help="also the alexnet iteration on 2 x 1 at the first rate")
    ap.add_argument("--it-iters", type=int, default=3)
    ap.add_argument("--out", help="folder for the JSON files (default: a temporary one)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gdl-emulated-"))
    out.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    print(f"# emulated cluster: {cores} cores; load average before: {os.getloadavg()[0]:.1f}; JSON in {out}\n")
    table = ["| layout | link | ranks/cores | #wrong (all algos, all sizes) | intra fit err (library / as hier) | "
             "inter fit err (alone / shared) | "
             "library 2-level / flat | ring 2-level / flat | hier 2-level / flat (median (worst) |error| from 64 KiB) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for rate in args.rates.split(","):
        for layout in args.layouts.split(","):
            doc = allreduce_run(out, layout, rate, args)
            wrong = sum(r["wrong"] or 0 for r in doc["rows"])
            algos = sorted({r["algo"] for r in doc["rows"]})
            levels = doc["summary"]["fit"]["levels"]
            errs = levels["model_check"]["median_abs_error_64k"]
            nranks = doc["summary"]["nranks"]

            def cell(a: str, errs: dict = errs) -> str:
                e = errs.get(a)
                return "-" if not e else (f"{pct(e['two_level'])} ({pct(e['two_level_worst'])}) / "
                                          f"{pct(e['flat'])} ({pct(e['flat_worst'])})")

            def fit_err(*names: str, levels: dict = levels) -> str:
                fits = [levels.get(n) for n in names]
                return " / ".join(pct(f["median_rel_error_64k"]) for f in fits if f) or "n/a (1 rank/node)"

            table.append(f"| {layout} | {rate} | {nranks}/{cores}{' (oversubscribed)' if nranks > cores else ''} | "
                         f"{wrong} ({', '.join(algos)}) | {fit_err('intra', 'intra_rsag')} | "
                         f"{fit_err('inter', 'inter_shared')} | {cell('library')} | {cell('ring')} | {cell('hier')} |")
            print(table[-1], flush=True)
    print("\n" + "\n".join(table))
    print(f"\n(load average after: {os.getloadavg()[0]:.1f})")
    if args.iteration:
        rate = args.rates.split(",")[0]
        fit_json = out / f"allreduce-2x1-{rate}.json"
        print("\n" + "\n".join(iteration_check(out, fit_json, rate, args)))


if __name__ == "__main__":
    main()
