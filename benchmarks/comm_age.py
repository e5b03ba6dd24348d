"""Does MPI_Allreduce's time depend on how many collectives its communicator has made? (issue 11)

MPICH switches a communicator's intra-node all-reduce to its shared-memory release-gather
algorithm once the communicator has made MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD (default 5)
collective calls. Per round, in alternation: one in-place all-reduce of --mib MiB of float32 on
COMM_WORLD (long past the threshold), on a fresh duplicate (its first call), and on a duplicate
after --barriers barriers; a barrier before each, the max over ranks of time.perf_counter around
the call. mpi4py at MPI_THREAD_SERIALIZED, the level `gdlbench iteration` asks for (its
communication thread calls MPI).

  mpiexec -n 2 python benchmarks/comm_age.py [--mib 26] [--rounds 12] [--barriers 10]

Run it again with MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD=1000000 (never release-gather) or =0
(release-gather at once) in the environment to see which algorithm each column got.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mpi4py

mpi4py.rc.thread_level = "serialized"
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

KINDS = ("COMM_WORLD", "a fresh duplicate", "a duplicate after N barriers")


def one_call(world: MPI.Intracomm, kind: str, buf: np.ndarray, barriers: int) -> float:
    comm = world if kind == KINDS[0] else world.Dup()
    try:
        if kind == KINDS[2]:
            for _ in range(barriers):
                comm.Barrier()
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    finally:
        if comm is not world:
            comm.Free()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=26.0, help="message size in MiB (default 26)")
    ap.add_argument("--rounds", type=int, default=12, help="rounds; the first 2 are warm-up (default 12)")
    ap.add_argument("--barriers", type=int, default=10, help="barriers before the third kind's call (default 10)")
    args = ap.parse_args()
    if args.mib <= 0 or args.rounds < 3 or args.barriers < 0:
        raise SystemExit("comm_age: --mib must be > 0, --rounds >= 3, --barriers >= 0")
    world = MPI.COMM_WORLD
    buf = np.ones(int(args.mib * 2**20) // 4, dtype=np.float32)
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    for r in range(args.rounds):
        for kind in KINDS:
            t = one_call(world, kind, buf, args.barriers)
            if r >= 2:
                times[kind].append(1e3 * t)
    if world.Get_rank() == 0:
        print(f"# {world.Get_size()} ranks, {args.mib:g} MiB float32 in place, {args.rounds - 2} rounds "
              f"(2 warm-up), max over ranks, time.perf_counter; {MPI.Get_library_version().splitlines()[0]}")
        print(f"{'communicator':32s} {'median ms':>10s} {'min':>8s} {'max':>8s}")
        for kind, v in times.items():
            name = kind.replace("N", str(args.barriers))
            print(f"{name:32s} {statistics.median(v):10.2f} {min(v):8.2f} {max(v):8.2f}")


if __name__ == "__main__":
    main()
