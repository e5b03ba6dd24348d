"""A prediction as an object: a PredictRequest is what `gdlbench predict` is asked (validated once,
on construction; to_argv() is the command line that asks it again), and evaluate() prices it into
rows and a summary. The CLI parses its arguments into a request; `gdlbench study` builds requests
and their what-ifs with dataclasses.replace. The phases JSON shape is in gdlbench.model.phases's docstring."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..common import env
from ..common.errors import UsageError
from ..common.paths import read_json
from ..common.units import SIZE_CONVENTION, parse_bandwidth, size_text
from ..common.units import option_argv as _argv
from ..model import cluster
from ..model.cluster import (
    Cluster,  # (CommSource's field `cluster` hides the module in its class body)
)
from ..model.phases import (
    SHARD_COLLECTIVES,
    CommModel,
    Compression,
    Phases,
    Prediction,
    normalise_algo,
    predict_iteration,
    predict_scaling,
    sharded_pricing,
)
from ..model.strategies import OVERLAPS, Strategy, fused, get_strategies
from ..nets.network import Network, load_network
from ..primitives.collectives import SERVER_ALGOS
from .scaling import DEFAULT_WORKERS, comm_model_from, fit_files

GRAD_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
MAX_WORKERS = 1_000_000
Load = Callable[[str, str], Any]  # load(path, option): a JSON file named by an option


def option(name: str) -> str:
    """The command-line option of a request field: from_file -> --from, per_node -> --per-node."""
    return "--from" if name == "from_file" else "--" + name.replace("_", "-")


def _check_workers(workers: tuple[int, ...] | list[int]) -> None:
    if not workers or min(workers) < 1:
        raise UsageError(f"--workers: each worker count must be >= 1, got {workers}")
    if max(workers) > MAX_WORKERS:
        raise UsageError(f"--workers: at most 1,000,000, got {max(workers)}")


def link_scale(text: str | None) -> tuple[float, float]:
    """--link-scale BW[:LAT] as (bandwidth factor, latency factor)."""
    if text is None:
        return 1.0, 1.0
    bw, _, lat = str(text).partition(":")
    try:
        return float(bw), float(lat) if lat else 1.0
    except ValueError:
        raise UsageError(f"--link-scale: expected BW[:LAT], e.g. 2 or 1:0.5, got {text!r}") from None


def _link(text: str, level: str) -> cluster.Link:
    if ":" in text:
        try:
            alpha, gbs = (float(x) for x in text.split(":", 1))
        except ValueError:
            raise UsageError(f"--{level}: expected a preset name or ALPHA_US:GBS, got {text!r}") from None
        return cluster.link({"name": text, "alpha_us": alpha, "gbs": gbs, "source": "command line"}, f"--{level}")
    return cluster.link(text, f"--{level}")


@dataclass(frozen=True)
class CommSource:
    """Where the communication model comes from: a saved `allreduce --fit` report (from_file, algo
    naming its fit); the formula `algo` with alpha (us per step) and beta (us per byte) or a
    bandwidth (GB/s, or with a unit); a two-level cluster (a cluster file, or the shape and links);
    nothing given: the phases file's own fit. The fields are predict's options of the same names."""

    from_file: str | None = None
    algo: str | None = None
    alpha: float | None = None
    beta: float | None = None
    bandwidth: str | None = None
    gamma: float | None = None
    cluster: str | None = None
    nodes: int | None = None
    per_node: int | None = None
    intra: str | None = None
    inter: str | None = None
    links_per_node: int | None = None

    def __post_init__(self) -> None:
        shape = [o for o in ("nodes", "per_node", "intra", "inter", "links_per_node") if getattr(self, o) is not None]
        if self.bandwidth is not None:
            parse_bandwidth(self.bandwidth)
        if not self.cluster and not shape:
            return
        if self.from_file or self.alpha is not None or self.beta is not None or self.bandwidth is not None:
            raise UsageError("give a cluster (--cluster, or --per-node/--intra/--inter) or --from/--alpha, not both")
        if self.cluster and shape:
            raise UsageError(f"--cluster FILE holds the shape and links; drop {option(shape[0])}")
        missing = [o for o in ("per_node", "intra", "inter") if getattr(self, o) is None]
        if not self.cluster and missing:
            raise UsageError(f"a cluster needs --per-node, --intra and --inter (missing {option(missing[0])})")
        if self.algo and normalise_algo(self.algo) in SERVER_ALGOS:
            raise UsageError("--algo: ps is a strategy (--strategy ps/mxnet/tensorflow), not an all-reduce algorithm")

    def two_level(self) -> Cluster | None:
        """The two-level cluster of the cluster file, or of the shape and links; None when neither."""
        if self.cluster:
            c = cluster.load_cluster(self.cluster)
        elif self.per_node is not None and self.intra is not None and self.inter is not None:
            c = Cluster(self.per_node, _link(self.intra, "intra"), _link(self.inter, "inter"),
                                1 if self.links_per_node is None else self.links_per_node, self.nodes,
                                source="command line")
        else:
            return None
        return replace(c, algo=normalise_algo(self.algo)) if self.algo else c

    def comm_model(self, fit_in_phases: dict[str, Any] | list[Any] | None = None, load: Load = read_json) -> CommModel:
        """The one-level model: the fit file's, the formula's, or else the phases file's fit."""
        return comm_model_from(algo=self.algo, alpha_us=self.alpha, beta_us_per_byte=self.beta,
                               bandwidth=self.bandwidth, gamma_us_per_byte=self.gamma, from_file=self.from_file,
                               fit_in_phases=fit_in_phases, load=load)

    def to_argv(self) -> list[str]:
        return _argv([(option(f.name), getattr(self, f.name)) for f in fields(self)])


@dataclass(frozen=True)
class PredictRequest:
    """What `gdlbench predict` prices: the measured phases (a file, or measured here on `net` at
    `batch` on `device`), the strategies (presets, a list or a strategy file; bucket_bytes and
    servers override the presets that fuse / use servers), the worker counts (None: predict's
    default, or the cluster's steps), the communication model, and the what-ifs: fuse_bytes (every
    strategy fused into buckets of that size, renamed NAME-bucket-SIZE), overlap, link_scale,
    grad_dtype, compress, batch (with a phases file: scaled to it) and io_threads."""

    phases: str | None = None
    net: str | None = None
    comm: CommSource = CommSource()
    strategy: str = "all"
    bucket_bytes: int | None = None
    servers: int | None = None
    workers: tuple[int, ...] | None = None
    device: str = "auto"
    fuse_bytes: int | None = None
    overlap: str | None = None
    link_scale: str | None = None
    grad_dtype: str = "float32"
    compress: str | None = None
    batch: int | None = None
    io_threads: int | None = None
    # the strategies as priced (the what-ifs on them applied), resolved on construction
    strategies: tuple[Strategy, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.workers is not None:
            _check_workers(self.workers)
        if not self.phases and not self.net:
            raise UsageError("give --phases FILE (a saved `gdlbench iteration --json` report) or --net NAME "
                             "to measure the phases on the spot")
        for name in ("batch", "io_threads", "fuse_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{option(name.removesuffix('_bytes'))} must be >= 1, got {value}")
        if self.servers is not None and not 1 <= self.servers <= MAX_WORKERS:
            raise UsageError(f"--servers must be from 1 to 1,000,000, got {self.servers}")
        if self.grad_dtype not in GRAD_DTYPE_BYTES:
            raise UsageError(f"--grad-dtype: one of {', '.join(GRAD_DTYPE_BYTES)}, got {self.grad_dtype!r}")
        if self.overlap is not None and self.overlap not in OVERLAPS:
            raise UsageError(f"--overlap: one of {', '.join(OVERLAPS)}, got {self.overlap!r}")
        link_scale(self.link_scale)
        self.compression()
        strategies = get_strategies(self.strategy, bucket_bytes=self.bucket_bytes, servers=self.servers)
        if self.fuse_bytes is not None:
            strategies = [fused(s, self.fuse_bytes) for s in strategies]
        if self.overlap:
            strategies = [replace(s, overlap=self.overlap) for s in strategies]
        object.__setattr__(self, "strategies", tuple(strategies))

    def compression(self) -> Compression | None:
        return Compression.parse(self.compress) if self.compress else None

    def to_argv(self) -> list[str]:
        """The arguments of `gdlbench predict` that make this request again."""
        return (_argv([("--phases", self.phases), ("--net", self.net)]) + self.comm.to_argv()
                + _argv([("--strategy", self.strategy),
                         ("--bucket", None if self.bucket_bytes is None else size_text(self.bucket_bytes)),
                         ("--servers", self.servers),
                         ("--workers", None if self.workers is None else ",".join(map(str, self.workers))),
                         ("--device", None if self.device == "auto" else self.device),
                         ("--fuse", None if self.fuse_bytes is None else size_text(self.fuse_bytes)),
                         ("--overlap", self.overlap), ("--link-scale", self.link_scale),
                         ("--grad-dtype", None if self.grad_dtype == "float32" else self.grad_dtype),
                         ("--compress", self.compress), ("--batch", self.batch), ("--io-threads", self.io_threads)]))

    def command(self) -> str:
        import shlex

        return "gdlbench predict " + shlex.join(self.to_argv())


@dataclass
class Evaluation:
    """What a request predicts, before anything is printed or written."""

    net: Network
    phases: Phases
    comm: CommModel | Cluster  # the cluster (scaled by the link what-if) when predicting one
    strategies: list[Strategy]
    workers: list[int]
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    dtype_bytes: int
    compress: Compression | None

    def prediction(self, strategy: Strategy, workers: int) -> Prediction:
        return predict_iteration(self.net, self.phases, self.comm, strategy, workers, self.dtype_bytes,
                                 compress=self.compress)


def _cluster_workers(c: Cluster) -> list[int]:
    """1, G, 2G, 4G, ... up to the cluster's nodes (and the whole cluster)."""
    out, k = [1, c.per_node], 2
    while c.nodes and k < c.nodes:
        out.append(k * c.per_node)
        k *= 2
    if c.nodes:
        out.append(c.nodes * c.per_node)
    return sorted(set(out))


def _measure_on_the_spot(request: PredictRequest) -> Phases:
    """The phases of one serial iteration measured here, on this rank's device and threads."""
    import sys

    from ..composed.iteration import Iteration

    def say(msg: str) -> None:
        if env.rank() == 0:
            print(f"gdlbench predict: measuring the phases: {msg}", file=sys.stderr, flush=True)

    assert request.net, "a request without phases names its net (checked on construction)"
    result = Iteration(request.net, request.batch, request.device, "serial", iters=3, warmup=1,
                       progress=say).measure()
    phases = result.phases_model()
    phases.source = f"measured on the spot ({result.device}, {result.threads} threads, batch {result.batch})"
    return phases


def _with_contention(phases: Phases, comm: CommModel | Cluster, fit_file: str | None, load: Load) -> Phases:
    """The phases with the contention the --from report measured beside compute (allreduce
    --backend gloo --beside-compute) on its link, where the phases have none measured on that
    link (none at all, or measured on another: Phases.on_link)."""
    if not fit_file or isinstance(comm, Cluster):
        return phases
    if phases.measured() and phases.contention_link in (None, comm.link):
        return phases
    found = None
    for path in fit_files(fit_file):  # (with --from's rs/ag fits: the all-reduce's report holds it)
        doc = load(path, "--from")
        found = found or (doc.get("summary", {}).get("contention") if isinstance(doc, dict) and isinstance(
            doc.get("summary"), dict) else None)
    if not isinstance(found, dict):
        return phases
    return replace(phases, compute_slowdown=found.get("compute_slowdown"), comm_slowdown=found.get("comm_slowdown"),
                   memory_slowdown=found.get("memory_slowdown"), strategy_slowdowns={}, contention_link=comm.link,
                   source=f"{phases.source}; contention beside compute from {fit_file}")


def _phases(request: PredictRequest, load: Load) -> tuple[Phases, dict[str, Any]]:
    """The phases (the batch and I/O-thread what-ifs applied) and the summary of their file ({})."""
    if request.phases:
        doc = load(request.phases, "--phases")
        phases = Phases.from_dict(doc, source=request.phases)
        if request.batch is not None:
            phases = phases.with_batch(request.batch)
    else:
        doc = {}
        phases = _measure_on_the_spot(request)
    if request.io_threads is not None:
        phases = phases.with_io_threads(request.io_threads)
    summary = doc.get("summary")
    return phases, summary if isinstance(summary, dict) else {}


def _network(request: PredictRequest, phases: Phases, phases_summary: dict[str, Any]) -> Network:
    """The network the phases were measured on, checked against them."""
    net_name = request.net or phases.net
    if not net_name:
        raise UsageError(f"--net is needed: {request.phases} does not name its network (args.net)")
    traced = phases_summary.get("network")  # import-trace: the traced job's gradients as a network
    net = load_network(traced if isinstance(traced, dict) and not request.net else net_name)
    if phases.net and phases.net != net.name:
        raise UsageError(f"--phases {request.phases} was measured on {phases.net}, not {net.name}")
    unknown = sorted((set(phases.layer_forward_us) | set(phases.layer_backward_us)) - {lay.name for lay in net.layers})
    if unknown:
        raise UsageError(f"--phases {request.phases}: layers not in {net.name}: {', '.join(unknown[:5])}"
                         + (" ..." if len(unknown) > 5 else ""))
    return net


def _summary(request: PredictRequest, ev: Evaluation) -> dict[str, Any]:
    net, phases, compress = ev.net, ev.phases, ev.compress
    bw, lat = link_scale(request.link_scale)
    summary = {
        "net": net.name, "params": net.params, "gradient_bytes": net.param_bytes(ev.dtype_bytes),
        "batch": phases.batch, "phases": phases.to_dict(), "comm_model": ev.comm.to_dict(), "workers": ev.workers,
        "strategies": [s.to_dict() for s in ev.strategies],
        "what_if": {"grad_dtype": request.grad_dtype, "compress": compress.to_dict() if compress else None,
                    "link_scale": {"bandwidth": bw, "latency": lat},
                    "batch": request.batch if request.phases else None,
                    "io_threads": request.io_threads, "overlap": request.overlap},
        "model": "docs/model.md (gdlbench.model.phases): serial, prefetch, WFBP recurrence, fusion, PS",
        "speedup": "S(N) = N t_iter(1) / t_iter(N), same strategy, weak scaling (fixed batch per worker)",
        "size_convention": SIZE_CONVENTION,
    }
    if any(s.shard for s in ev.strategies):
        summary["sharded_pricing"] = [sharded_pricing(ev.comm, c) for c in SHARD_COLLECTIVES]
    if phases.comm_us is not None:
        summary["measured_comm_us"] = {"workers": phases.workers, "time_us": phases.comm_us}
    return summary


def evaluate(request: PredictRequest, load: Load = read_json) -> Evaluation:
    """The rows and summary of `gdlbench predict` for this request. load(path, option) reads a
    JSON file (gdlbench study hands in a cached reader)."""
    two_level = request.comm.two_level()
    workers = (list(request.workers) if request.workers else
               _cluster_workers(two_level) if two_level and two_level.nodes else
               list(DEFAULT_WORKERS))
    _check_workers(workers)  # a cluster's steps reach its size
    phases, phases_summary = _phases(request, load)
    net = _network(request, phases, phases_summary)
    fit = phases_summary.get("fit")
    comm: CommModel | Cluster
    if two_level:
        comm = two_level
    else:
        comm = request.comm.comm_model(fit if isinstance(fit, (dict, list)) else None, load)
        src = request.comm
        if not src.from_file and src.alpha is None and src.beta is None and src.bandwidth is None:
            comm = replace(comm, link=phases.contention_link)  # the phases file's own fit: its run's link
    bw, lat = link_scale(request.link_scale)
    comm = comm.scaled(bandwidth=bw, latency=lat)  # on a cluster: its inter-node link; the same link, faster
    phases = _with_contention(phases, comm, request.comm.from_file, load)
    dtype_bytes = GRAD_DTYPE_BYTES[request.grad_dtype]
    compress = request.compression()
    strategies = list(request.strategies)
    rows = predict_scaling(net, phases, comm, strategies, workers, dtype_bytes, compress=compress)
    ev = Evaluation(net, phases, comm, strategies, workers, rows, {}, dtype_bytes, compress)
    ev.summary = _summary(request, ev)
    return ev
