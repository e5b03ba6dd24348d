"""Renders the example plots in this folder from synthetic phases (not measurements):
12 TFLOP/s effective compute (a GPU-like rate), backward = 2 x forward, and a 56 Gb/s
InfiniBand-like link (alpha 5 us, 6 GB/s), the kind of cluster Shi, Wang and Chu used.
Run: python docs/img/make_examples.py"""

from __future__ import annotations

from pathlib import Path

from gdlbench.model.phases import CommModel, Phases, predict_iteration, predict_scaling
from gdlbench.model.strategies import PRESETS
from gdlbench.study import plots

HERE = Path(__file__).parent
COMM = CommModel.from_bandwidth("ring", alpha_us=5.0, gbs=6.0, source="synthetic: 56 Gb/s InfiniBand-like")


def main() -> None:
    resnet = Phases.synthetic("resnet50", 64, gflops=12_000)
    strategies = list(PRESETS.values())
    preds = [predict_iteration("resnet50", resnet, COMM, s, 16) for s in strategies]
    plots.plot_breakdown(preds, HERE / "breakdown-resnet50-n16.png",
                         title="ResNet-50, N = 16, batch 64 per worker (synthetic phases): predicted phases")
    alexnet = Phases.synthetic("alexnet", 256, gflops=12_000)
    pred = predict_iteration("alexnet", alexnet, COMM, PRESETS["wfbp"], 16)
    plots.plot_timeline(pred, HERE / "timeline-alexnet-wfbp-n16.png",
                        title="AlexNet, wfbp, N = 16, batch 256 (synthetic phases)")
    rows = predict_scaling("resnet50", resnet, COMM, strategies, [2**k for k in range(11)])
    plots.plot_scaling(rows, HERE / "scaling-resnet50.png",
                       title="ResNet-50, batch 64 per worker (synthetic phases): predicted speedup")


if __name__ == "__main__":
    main()
