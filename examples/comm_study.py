"""A communication study: sweep all-reduce sizes for several algorithms, fit the alpha-beta model
to each, and ask what a faster link would give; plot it all.

    .venv/bin/mpiexec -n 4 .venv/bin/python examples/comm_study.py --min 1K --max 64M --faster 10

Every rank takes part; rank 0 prints the table (as `gdlbench allreduce` does), writes
allreduce.json (the CLI's rows, the fits in its summary) and comm_study.png into --out. The
what-if keeps each fit's alpha and divides its beta by --faster: the same algorithm and
latency on a link --faster times the bandwidth. Run it in your own mpi4py program with
`comm=` a sub-communicator (one node, say) to study one level of the network.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import gdlbench
from gdlbench.common.units import parse_size


def sweep(lo: int, hi: int, factor: int) -> list[int]:
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes


def main(argv: list[str] | None = None, comm=None) -> int:
    from mpi4py import MPI

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="library,ring,rd,tree", help="all-reduce algorithms to compare")
    p.add_argument("--min", default="1K")
    p.add_argument("--max", default="16M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--faster", type=float, default=10.0, help="what-if: a link this many times faster")
    p.add_argument("--out", default="comm-study-out")
    args = p.parse_args(argv)
    comm = comm or MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise SystemExit("comm_study: run it under mpiexec -n 2 (or more): one rank communicates nothing")

    sizes = sweep(parse_size(args.min), parse_size(args.max), args.factor)
    results = []
    for algo in args.algos.split(","):
        results += gdlbench.allreduce(sizes, algo=algo, inplace=True, iters=args.iters, warmup=2, comm=comm)
    fits = gdlbench.fit_results(results)
    whatif = {f.algo: dataclasses.replace(f, beta_us_per_byte=f.beta_us_per_byte / args.faster, regimes=[])
              for f in fits}
    summary = {"fit": [f.to_dict() for f in fits], "what_if": {
        "link_speedup": args.faster,
        "predicted_us": {a: {m: w.predict_us(m) for m in sizes} for a, w in whatif.items()}}}
    study = gdlbench.Compare(results, summary=summary, comm=comm,
                             title=f"all-reduce, {comm.Get_size()} ranks: {args.algos}")
    study.print()
    if not study.is_root:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    study.write_json(out / "allreduce.json")
    for f in fits:
        big = sizes[-1]
        print(f"{f.algo:8s} alpha {f.alpha_us:8.2f} us  1/beta {f.link_gbs or 0:7.2f} GB/s  "
              f"median error {100 * (f.median_rel_error() or 0):5.1f} %  "
              f"{big} B: {f.predict_us(big):10.1f} us now, {whatif[f.algo].predict_us(big):10.1f} us "
              f"on a {args.faster:g}x faster link")
    plot(fits, whatif, args.faster, out / "comm_study.png")
    return 0


def plot(fits, whatif, faster: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for f in fits:
        line = ax.loglog(f.sizes_bytes, f.measured_us, "o", label=f"{f.algo} measured")[0]
        ax.loglog(f.sizes_bytes, f.predicted_us, "-", color=line.get_color(), label=f"{f.algo} fit")
        ax.loglog(f.sizes_bytes, [whatif[f.algo].predict_us(m) for m in f.sizes_bytes], ":",
                  color=line.get_color(), label=f"{f.algo} on a {faster:g}x faster link")
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("time (us)")
    ax.set_title(f"all-reduce on {fits[0].nranks} ranks: measured, alpha-beta fit, what-if")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
