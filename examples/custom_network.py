"""A network of your own: measure one SGD iteration of it, then ask the model how it scales.

Copy my_net.json, change its layers (the format: docs/model.md), and run

    python examples/custom_network.py --net my_net.json --batch 16
    .venv/bin/mpiexec -n 2 .venv/bin/python examples/custom_network.py    # with communication

It measures every phase of the net alone and the composed iteration per strategy (Iteration),
prints the model's error against the composed run, then predicts t_iter, speedup and
efficiency for more workers on a link of --gbs GB/s (predict), and writes both reports, as
`gdlbench iteration --json` and `gdlbench predict --json` would, into --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gdlbench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default=str(Path(__file__).with_name("my_net.json")), help="a .json or .py net spec")
    p.add_argument("--batch", type=int, default=16, help="per-worker batch")
    p.add_argument("--strategy", default="serial,wfbp", help="presets to measure and predict")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--device", default="auto")
    p.add_argument("--no-io", dest="io", action="store_false", help="leave out reading JPEGs")
    p.add_argument("--workers", default="1,2,4,8,16,32,64,128", help="worker counts to predict")
    p.add_argument("--alpha-us", type=float, default=5.0, help="link latency per step (us)")
    p.add_argument("--gbs", type=float, default=12.5, help="link bandwidth, GB/s (12.5: 100 Gb/s)")
    p.add_argument("--out", default="custom-network-out", help="directory for iteration.json, predict.json")
    args = p.parse_args(argv)

    net = gdlbench.load_network(args.net)
    result = gdlbench.Iteration(net, args.batch, args.device, args.strategy, iters=args.iters, warmup=1,
                                io=args.io).measure()
    link = gdlbench.CommModel.from_bandwidth("ring", alpha_us=args.alpha_us, gbs=args.gbs)
    scaling = gdlbench.predict(net, result, link, strategy=args.strategy, workers=args.workers)

    measured = gdlbench.Compare([result], title=f"{net.name}: {net.params:,} parameters, batch {result.batch}")
    predicted = gdlbench.Compare([scaling], title=f"{net.name} on a {args.gbs:g} GB/s ring: predicted scaling")
    measured.print()
    predicted.print()
    if measured.is_root:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    measured.write_json(Path(args.out) / "iteration.json")
    predicted.write_json(Path(args.out) / "predict.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
