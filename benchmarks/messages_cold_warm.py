"""A plan's messages alone, cold and warm, against the same messages inside the composed iteration,
cold and warm, round after round in one process (so that all four meet the machine in the same
state): why `gdlbench iteration` warms each message alone in every round (docs/model.md).

  mpiexec -n 2 python benchmarks/messages_cold_warm.py [--net gpt2-small:seq=64] [--strategy ps]
      [--rounds 8]

Per round, each after an unrelated 400 MB library all-reduce (as other strategies' work runs
between them in `gdlbench iteration`): the messages alone without a warm-up (cold), the composed
iteration after one untimed iteration (warm), the messages alone each after one untimed send of
itself (warm), the composed iteration without a warm-up (cold). Alone: the sum over the plan of
each message's time, max over ranks; inside: the comm phase (the messages' time on the
communication thread), the slower rank's. Rank 0 prints each round (ms) and the medians.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from gdlbench import _core
from gdlbench.composed.iteration import executed_algo, phase_times, plan_messages
from gdlbench.model.strategies import get_strategies
from gdlbench.nets.network import load_network


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="gpt2-small:seq=64")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--strategy", default="ps")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    _core.set_blas_threads(1)
    _core.set_compute_threads(1)
    _core.keep_freed_memory(1 << 30)  # as `gdlbench iteration`
    net = load_network(args.net)
    exe = _core.Net(net.layer_specs(), args.batch)
    strategy = get_strategies(args.strategy)[0]
    algo, servers = executed_algo(strategy, comm.Get_size())
    plan = plan_messages(net, strategy, exe.layer_param_offset)
    other = np.ones(100 << 20, dtype=np.float32)

    def alone(warmup: int) -> float:
        samples = exe.time_messages(messages=plan.messages, algo=algo, servers=servers, comm=comm, warmup=warmup,
                                    iters=1)
        return sum(s[0] for s in samples) / 1e3

    def inside(warmup: int) -> float:
        _, t = exe.time_iteration(messages=plan.messages, overlap=strategy.overlap == "wfbp", algo=algo,
                                  servers=servers, comm=comm, io=None, prefetch=False, warmup=warmup, iters=1)
        return max(phase_times(x)["comm"] for x in comm.allgather(t)) / 1e3

    steps: dict[str, Callable[[], float]] = {"alone cold": lambda: alone(0), "inside warm": lambda: inside(1),
                                             "alone warm": lambda: alone(1), "inside cold": lambda: inside(0)}
    alone(1)
    cols: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(args.rounds):
        for name, step in steps.items():
            comm.Allreduce(MPI.IN_PLACE, other)
            cols[name].append(step())
        if comm.rank == 0:
            print(f"{args.strategy} round {r}: " + "  ".join(f"{k} {v[-1]:6.1f}" for k, v in cols.items()), flush=True)
    if comm.rank == 0:
        print(f"{args.strategy} medians: " + "  ".join(f"{k} {statistics.median(v):6.1f}" for k, v in cols.items()))


if __name__ == "__main__":
    main()
