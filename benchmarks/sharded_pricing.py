"""The sharded strategies' messages, each measured alone in a composed-iteration run, against their
prices: by the reduce-scatter's and all-gather's own fits, and by their formulas with the
all-reduce fit's alpha and beta (model.sharded_message_us), and where the folder has them
(iteration_model.py --fits-on-main-too) by the same fits timed on the main thread. Reads a
benchmarks/iteration_model.py folder (its iteration-N-NET-REP.json, fit-N.json,
reduce_scatter-fit-N.json, allgather-fit-N.json, *-fit-N-main.json).

  python benchmarks/sharded_pricing.py DIR [--ranks 2]

Per run and strategy: the sum of the messages' medians alone, each price's sum and its error, and
per collective the same (ms)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gdlbench.model.phases import load_comm_model, plan_sharded, sharded_message_us
from gdlbench.model.strategies import get_strategies
from gdlbench.nets.network import load_network


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    d, n = Path(args.dir), args.ranks
    ar = load_comm_model(d / f"fit-{n}.json", "library")
    # (a folder without them, from before the fits existed: "own fit" is the formula's too)
    own = load_comm_model([d / f"fit-{n}.json", *(f for c in ("reduce_scatter", "allgather")
                                                   if (f := d / f"{c}-fit-{n}.json").is_file())], "library")
    # iteration_model.py --fits-on-main-too: the same fits timed on the main thread (*-main.json)
    mains = [d / f"{c}-fit-{n}-main.json" for c in ("reduce_scatter", "allgather")]
    on_main = load_comm_model([d / f"fit-{n}.json", *mains], "library") if all(f.is_file() for f in mains) else None
    print(f"{'run':24s} {'strategy':8s} {'collective':15s} {'msgs':>4s} {'alone':>9s} {'own fit':>9s} {'err':>7s} "
          f"{'formula':>9s} {'err':>7s}" + (f" {'on main':>9s} {'err':>7s}" if on_main else "") + "   (ms)")
    for it_file in sorted(d.glob(f"iteration-{n}-*.json")):
        doc = json.loads(it_file.read_text())
        net = load_network(doc["args"]["net"])
        rows = [r for r in doc["rows"] if r["phase"] == "message"]
        for strategy in dict.fromkeys(r["strategy"] for r in rows if get_strategies(r["strategy"])[0].shard):
            pairs = by_plan_message([r for r in rows if r["strategy"] == strategy],
                                    plan_sharded(net, get_strategies(strategy)[0]))
            for coll in ("reduce_scatter", "allgather", None):
                pick = [(t, m) for t, m in pairs if coll in (None, m["collective"])]
                alone = sum(t for t, _ in pick)
                p_own = sum(sharded_message_us(own, m["collective"], m["bytes"], n) for _, m in pick)
                p_ar = sum(sharded_message_us(ar, m["collective"], m["bytes"], n) for _, m in pick)
                p_main = sum(sharded_message_us(on_main, m["collective"], m["bytes"], n) for _, m in pick) if on_main else 0
                print(f"{it_file.stem.removeprefix(f'iteration-{n}-'):24s} {strategy:8s} {coll or 'all':15s} "
                      f"{len(pick):4d} {alone / 1e3:9.1f} {p_own / 1e3:9.1f} {100 * (p_own / alone - 1):+6.1f}% "
                      f"{p_ar / 1e3:9.1f} {100 * (p_ar / alone - 1):+6.1f}%"
                      + (f" {p_main / 1e3:9.1f} {100 * (p_main / alone - 1):+6.1f}%" if on_main else ""))


def by_plan_message(rows: list[dict], plan: list[dict]) -> list[tuple[float, dict]]:
    """(median alone, the model's message) per plan_sharded message: the executor sends a unit whose
    parameters lie in several ranges as pieces back to back (iteration.plan_sharded_messages),
    whose times add."""
    out, k = [], 0
    for m in plan:
        t, got = 0.0, 0
        while got < m["bytes"]:
            t, got, k = t + rows[k]["time_us"], got + rows[k]["size_bytes"], k + 1
        assert got == m["bytes"], (got, m)
        out.append((t, m))
    assert k == len(rows)
    return out

if __name__ == "__main__":
    main()
