"""Plots of the model (matplotlib, the optional extra gdlbench[plot]; Agg backend, PNG files):
- plot_breakdown: exposed time of each phase per strategy, stacked bars;
- plot_timeline: one iteration's forward, backward and communication lanes (WFBP overlap shows);
  plot_spans draws the same from any spans list (a measured iteration's, say);
- plot_scaling: speedup, throughput or efficiency against workers per strategy, with the ideal.
matplotlib is imported only when a plot is drawn."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..common.errors import UsageError
from ..model.phases import Span

PHASE_COLOURS = {"io": "#8c8c8c", "h2d": "#bcbd22", "forward": "#1f77b4", "backward": "#ff7f0e",
                 "comm": "#d62728", "wait": "#e8a3a3", "update": "#2ca02c"}
LANES = ("io", "h2d", "forward", "backward", "comm", "wait", "update")  # wait: for the last messages (a trace's)

Row = Mapping[str, Any]  # a row of model.predict_scaling (a JSON-like dict)


class Breakdown(Protocol):
    """What plot_breakdown reads of a model.Prediction."""

    @property
    def strategy(self) -> str: ...

    def breakdown(self) -> dict[str, float]: ...


Bar = Breakdown | tuple[str, Mapping[str, float]]  # a Prediction, or (label, {phase: us})


class Timeline(Protocol):
    """What plot_timeline reads: a model.Prediction, or a measured iteration in the same shape."""

    @property
    def timeline(self) -> Sequence[Span]: ...

    @property
    def t_iter_us(self) -> float: ...

    @property
    def comm_us(self) -> float: ...

    @property
    def comm_exposed_us(self) -> float: ...


def require_matplotlib() -> Any:
    """matplotlib.pyplot on the Agg backend, or a UsageError saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("plots need matplotlib: pip install 'gdlbench[plot]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _unit(max_us: float) -> tuple[float, str]:
    return (1e3, "ms") if max_us >= 2e3 else (1.0, "us")


def _bars(items: Sequence[Bar]) -> list[tuple[str, dict[str, float]]]:
    out = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:  # (label, {phase: us}), e.g. a measurement
            out.append((str(item[0]), {k: float(v) for k, v in item[1].items()}))
        elif hasattr(item, "breakdown"):  # a model.Prediction
            out.append((item.strategy, item.breakdown()))
        else:
            raise UsageError(f"plot_breakdown: expected Predictions or (label, {{phase: us}}), got {item!r}")
    return out


def plot_breakdown(predictions: Sequence[Bar], path: str | Path, title: str = "predicted phases") -> Path:
    """Stacked bars, one per item: a Prediction (its exposed io, h2d, forward, backward, comm,
    update) or a (label, {phase: time_us}) pair, e.g. a measured iteration beside the model's."""
    plt = require_matplotlib()
    bars = _bars(predictions)
    if not bars:
        raise UsageError("plot_breakdown: nothing to plot")
    totals = [sum(b.values()) for _, b in bars]
    scale, unit = _unit(max(totals))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(bars) + 2), 4.5), dpi=110)
    labels = [label for label, _ in bars]
    bottoms = [0.0] * len(bars)
    for phase in LANES + tuple(sorted({k for _, b in bars for k in b} - set(LANES))):
        values = [b.get(phase, 0.0) / scale for _, b in bars]
        if not any(values):
            continue
        ax.bar(labels, values, bottom=bottoms, color=PHASE_COLOURS.get(phase),
               label=phase + (" (exposed)" if phase in ("io", "comm") else ""), edgecolor="white", linewidth=0.5)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    for i, total in enumerate(totals):
        ax.text(i, bottoms[i], f"{total / scale:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel(f"time per iteration ({unit})")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    ax.set_ylim(0, max(bottoms) * 1.12 or 1)
    fig.tight_layout()
    return _save(fig, plt, path)


def plot_timeline(prediction: Timeline, path: str | Path, title: str = "one iteration") -> Path:
    """One iteration of a model.Prediction: lanes io, h2d, forward, backward, comm, update."""
    subtitle = (f"comm {prediction.comm_us / 1e3:.1f} ms, exposed {prediction.comm_exposed_us / 1e3:.1f} ms"
                if prediction.t_iter_us >= 2e3 else
                f"comm {prediction.comm_us:.1f} us, exposed {prediction.comm_exposed_us:.1f} us")
    return plot_spans(prediction.timeline, path, title=f"{title}: {subtitle}", t_iter_us=prediction.t_iter_us)


def plot_spans(spans: Sequence[Span], path: str | Path, title: str = "one iteration",
               t_iter_us: float | None = None) -> Path:
    """Spans {"lane", "name", "start_us", "end_us"} (a Prediction's timeline, or a measured
    iteration's in the same shape) as one bar each in its lane; t_iter_us draws the end line."""
    return plot_timelines([(title, spans, t_iter_us)], path)


def plot_timelines(items: Sequence[tuple[str, Sequence[Span], float | None]], path: str | Path,
                   title: str | None = None) -> Path:
    """One panel per (title, spans, t_iter_us), on one time axis: e.g. one measured iteration per
    strategy, one above the other."""
    plt = require_matplotlib()
    if not items or any(not spans for _, spans, _ in items):
        raise UsageError("plot_spans: nothing to plot")
    end = max(max([s["end_us"] for s in spans] + [t or 0.0]) for _, spans, t in items)
    scale, unit = _unit(end)
    # a lane under 0.5 % of the longest panel is not drawn (h2d on a CPU: a host copy of a few us)
    lane_sets = [_lanes(spans, min_us=0.005 * end) for _, spans, _ in items]
    heights = [0.55 * len(lanes) + 0.9 for lanes in lane_sets]
    fig, axes = plt.subplots(len(items), 1, figsize=(10, sum(heights) + 0.35 * len(items) + 1.3), dpi=110,
                             sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for k, (ax, (panel_title, spans, t_iter_us), lanes) in enumerate(zip(axes[:, 0], items, lane_sets, strict=True)):
        _draw_spans(ax, spans, lanes, scale, unit, end, t_iter_us)
        ax.set_title(f"{title}: {panel_title}" if title and k == 0 else panel_title,
                     fontsize=9 if len(items) > 1 else 10)
        ax.tick_params(labelbottom=True)  # a time axis on every panel, not only the last
        ax.set_xlabel(f"time from the start of the iteration ({unit})", fontsize=8)
    from matplotlib.patches import Patch

    shown = [lane for lane in LANES if any(lane in lanes for lanes in lane_sets)]
    handles = [Patch(color=PHASE_COLOURS.get(lane, "#7f7f7f"), label=lane) for lane in shown]
    if any("prefetch" in s["name"] for _, spans, _ in items for s in spans):
        handles.append(Patch(color="#c7c7c7", label="prefetch read (hidden)"))
    fig.legend(handles=handles, fontsize=8, loc="upper center", ncol=min(len(handles), 8), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))
    return _save(fig, plt, path)


def _lanes(spans: Sequence[Span], min_us: float = 0.0) -> list[str]:
    """The lanes with more than min_us of time in them, in LANES order."""
    total: dict[str, float] = {}
    for s in spans:
        total[s["lane"]] = total.get(s["lane"], 0.0) + s["end_us"] - s["start_us"]
    busy = {lane for lane, t in total.items() if t > min_us}
    lanes = [lane for lane in LANES if lane in busy]
    return lanes + sorted(busy - set(lanes))


def _draw_spans(ax: Any, spans: Sequence[Span], lanes: list[str], scale: float, unit: str, end: float,
                t_iter_us: float | None) -> None:
    for row, lane in enumerate(lanes):
        y = len(lanes) - 1 - row
        items = [s for s in spans if s["lane"] == lane]
        bars = [(s["start_us"] / scale, (s["end_us"] - s["start_us"]) / scale) for s in items]
        # the prefetch thread's read of the next batch is lighter than a wait on it
        colours = ["#c7c7c7" if "prefetch" in s["name"] else PHASE_COLOURS.get(lane, "#7f7f7f") for s in items]
        ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colours, edgecolor="white", linewidth=0.4)
        if lane == "comm":  # name the few largest messages
            for s in sorted(items, key=lambda s: s["end_us"] - s["start_us"], reverse=True)[:4]:
                w = (s["end_us"] - s["start_us"]) / scale
                if w > end / scale * 0.06:
                    ax.text((s["start_us"] / scale) + w / 2, y, s["name"], ha="center", va="center", fontsize=6,
                            color="white", clip_on=True)
    if t_iter_us is not None:
        ax.axvline(t_iter_us / scale, color="black", linestyle="--", linewidth=0.8)
        ax.text(t_iter_us / scale, len(lanes) - 0.45, f" t_iter {t_iter_us / scale:.1f} {unit}", fontsize=8,
                va="bottom")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(list(reversed(lanes)))
    ax.set_ylim(-0.6, len(lanes) - 0.1)
    ax.set_xlim(0, end / scale * 1.08)
    ax.grid(axis="x", alpha=0.3)


def plot_scaling(rows: Sequence[Row], path: str | Path, metric: str = "speedup",
                 title: str = "predicted scaling") -> Path:
    """rows from model.predict_scaling: metric speedup, throughput (images/s) or efficiency
    against N per strategy, log-log for speedup/throughput, with the ideal line."""
    return plot_scaling_panels(rows, path, metrics=(metric,), title=title)


def plot_scaling_panels(rows: Sequence[Row], path: str | Path, metrics: Sequence[str] = ("throughput", "efficiency"),
                        measured: Sequence[Row] = (), title: str = "predicted scaling",
                        measured_upto: int | None = None, validation: Sequence[Row] = (),
                        validation_label: str = "") -> Path:
    """One panel per metric, side by side; `measured` rows ({"strategy", "workers", metric keys})
    drawn as large open markers apart from the predicted lines; `validation` rows (measured on
    other nodes, `validation_label`: metric keys, and predicted_ + key for the model's figure
    for those nodes) as filled crosses beside open squares."""
    plt = require_matplotlib()
    if not rows:
        raise UsageError("plot_scaling: nothing to plot")
    fig, axes = plt.subplots(1, len(metrics), figsize=(7.5 if len(metrics) == 1 else 11.5, 4.8), dpi=110,
                             squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        colours = _draw_scaling(ax, rows, metric, measured)
        _draw_validation(ax, validation, metric, colours, validation_label)
        if measured_upto is not None:  # beyond the measured scale: the model alone
            top = max(r["workers"] for r in rows)
            if top > measured_upto:
                ax.axvspan(measured_upto, top * 1.05, color="#1a4f8a", alpha=0.07, linewidth=0,
                           label=f"predicted only (N > {measured_upto})")
        if len(metrics) > 1:
            ax.set_title(metric, fontsize=9)
    axes[0, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if len(metrics) > 1:
        fig.suptitle(title, fontsize=10)
    else:
        axes[0, 0].set_title(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, plt, path)


SCALING_KEYS = {"speedup": "speedup", "throughput": "images_per_s", "efficiency": "efficiency"}


def _draw_validation(ax: Any, points: Sequence[Row], metric: str, colours: dict[str, str], label: str) -> None:
    """Validation points: measured beyond the measured scale (filled X) and the model's figure for
    the same nodes (open square), in the strategy's colour."""
    key = SCALING_KEYS[metric]
    first = True
    for v in points:
        if v.get(key) is None or v["strategy"] not in colours:
            continue
        colour = colours[v["strategy"]]
        ax.plot([v["workers"]], [v[key]], marker="X", markersize=11, linestyle="none", color=colour,
                markeredgecolor="black", markeredgewidth=0.6,
                label=f"measured on {label} (validation)" if first else None)
        ax.plot([v["workers"]], [v[f"predicted_{key}"]], marker="s", markersize=10, linestyle="none",
                markerfacecolor="none", markeredgecolor=colour, markeredgewidth=1.4,
                label=f"predicted for {label}" if first else None)
        first = False


def _draw_scaling(ax: Any, rows: Sequence[Row], metric: str, measured: Sequence[Row]) -> dict[str, str]:
    key = SCALING_KEYS.get(metric)
    if key is None:
        raise UsageError(f"plot_scaling: metric must be speedup, throughput or efficiency, got {metric!r}")
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    workers = sorted({r["workers"] for r in rows})
    markers = "osD^v<>ph*"
    colours: dict[str, str] = {}
    for i, name in enumerate(strategies):
        pts = sorted((r["workers"], r[key]) for r in rows if r["strategy"] == name)
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)], markersize=4,
                          linewidth=1.3, label=f"{name} (predicted)" if measured else name)
        colours[name] = line.get_color()
    shown = False
    for m in measured:
        if m.get(key) is None or m["strategy"] not in colours:
            continue
        ax.plot([m["workers"]], [m[key]], marker="*", markersize=14, linestyle="none", markerfacecolor="none",
                markeredgecolor=colours[m["strategy"]], markeredgewidth=1.6,
                label=None if shown else "measured (star)")
        shown = True
    if metric == "speedup":
        ax.plot(workers, workers, color="black", linestyle="--", linewidth=0.9, label="ideal")
    elif metric == "efficiency":
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.9, label="ideal")
    else:
        per_worker = {r["strategy"]: r["images_per_s"] / r["workers"] for r in rows if r["workers"] == workers[0]}
        best = max(per_worker.values()) if per_worker else 0
        ax.plot(workers, [best * n for n in workers], color="black", linestyle="--", linewidth=0.9,
                label=f"ideal (best N={workers[0]} rate x N)")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")  # 1, 2, 4 ... rather than 2^k
    if len(workers) > 1:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(plain)
    if metric == "efficiency":
        ax.set_ylim(0, 1.05)
    elif len(workers) > 1:
        ax.set_yscale("log", base=2 if metric == "speedup" else 10)
        if metric == "speedup":
            ax.yaxis.set_major_formatter(plain)
    ax.set_xlabel("workers N")
    ax.set_ylabel({"speedup": "speedup S(N) = N t(1)/t(N)", "throughput": "images/s (all workers)",
                   "efficiency": "efficiency S(N)/N"}[metric])
    ax.grid(True, which="both", alpha=0.3)
    return colours


def _save(fig: Any, plt: Any, path: str | Path) -> Path:
    """Written whole or not at all: to a temporary name beside it, then renamed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        fig.savefig(tmp)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
