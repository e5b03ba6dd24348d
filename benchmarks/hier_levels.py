"""Diagnostic for the two-level model (issue 12): the whole communicator's hier, library and ring
all-reduce beside each level measured several ways, per size, on a multi-node run:

- intra_library: the library all-reduce of m on every node's ranks at once (the `intra` fit);
- intra_hier: `--algo hier` on every node's ranks at once (its reduce-scatter + all-gather; the
  `intra_rsag` fit);
- inter_one(x): the library all-reduce of x among the first rank of each node, the others waiting
  (the `inter` fit);
- inter_all(x): the same among every local rank at once, each on its own buffer, every call
  started together by a barrier on the whole communicator (`inter_shared`).

hier's shard variant is intra_hier(m) + inter_all(m/G) if its steps add up. Run it on the
emulated cluster (root):

    scripts/emulated-cluster.sh --nodes 2 --per-node 2 --rate 10gbit -- python benchmarks/hier_levels.py

Times: median microseconds of --iters timed calls (max over ranks), in place, float32 sum.
"""

from __future__ import annotations

import argparse

from gdlbench._native import MPI
from gdlbench.common import env
from gdlbench.common.units import parse_size
from gdlbench.primitives import collectives as C


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--sizes", default="64K,128K,256K,512K,1M,2M,4M,8M,16M")
    args = ap.parse_args()
    world = env.world()
    node, cross = C._core.level_comms(world)
    topo = env.topology(world)
    per_node = topo["min_ranks_per_node"]
    local = C._core.topology(world)["local_rank"]

    def t(size: int, algo: str, comm) -> float:
        return C.run_one("allreduce", size, inplace=True, algo=algo, iters=args.iters, warmup=2, comm=comm).time_us

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = []
    for m in sizes:
        r = {algo: t(m, algo, world) for algo in ("hier", "library", "ring")}
        r["intra_library"], r["intra_hier"] = t(m, "library", node), t(m, "hier", node)
        shard = m // per_node
        if cross != MPI.COMM_NULL and local == 0:
            r["inter_one(m/G)"], r["inter_one(m)"] = t(shard, "library", cross), t(m, "library", cross)
        world.Barrier()
        for x, key in ((shard, "inter_all(m/G)"), (m, "inter_all(m)")):
            row = C.run_started_together("allreduce", x, inplace=True, iters=args.iters, warmup=2, comm=cross,
                                         start_on=world)
            if row is not None:
                r[key] = row.time_us
        if "inter_all(m/G)" in r:  # every rank of the first cross-node communicator (rank 0's)
            r["intra_hier + inter_all(m/G)"] = r["intra_hier"] + r["inter_all(m/G)"]
        rows.append((m, r))
    if world.Get_rank() == 0:
        print(f"# {topo['nodes']} nodes x {per_node} ranks per node; us, median of {args.iters} calls, max over ranks; G = {per_node}")
        keys = list(rows[0][1])
        print("| size | " + " | ".join(keys) + " |")
        print("|---" * (len(keys) + 1) + "|")
        for m, r in rows:
            print(f"| {m} | " + " | ".join(f"{r[k]:.0f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
