"""Minor page faults per call: a sharded strategy's messages inside the composed iteration, each
alone as `gdlbench iteration` times it, and the same collectives as `gdlbench reduce_scatter` /
`allgather` time them on the main thread and with `--on comm-thread` (the fits predict prices
the sharded messages with). glibc gives a thread other than the main one a malloc arena of its
own, whose heaps (64 MB at most) cannot keep MPICH's large temporaries: on such a thread they are
mapped and faulted in on every call.

  mpiexec -n 2 python benchmarks/arena_faults.py [--net gpt2-small:seq=64] [--strategy zero1] [--calls 4]
      [--rounds 2]

Prints, per rank, the faults (getrusage ru_minflt of the process, every thread) and the median
time of each, per call: the iteration (forward, backward, its messages on the communication
thread, the update), its messages alone (on a communication thread, as the iteration's model
times them), and one row of each of the plan's collectives at the plan's largest size in place,
on the main thread and on a comm thread in --rounds alternating rounds (its buffers touched
before timing, on the main thread; one warm-up call before --calls timed ones and one check),
then the median over the rounds of each row's median time. The iteration runs first, so the main
thread's heap has not yet kept any temporary for it.
"""

from __future__ import annotations

import argparse
import resource
import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

from gdlbench._native import _core
from gdlbench.common import env
from gdlbench.composed.iteration import Iteration
from gdlbench.primitives import collectives as C


def faults_per_call(what: Callable[[], Any], calls: int) -> tuple[float, Any]:
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    out = what()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / calls, out


def report(comm: Any, label: str, faults: float, ms: float) -> None:
    got = comm.gather((faults, ms), root=0)
    if comm.Get_rank() == 0:
        cells = "  ".join(f"rank {r}: {f:9.0f} faults {t:8.1f} ms" for r, (f, t) in enumerate(got))
        print(f"{label:44s} {cells}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="gpt2-small:seq=64")
    ap.add_argument("--strategy", default="zero1")
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="alternating main / comm-thread rounds per collective")
    args = ap.parse_args()
    it = Iteration(args.net, 1, "cpu", args.strategy, threads=1, io=False)
    comm = it.comm
    _core.set_blas_threads(1)
    _core.set_compute_threads(1)
    _core.keep_freed_memory(1 << 30)  # as `gdlbench iteration` and `gdlbench allreduce`
    net, _, _ = it._build_net(it.net.layer_specs())
    (_, mplan, algo, servers), = it._plans(net, comm.Get_size())
    n = args.calls
    f, (samples, _) = faults_per_call(lambda: net.time_iteration(
        messages=mplan.messages, overlap=False, algo=algo, servers=servers, comm=comm, io=None, prefetch=False,
        warmup=0, iters=n), n)
    report(comm, f"{args.strategy}: the composed iteration", f, statistics.median(samples) / 1e3)
    f, alone = faults_per_call(lambda: net.time_messages(messages=mplan.messages, algo=algo, servers=servers,
                                                         comm=comm, warmup=0, iters=n), n)
    report(comm, f"{args.strategy}: its {len(alone)} message(s) alone", f,
           sum(statistics.median(s) for s in alone) / 1e3)
    largest = max(mplan.bytes)  # ZeRO-1/2: the whole gradient, one reduce-scatter and one all-gather
    for coll in ("reduce_scatter", "allgather"):
        times: dict[str, list[float]] = {"main": [], "comm-thread": []}
        for _ in range(args.rounds):  # alternating, so that the machine's load drifts over both alike
            for on in ("main", "comm-thread"):
                f, r = faults_per_call(partial(C.run_one, coll, largest, inplace=True, iters=n, warmup=1, check=1,
                                               on=on, comm=comm), n + 2)
                times[on].append(r.time_us / 1e3)
                report(comm, f"{coll} {largest} B --on {on}", f, r.time_us / 1e3)
        if comm.Get_rank() == 0:
            main, thread = (statistics.median(times[on]) for on in ("main", "comm-thread"))
            print(f"{coll}: median over {args.rounds} alternating rounds of the rows' medians: main {main:.1f} ms, "
                  f"comm-thread {thread:.1f} ms ({100 * (thread / main - 1):+.1f} %)", flush=True)
    if comm.Get_rank() == 0:
        print(f"(per call; the collective rows' first counts its buffers, {largest} B touched once, over "
              f"{n + 2} calls; MPICH's temporary is {largest // comm.Get_size() // 4096} pages of 4 KiB)",
              flush=True)
    env.world().Barrier()


if __name__ == "__main__":
    main()
