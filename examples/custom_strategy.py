"""A strategy of your own against the presets: DDP-style buckets of 50 MB, and the same with
gradients sent in bf16.

    python examples/custom_strategy.py --net resnet50 --workers 1,8,64,512

A Strategy is data: a collective, an overlap (none, or wfbp: a message leaves as soon as its
gradients are ready), a bucket size for fusion, parameter servers. The model prices it next to
the presets at every worker count, from phases given by a GPU's nominal speed (or --phases, a
saved `gdlbench iteration --json`); then the executor runs it for real on a small net
(--measure-net) beside a preset, and the model is held against that run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gdlbench

DDP_50MB = gdlbench.Strategy(
    "ddp-50mb", overlap="wfbp", bucket_bytes=50_000_000,
    assumptions="PyTorch DDP with bucket_cap_mb=50: gradients merged into buckets of at least 50 MB in "
                "backward order, each all-reduced (ring) as soon as its last gradient is ready.",
    source="this study")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default="resnet50", help="network for the prediction")
    p.add_argument("--phases", help="a saved `gdlbench iteration --json` (default: synthetic, 10 TFLOP/s)")
    p.add_argument("--batch", type=int, default=64, help="per-worker batch of the synthetic phases")
    p.add_argument("--presets", default="wfbp,wfbp-fusion,cntk", help="presets to compare with")
    p.add_argument("--workers", default="1,8,64,512")
    p.add_argument("--gbs", type=float, default=12.5, help="link bandwidth, GB/s")
    p.add_argument("--measure-net", default=str(Path(__file__).with_name("my_net.json")),
                   help="a small net the executor runs with the strategy for real ('' to skip)")
    p.add_argument("--measure-batch", type=int, default=8)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--out", default="custom-strategy-out")
    args = p.parse_args(argv)

    phases = args.phases or gdlbench.Phases.synthetic(args.net, batch=args.batch)
    link = gdlbench.CommModel.from_bandwidth("ring", alpha_us=5.0, gbs=args.gbs)
    strategies = [DDP_50MB, *gdlbench.get_strategies(args.presets)]
    fp32 = gdlbench.predict(args.net, phases, link, strategy=strategies, workers=args.workers)
    bf16 = gdlbench.predict(args.net, phases, link, strategy=[DDP_50MB], workers=args.workers, gradient_bytes=2)
    for row in bf16.table_rows:
        row["strategy"] = "ddp-50mb-bf16"
    fp32.table_rows += bf16.table_rows
    compared = gdlbench.Compare([fp32], title=f"{args.net}: ddp-50mb (fp32 and bf16 gradients) against the presets")
    compared.print()

    out = Path(args.out)
    if compared.is_root:
        out.mkdir(parents=True, exist_ok=True)
    compared.write_json(out / "predict.json")
    if args.measure_net:
        run = gdlbench.Iteration(args.measure_net, args.measure_batch, "auto", [DDP_50MB, gdlbench.PRESETS["wfbp"]],
                                 iters=args.iters, warmup=1, io=False).measure()
        measured = gdlbench.Compare([run], title=f"{run.net}: the strategy run for real, against the model")
        measured.print()
        measured.write_json(out / "iteration.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
