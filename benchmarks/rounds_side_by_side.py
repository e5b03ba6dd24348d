"""Round by round, what `gdlbench iteration` measures of each strategy: its messages alone (the
sum over its plan), the same messages inside the composed iteration (the comm phase), the
composed iteration, and the isolated passes: where a median over rounds hides that the machine
changed speed between them (on a shared VM the copies between ranks do, for tens of seconds).

  mpiexec -n 2 python benchmarks/rounds_side_by_side.py [--net gpt2-small:seq=64] [--batch 1]
      [--strategy serial,zero1] [--rounds 12]

Rank 0 prints, per strategy, one line per quantity with its sample of every round (ms, the
max over ranks as `iteration` keeps them), then the isolated forward, backward and update of
every isolated round. GLIBC_TUNABLES=glibc.malloc.arena_max=1 in the ranks' environment takes
the page faults of MPICH's temporaries out of the messages (docs/model.md).
"""

from __future__ import annotations

import argparse

from gdlbench.common import env
from gdlbench.composed.iteration import Iteration


def row(label: str, samples: list[float]) -> str:
    return f"  {label:22s} " + " ".join(f"{x / 1e3:5.0f}" for x in samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="gpt2-small:seq=64")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--strategy", default="serial,zero1")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    r = Iteration(args.net, args.batch, "cpu", args.strategy, iters=args.rounds, warmup=1, threads=args.threads,
                  io=True).measure()
    if env.rank() != 0:
        return
    print(f"{args.net}, batch {args.batch}, {r.world_size} rank(s), {args.rounds} rounds (ms per round)")
    for run in r.runs:
        alone = [sum(m.samples_us[i] for m in run.message_times) for i in range(len(run.composed.samples_us))]
        print(f"{run.strategy.name}: model {run.predicted_us / 1e3:.0f}, measured {run.composed.median / 1e3:.0f}, "
              f"error {run.error_pct:+.1f} %")
        print(row("messages alone", alone))
        if "comm" in run.inside:
            print(row("comm inside", run.inside["comm"].samples_us))
        print(row("composed", run.composed.samples_us))
    for phase in ("forward", "backward", "update"):
        print(row(f"isolated {phase}", r.phases[phase].samples_us))


if __name__ == "__main__":
    main()
