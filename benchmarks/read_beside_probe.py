"""Diagnostic for the model's read-beside price (issue 11): is the read on the prefetch thread
probed in the state the composed iteration runs it in? On one rank, per round and alternating:
the isolated iteration (read in line), the probe without a warm-up (as `gdlbench iteration` ran it
before 2026-12-05's fix) and the same probe after one warm-up iteration (as every composed
iteration runs, and `iteration` now probes). Prints, per
kind, the medians of forward's time, what it took beyond the same round's isolated forward, the
read's span and iteration.read_beside's estimate of the compute the read cost.

  python benchmarks/read_beside_probe.py [--net alexnet] [--batch 16] [--rounds 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from gdlbench._native import _core
from gdlbench.common import env
from gdlbench.composed.iteration import Iteration, phase_times, read_beside
from gdlbench.nets.network import net_option


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", type=net_option, default="alexnet")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--io-dir", default=None, help="the JPEG dataset (default: a temporary one)")
    args = ap.parse_args()
    if args.batch < 1 or args.rounds < 1 or args.threads < 1:
        ap.error("--batch, --rounds and --threads must be >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        it = Iteration(args.net, batch=args.batch, strategy="serial", iters=1, threads=args.threads,
                       io_dir=args.io_dir or tmp)
        _core.set_blas_threads(args.threads)
        _core.set_compute_threads(args.threads)
        _core.keep_freed_memory(1 << 30)
        net = _core.Net(it.net.layer_specs(), it.batch)
        reader = it.io_reader()
        assert reader is not None  # Iteration reads by default (io=True)
        comm = env.world()

        def run(prefetch: bool, warmup: int) -> dict:
            return net.time_iteration(messages=[], overlap=False, algo="library", servers=1, comm=comm, io=reader.read_next,
                                      prefetch=prefetch, warmup=warmup, iters=1)[1]

        run(False, 1)
        kinds = {"isolated round (read in line)": [], "probe, no warm-up": [],
                 "probe after a warm-up (as iteration measures it)": []}
        for _ in range(args.rounds):
            iso = run(False, 0)
            traces = (iso, run(True, 0), run(True, 1))
            f0 = phase_times(iso)["forward"]
            for rows, t in zip(kinds.values(), traces, strict=True):
                p = phase_times(t)
                rows.append((p["forward"], p["forward"] - f0, p["io"], read_beside(t, iso) if t is not iso else None))
        reader.close()
    print(f"{it.net.name}, batch {it.batch}, {args.threads} threads, {args.rounds} rounds (medians, ms)")
    for name, rows in kinds.items():
        med = [statistics.median(r[i] for r in rows) / 1e3 for i in range(3)]
        beside = [r[3] for r in rows if r[3] is not None]
        rb = f"{statistics.median(beside) / 1e3:.1f}" if beside else "-"
        print(f"  {name:55s} forward {med[0]:7.1f}  beyond isolated {med[1]:+6.1f}  read {med[2]:5.1f}  read_beside {rb}")


if __name__ == "__main__":
    main()
