"""Model accuracy on this machine: for each network, one `mpiexec -n N gdlbench iteration` run
measures the phases alone and the composed iteration per strategy; the model's prediction from
those phases (with each message's measured time) is held against the composed run. Then
`gdlbench predict`, fed that run's phases and an alpha-beta fit from `gdlbench allreduce --fit`
measured on the same ranks, predicts the N-worker iteration again, now from the fit alone.

  python benchmarks/iteration_model.py [--ranks 2] [--nets alexnet,googlenet,resnet50]
                                       [--strategy all] [--out DIR]

Prints one table per source of communication times (measured messages; the fit) with the
error = (predicted - measured) / measured per net and strategy. The goal is |error| <= 10 %.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gdlbench.strategies import get_strategies

BIN = Path(sys.executable).parent
SMALL_BATCH = {"alexnet": 8, "googlenet": 2, "resnet50": 1}


def run(cmd: list[str]) -> None:
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}):\n{p.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--nets", default="alexnet,googlenet,resnet50")
    ap.add_argument("--strategy", default="all")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--out", default=None, help="folder for the JSON files (default: a temporary one)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="gdl-model-"))
    out.mkdir(parents=True, exist_ok=True)
    mpi = [str(BIN / "mpiexec"), "-n", str(args.ranks), str(BIN / "gdlbench")]
    threads = "1" if args.ranks > 1 else "2"

    fit_json = out / "fit.json"
    # up to 256M: AlexNet sends a 151 MB gradient (fc6), beyond a 64M sweep
    # ps with P = N servers, as the parameter-server presets run it
    run(mpi + ["allreduce", "-b", "4K", "-e", "256M", "-f", "4", "--algo", "library,ring,rd,tree,ps",
               "--servers", str(args.ranks), "--fit", "-n", "10", "-w", "2", "-c", "1", "--json", str(fit_json)])
    rows = []
    for net in args.nets.split(","):
        it_json = out / f"iteration-{net}.json"
        run(mpi + ["iteration", "--net", net, "--batch", str(SMALL_BATCH.get(net, 2)), "--strategy", args.strategy,
                   "--iters", str(args.iters), "--warmup", "1", "--threads", threads, "--json", str(it_json)])
        it = json.loads(it_json.read_text())
        # Each strategy priced with the fit of the algorithm the executor sends it with:
        # MPI_Allreduce (library) for the all-reduce strategies, gdlbench's ps for the others.
        strategies = get_strategies(args.strategy)
        pred = {}
        for algo, names in (("library", [s.name for s in strategies if s.collective != "ps"]),
                            ("ps", [s.name for s in strategies if s.collective == "ps"])):
            if not names:
                continue
            pred_json = out / f"predict-{net}-{algo}.json"
            run([str(BIN / "gdlbench"), "predict", "--net", net, "--phases", str(it_json), "--from", str(fit_json),
                 "--workers", str(args.ranks), "--strategy", ",".join(names), "--algo", algo,
                 "--servers", str(args.ranks), "--json", str(pred_json)])
            pred |= {r["strategy"]: r for r in json.loads(pred_json.read_text())["rows"] if r.get("workers") == args.ranks}
        for r in it["rows"]:
            if r["phase"] != "iteration":
                continue
            s = r["strategy"]
            fit_us = pred[s]["t_iter_us"] if s in pred else float("nan")
            rows.append({"net": net, "batch": r["batch"], "strategy": s, "measured_ms": r["time_us"] / 1e3,
                         "p95_ms": r["time_us_p95"] / 1e3, "model_ms": r["predicted_us"] / 1e3,
                         "model_err": r["error_pct"], "fit_ms": fit_us / 1e3,
                         "fit_err": 100 * (fit_us - r["time_us"]) / r["time_us"]})
    print(f"\n{args.ranks} ranks, {threads} compute thread(s) each; JSON in {out}")
    print(f"{'net':10s} {'batch':>5s} {'strategy':12s} {'measured':>10s} {'p95':>9s} {'model':>9s} {'err':>7s} "
          f"{'predict':>9s} {'err':>7s}   (ms; model: measured messages; predict: alpha-beta fit)")
    worst_model = worst_fit = 0.0
    for r in rows:
        print(f"{r['net']:10s} {r['batch']:5d} {r['strategy']:12s} {r['measured_ms']:10.1f} {r['p95_ms']:9.1f} "
              f"{r['model_ms']:9.1f} {r['model_err']:+6.1f}% {r['fit_ms']:9.1f} {r['fit_err']:+6.1f}%")
        worst_model = max(worst_model, abs(r["model_err"]))
        worst_fit = max(worst_fit, abs(r["fit_err"]))
    within = sum(abs(r["model_err"]) <= 10 for r in rows)
    within_fit = sum(abs(r["fit_err"]) <= 10 for r in rows)
    print(f"\nmodel within 10 %: {within}/{len(rows)} (worst {worst_model:.1f} %); "
          f"predict from the fit within 10 %: {within_fit}/{len(rows)} (worst {worst_fit:.1f} %)")
    (out / "summary.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
