"""Diagnostic for the two-level fit's `inter` level (issue 12): the first rank of every node
all-reducing on the cross-node communicator while the other ranks wait, three ways: in
MPI_Barrier (as `allreduce --fit` has them), in MPI_Ibarrier + MPI_Wait, or asleep (Ibarrier,
tested every 1 ms). With --history, first a sweep of every algorithm on the whole communicator
(8 B - 16 MiB, as `allreduce --algo all --fit` runs before its levels). Run it on the emulated
cluster (root):

    scripts/emulated-cluster.sh --nodes 2 --per-node 2 --rate 10gbit -- \\
        python benchmarks/inter_alone.py --history --waits barrier,ibarrier-wait,sleep

Prints, per round, the leaders' median time (us, max over the pair) at each size. The slow
crossing this was written to find was TCP BBR's PROBE_RTT (4 segments in flight for 200 ms
whenever a connection's minimum RTT is 10 s old): the script now runs cubic between the nodes;
`--tcp-cc host` on a BBR host with `--reps 300` shows it again, about once in 300 rounds.
"""

from __future__ import annotations

import argparse
import time

from gdlbench._native import MPI
from gdlbench.common.units import parse_size
from gdlbench.primitives import collectives as C


def wait(world, how: str) -> None:
    if how == "barrier":
        world.Barrier()
    elif how == "ibarrier-wait":
        world.Ibarrier().Wait()
    else:  # asleep: no core taken while waiting
        req = world.Ibarrier()
        while not req.Test():
            time.sleep(0.001)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--history", action="store_true", help="sweep every algorithm on the whole communicator first")
    ap.add_argument("--waits", default="barrier,ibarrier-wait,sleep")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M")
    args = ap.parse_args()
    waits = args.waits.split(",")
    if bad := [w for w in waits if w not in ("barrier", "ibarrier-wait", "sleep")]:
        ap.error(f"unknown wait {bad[0]} (barrier, ibarrier-wait, sleep)")
    world = MPI.COMM_WORLD
    _, cross = C._core.level_comms(world)
    leader = C._core.topology(world)["local_rank"] == 0
    if args.history:
        for algo in C.ALGOS:
            for k in range(3, 25):
                C.run_one("allreduce", 2 ** k, inplace=True, algo=algo, iters=10, warmup=2,
                          servers=world.Get_size(), comm=world)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    for rep in range(args.reps):
        for how in waits:
            row = [C.run_one("allreduce", s, inplace=True, iters=10, warmup=2, comm=cross).time_us
                   for s in sizes] if leader else []
            wait(world, how)
            if world.Get_rank() == 0:
                print(rep, how, " ".join(f"{s}:{t:.0f}" for s, t in zip(sizes, row, strict=True)), flush=True)


if __name__ == "__main__":
    main()
