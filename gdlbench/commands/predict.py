"""gdlbench predict: the model's iteration time, throughput, speedup and efficiency per worker
count and strategy, from measured phases (--phases) and a communication model (--alpha/--beta,
--bandwidth, or --from a saved allreduce JSON with its fit). The phases JSON shape is in
gdlbench.model's docstring."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rich.markup import escape

from .. import cluster, env, memory
from ..collectives import SERVER_ALGOS
from ..errors import UsageError
from ..model import (
    CommModel,
    Compression,
    Phases,
    Prediction,
    normalise_algo,
    predict_iteration,
    predict_scaling,
)
from ..network import Network, load_network, net_option
from ..paths import read_json
from ..report import Column, OutputFile, Report, fmt_float, print_table, stdout_console
from ..scaling import PredictResult, comm_model_from
from ..strategies import Strategy, get_strategies
from ..units import BANDWIDTH_FORMS, SIZE_CONVENTION, parse_int_list, parse_size

DEFAULT_WORKERS = "1,2,4,8,16,32,64,128,256,512,1024"
GRAD_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--net", type=net_option, help="network: a built-in name or a .json/.py spec (default: the phases' net)")
    p.add_argument("--workers", help=f"worker counts N (default {DEFAULT_WORKERS}; with --nodes: 1, G, 2G, "
                                     "4G, ... up to the cluster)")
    p.add_argument("--strategy", default="all",
                   help="a preset, a comma-separated list, a strategy .json file, or all (default)")
    p.add_argument("--phases", metavar="FILE",
                   help="measured phases: a saved `gdlbench iteration --json` file (default: measure them "
                        "on the spot, on this machine, with --batch)")
    p.add_argument("--batch", type=int,
                   help="per-worker batch: measured at this batch on the spot, or with --phases the what-if of "
                        "the phases scaled to it (io, h2d, forward, backward linear in the batch; update fixed)")
    p.add_argument("--device", default="auto", help="device for phases measured on the spot (auto, cpu, cuda)")
    p.add_argument("--from", dest="from_file", metavar="FILE",
                   help="communication model: a saved `gdlbench allreduce --json` file with its fit")
    p.add_argument("--algo", help="all-reduce algorithm, as allreduce --algo names it: ring (default), rd, tree, "
                                  "library, hier (long forms such as recursive_doubling accepted); "
                                  "with --from, which fit to use")
    p.add_argument("--alpha", type=float, help="latency per step, microseconds")
    p.add_argument("--beta", type=float, help="link time per byte, microseconds per byte")
    p.add_argument("--bandwidth", metavar="BW", help="link bandwidth instead of --beta: GB/s as a bare number, "
                   f"or with a unit ({BANDWIDTH_FORMS}; b = bits)")
    p.add_argument("--gamma", type=float, help="reduction time per byte, microseconds per byte (default 0)")
    g = p.add_argument_group("a two-level cluster (nodes of G workers; instead of --from/--alpha)")
    g.add_argument("--cluster", metavar="FILE",
                   help="a cluster file ({\"nodes\": 4, \"per_node\": 8, \"intra\": \"nvlink4\", \"inter\": "
                        "\"ib-hdr\"}; a link is a preset or {\"alpha_us\", \"gbs\"}), or the --json report of "
                        "`allreduce --fit` run on several nodes (its measured two-level fit)")
    g.add_argument("--nodes", type=int, help="nodes in the cluster (with --per-node, --intra, --inter)")
    g.add_argument("--per-node", type=int, metavar="G", help="workers per node")
    g.add_argument("--intra", metavar="LINK", help=f"intra-node link: a preset ({', '.join(cluster.LINKS)}) or "
                                                    "ALPHA_US:GBS")
    g.add_argument("--inter", metavar="LINK", help="inter-node link: a preset or ALPHA_US:GBS")
    g.add_argument("--links-per-node", type=int, help="inter-node links (NICs) per node, shared by its workers, "
                                                      "1 to --per-node (default 1)")
    g.add_argument("--list-links", action="store_true", help="print the link presets and their sources, and exit")
    p.add_argument("--bucket", help="fusion bucket size for the presets that fuse, e.g. 25MiB")
    p.add_argument("--servers", type=int, help="parameter servers P (default: P = N)")
    w = p.add_argument_group("what-ifs (the report of `gdlbench study` quotes these, so each number reproduces)")
    w.add_argument("--grad-dtype", default="float32", choices=tuple(GRAD_DTYPE_BYTES),
                   help="gradients sent as this type (float16/bfloat16: half the bytes; default float32)")
    w.add_argument("--compress", metavar="RATIO[:COST]",
                   help="gradient compression: each message sends 1/RATIO of its bytes after an encode costing "
                        "COST us per dense byte (e.g. 100:2e-4; `gdlbench study` measures top-k's)")
    w.add_argument("--link-scale", metavar="BW[:LAT]",
                   help="every link's bandwidth times BW and latency times LAT (2: twice the bandwidth; 1:0.5: "
                        "half the latency); on a cluster, the inter-node link's")
    w.add_argument("--io-threads", type=int,
                   help="t_io as if read by this many threads (linear in the threads; needs the phases' io_threads)")
    w.add_argument("--overlap", choices=("none", "wfbp"),
                   help="every strategy's overlap set to this (wfbp: turn WFBP on)")
    memory.add_arguments(p)  # --memory-limit, --optimizer, --checkpointing (issue 35)
    p.add_argument("--plot", metavar="FILE.png", help="scaling curve per strategy (needs gdlbench[plot])")
    p.add_argument("--plot-metric", default="speedup", choices=("speedup", "throughput", "efficiency"),
                   help="what --plot shows (default speedup)")
    p.add_argument("--plot-breakdown", metavar="FILE.png", help="phase breakdown per strategy at --plot-workers")
    p.add_argument("--plot-timeline", metavar="FILE.png",
                   help="timeline of one iteration of --plot-strategy at --plot-workers")
    p.add_argument("--plot-workers", type=int, help="N for the breakdown and timeline plots (default the largest)")
    p.add_argument("--plot-strategy", help="strategy for --plot-timeline (default wfbp if selected, else the first)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")


def comm_model_from_args(args: argparse.Namespace,
                         phases_doc_fit: dict[str, Any] | list[Any] | None = None,
                         load: Callable[[str, str], Any] = read_json) -> CommModel:
    return comm_model_from(algo=args.algo, alpha_us=args.alpha, beta_us_per_byte=args.beta, bandwidth=args.bandwidth,
                           gamma_us_per_byte=args.gamma, from_file=args.from_file, fit_in_phases=phases_doc_fit,
                           load=load)


# Without --phases, predict measures one serial iteration here: the composed run's communication
# thread calls MPI (see Iteration.MPI_THREAD_LEVEL).
MPI_THREAD_LEVEL = "serialized"


def _link_arg(text: str, level: str) -> cluster.Link:
    if ":" in text:
        try:
            alpha, gbs = (float(x) for x in text.split(":", 1))
        except ValueError:
            raise UsageError(f"--{level}: expected a preset name or ALPHA_US:GBS, got {text!r}") from None
        return cluster.link({"name": text, "alpha_us": alpha, "gbs": gbs, "source": "command line"}, f"--{level}")
    return cluster.link(text, f"--{level}")


def cluster_from_args(args: argparse.Namespace) -> cluster.Cluster | None:
    """The two-level cluster of --cluster, or of --per-node/--intra/--inter; None when neither."""
    shape = [o for o in ("nodes", "per_node", "intra", "inter", "links_per_node") if getattr(args, o) is not None]
    if not args.cluster and not shape:
        return None
    if args.from_file or args.alpha is not None or args.beta is not None or args.bandwidth is not None:
        raise UsageError("give a cluster (--cluster, or --per-node/--intra/--inter) or --from/--alpha, not both")
    if args.cluster:
        if shape:
            raise UsageError(f"--cluster FILE holds the shape and links; drop --{shape[0].replace('_', '-')}")
        c = cluster.load_cluster(args.cluster)
    else:
        missing = [o for o in ("per_node", "intra", "inter") if getattr(args, o) is None]
        if missing:
            raise UsageError(f"a cluster needs --per-node, --intra and --inter (missing --{missing[0].replace('_', '-')})")
        c = cluster.Cluster(args.per_node, _link_arg(args.intra, "intra"), _link_arg(args.inter, "inter"),
                            1 if args.links_per_node is None else args.links_per_node, args.nodes,
                            source="command line")
    if args.algo:
        algo = normalise_algo(args.algo)
        if algo in SERVER_ALGOS:
            raise UsageError("--algo: ps is a strategy (--strategy ps/mxnet/tensorflow), not an all-reduce algorithm")
        from dataclasses import replace

        c = replace(c, algo=algo)
    return c


def _cluster_workers(c: cluster.Cluster) -> list[int]:
    """1, G, 2G, 4G, ... up to the cluster's nodes (and the whole cluster)."""
    out, k = [1, c.per_node], 2
    while c.nodes and k < c.nodes:
        out.append(k * c.per_node)
        k *= 2
    if c.nodes:
        out.append(c.nodes * c.per_node)
    return sorted(set(out))


def _print_links() -> None:
    rows = [{"name": k, "gbs": v.gbs, "alpha": v.alpha_us, "source": v.source} for k, v in cluster.LINKS.items()]
    print_table("link presets (bandwidth per direction, 1e9 B/s)",
                [Column("preset", "name"), Column("GB/s", "gbs", fmt_float(3)), Column("alpha (us)", "alpha"),
                 Column("source", "source")], rows)


def _measure_on_the_spot(args: argparse.Namespace) -> Phases:
    """The phases of one serial iteration measured here, on this rank's device and threads."""
    import sys

    from ..iteration import Iteration

    def say(msg: str) -> None:
        if env.rank() == 0:
            print(f"gdlbench predict: measuring the phases: {msg}", file=sys.stderr, flush=True)

    result = Iteration(args.net, args.batch, args.device, "serial", iters=3, warmup=1, progress=say).measure()
    phases = result.phases_model()
    phases.source = f"measured on the spot ({result.device}, {result.threads} threads, batch {result.batch})"
    return phases


def _link_scale(text: str | None) -> tuple[float, float]:
    if text is None:
        return 1.0, 1.0
    bw, _, lat = str(text).partition(":")
    try:
        return float(bw), float(lat) if lat else 1.0
    except ValueError:
        raise UsageError(f"--link-scale: expected BW[:LAT], e.g. 2 or 1:0.5, got {text!r}") from None


@dataclass
class Evaluation:
    """What `predict` computes from its arguments, before anything is printed or written."""

    net: Network
    phases: Phases
    comm: CommModel | cluster.Cluster  # the cluster (scaled by --link-scale) when predicting one
    strategies: list[Strategy]
    workers: list[int]
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    dtype_bytes: int
    compress: Compression | None

    def prediction(self, strategy: Strategy, workers: int) -> Prediction:
        return predict_iteration(self.net, self.phases, self.comm, strategy, workers, self.dtype_bytes,
                                 compress=self.compress)


def _with_contention(phases: Phases, fit_file: str | None, load: Callable[[str, str], Any]) -> Phases:
    """The phases with the contention the --from report measured beside compute (allreduce
    --backend gloo --beside-compute), where the phases have none of their own."""
    if not fit_file or phases.compute_slowdown is not None or phases.strategy_slowdowns:
        return phases
    doc = load(fit_file, "--from")
    found = doc.get("summary", {}).get("contention") if isinstance(doc, dict) and isinstance(
        doc.get("summary"), dict) else None
    if not isinstance(found, dict):
        return phases
    return replace(phases, compute_slowdown=found.get("compute_slowdown"), comm_slowdown=found.get("comm_slowdown"),
                   memory_slowdown=found.get("memory_slowdown"),
                   source=f"{phases.source}; contention beside compute from {fit_file}")


def evaluate(args: argparse.Namespace, load: Callable[[str, str], Any] = read_json) -> Evaluation:
    """The rows and summary of `gdlbench predict` for these arguments (gdlbench study calls this
    with the very arguments its report quotes). load(path, option) reads a JSON file."""
    two_level = cluster_from_args(args)
    workers = parse_int_list(args.workers or (",".join(map(str, _cluster_workers(two_level)))
                                              if two_level and two_level.nodes else DEFAULT_WORKERS), "--workers")
    if max(workers) > 1_000_000:
        raise UsageError(f"--workers: at most 1,000,000, got {max(workers)}")
    if not args.phases and not args.net:
        raise UsageError("give --phases FILE (a saved `gdlbench iteration --json` report) or --net NAME "
                         "to measure the phases on the spot")
    if args.batch is not None and args.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {args.batch}")
    for opt, value in (("--servers", args.servers), ("--plot-workers", args.plot_workers)):
        if value is not None and not 1 <= value <= 1_000_000:
            raise UsageError(f"{opt} must be from 1 to 1,000,000, got {value}")
    bucket = parse_size(args.bucket, "--bucket") if args.bucket else None
    strategies = get_strategies(args.strategy, bucket_bytes=bucket, servers=args.servers)
    if args.overlap:
        strategies = [replace(s, overlap=args.overlap) for s in strategies]
    compress = Compression.parse(args.compress) if args.compress else None
    bw, lat = _link_scale(args.link_scale)

    if args.phases:
        doc = load(args.phases, "--phases")
        phases = Phases.from_dict(doc, source=args.phases)
        if args.batch is not None:
            phases = phases.with_batch(args.batch)
    else:
        doc = {}
        phases = _measure_on_the_spot(args)
    if args.io_threads is not None:
        phases = phases.with_io_threads(args.io_threads)
    net_name = args.net or phases.net
    if not net_name:
        raise UsageError(f"--net is needed: {args.phases} does not name its network (args.net)")
    summary_doc = doc.get("summary") if isinstance(doc.get("summary"), dict) else {}
    traced = summary_doc.get("network")  # import-trace: the traced job's gradients as a network
    net = load_network(traced if isinstance(traced, dict) and not args.net else net_name)
    if phases.net and phases.net != net.name:
        raise UsageError(f"--phases {args.phases} was measured on {phases.net}, not {net.name}")
    unknown = sorted((set(phases.layer_forward_us) | set(phases.layer_backward_us)) - {lay.name for lay in net.layers})
    if unknown:
        raise UsageError(f"--phases {args.phases}: layers not in {net.name}: {', '.join(unknown[:5])}"
                         + (" ..." if len(unknown) > 5 else ""))
    summary_fit = doc.get("summary", {}).get("fit") if isinstance(doc.get("summary"), dict) else None
    comm = two_level or comm_model_from_args(args, summary_fit if isinstance(summary_fit, (dict, list)) else None,
                                             load)
    comm = comm.scaled(bandwidth=bw, latency=lat)  # on a cluster: its inter-node link
    phases = _with_contention(phases, args.from_file, load)
    dtype_bytes = GRAD_DTYPE_BYTES[args.grad_dtype]
    rows = predict_scaling(net, phases, comm, strategies, workers, dtype_bytes, compress=compress)
    summary = {
        "net": net.name, "params": net.params, "gradient_bytes": net.param_bytes(dtype_bytes), "batch": phases.batch,
        "phases": phases.to_dict(), "comm_model": comm.to_dict(), "workers": workers,
        "strategies": [s.to_dict() for s in strategies],
        "what_if": {"grad_dtype": args.grad_dtype, "compress": compress.to_dict() if compress else None,
                    "link_scale": {"bandwidth": bw, "latency": lat}, "batch": args.batch if args.phases else None,
                    "io_threads": args.io_threads, "overlap": args.overlap},
        "model": "docs/model.md (gdlbench.model): serial, prefetch, WFBP recurrence, fusion, PS",
        "speedup": "S(N) = N t_iter(1) / t_iter(N), same strategy, weak scaling (fixed batch per worker)",
        "size_convention": SIZE_CONVENTION,
    }
    if phases.comm_us is not None:
        summary["measured_comm_us"] = {"workers": phases.workers, "time_us": phases.comm_us}
    return Evaluation(net, phases, comm, strategies, workers, rows, summary, dtype_bytes, compress)


def run(args: argparse.Namespace) -> int:
    if args.list_links:
        if env.rank() == 0:
            _print_links()
        return 0
    if args.plot_workers is not None and args.plot_workers < 1:
        raise UsageError(f"--plot-workers must be >= 1, got {args.plot_workers}")
    if args.plot_strategy and not args.plot_timeline:
        raise UsageError("--plot-strategy goes with --plot-timeline")
    outputs = {opt: OutputFile(path, opt) for opt, path in (
        ("--json", args.json), ("--csv", args.csv), ("--plot", args.plot),
        ("--plot-breakdown", args.plot_breakdown), ("--plot-timeline", args.plot_timeline)) if path}
    if any(opt.startswith("--plot") for opt in outputs):
        from ..plots import require_matplotlib

        require_matplotlib()
    ev = evaluate(args)
    # the cluster as priced (its inter-node link scaled by --link-scale), for every line that shows it
    two_level = ev.comm if isinstance(ev.comm, cluster.Cluster) else None
    net, phases, comm, strategies, workers, rows = ev.net, ev.phases, ev.comm, ev.strategies, ev.workers, ev.rows
    timeline_strategy = None
    if args.plot_timeline:
        names = [s.name for s in strategies]
        pick = args.plot_strategy or ("wfbp" if "wfbp" in names else names[0])
        timeline_strategy = next((s for s in strategies if s.name == pick), None) or get_strategies(
            pick, bucket_bytes=parse_size(args.bucket, "--bucket") if args.bucket else None,
            servers=args.servers)[0]
    is_root = env.rank() == 0
    env_info = env.collect()  # on every rank: it holds a collective (the node split), cached after
    report = Report("predict", vars(args), env_info if is_root else {},
                    {"clock": "none", "region": "model prediction: nothing timed", "rank_reduction": "none"},
                    rows=rows, summary=ev.summary,
                    notes=["strategies are stated assumptions, not exact reproductions of the frameworks"]
                    + ([comm.note] if isinstance(comm, CommModel) and comm.note else [])
                    + ([f"{lv} link {k.name}: {k.source}" for lv, k in (("intra-node", two_level.intra),
                                                                        ("inter-node", two_level.inter))]
                       + list(two_level.notes) if two_level else []))
    if not is_root:
        return 0
    what_if = [f"{k} {v}" for k, v in (("grad-dtype", args.grad_dtype if args.grad_dtype != "float32" else None),
                                       ("compress", args.compress), ("link-scale", args.link_scale),
                                       ("io-threads", args.io_threads), ("overlap", args.overlap)) if v]
    if two_level:
        comm_text = (f"comm: two-level cluster, {two_level.describe()}, algorithm {two_level.algo} unless the "
                     f"strategy names one ({two_level.source}); ")
    else:
        assert isinstance(comm, CommModel)  # without a cluster, evaluate() made a CommModel
        comm_text = (f"comm {comm.algo} (formula {comm.formula}): alpha {comm.alpha_us:.3g} us, "
                     f"beta {comm.beta_us_per_byte:.3g} us/B, gamma {comm.gamma_us_per_byte:.3g} us/B "
                     f"({comm.source}); ")
    caption = (f"{net.name}, batch {phases.batch} per worker; phases from {phases.source} "
               f"(t_f {phases.forward_us / 1e3:.2f} ms, t_b {phases.backward_us / 1e3:.2f} ms, "
               f"t_io {phases.io_us / 1e3:.2f}, t_h2d {phases.h2d_us / 1e3:.2f}, t_u {phases.update_us / 1e3:.2f} ms); "
               + comm_text
               + f"gradients {net.param_bytes(ev.dtype_bytes):,} B {args.grad_dtype}; speedup = N t(1)/t(N); "
                 "images/s in total" + (f"; what-if: {', '.join(what_if)}" if what_if else ""))
    # a cluster's table is headed by the shape it prices, not by the topology of this process
    shape = None if not two_level else (f"priced for {two_level.nodes} nodes x {two_level.per_node} workers per node"
                                        if two_level.nodes else f"priced for nodes of {two_level.per_node} workers")
    print_table(f"gdlbench predict: {net.name}", PredictResult.COLUMNS, rows, caption=caption, context=shape)
    console = stdout_console()
    if two_level:
        for level, k in (("intra-node", two_level.intra), ("inter-node", two_level.inter)):
            console.print(f"{level} link {escape(k.name)}: {k.gbs:.4g} GB/s, alpha {k.alpha_us:.3g} us. "
                          f"[dim]Source: {escape(k.source)}[/dim]", highlight=False)
        for note in two_level.notes:
            console.print(escape(note), highlight=False)
    console.print("strategies (stated assumptions, not exact reproductions of the frameworks):", highlight=False)
    for s in strategies:
        console.print(f"  {escape(s.name)}: {escape(s.describe())}. {escape(s.assumptions)} "
                      f"[dim]Source: {escape(s.source)}[/dim]", highlight=False)
    memory_summary = memory.annotate(net, strategies, rows, phases.batch, args)  # --memory-limit (issue 35)
    if memory_summary is not None:
        ev.summary["memory"] = memory_summary  # the report holds rows and summary: the JSON and CSV get them
        memory.print_memory(rows, memory_summary)
    if "--json" in outputs:
        outputs["--json"].write(report.to_json())
    if "--csv" in outputs:
        outputs["--csv"].write(report.to_csv())
    if any(opt.startswith("--plot") for opt in outputs):
        from .. import plots

        if "--plot" in outputs:
            plots.plot_scaling(rows, outputs["--plot"].path, metric=args.plot_metric,
                               title=f"{net.name}, batch {phases.batch}/worker: predicted {args.plot_metric}")
        n_plot = args.plot_workers or max(workers)
        if "--plot-breakdown" in outputs:
            preds = [ev.prediction(s, n_plot) for s in strategies]
            plots.plot_breakdown(preds, outputs["--plot-breakdown"].path,
                                 title=f"{net.name}, N = {n_plot}, batch {phases.batch}: predicted phases")
        if "--plot-timeline" in outputs and timeline_strategy is not None:
            pred = ev.prediction(timeline_strategy, n_plot)
            plots.plot_timeline(pred, outputs["--plot-timeline"].path,
                                title=f"{net.name}, {timeline_strategy.name}, N = {n_plot}, batch {phases.batch}: "
                                      "one iteration")
        for opt in outputs:
            if opt.startswith("--plot"):
                print(f"wrote {outputs[opt].path}")
    return 0
