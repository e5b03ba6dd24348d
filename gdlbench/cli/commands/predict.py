"""gdlbench predict: the model's iteration time, throughput, speedup and efficiency per worker
count and strategy, from measured phases (--phases) and a communication model (--alpha/--beta,
--bandwidth, or --from a saved allreduce JSON with its fit). The phases JSON shape is in
gdlbench.model.phases's docstring."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

from rich.markup import escape

from ...common import env
from ...common.errors import UsageError
from ...common.output import Column, OutputFile, Report, fmt_float, print_table, stdout_console
from ...common.units import BANDWIDTH_FORMS, parse_int_list, parse_size, size_text
from ...model import cluster, memory
from ...model.phases import CommModel
from ...model.strategies import OVERLAPS
from ...nets.network import net_option
from ...primitives.collectives import ALGOS, SERVER_ALGOS
from ...whatif.prediction import (
    GRAD_DTYPE_BYTES,
    MAX_WORKERS,
    CommSource,
    Evaluation,
    PredictRequest,
    evaluate,
)
from ...whatif.scaling import DEFAULT_WORKERS, PredictResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--net", type=net_option, help="network: a built-in name or a .json/.py spec (default: the phases' net)")
    p.add_argument("--workers", help=f"worker counts N (default {','.join(map(str, DEFAULT_WORKERS))}; with --nodes: 1, G, 2G, "
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
                   help="communication model: a saved `gdlbench allreduce --json` file with its fit; a comma list: "
                        "with the `reduce_scatter --fit --on comm-thread` and `allgather --fit --on comm-thread` "
                        "reports, whose fits price the sharded strategies' messages (without them: their formulas "
                        "with the all-reduce's alpha and beta)")
    p.add_argument("--algo", help="all-reduce algorithm, as allreduce --algo names it: ring (default), "
                                  + ", ".join(a for a in ALGOS if a not in SERVER_ALGOS and a != "ring")
                                  + " (long forms such as recursive_doubling accepted); with --from, which fit to use")
    p.add_argument("--alpha", type=float, help="latency per step, microseconds")
    p.add_argument("--beta", type=float, help="link time per byte, microseconds per byte")
    p.add_argument("--bandwidth", metavar="BW", help="link bandwidth instead of --beta: GB/s as a bare number, "
                   f"or with a unit ({BANDWIDTH_FORMS}; b = bits)")
    p.add_argument("--gamma", type=float, help="reduction time per byte, microseconds per byte (default 0)")
    _cluster_arguments(p.add_argument_group("a two-level cluster (nodes of G workers; instead of --from/--alpha)"))
    p.add_argument("--bucket", help="fusion bucket size for the presets that fuse, e.g. 25MiB")
    p.add_argument("--servers", type=int, help="parameter servers P (default: P = N)")
    _what_if_arguments(p.add_argument_group("what-ifs (the report of `gdlbench study` quotes these, so each number "
                                            "reproduces)"))
    memory.add_arguments(p)  # --memory-limit, --optimizer, --checkpointing (issue 35)
    _output_arguments(p)


def _cluster_arguments(g: argparse._ArgumentGroup) -> None:
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


def _what_if_arguments(w: argparse._ArgumentGroup) -> None:
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
    w.add_argument("--overlap", choices=OVERLAPS,
                   help="every strategy's overlap set to this (wfbp: turn WFBP on)")
    w.add_argument("--fuse", metavar="SIZE",
                   help="every strategy's gradients fused into buckets of SIZE (e.g. 4MiB), as a strategy of its "
                        "own named NAME-bucket-SIZE: priced with the run's contention, not the strategy's")


def _output_arguments(p: argparse.ArgumentParser) -> None:
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


def comm_source_from_args(args: argparse.Namespace) -> CommSource:
    """The communication model's options (CommSource's fields are their names)."""
    return CommSource(**{f.name: getattr(args, f.name) for f in fields(CommSource)})


def request_from_args(args: argparse.Namespace) -> PredictRequest:
    """What the arguments ask, checked once (PredictRequest.to_argv() gives them back)."""
    return PredictRequest(
        phases=args.phases, net=args.net, comm=comm_source_from_args(args), strategy=args.strategy,
        bucket_bytes=parse_size(args.bucket, "--bucket") if args.bucket else None, servers=args.servers,
        workers=tuple(parse_int_list(args.workers, "--workers")) if args.workers else None, device=args.device,
        fuse_bytes=parse_size(args.fuse, "--fuse") if args.fuse else None, overlap=args.overlap,
        link_scale=args.link_scale, grad_dtype=args.grad_dtype, compress=args.compress, batch=args.batch,
        io_threads=args.io_threads)


# Without --phases, predict measures one serial iteration here: the composed run's communication
# thread calls MPI (see Iteration.MPI_THREAD_LEVEL).
MPI_THREAD_LEVEL = "serialized"


def _print_links() -> None:
    rows = [{"name": k, "gbs": v.gbs, "alpha": v.alpha_us, "source": v.source} for k, v in cluster.LINKS.items()]
    print_table("link presets (bandwidth per direction, 1e9 B/s)",
                [Column("preset", "name"), Column("GB/s", "gbs", fmt_float(3)), Column("alpha (us)", "alpha"),
                 Column("source", "source")], rows)


def run(args: argparse.Namespace) -> int:
    if args.list_links:
        if env.rank() == 0:
            _print_links()
        return 0
    if args.plot_workers is not None and not 1 <= args.plot_workers <= MAX_WORKERS:
        raise UsageError(f"--plot-workers must be from 1 to 1,000,000, got {args.plot_workers}")
    if args.plot_strategy and not args.plot_timeline:
        raise UsageError("--plot-strategy goes with --plot-timeline")
    outputs = {opt: OutputFile(path, opt) for opt, path in (
        ("--json", args.json), ("--csv", args.csv), ("--plot", args.plot),
        ("--plot-breakdown", args.plot_breakdown), ("--plot-timeline", args.plot_timeline)) if path}
    if any(opt.startswith("--plot") for opt in outputs):
        from ...study.plots import require_matplotlib

        require_matplotlib()
    request = request_from_args(args)
    ev = evaluate(request)
    # the cluster as priced (its inter-node link scaled by --link-scale), for every line that shows it
    two_level = ev.comm if isinstance(ev.comm, cluster.Cluster) else None
    env_info = env.collect()  # on every rank: it holds a collective (the node split), cached after
    if env.rank() != 0:
        return 0
    notes = (["strategies are stated assumptions, not exact reproductions of the frameworks"]
             + ([ev.comm.note] if isinstance(ev.comm, CommModel) and ev.comm.note else [])
             + ([f"{lv} link {k.name}: {k.source}" for lv, k in (("intra-node", two_level.intra),
                                                                 ("inter-node", two_level.inter))]
                + list(two_level.notes) if two_level else [])
             + [f"sharded messages priced by {how}" for how in ev.summary.get("sharded_pricing", [])])
    report = Report("predict", vars(args), env_info,
                    {"clock": "none", "region": "model prediction: nothing timed", "rank_reduction": "none"},
                    rows=ev.rows, summary=ev.summary, notes=notes)
    _print_prediction(request, ev, two_level)
    memory_summary = memory.annotate(ev.net, ev.strategies, ev.rows, ev.phases.batch, args)  # --memory-limit
    if memory_summary is not None:
        ev.summary["memory"] = memory_summary  # the report holds rows and summary: the JSON and CSV get them
        memory.print_memory(ev.rows, memory_summary)
    if "--json" in outputs:
        outputs["--json"].write(report.to_json())
    if "--csv" in outputs:
        outputs["--csv"].write(report.to_csv())
    _plot(args, request, ev, outputs)
    return 0


def _caption(request: PredictRequest, ev: Evaluation, two_level: cluster.Cluster | None) -> str:
    """The table's caption: the phases, the communication model and the what-ifs it prices."""
    what_if = [f"{k} {v}" for k, v in (("grad-dtype", request.grad_dtype if request.grad_dtype != "float32" else None),
                                       ("compress", request.compress), ("link-scale", request.link_scale),
                                       ("io-threads", request.io_threads), ("overlap", request.overlap),
                                       ("fuse", size_text(request.fuse_bytes) if request.fuse_bytes else None)) if v]
    if two_level:
        comm_text = (f"comm: two-level cluster, {two_level.describe()}, algorithm {two_level.algo} unless the "
                     f"strategy names one ({two_level.source}); ")
    else:
        comm = ev.comm
        assert isinstance(comm, CommModel)  # without a cluster, evaluate() made a CommModel
        comm_text = (f"comm {comm.algo} (formula {comm.formula}): alpha {comm.alpha_us:.3g} us, "
                     f"beta {comm.beta_us_per_byte:.3g} us/B, gamma {comm.gamma_us_per_byte:.3g} us/B "
                     f"({comm.source}); ")
    phases = ev.phases
    return (f"{ev.net.name}, batch {phases.batch} per worker; phases from {phases.source} "
            f"(t_f {phases.forward_us / 1e3:.2f} ms, t_b {phases.backward_us / 1e3:.2f} ms, "
            f"t_io {phases.io_us / 1e3:.2f}, t_h2d {phases.h2d_us / 1e3:.2f}, t_u {phases.update_us / 1e3:.2f} ms); "
            + comm_text
            + f"gradients {ev.net.param_bytes(ev.dtype_bytes):,} B {request.grad_dtype}; speedup = N t(1)/t(N); "
              "images/s in total" + (f"; what-if: {', '.join(what_if)}" if what_if else ""))


def _print_prediction(request: PredictRequest, ev: Evaluation, two_level: cluster.Cluster | None) -> None:
    """The table, the cluster's links and the strategies' assumptions."""
    # a cluster's table is headed by the shape it prices, not by the topology of this process
    shape = None if not two_level else (f"priced for {two_level.nodes} nodes x {two_level.per_node} workers per node"
                                        if two_level.nodes else f"priced for nodes of {two_level.per_node} workers")
    print_table(f"gdlbench predict: {ev.net.name}", PredictResult.COLUMNS, ev.rows,
                caption=_caption(request, ev, two_level), context=shape)
    console = stdout_console()
    if two_level:
        for level, k in (("intra-node", two_level.intra), ("inter-node", two_level.inter)):
            console.print(f"{level} link {escape(k.name)}: {k.gbs:.4g} GB/s, alpha {k.alpha_us:.3g} us. "
                          f"[dim]Source: {escape(k.source)}[/dim]", highlight=False)
        for note in two_level.notes:
            console.print(escape(note), highlight=False)
    used: dict[str, list[int]] = {}  # which contention priced the messages beside backward, per N (Phases.on_link)
    for r in ev.rows:
        if r.get("contention"):
            used.setdefault(r["contention"], []).append(r["workers"])
    for text, ns in used.items():
        console.print(f"contention beside backward at N = {', '.join(map(str, sorted(set(ns))))}: {escape(text)}",
                      highlight=False)
    console.print("strategies (stated assumptions, not exact reproductions of the frameworks):", highlight=False)
    for s in ev.strategies:
        console.print(f"  {escape(s.name)}: {escape(s.describe())}. {escape(s.assumptions)} "
                      f"[dim]Source: {escape(s.source)}[/dim]", highlight=False)
    for how in ev.summary.get("sharded_pricing", []):
        console.print(f"sharded messages priced by {escape(how)}", highlight=False)


def _plot(args: argparse.Namespace, request: PredictRequest, ev: Evaluation, outputs: dict[str, OutputFile]) -> None:
    """--plot, --plot-breakdown and --plot-timeline."""
    if not any(opt.startswith("--plot") for opt in outputs):
        return
    from ...study import plots

    net, batch = ev.net.name, ev.phases.batch
    if "--plot" in outputs:
        plots.plot_scaling(ev.rows, outputs["--plot"].path, metric=args.plot_metric,
                           title=f"{net}, batch {batch}/worker: predicted {args.plot_metric}")
    n_plot = args.plot_workers or max(ev.workers)
    if "--plot-breakdown" in outputs:
        preds = [ev.prediction(s, n_plot) for s in ev.strategies]
        plots.plot_breakdown(preds, outputs["--plot-breakdown"].path,
                             title=f"{net}, N = {n_plot}, batch {batch}: predicted phases")
    if "--plot-timeline" in outputs:
        names = [s.name for s in ev.strategies]
        pick = args.plot_strategy or ("wfbp" if "wfbp" in names else names[0])
        strategy = next((s for s in ev.strategies if s.name == pick), None) or replace(request, strategy=pick).strategies[0]
        plots.plot_timeline(ev.prediction(strategy, n_plot), outputs["--plot-timeline"].path,
                            title=f"{net}, {strategy.name}, N = {n_plot}, batch {batch}: one iteration")
    for opt in outputs:
        if opt.startswith("--plot"):
            print(f"wrote {outputs[opt].path}")
