"""gdlbench's MPI_Allreduce (timed in C++) against a plain mpi4py loop, in one mpiexec run.

    mpiexec -n 2 python benchmarks/allreduce_vs_mpi4py.py [--rounds 7]

Both sides use the same protocol: per iteration an untimed barrier, then one out-of-place
MPI_Allreduce of float32 timed alone (gdlbench: host steady clock in C++; mpi4py: MPI.Wtime
around comm.Allreduce on numpy buffers); per-iteration samples are reduced with MAX over ranks
and the median is taken. Runs alternate gdlbench / mpi4py / gdlbench ring in every round (the
core-to-core latency of these VMs flips every few seconds), and the medians over rounds are
compared. Targets (issue 3): gdlbench's 8-byte latency <= mpi4py's; gdlbench's 64 MB busbw >=
0.95 x mpi4py's; gdlbench's ring at 64 MB >= 0.8 x MPI_Allreduce's busbw on 2 ranks.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
from mpi4py import MPI

from gdlbench._native import _core


def mpi4py_loop(comm, nbytes: int, iters: int, warmup: int) -> float:
    send = np.zeros(nbytes // 4, dtype=np.float32)
    recv = np.zeros_like(send)
    samples = np.empty(iters)
    for i in range(warmup + iters):
        comm.Barrier()
        t0 = MPI.Wtime()
        comm.Allreduce(send, recv)
        t1 = MPI.Wtime()
        if i >= warmup:
            samples[i - warmup] = (t1 - t0) * 1e6
    comm.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
    return float(np.median(samples))


def gdlbench_run(comm, nbytes: int, iters: int, warmup: int, algo: str = "library") -> float:
    spec = _core.BenchSpec(collective="allreduce", algo=algo, count=nbytes // 4, warmup=warmup, iters=iters,
                           check_iters=0)
    return float(np.median(_core.comm_bench(comm, spec).samples_us))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--small-iters", type=int, default=2000)
    p.add_argument("--large-iters", type=int, default=10)
    p.add_argument("--large", type=int, default=64 * 10**6, help="bytes of the large all-reduce (64 MB)")
    p.add_argument("--no-mallopt", action="store_true",
                   help="leave glibc's mmap threshold alone (MPICH's temporary buffers then fault in every call)")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    if not a.no_mallopt:
        _core.keep_freed_memory(1 << 30)  # process-wide: applies to the mpi4py loop as much as to gdlbench
    res: dict[str, list[float]] = {k: [] for k in ("g8", "m8", "g64", "m64", "r64")}
    for _ in range(a.rounds):
        res["g8"].append(gdlbench_run(comm, 8, a.small_iters, 100))
        res["m8"].append(mpi4py_loop(comm, 8, a.small_iters, 100))
        res["g64"].append(gdlbench_run(comm, a.large, a.large_iters, 2))
        res["m64"].append(mpi4py_loop(comm, a.large, a.large_iters, 2))
        res["r64"].append(gdlbench_run(comm, a.large, a.large_iters, 2, "ring"))
    if comm.Get_rank() != 0:
        return 0
    factor = 2 * (n - 1) / n

    def busbw(t_us: float) -> float:
        return a.large / 1e9 / (t_us * 1e-6) * factor

    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"# {n} ranks, {MPI.Get_library_version().splitlines()[0].strip()}; {a.rounds} alternating rounds; "
          f"medians over rounds of per-round medians (max over ranks per iteration); "
          f"mallopt {'off' if a.no_mallopt else 'on (both sides)'}")
    print("| measure | gdlbench | mpi4py / library | ratio | target | ok |")
    print("|---|---|---|---|---|---|")
    lat_ratio = med["g8"] / med["m8"]
    bw_ratio = busbw(med["g64"]) / busbw(med["m64"])
    ring_ratio = busbw(med["r64"]) / busbw(med["g64"])
    print(f"| 8 B latency (us) | {med['g8']:.2f} | {med['m8']:.2f} | {lat_ratio:.3f} | <= 1 | {lat_ratio <= 1} |")
    print(f"| {a.large / 1e6:g} MB busbw (GB/s) | {busbw(med['g64']):.3f} | {busbw(med['m64']):.3f} | "
          f"{bw_ratio:.3f} | >= 0.95 | {bw_ratio >= 0.95} |")
    print(f"| ring {a.large / 1e6:g} MB busbw vs MPI_Allreduce (GB/s) | {busbw(med['r64']):.3f} | "
          f"{busbw(med['g64']):.3f} | {ring_ratio:.3f} | >= 0.8 | {ring_ratio >= 0.8} |")
    print("# per round (us): " + "; ".join(
        f"{k}=[{', '.join(f'{x:.1f}' for x in v)}]" for k, v in res.items()))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
