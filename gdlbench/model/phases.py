"""The performance model of one synchronous data-parallel SGD iteration (docs/model.md).

Phases (microseconds, per worker, batch b): t_io, t_h2d, t_f = sum t_f(l), t_b = sum t_b(l),
t_c (gradient aggregation, from a communication model), t_u.

- serial:    t_iter = t_io + t_h2d + t_f + t_b + t_c + t_u
- prefetch:  the t_io term becomes max(r_io, t_io - (t_f + t_b + t_c + t_u)), r_io what the read
             costs the compute beside it: measured (Phases.read_beside_us; gdlbench iteration's
             read-beside round) or (1 - overlap_efficiency) t_io
- WFBP:      backward runs from the last layer down; the gradient of layer l is ready at
             r_l = sum_{j >= l} t_b(j); its message starts at s_l = max(r_l, e_prev) and ends at
             e_l = s_l + t_c(m_l); the iteration pays t_f + max(t_b, e_last) + t_u.
- contention: while a message and a backward layer run side by side, the layer runs s_c times
             and the message s_m times slower than alone (schedule_shared); s_c and s_m are
             measured (Phases.compute_slowdown, comm_slowdown; gdlbench iteration's contention
             round) or 2 - overlap_efficiency (1: own resources, 2: the same cores half and half);
             measured ones price messages over the link they were measured on only (Phases.on_link).
- fusion:    consecutive gradients merge into buckets of >= B bytes, a bucket ready with its last.
- no overlap: the same recurrence with every r_l = t_b (all messages after backward).
- sharded (ZeRO-1/2/3, FSDP; strategies.SHARDED): reduce-scatters of the gradients and
             all-gathers of the parameters (plan_sharded), on a communication lane beside the
             compute lane, the update of 1/N of the parameters (predict_sharded, schedule_lanes).

Communication of one message of m bytes among N workers: the algorithm's formula in
costmodel.COSTS (alpha us per step, beta us per byte on the link, gamma us per byte reduced);
N = 1 costs nothing (no aggregation on one worker).

Throughput = N b / t_iter; speedup S(N) = N t_iter(1) / t_iter(N) (weak scaling); E = S / N.

The phases JSON that `Phases.load` reads (what `gdlbench iteration --json` writes):
    {"args": {"net": "resnet50", "batch": 32, ...},                   # "batch" here, or
     "summary": {"batch": 32, "fit": {...}},                           # here, or in a row
     "env": {"world_size": 2},
     "rows": [{"phase": "io" | "h2d" | "forward" | "backward" | "update" | "comm",
               "time_us": 1234.5},                                     # one row per phase
              {"layer": "conv1", "phase": "forward" | "backward", "time_us": 12.3}, ...]}
Rows with a "layer" are per-layer times (per-layer comm rows are ignored: the model costs the
messages itself, or takes measured ones through predict_iteration's message_costs_us); rows
without are the phase totals. When a phase has
several rows (one per strategy, say), the first one counts. Missing phases count 0, except
forward and backward: at least the totals or the per-layer rows must be there. Per-layer
backward times give the shape of the gradients' ready times and are scaled to the backward total;
missing per-layer times are filled in proportion to the layers' forward multiply-adds.

A saved communication fit (`CommModel.from_dict`, `load_comm_model`) may be any of
    {"algo": "ring", "alpha_us": a, "beta_us_per_byte": b, "gamma_us_per_byte": g}   (a fit's to_dict())
    {"summary": {"fit": {"ring": {"alpha_us": ..., ...}, "tree": {...}}}}            (an allreduce JSON)
    {"summary": {"fit": {"algo": "ring", "alpha_us": ...}}} or {"summary": {"fit": [{...}, ...]}}
gamma defaults to 0; *_s / *_s_per_byte fields (seconds) are accepted too. A CommModel's
to_dict() may hold "collectives": {"reduce_scatter": {...}, "allgather": {...}}, the fits of the
sharded strategies' collectives (the same fields each); `load_comm_model` takes such fits from
`gdlbench reduce_scatter --fit` / `allgather --fit` reports beside the all-reduce's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from ..common.errors import UsageError
from ..common.paths import read_json
from ..nets.network import Network, load_network
from ..primitives import costmodel
from .strategies import Strategy

PHASES = ("io", "h2d", "forward", "backward", "update", "comm")
SHARD_COLLECTIVES = ("reduce_scatter", "allgather")  # what sharded strategies send (plan_sharded)


def normalise_algo(algo: str) -> str:
    """The cost model's name for an all-reduce algorithm (costmodel.canonical, for --algo)."""
    try:
        return costmodel.canonical(algo)
    except UsageError:
        raise UsageError(f"--algo: unknown algorithm {algo!r} ({', '.join(costmodel.ALLREDUCE_ALGOS)})") from None



def _section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    """doc[key] where it is an object, else {} (a report's optional sections)."""
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def measured_link(doc: Any) -> str | None:
    """The link a report's messages crossed, from its env: 'intra-node link of CPU' (one node:
    the node's shared memory or its devices' links) or 'inter-node link of CPU' (several nodes:
    the network between them); None where the report does not say (no env.topology.nodes)."""
    env = _section(doc, "env") if isinstance(doc, dict) else {}
    nodes = _section(env, "topology").get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        return None
    return link_at_level(nodes > 1, env.get("cpu"))


def _contention_link(doc: Any, contention: dict[str, Any], source: str) -> str | None:
    """The link a phases file's contention was measured on: summary.contention.link, else its env's."""
    given = contention.get("link")
    if not isinstance(given, (str, type(None))):
        raise UsageError(f"{source}: summary.contention.link must be the name of a link, got {given!r}")
    return given or measured_link(doc)


def link_at_level(inter: bool, machine: Any) -> str:
    """The name of a measured link: its level and the machine (env.cpu) it was measured on."""
    return f"{'inter' if inter else 'intra'}-node link of {machine or 'an unnamed machine'}"


@dataclass(frozen=True)
class CommModel:
    """alpha-beta(-gamma) parameters of one algorithm; the same fields as
    gdlbench.primitives.collectives.AlphaBetaFit.to_dict(). `formula` is the cost model used: the algorithm's
    own, or ring for a library algorithm without one (MPICH and NCCL use ring-like
    reduce-scatter + all-gather for large messages), as `note` says."""

    algo: str
    alpha_us: float
    beta_us_per_byte: float
    gamma_us_per_byte: float = 0.0
    source: str = ""
    formula: str = ""
    note: str = ""
    # Piecewise fits (AlphaBetaFit.regimes): ((from_bytes, alpha_us, beta_us_per_byte), ...),
    # ascending; a message uses the last regime starting at or below its size. Empty: one regime.
    regimes: tuple[tuple[int, float, float], ...] = ()
    # The fits of the sharded strategies' collectives measured themselves (`gdlbench
    # reduce_scatter --fit`, `allgather --fit`), each a CommModel whose algo is its collective
    # (SHARD_COLLECTIVES); a sharded message is priced by its collective's fit where there is one,
    # else by that collective's formula with this fit's alpha and beta (sharded_message_us).
    collective_fits: tuple[CommModel, ...] = ()
    # the link it was measured on (measured_link; None: a formula or a file that does not say)
    link: str | None = None
    # the thread its sweep's timed loop ran on (`--on`: main or comm-thread; None: the file does not say)
    timed_on: str | None = None

    def link_at(self, n: int) -> str | None:
        """The link n workers' messages cross: this model's at every n."""
        return self.link

    def params_for(self, m: float) -> tuple[float, float]:
        """(alpha_us, beta_us_per_byte) for a message of m bytes."""
        return costmodel.regime_params(self.alpha_us, self.beta_us_per_byte, self.regimes, m)

    def fit_for(self, collective: str) -> CommModel | None:
        """The fit of `collective` measured itself, or None."""
        return next((f for f in self.collective_fits if f.algo == collective), None)

    def with_fits(self, *fits: CommModel) -> CommModel:
        """This model carrying `fits` (reduce_scatter, allgather) beside the ones it has; a
        collective given again replaces its fit."""
        names = {f.algo for f in fits}
        return replace(self, collective_fits=(*(f for f in self.collective_fits if f.algo not in names), *fits))

    def __post_init__(self) -> None:
        for name in ("alpha_us", "beta_us_per_byte", "gamma_us_per_byte"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise UsageError(f"communication model: {name} must be a finite number >= 0, got {v!r}")
        for f in self.collective_fits:
            if not isinstance(f, CommModel) or f.algo not in SHARD_COLLECTIVES or f.collective_fits:
                raise UsageError(f"communication model: collective fits are {' and '.join(SHARD_COLLECTIVES)} "
                                 f"fits without fits of their own, got {getattr(f, 'algo', f)!r}")
        if len({f.algo for f in self.collective_fits}) < len(self.collective_fits):
            raise UsageError("communication model: two fits of the same collective")
        if not self.formula:
            known = costmodel.known(self.algo)
            object.__setattr__(self, "formula", costmodel.canonical(self.algo) if known else "ring")
            if not known and not self.note:
                object.__setattr__(self, "note", f"no formula for algorithm {self.algo!r}: ring's used")

    @classmethod
    def from_bandwidth(cls, algo: str, alpha_us: float, gbs: float, gamma_gbs: float | None = None,
                       source: str = "") -> CommModel:
        """beta from a link bandwidth in GB/s (1e9 bytes/s); gamma from a reduction bandwidth."""
        if gbs <= 0 or (gamma_gbs is not None and gamma_gbs <= 0):
            raise UsageError("bandwidths must be > 0")
        gamma = 0.0 if gamma_gbs is None else 1e6 / (gamma_gbs * 1e9)
        return cls(algo, alpha_us, 1e6 / (gbs * 1e9), gamma, source)

    def scaled(self, bandwidth: float = 1.0, latency: float = 1.0) -> CommModel:
        """What-if: every link bandwidth times `bandwidth` (beta divided), every latency times
        `latency` (alpha multiplied), in every regime; the reduction (gamma) unchanged."""
        alpha, beta, regimes = costmodel.scale_link(self.alpha_us, self.beta_us_per_byte, self.regimes,
                                                    bandwidth, latency)
        if bandwidth == 1 and latency == 1:
            return self
        note = f"links scaled: bandwidth x {bandwidth:g}, latency x {latency:g}"
        return replace(self, alpha_us=alpha, beta_us_per_byte=beta, regimes=regimes,
                       note="; ".join(x for x in (self.note, note) if x),
                       collective_fits=tuple(f.scaled(bandwidth, latency) for f in self.collective_fits))

    def predict_us(self, m: float, n: int, servers: int | None = None) -> float:
        return self.allreduce_us(self.formula, m, n, servers)

    # What predict_iteration asks of a communication model (gdlbench.model.cluster.Cluster answers the same):
    # the costmodel entry's formula with this fit's parameters (the regime of size m).
    def allreduce_us(self, algo: str, m: float, n: int, servers: int | None = None) -> float:
        a, b = self.params_for(m)
        return costmodel.time_us(algo, m, n, a, b, self.gamma_us_per_byte, servers)

    def push_us(self, m: float, n: int, servers: int) -> float:
        return self.allreduce_us("ps_push", m, n, servers)

    def pull_us(self, m: float, n: int, servers: int) -> float:
        return self.allreduce_us("ps_pull", m, n, servers)

    def to_dict(self) -> dict[str, Any]:
        return {"algo": self.algo, "alpha_us": self.alpha_us, "beta_us_per_byte": self.beta_us_per_byte,
                "gamma_us_per_byte": self.gamma_us_per_byte, "formula": self.formula,
                "link_gbs": (1e6 / self.beta_us_per_byte / 1e9) if self.beta_us_per_byte else None,
                "source": self.source, "note": self.note, **({"link": self.link} if self.link else {}),
                **({"on": self.timed_on} if self.timed_on else {}),
                "regimes": costmodel.regimes_to_json(self.regimes),
                **({"collectives": {f.algo: f.to_dict() for f in self.collective_fits}} if self.collective_fits else {})}

    @classmethod
    def from_dict(cls, doc: Any, algo: str | None = None, source: str = "") -> CommModel:
        """A fit's to_dict(), or a saved allreduce report holding summary.fit (module docstring)."""
        fit = _find_fit(doc, algo, source or "communication fit")
        if hasattr(fit, "to_dict"):
            fit = fit.to_dict()

        def get(name: str, default: float | None = None) -> float:
            if default is not None and fit.get(name + "_us_per_byte", 0) is None:
                return default  # e.g. gamma not separated from beta in the fit
            if name + "_us" in fit or name + "_us_per_byte" in fit:
                return float(fit.get(name + "_us", fit.get(name + "_us_per_byte")))
            if name + "_s" in fit or name + "_s_per_byte" in fit:
                return float(fit.get(name + "_s", fit.get(name + "_s_per_byte"))) * 1e6
            if default is None:
                raise UsageError(f"{source or 'communication fit'}: no {name}_us in {sorted(fit)}")
            return default

        try:
            regimes = costmodel.regimes_from_json(fit.get("regimes"))
            own = fit.get("collectives") or {}  # a saved CommModel's to_dict(): the collectives' own fits
            if not isinstance(own, dict):
                raise TypeError("collectives must be an object")
            fits = tuple(cls.from_dict(v | {"algo": k}) for k, v in own.items())  # (the key names it)
            return cls(str(fit.get("algo") or algo or "ring"), get("alpha"), get("beta"), get("gamma", 0.0),
                       source=source or str(fit.get("source") or ""), note=str(fit.get("note") or ""),
                       regimes=regimes, collective_fits=fits,
                       link=measured_link(doc) or (fit["link"] if isinstance(fit.get("link"), str) else None),
                       timed_on=fit["on"] if isinstance(fit.get("on"), str) else None)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            if isinstance(exc, UsageError):
                raise
            raise UsageError(f"{source or 'communication fit'}: cannot read the fit: {exc}") from None


def _find_fit(doc: Any, algo: str | None, source: str) -> Any:
    if hasattr(doc, "to_dict") and not isinstance(doc, dict):
        return doc
    if not isinstance(doc, dict):
        raise UsageError(f"{source}: expected a JSON object with a fit")
    if "alpha_us" in doc or "alpha_s" in doc:
        return doc
    fit = doc.get("summary", {}).get("fit") if isinstance(doc.get("summary"), dict) else None
    if fit is None:
        fit = doc.get("fit")
    if fit is None:
        raise UsageError(f"{source}: no summary.fit (run `gdlbench allreduce` with its fit, or give --alpha/--beta)")
    if isinstance(fit, list):  # one per algorithm: the in-place fit where both modes ran (as gradients are reduced)
        items = sorted((f for f in fit if isinstance(f, dict)), key=lambda f: f.get("inplace") is True)
        fit = {str(f.get("algo", i)): f for i, f in enumerate(items)}
    if not isinstance(fit, dict):
        raise UsageError(f"{source}: summary.fit is not an object")
    if "alpha_us" in fit or "alpha_s" in fit:
        return fit
    fits = {k: v for k, v in fit.items() if isinstance(v, dict)}
    if not fits:
        raise UsageError(f"{source}: summary.fit holds no fits")
    if algo is not None:
        for k, v in fits.items():
            if k == algo or (costmodel.known(k) and costmodel.known(algo)
                             and costmodel.canonical(k) == costmodel.canonical(algo)):
                return {"algo": k} | v
        raise UsageError(f"{source}: no fit for algorithm {algo!r} (there are: {', '.join(fits)})")
    if len(fits) == 1:
        k, v = next(iter(fits.items()))
        return {"algo": k} | v
    if "ring" in fits:
        return {"algo": "ring"} | fits["ring"]
    raise UsageError(f"{source}: several fits ({', '.join(fits)}): choose one with --algo")


def _shard_collective(doc: Any) -> str | None:
    """'reduce_scatter' or 'allgather' where `doc` is that collective's fit (a `gdlbench
    reduce_scatter --fit --json` report, say), else None."""
    try:
        fit = _find_fit(doc, None, "")
    except UsageError:
        return None
    algo = fit.get("algo") if isinstance(fit, dict) else getattr(fit, "algo", None)
    return algo if algo in SHARD_COLLECTIVES else None


def comm_model_of(docs: Sequence[tuple[str, Any]], algo: str | None = None) -> CommModel:
    """One model from saved fits, each (source, document): one all-reduce fit (`algo` names it,
    as in CommModel.from_dict) and any reduce_scatter and allgather fits, told apart by the
    collective they fit, in any order."""
    main: CommModel | None = None
    fits: list[CommModel] = []
    for source, doc in docs:
        collective = _shard_collective(doc)
        if collective is not None:
            if any(f.algo == collective for f in fits):
                raise UsageError(f"{source}: a second {collective} fit (give one)")
            fits.append(CommModel.from_dict(doc, collective, source=source))
        elif main is not None:
            raise UsageError(f"{source}: a second all-reduce fit (after {main.source}): give one, "
                             "beside the reduce_scatter and allgather fits")
        else:
            main = CommModel.from_dict(doc, algo, source=source)
    if main is None:
        raise UsageError(f"{', '.join(s for s, _ in docs)}: no all-reduce fit (the reduce_scatter and allgather "
                         "fits go beside one: the other strategies' messages are all-reduces)")
    return main.with_fits(*fits)


def load_comm_model(path: str | Path | Sequence[str | Path], algo: str | None = None) -> CommModel:
    """The fit from a saved `gdlbench allreduce --json` file (or a fit's own JSON, or a saved
    CommModel); several paths: that one and the `reduce_scatter --fit` and `allgather --fit`
    reports beside it (comm_model_of)."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    return comm_model_of([(str(p), read_json(p, "--from")) for p in paths], algo)


def sharded_message_us(comm: CommModel | Any, collective: str, m: float, n: int) -> float:
    """A sharded strategy's message of m bytes (the whole buffer) among n workers: its
    collective's own fit where `comm` carries one (CommModel.collective_fits), else its formula
    with comm's alpha and beta (a cluster: on its links)."""
    own = comm.fit_for(collective) if isinstance(comm, CommModel) else None
    return float((own or comm).allreduce_us(collective, m, n))


def _timed_on(fit: CommModel) -> str:
    """Where a fit's sweep was timed, for predict's statement: the composed iteration sends its
    messages from its communication thread (`--on comm-thread` times them as it does)."""
    if fit.timed_on == "comm-thread":
        return "; timed on a communication thread, as the iteration sends"
    if fit.timed_on == "main":
        return "; timed on the main thread: the iteration sends from its communication thread (--on comm-thread)"
    return ""


def sharded_pricing(comm: CommModel | Any, collective: str) -> str:
    """How sharded_message_us prices `collective` with `comm` (what predict states)."""
    own = comm.fit_for(collective) if isinstance(comm, CommModel) else None
    if own is not None:
        return f"{collective}: its own fit ({own.source or 'given'}{_timed_on(own)})"
    if not isinstance(comm, CommModel):
        return f"{collective}: its formula ({costmodel.formula(collective)}) on the cluster's links"
    return (f"{collective}: no fit of its own, its formula ({costmodel.formula(collective)}) with the "
            f"{comm.algo} fit's alpha and beta")


# ---------------------------------------------------------------------------------------------
# Measured phases


def _time(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{what}: time_us must be a number >= 0, got {value!r}")
    return float(value)


@dataclass
class Phases:
    """Per-worker phase times in microseconds at batch `batch` (module docstring)."""

    batch: int
    forward_us: float
    backward_us: float
    io_us: float = 0.0
    h2d_us: float = 0.0
    update_us: float = 0.0
    comm_us: float | None = None  # measured at `workers`, for reference; the model predicts t_c
    layer_forward_us: dict[str, float] = field(default_factory=dict)
    layer_backward_us: dict[str, float] = field(default_factory=dict)
    net: str | None = None
    workers: int = 1
    source: str = ""
    # How much of the work overlapped with compute (WFBP communication, prefetched I/O) runs on
    # resources of its own: 1 (a GPU's copy engines and NCCL, another machine's disks) hides it
    # all; 0 (a CPU whose compute threads already fill every core) hides none of it, since the
    # overlapped work then needs the same cores.
    overlap_efficiency: float = 1.0
    io_threads: int | None = None  # the threads that read and decoded the batch (t_io)
    # Contention measured on this machine (Iteration's contention round): how much slower backward
    # runs while messages go beside it, and how much slower the messages go, as ratios >= 1 of
    # their times alone. None: 2 - overlap_efficiency for both (1: each on resources of its own;
    # 2: the two share the same cores half and half).
    compute_slowdown: float | None = None
    comm_slowdown: float | None = None
    # The same, measured with one strategy's own messages posted as it posts them: (backward,
    # messages) per strategy name; a strategy not here takes the pair above.
    strategy_slowdowns: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Memory-bound compute beside the messages (gdlbench.primitives.gloo.contention), and per backward layer
    # the share of its time in memory-bound operators (an imported trace's): such a layer runs
    # (1 - share) compute_slowdown + share memory_slowdown times slower. None / absent: share 0.
    memory_slowdown: float | None = None
    layer_memory_share: dict[str, float] = field(default_factory=dict)
    # The compute time a read on the prefetch thread costs while it runs beside compute (Iteration's
    # read-beside round), in us. None: (1 - overlap_efficiency) t_io.
    read_beside_us: float | None = None
    # The link the contention above was measured on (measured_link: 'intra-node link of CPU'):
    # it prices messages over that link only (on_link). None: not recorded, applied to any link.
    contention_link: str | None = None
    # Which contention prices the messages, once on_link has chosen (docs/model.md, "Contention
    # belongs to its link"); "" before.
    contention_used: str = ""

    def contention(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compute_slowdown": self.compute_slowdown, "comm_slowdown": self.comm_slowdown,
               "read_beside_us": self.read_beside_us, "link": self.contention_link}
        if self.contention_used:
            out["used"] = self.contention_used
        if self.memory_slowdown is not None:
            out["memory_slowdown"] = self.memory_slowdown
        if self.strategy_slowdowns:
            out["by_strategy"] = {name: {"compute_slowdown": c, "comm_slowdown": m}
                                  for name, (c, m) in self.strategy_slowdowns.items()}
        return out

    def slowdowns(self, strategy: str | None = None) -> tuple[float, float]:
        """(backward, messages) slowdown while both run: those measured with `strategy`'s own
        messages when there are, else the run's pair, else as overlap_efficiency implies."""
        if strategy in self.strategy_slowdowns:
            return self.strategy_slowdowns[strategy]
        default = 2.0 - self.overlap_efficiency
        return (default if self.compute_slowdown is None else self.compute_slowdown,
                default if self.comm_slowdown is None else self.comm_slowdown)

    def measured(self) -> bool:
        return self.compute_slowdown is not None or self.comm_slowdown is not None or bool(self.strategy_slowdowns)

    def on_link(self, link: str | None) -> Phases:
        """These phases with the contention that prices messages over `link` (None: a link not
        measured: a formula, a preset, a hand-made cluster). The measured slowdowns belong to the
        link they were measured on (contention_link); messages over another link take the default
        for an unmeasured link, 2 - overlap_efficiency for backward and messages. Contention
        measured on an unrecorded link (contention_link None) is applied as given."""
        if not self.measured():
            return replace(self, contention_used=f"assumed: none measured, 2 - overlap_efficiency = "
                                                 f"{2.0 - self.overlap_efficiency:g} for backward and messages")
        if self.contention_link is None:
            return replace(self, contention_used="measured (its link not recorded: applied as given)")
        if link == self.contention_link:
            return replace(self, contention_used=f"measured on this link ({link})")
        return replace(self, compute_slowdown=None, comm_slowdown=None, strategy_slowdowns={}, memory_slowdown=None,
                       contention_used=f"assumed for an unmeasured link: 2 - overlap_efficiency = "
                                       f"{2.0 - self.overlap_efficiency:g} for backward and messages (messages over "
                                       f"{link or 'a link not measured'}; the contention measured over "
                                       f"{self.contention_link} is not carried)")

    def backward_slowdowns(self, strategy: str | None, layers: Sequence[str]) -> list[float]:
        """Each backward layer's slowdown beside the messages: slowdowns()'s, moved towards
        memory_slowdown by the layer's memory-bound share (not where `strategy` has its own pair,
        measured with backward's real mix)."""
        c = self.slowdowns(strategy)[0]
        if self.memory_slowdown is None or strategy in self.strategy_slowdowns:
            return [c] * len(layers)
        return [c + self.layer_memory_share.get(name, 0.0) * (self.memory_slowdown - c) for name in layers]

    def __post_init__(self) -> None:
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise UsageError(f"phases: batch must be a positive integer, got {self.batch!r}")
        if not isinstance(self.overlap_efficiency, (int, float)) or not 0 <= self.overlap_efficiency <= 1:
            raise UsageError(f"phases: overlap_efficiency must be in [0, 1], got {self.overlap_efficiency!r}")
        pairs = [("", (self.compute_slowdown, self.comm_slowdown))] + [
            (f"by_strategy.{k}.", v) for k, v in self.strategy_slowdowns.items()]
        for where, pair in pairs:
            for name, v in zip(("compute_slowdown", "comm_slowdown"), pair, strict=True):
                if (v is not None or where) and (isinstance(v, bool) or not isinstance(v, (int, float))
                                                 or not math.isfinite(v) or v < 1):
                    raise UsageError(f"phases: {where}{name} must be a number >= 1, got {v!r}")
        m = self.memory_slowdown
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m < 1):
            raise UsageError(f"phases: memory_slowdown must be a number >= 1, got {m!r}")
        for layer, share in self.layer_memory_share.items():
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
                raise UsageError(f"phases: layer {layer!r}: memory_share must be a number in [0, 1], got {share!r}")
        if self.read_beside_us is not None:
            _time(self.read_beside_us, "phases: read_beside_us")
        for name in ("forward_us", "backward_us", "io_us", "h2d_us", "update_us"):
            _time(getattr(self, name), f"phases: {name}")
        if self.forward_us + self.backward_us <= 0:
            raise UsageError("phases: forward and backward are both 0")

    @classmethod
    def from_dict(cls, doc: Any, source: str = "phases") -> Phases:
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            raise UsageError(f"{source}: expected an iteration report with 'rows' (see gdlbench.model.phases)")
        args, summary = _section(doc, "args"), _section(doc, "summary")
        totals: dict[str, float] = {}
        fwd: dict[str, float] = {}
        bwd: dict[str, float] = {}
        shares: dict[str, Any] = {}
        batch = summary.get("batch", args.get("batch"))
        for i, row in enumerate(doc["rows"]):
            if not isinstance(row, dict) or "phase" not in row:
                continue
            phase = row["phase"]
            if batch is None and "batch" in row:
                batch = row["batch"]
            where = f"{source}: row {i} ({phase})"
            if row.get("layer") not in (None, ""):
                if phase in ("forward", "backward") and "time_us" in row:
                    target = fwd if phase == "forward" else bwd
                    target.setdefault(str(row["layer"]), _time(row["time_us"], where))
                    if phase == "backward" and "memory_share" in row:
                        shares.setdefault(str(row["layer"]), row["memory_share"])
                continue
            if phase in PHASES and phase not in totals and "time_us" in row:
                totals[phase] = _time(row["time_us"], where)
        if batch is None:
            raise UsageError(f"{source}: no batch (args.batch, summary.batch or a row's batch)")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise UsageError(f"{source}: batch must be a positive integer, got {batch!r}")
        for phase, per_layer in (("forward", fwd), ("backward", bwd)):
            if phase not in totals:
                if not per_layer:
                    raise UsageError(f"{source}: no {phase} time (a '{phase}' row or per-layer rows)")
                totals[phase] = sum(per_layer.values())
        env = _section(doc, "env")
        workers = env.get("world_size", summary.get("workers", 1))
        io_threads = summary.get("io_threads")
        if io_threads is not None and (isinstance(io_threads, bool) or not isinstance(io_threads, int)
                                       or io_threads < 1):
            raise UsageError(f"{source}: summary.io_threads must be a positive integer, got {io_threads!r}")
        eta = summary.get("overlap_efficiency", 1.0)
        if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not 0 <= eta <= 1:
            raise UsageError(f"{source}: summary.overlap_efficiency must be a number in [0, 1], got {eta!r}")
        contention = _section(summary, "contention")
        by_strategy = contention.get("by_strategy", {})
        if not isinstance(by_strategy, dict) or not all(isinstance(v, dict) for v in by_strategy.values()):
            raise UsageError(f"{source}: summary.contention.by_strategy must map strategy names to "
                             "{compute_slowdown, comm_slowdown}")
        return cls(batch=batch, forward_us=totals["forward"], backward_us=totals["backward"],
                   io_us=totals.get("io", 0.0), h2d_us=totals.get("h2d", 0.0), update_us=totals.get("update", 0.0),
                   comm_us=totals.get("comm"), layer_forward_us=fwd, layer_backward_us=bwd,
                   net=args.get("net") if isinstance(args.get("net"), str) else None,
                   workers=workers if isinstance(workers, int) and workers > 0 else 1, source=source,
                   overlap_efficiency=float(eta), compute_slowdown=contention.get("compute_slowdown"),
                   comm_slowdown=contention.get("comm_slowdown"), read_beside_us=contention.get("read_beside_us"),
                   strategy_slowdowns={k: (v.get("compute_slowdown"), v.get("comm_slowdown"))
                                       for k, v in by_strategy.items()},
                   memory_slowdown=contention.get("memory_slowdown"), layer_memory_share=shares,
                   io_threads=io_threads, contention_link=_contention_link(doc, contention, source))

    def with_batch(self, batch: int) -> Phases:
        """What-if: these phases at another per-worker batch. Assumes io, h2d, forward and
        backward grow linearly with the batch and the update does not change (it touches the
        parameters only): on a GPU that small batches leave idle this is pessimistic."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise UsageError(f"--batch must be a positive integer, got {batch!r}")
        k = batch / self.batch
        return replace(self, batch=batch, forward_us=self.forward_us * k, backward_us=self.backward_us * k,
                       io_us=self.io_us * k, h2d_us=self.h2d_us * k,
                       read_beside_us=None if self.read_beside_us is None else self.read_beside_us * k,
                       layer_forward_us={n: t * k for n, t in self.layer_forward_us.items()},
                       layer_backward_us={n: t * k for n, t in self.layer_backward_us.items()},
                       source=f"{self.source}, scaled from batch {self.batch} to {batch}")

    def with_io_threads(self, threads: int) -> Phases:
        """What-if: t_io read by `threads` threads instead of the measured io_threads. Assumes
        reading and decoding scale linearly with threads (as far as there are cores and disk)."""
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise UsageError(f"--io-threads must be a positive integer, got {threads!r}")
        if not self.io_threads:
            raise UsageError(f"--io-threads: {self.source} does not say how many threads read the batch "
                             "(summary.io_threads)")
        return replace(self, io_us=self.io_us * self.io_threads / threads, io_threads=threads,
                       source=f"{self.source}, t_io scaled from {self.io_threads} to {threads} I/O threads")

    @classmethod
    def load(cls, path: str | Path) -> Phases:
        return cls.from_dict(read_json(path, "--phases"), source=str(path))

    @classmethod
    def synthetic(cls, net: Network | str, batch: int, gflops: float = 10_000.0, bwd_ratio: float = 2.0,
                  io_mbs: float = 2_000.0, image_bytes: int = 110_000, h2d_gbs: float = 20.0,
                  update_gbs: float = 1_000.0) -> Phases:
        """Plausible phases from rates (Paleo-like, for plots, tests and what-ifs; not a measurement):
        per layer forward = 2 MACs b / gflops, backward = bwd_ratio x forward; io reads b JPEGs of
        image_bytes at io_mbs MB/s; h2d copies b fp32 inputs at h2d_gbs; update streams 5 x params x 4
        bytes (weights, gradients, momentum read; weights, momentum written) at update_gbs."""
        net = load_network(net)
        fwd = {layer.name: 2 * layer.fwd_macs * batch / (gflops * 1e9) * 1e6 for layer in net.layers}
        bwd = {k: v * bwd_ratio for k, v in fwd.items()}
        in_bytes = 4 * math.prod(net.input_shape) * batch
        return cls(batch=batch, forward_us=sum(fwd.values()), backward_us=sum(bwd.values()),
                   io_us=batch * image_bytes / (io_mbs * 1e6) * 1e6, h2d_us=in_bytes / (h2d_gbs * 1e9) * 1e6,
                   update_us=5 * net.param_bytes() / (update_gbs * 1e9) * 1e6, layer_forward_us=fwd,
                   layer_backward_us=bwd, net=net.name, source=f"synthetic ({gflops:g} GFLOP/s)")

    def per_layer(self, net: Network, phase: str) -> list[float]:
        """Per-layer times in the network's (forward) order, summing to the phase total."""
        given = self.layer_forward_us if phase == "forward" else self.layer_backward_us
        total = self.forward_us if phase == "forward" else self.backward_us
        names = [layer.name for layer in net.layers]
        times = [given.get(n) for n in names]
        missing = [i for i, t in enumerate(times) if t is None]
        known = sum(t for t in times if t is not None)
        if missing:
            # Spread what the per-layer rows do not account for by forward multiply-adds
            # (evenly when those are all zero): compute-bound layers take the time.
            rest = max(0.0, total - known)
            weights = [net.layers[i].fwd_macs for i in missing]
            if sum(weights) == 0:
                weights = [1] * len(missing)
            for i, w in zip(missing, weights, strict=True):
                times[i] = rest * w / sum(weights)
        out = [float(t or 0.0) for t in times]
        s = sum(out)
        return [t * total / s for t in out] if s > 0 else [total / len(out)] * len(out)

    def to_report(self) -> dict[str, Any]:
        """These phases in the phases-JSON shape (module docstring): what from_dict reads back."""
        rows: list[dict[str, Any]] = [{"phase": ph, "time_us": t} for ph, t in (
            ("io", self.io_us), ("h2d", self.h2d_us), ("forward", self.forward_us),
            ("backward", self.backward_us), ("update", self.update_us))]
        if self.comm_us is not None:
            rows.append({"phase": "comm", "time_us": self.comm_us})
        rows += [{"layer": k, "phase": "forward", "time_us": v} for k, v in self.layer_forward_us.items()]
        rows += [{"layer": k, "phase": "backward", "time_us": v} for k, v in self.layer_backward_us.items()]
        return {"tool": "gdlbench", "command": "iteration", "args": {"net": self.net, "batch": self.batch},
                "env": {"world_size": self.workers}, "summary": {"batch": self.batch, "source": self.source,
                                                                  "overlap_efficiency": self.overlap_efficiency,
                                                                  "contention": self.contention(),
                                                                  "io_threads": self.io_threads},
                "rows": rows}

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "io_us": self.io_us, "h2d_us": self.h2d_us, "forward_us": self.forward_us,
                "backward_us": self.backward_us, "update_us": self.update_us, "comm_us": self.comm_us,
                "net": self.net, "workers": self.workers, "source": self.source,
                "overlap_efficiency": self.overlap_efficiency, "contention": self.contention(),
                "io_threads": self.io_threads,
                "layers_with_times": {"forward": len(self.layer_forward_us), "backward": len(self.layer_backward_us)}}


# ---------------------------------------------------------------------------------------------
# The model


class Span(TypedDict):
    """One span of an iteration's timeline, in microseconds from the iteration's start: what the
    model predicts (Prediction.timeline) and what the executor traced (gdlbench.composed.trace) alike."""

    lane: str  # io, h2d, forward, backward, comm, update (and a trace's wait)
    name: str
    start_us: float
    end_us: float


class MessageSpan(Span):
    """A message's span on the model's comm lane, with its size."""

    bytes: int


def hidden_us(spans: Iterable[tuple[float, float]], until: float) -> float:
    """The time of the (start, end) spans before `until`: the communication hidden behind a
    backward that ends there (the model's schedule and a traced iteration read the same way)."""
    return sum(max(0.0, min(e, until) - s) for s, e in spans)


def message_label(layers: Sequence[str]) -> str:
    """A message's name on a timeline: its layer's gradient, or a bucket's first..last layer."""
    return layers[0] if len(layers) == 1 else f"{layers[0]}..{layers[-1]} ({len(layers)} grads)"


@dataclass(frozen=True)
class Message:
    """One message (a layer's gradient or a bucket), times relative to the start of backward."""

    layers: tuple[str, ...]
    bytes: int
    ready_us: float
    start_us: float
    end_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"layers": list(self.layers), "bytes": self.bytes, "ready_us": self.ready_us,
                "start_us": self.start_us, "end_us": self.end_us}


@dataclass
class Prediction:
    """The model's iteration for one strategy and worker count. Times in microseconds.
    timeline: its spans (lanes io, h2d, forward, backward, comm, update)."""

    strategy: str
    workers: int
    batch: int
    t_iter_us: float
    io_us: float  # exposed (all of it without prefetch)
    h2d_us: float
    forward_us: float
    backward_us: float
    comm_us: float  # the sum of all message times
    comm_exposed_us: float  # what the iteration pays for communication beyond backward
    update_us: float
    messages: list[Message]
    timeline: list[Span]
    # what the step waits for its messages after backward's last layer (backward slowed by the
    # messages beside it is in comm_exposed_us, not here): what a profiler shows as idle
    comm_wait_us: float = 0.0
    # backward as it runs beside the messages (backward_us slowed by the contention): with
    # comm_wait_us, what a traced iteration shows (backward_beside_us + comm_wait_us =
    # backward_us + comm_exposed_us)
    backward_beside_us: float = 0.0
    comm_hidden_us: float = 0.0  # the messages' time before backward's end (hidden_us)
    # of io_us, what a prefetched read costs the compute beside it: a trace shows it as slower
    # compute, and io_us - io_beside_us as the wait for the batch
    io_beside_us: float = 0.0
    # which contention priced the messages beside compute (Phases.on_link); "" with no messages
    contention: str = ""

    @property
    def images_per_s(self) -> float:
        return self.workers * self.batch / (self.t_iter_us * 1e-6) if self.t_iter_us > 0 else math.inf

    def breakdown(self) -> dict[str, float]:
        """The exposed time of each phase; they sum to t_iter."""
        return {"io": self.io_us, "h2d": self.h2d_us, "forward": self.forward_us, "backward": self.backward_us,
                "comm": self.comm_exposed_us, "update": self.update_us}

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        d = {"strategy": self.strategy, "workers": self.workers, "batch": self.batch, "t_iter_us": self.t_iter_us,
             "io_exposed_us": self.io_us, "h2d_us": self.h2d_us, "forward_us": self.forward_us,
             "backward_us": self.backward_us, "comm_us": self.comm_us, "comm_exposed_us": self.comm_exposed_us,
             "update_us": self.update_us, "images_per_s": self.images_per_s, "messages": len(self.messages),
             "comm_wait_us": self.comm_wait_us, "backward_beside_us": self.backward_beside_us,
             "comm_hidden_us": self.comm_hidden_us, "io_beside_us": self.io_beside_us,
             "contention": self.contention}
        if timeline:
            d["timeline"] = self.timeline
            d["message_list"] = [m.to_dict() for m in self.messages]
        return d


@dataclass(frozen=True)
class Compression:
    """Gradient compression at `ratio` (a message sends bytes / ratio) with an encode cost of
    `encode_us_per_byte` per byte of the dense gradient, paid before the message is sent (e.g.
    top-k sparsification, measured by gdlbench.study.run). The compressed message is priced as an
    all-reduce of the smaller size: exact for quantisation, optimistic for sparse top-k, whose
    union of indices grows with the workers."""

    ratio: float
    encode_us_per_byte: float = 0.0

    def __post_init__(self) -> None:
        for name, v, low in (("ratio", self.ratio, 1.0), ("encode cost", self.encode_us_per_byte, 0.0)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
                raise UsageError(f"--compress: {name} must be a number >= {low:g}, got {v!r}")

    @classmethod
    def parse(cls, text: str) -> Compression:
        """RATIO[:COST]: e.g. 100 or 100:2e-4 (COST in us per dense byte)."""
        ratio, _, cost = str(text).partition(":")
        try:
            values = float(ratio), float(cost) if cost else 0.0
        except ValueError:
            raise UsageError(f"--compress: expected RATIO[:US_PER_BYTE], e.g. 100:2e-4, got {text!r}") from None
        return cls(*values)

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "encode_us_per_byte": self.encode_us_per_byte}


def make_buckets(sizes: Sequence[int], bucket_bytes: int | None,
                 first_bucket_bytes: int | None = None) -> list[list[int]]:
    """Indices of consecutive messages merged into buckets of at least bucket_bytes (None: one
    per message); the first bucket closes at first_bucket_bytes when given (PyTorch DDP's
    compute_bucket_assignment_by_size with limits [first, cap]). The last bucket takes what is
    left, however small."""
    if bucket_bytes is None:
        return [[i] for i in range(len(sizes))]
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, size in enumerate(sizes):
        current.append(i)
        filled += size
        if filled >= (first_bucket_bytes if first_bucket_bytes is not None and not buckets else bucket_bytes):
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def schedule_shared(layer_us: Sequence[float], ready_after: Sequence[int], cost_us: Sequence[float],
                    compute_slowdown: float | Sequence[float] = 1.0,
                    comm_slowdown: float = 1.0) -> tuple[list[float], list[tuple[float, float]]]:
    """Backward and its messages when they share the machine. layer_us: backward's layers in the
    order they run; message j may start once ready_after[j] + 1 of them are done and message j - 1
    has ended. While a layer and a message run together, the layer runs compute_slowdown times and
    the message comm_slowdown times slower than alone (compute_slowdown: one for every layer, or
    each layer's own, in layer_us's order). Returns (each layer's end, each message's
    (start, end)), from the start of backward. With both slowdowns 1 this is the WFBP recurrence
    s_j = max(r_j, e_{j-1}), e_j = s_j + t_c(m_j) (module docstring)."""
    n_layers, n_msgs = len(layer_us), len(cost_us)
    slow_b = [float(compute_slowdown)] * n_layers if isinstance(compute_slowdown, (int, float)) else list(compute_slowdown)
    if len(slow_b) != n_layers:
        raise ValueError(f"schedule_shared: {len(slow_b)} compute slowdowns for {n_layers} layers")
    ends: list[float] = []
    spans: list[tuple[float, float]] = []
    t, k, j = 0.0, 0, 0
    left_b = layer_us[0] if n_layers else 0.0
    left_c: float | None = None
    eps = 1e-9
    while k < n_layers or j < n_msgs:
        if k < n_layers and left_b <= eps:  # a layer of no time (or just done)
            ends.append(t)
            k += 1
            left_b = layer_us[k] if k < n_layers else 0.0
            continue
        if j < n_msgs and left_c is None and k > ready_after[j]:
            spans.append((t, t))
            left_c = float(cost_us[j])
        if left_c is not None and left_c <= eps:
            spans[-1] = (spans[-1][0], t)
            j += 1
            left_c = None
            continue
        computing = k < n_layers
        both = computing and left_c is not None
        rate_b = 1.0 / slow_b[k] if both else 1.0
        rate_c = 1.0 / comm_slowdown if both else 1.0
        dt = min(left_b / rate_b if computing else math.inf, left_c / rate_c if left_c is not None else math.inf)
        t += dt
        if computing:
            left_b = max(0.0, left_b - dt * rate_b) if dt < left_b / rate_b else 0.0
        if left_c is not None:
            left_c = max(0.0, left_c - dt * rate_c) if dt < left_c / rate_c else 0.0
    return ends, spans


def plan_messages(net: Network | str, strategy: Strategy, dtype_bytes: int = 4) -> list[dict[str, Any]]:
    """The messages `strategy` sends, in the order it sends them (backward order): each
    {"layers": [names], "indices": [layer indices], "bytes": int}; the executor sends exactly
    these, and predict_iteration(message_costs_us=...) takes their measured times in this order."""
    net = load_network(net)
    if strategy.shard:  # reduce-scatters and all-gathers, not all-reduces: plan_sharded lists them
        raise UsageError(f"strategy {strategy.name}: a sharded strategy sends reduce-scatters and all-gathers "
                         "(plan_sharded), not all-reduce messages")
    grads = net.gradient_messages(dtype_bytes)
    return [{"layers": [grads[j].layer for j in b], "indices": [grads[j].index for j in b],
             "bytes": sum(grads[j].bytes for j in b)}
            for b in make_buckets([g.bytes for g in grads], strategy.bucket_bytes, strategy.first_bucket_bytes)]


def _check_costs_given(strategy: Strategy, comm: CommModel | Any | None, n_messages: int,
                       message_costs_us: Sequence[float] | None, pull_costs_us: Sequence[float] | None) -> None:
    """Measured times, when given, are one per message; without them the comm model is needed."""
    for what, given in (("message_costs_us", message_costs_us), ("pull_costs_us", pull_costs_us)):
        if given is not None and len(given) != n_messages:
            raise UsageError(f"{what}: {len(given)} times for {n_messages} messages of {strategy.name}")
    if comm is None and (message_costs_us is None or (
            strategy.collective == "ps" and strategy.ps_pull == "after_push" and pull_costs_us is None)):
        raise UsageError("predict_iteration: a comm model is needed without measured message times")


def _message_costs(strategy: Strategy, comm: CommModel | Any | None, n: int, sizes: Sequence[float],
                   dense: Sequence[int], message_costs_us: Sequence[float] | None,
                   pull_costs_us: Sequence[float] | None) -> tuple[list[float], list[float]]:
    """Each message's time (measured, or the comm model's) and, for ps_pull='after_push', each
    pull's after the update (else none). sizes: the bytes sent; dense: the bytes pulled back."""
    _check_costs_given(strategy, comm, len(sizes), message_costs_us, pull_costs_us)
    # P servers among n workers: P = n by default, and never more servers than workers (predict's
    # speedup prices the strategy at n = 1 too, where a P-server fit of a larger run has one)
    servers = min(strategy.servers or n, n)
    pulls_after_push = strategy.collective == "ps" and strategy.ps_pull == "after_push"
    if message_costs_us is not None:
        if not pulls_after_push:
            return [float(c) for c in message_costs_us], []
        if pull_costs_us is not None:
            return [float(c) for c in message_costs_us], [float(c) for c in pull_costs_us]
        assert comm is not None  # checked above
        return [float(c) for c in message_costs_us], [comm.pull_us(m, n, servers) for m in dense]
    assert comm is not None  # checked above: without measured message times, a comm model
    if pulls_after_push:
        return [comm.push_us(m, n, servers) for m in sizes], [comm.pull_us(m, n, servers) for m in dense]
    if strategy.collective == "ps":
        return [comm.push_us(m, n, servers) + comm.pull_us(m, n, servers) for m in sizes], []
    return [comm.allreduce_us(strategy.algo or comm.formula, m, n) for m in sizes], []


def _io_exposure(phases: Phases, strategy: Strategy, compute_us: float) -> tuple[float, float, float]:
    """(the read's exposed time, the whole iteration, the part of the exposed time that the read
    costs the compute beside it) around `compute_us` of compute and communication after the batch
    is copied in. A trace shows that part as slower compute, the rest as a wait for the batch."""
    t_io, t_h2d = phases.io_us, phases.h2d_us
    # prefetched: what the read costs beside compute (measured, or as eta says), or the part of
    # it longer than the compute it overlaps
    beside = (1 - phases.overlap_efficiency) * t_io if phases.read_beside_us is None else phases.read_beside_us
    io_exposed = max(beside, t_io - compute_us) if strategy.io_prefetch else t_io
    # the same sum, written so that a read that outlasts compute gives exactly t_io + t_h2d (what-ifs
    # that change only compute or communication then gain exactly 0, not a rounding error)
    t_iter = t_h2d + (max(beside + compute_us, t_io) if strategy.io_prefetch else t_io + compute_us)
    return io_exposed, t_iter, min(beside, io_exposed) if strategy.io_prefetch else 0.0


def _batch_spans(strategy: Strategy, t_io: float, t_h2d: float, io_exposed: float,
                 io_beside: float = 0.0) -> tuple[list[Span], float]:
    """The read and copy of the batch on the timeline, and when forward starts. Of a prefetched
    read's exposed time, io_beside (what it costs the compute beside it) is not a wait: forward
    runs that much slower (_pass_spans), as a trace shows it; the rest is the wait for the batch."""
    tl: list[Span] = []
    t0 = 0.0
    if strategy.io_prefetch:
        wait = io_exposed - io_beside
        if wait > 0:
            tl.append({"lane": "io", "name": "wait for the prefetched batch", "start_us": 0.0, "end_us": wait})
        if t_io > 0:
            tl.append({"lane": "io", "name": "read the next batch (prefetch thread)",
                       "start_us": wait + t_h2d, "end_us": wait + t_h2d + t_io})
        t0 = wait
    elif t_io > 0:
        tl.append({"lane": "io", "name": "read the batch", "start_us": 0.0, "end_us": t_io})
        t0 = t_io
    if t_h2d > 0:
        tl.append({"lane": "h2d", "name": "copy the batch", "start_us": t0, "end_us": t0 + t_h2d})
    return tl, t0 + t_h2d


def _pass_spans(net: Network, fwd: Sequence[float], t0: float, b0: float, order: Sequence[int],
                layer_ends: Sequence[float], stretch: float = 1.0) -> list[Span]:
    """Forward's layers from t0, each `stretch` x its time (a prefetched read beside it slows it),
    then backward's (in `order`, ending at layer_ends) from b0."""
    tl: list[Span] = []
    clock = t0
    for layer, t in zip(net.layers, fwd, strict=True):
        if t > 0:
            tl.append({"lane": "forward", "name": layer.name, "start_us": clock, "end_us": clock + t * stretch})
        clock += t * stretch
    prev = 0.0
    for i, end in zip(order, layer_ends, strict=True):
        if end > prev:
            tl.append({"lane": "backward", "name": net.layers[i].name, "start_us": b0 + prev, "end_us": b0 + end})
        prev = end
    return tl


def _message_spans(names: Sequence[tuple[str, ...]], sizes: Sequence[Any], ready: Sequence[float],
                   spans: Sequence[tuple[float, float]], b0: float) -> tuple[list[Message], list[Span]]:
    """The messages (times from the start of backward) and their spans on the timeline. sizes:
    the bytes sent (a float once compressed, though Message.bytes says int)."""
    messages: list[Message] = []
    tl: list[Span] = []
    for nm, m, r, (s, e) in zip(names, sizes, ready, spans, strict=True):
        messages.append(Message(nm, m, r, s, e))
        if e > s:
            span: MessageSpan = {"lane": "comm", "name": message_label(nm), "start_us": b0 + s, "end_us": b0 + e,
                                 "bytes": m}
            tl.append(span)
    return messages, tl


def _update_spans(u0: float, t_u: float, names: Sequence[tuple[str, ...]], pulls: Sequence[float]) -> list[Span]:
    """The update from u0, then the pulls that come after it (ps_pull='after_push')."""
    tl: list[Span] = []
    if t_u > 0:
        tl.append({"lane": "update", "name": "SGD update", "start_us": u0, "end_us": u0 + t_u})
    p0 = u0 + t_u
    for nm, c in zip(names, pulls, strict=False):  # empty unless pulls come after pushes
        if c > 0:
            tl.append({"lane": "comm", "name": f"pull {nm[0]}", "start_us": p0, "end_us": p0 + c})
        p0 += c
    return tl


def _ready_after(plan: Sequence[dict[str, Any]], order: Sequence[int], strategy: Strategy) -> list[int]:
    """Per message, the position in backward's `order` of the layer after which it is ready: the
    last of its gradients (its lowest layer index), or backward's last layer without overlap."""
    position = {i: p for p, i in enumerate(order)}
    return [position[msg["indices"][-1]] if strategy.overlap == "wfbp" else len(order) - 1 for msg in plan]


def _phases_on_link(phases: Phases, comm: CommModel | Any | None, n: int,
                    message_costs_us: Sequence[float] | None) -> Phases:
    """The phases with the contention of the link n workers' messages cross (Phases.on_link):
    the comm model's link_at(n). Messages measured alone (message_costs_us) crossed the link the
    contention was measured on, in the same run: its contention, as given."""
    if message_costs_us is not None or comm is None:
        return phases
    link_at = getattr(comm, "link_at", None)
    return phases.on_link(link_at(n)) if link_at is not None else phases


def predict_iteration(net: Network | str, phases: Phases, comm: CommModel | Any | None, strategy: Strategy,
                      workers: int, dtype_bytes: int = 4, message_costs_us: Sequence[float] | None = None,
                      pull_costs_us: Sequence[float] | None = None, compress: Compression | None = None) -> Prediction:
    """The model's iteration time for `strategy` on `workers` workers (module docstring).
    message_costs_us replaces the comm model's time of each message of plan_messages() (measured
    times, say; for ps_pull='after_push' the push only, and pull_costs_us the pulls); comm may
    then be None, unless the pulls still need the model. dtype_bytes: bytes per gradient value
    (2 for fp16/bf16 gradients). compress: each message is encoded (its cost per dense byte) and
    sends 1/ratio of its bytes; the comm model prices the smaller message."""
    if strategy.shard:  # ZeRO / FSDP: reduce-scatters and all-gathers (predict_sharded)
        if pull_costs_us is not None or compress is not None:
            raise UsageError(f"strategy {strategy.name}: pull times and compression apply to "
                             "the all-reduce strategies only")
        return predict_sharded(net, phases, comm, strategy, workers, dtype_bytes, message_costs_us)
    net = load_network(net)
    if workers < 1:
        raise UsageError(f"workers must be >= 1, got {workers}")
    n = workers
    t_f, t_b, t_u, t_h2d = phases.forward_us, phases.backward_us, phases.update_us, phases.h2d_us
    fwd = phases.per_layer(net, "forward")
    bwd = phases.per_layer(net, "backward")

    plan = plan_messages(net, strategy, dtype_bytes)
    names = [tuple(msg["layers"]) for msg in plan]
    dense = [msg["bytes"] for msg in plan]  # what the pulls of parameter servers carry back: never compressed
    sizes: list[Any] = list(dense)
    encode = [0.0] * len(sizes)
    if compress is not None and message_costs_us is None and workers > 1:  # one worker sends nothing
        encode = [compress.encode_us_per_byte * m for m in dense]
        sizes = [m / compress.ratio for m in dense]
    order = list(reversed(range(len(net.layers))))  # backward runs the last layer first
    ready_after = _ready_after(plan, order, strategy)

    costs, pulls = _message_costs(strategy, comm, n, sizes, dense, message_costs_us, pull_costs_us)
    costs = [c + e for c, e in zip(costs, encode, strict=True)]
    phases = _phases_on_link(phases, comm, n, message_costs_us)
    slow_b = phases.backward_slowdowns(strategy.name, [net.layers[i].name for i in order])
    layer_ends, spans = schedule_shared([bwd[i] for i in order], ready_after, costs, slow_b,
                                        phases.slowdowns(strategy.name)[1])
    backward_end = layer_ends[-1] if layer_ends else 0.0
    e_last = spans[-1][1] if spans else 0.0
    comm_end = max(backward_end, e_last)  # from the start of backward
    pulls_total = sum(pulls)
    after_fwd = comm_end + t_u + pulls_total  # backward + exposed comm + update (+ pulls)
    comm_total = sum(costs) + pulls_total
    comm_exposed = comm_end - t_b + pulls_total  # with the slowdown backward takes beside the messages
    io_exposed, t_iter, io_beside = _io_exposure(phases, strategy, t_f + after_fwd)

    # Timeline from the start of the iteration.
    tl, f0 = _batch_spans(strategy, phases.io_us, t_h2d, io_exposed, io_beside)
    b0 = f0 + t_f + io_beside  # the read's cost beside forward drawn in it
    tl += _pass_spans(net, fwd, f0, b0, order, layer_ends, (t_f + io_beside) / t_f if t_f > 0 else 1.0)
    messages, comm_spans = _message_spans(names, sizes, [layer_ends[p] for p in ready_after], spans, b0)
    tl += comm_spans + _update_spans(b0 + comm_end, t_u, names, pulls)
    return Prediction(strategy.name, n, phases.batch, t_iter, io_exposed, t_h2d, t_f, t_b, comm_total,
                      comm_exposed, t_u, messages, tl, comm_wait_us=comm_end - backward_end + pulls_total,
                      backward_beside_us=backward_end, comm_hidden_us=hidden_us(spans, backward_end),
                      io_beside_us=io_beside, contention=phases.contention_used if n > 1 else "")


def predict_scaling(net: Network | str, phases: Phases, comm: CommModel | Any, strategies: Iterable[Strategy],
                    workers: Sequence[int], dtype_bytes: int = 4, compress: Compression | None = None) -> list[dict[str, Any]]:
    """Rows per (strategy, N): t_iter_us, images_per_s, speedup S(N) = N t(1)/t(N), efficiency S/N,
    and the exposed phases. t(1) is the same strategy on one worker (no communication)."""
    net = load_network(net)
    rows = []
    for strategy in strategies:
        base = predict_iteration(net, phases, comm, strategy, 1, dtype_bytes, compress=compress).t_iter_us
        for n in workers:
            p = predict_iteration(net, phases, comm, strategy, n, dtype_bytes, compress=compress)
            speedup = n * base / p.t_iter_us if p.t_iter_us > 0 else math.nan
            rows.append(p.to_dict() | {"speedup": speedup, "efficiency": speedup / n, "t_iter_1_us": base})
    return rows


# ---------------------------------------------------------------------------------------------
# Sharded data parallelism: ZeRO-1/2/3 and FSDP (strategies.SHARDED; docs/model.md, sharded)


@dataclass(frozen=True)
class ShardUnit:
    """What ZeRO-3/FSDP gather at once: a block (all its layers), the root (the parameterised
    layers in no block), or, in a net without blocks, one parameterised layer."""

    name: str
    layers: tuple[int, ...]  # indices into net.layers, ascending
    params: int
    root: bool = False


def shard_units(net: Network | str) -> list[ShardUnit]:
    """The units of a net in the order forward first uses them. A tied lm_head joins the unit
    of the embedding whose table it uses (it needs those parameters gathered)."""
    net = load_network(net)
    has_blocks = any(lay.block for lay in net.layers)
    emb = next((i for i, lay in enumerate(net.layers) if lay.type == "embedding"), None)

    def key(i: int) -> str:
        lay = net.layers[i]
        if lay.type == "lm_head" and lay.attrs.get("tied") and emb is not None and i != emb:
            return key(emb)
        return lay.block if lay.block else ("" if has_blocks else lay.name)

    members: dict[str, list[int]] = {}
    for i, lay in enumerate(net.layers):
        if lay.block or lay.params or (lay.type == "lm_head" and lay.attrs.get("tied")):
            members.setdefault(key(i), []).append(i)
    units = [ShardUnit(k or "root", tuple(ix), sum(net.layers[i].params for i in ix), root=not k)
             for k, ix in members.items()]
    return sorted((u for u in units if u.params), key=lambda u: u.layers[0])


@dataclass(frozen=True)
class ShardMessage(Message):
    """A message of a sharded strategy; times from the start of backward (forward's are < 0).
    collective: 'reduce_scatter' or 'allgather'; when: 'forward', 'backward' or 'after_update';
    bytes: the whole buffer (each rank sends and receives (N-1)/N of it)."""

    collective: str = "reduce_scatter"
    when: str = "backward"

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {"collective": self.collective, "when": self.when}


def plan_sharded(net: Network | str, strategy: Strategy, dtype_bytes: int = 4) -> list[dict[str, Any]]:
    """The messages of a sharded strategy in the order its communication lane runs them: each
    {"collective", "when", "layers": [names], "bytes", "ready": compute tasks done before it is
    issued, "needed_by": the compute task that waits for it or None}. Compute tasks: forward's
    layers 0..L-1, backward's L..2L-1 (last layer first), the update 2L."""
    net = load_network(net)
    nl = len(net.layers)
    names = [lay.name for lay in net.layers]
    msgs: list[dict[str, Any]] = []
    if strategy.shard < 3:
        grads = net.gradient_messages(dtype_bytes)
        position = {i: p for p, i in enumerate(reversed(range(nl)))}
        buckets = make_buckets([g.bytes for g in grads], strategy.bucket_bytes)
        for b in buckets:
            last = position[grads[b[-1]].index]  # a bucket is ready with its last gradient
            ready = nl + last + 1 if strategy.overlap == "wfbp" else 2 * nl
            msgs.append({"collective": "reduce_scatter", "when": "backward", "layers": [grads[j].layer for j in b],
                         "bytes": sum(grads[j].bytes for j in b), "ready": ready, "needed_by": None, "order": 1})
        for b in reversed(buckets):  # the updated parameters, in forward order
            msgs.append({"collective": "allgather", "when": "after_update",
                         "layers": [grads[j].layer for j in reversed(b)], "bytes": sum(grads[j].bytes for j in b),
                         "ready": 2 * nl + 1, "needed_by": None, "order": 1})
        return [{k: v for k, v in m.items() if k != "order"} for m in msgs]
    units = shard_units(net)
    # forward: unit j's all-gather is needed by its first layer; prefetched, it is issued when
    # unit j-1 starts (FSDP forward_prefetch), else when unit j is reached
    for j, u in enumerate(units):
        issue = units[j - 1].layers[0] if strategy.prefetch and j > 0 else (0 if strategy.prefetch else u.layers[0])
        msgs.append({"collective": "allgather", "when": "forward", "layers": [names[i] for i in u.layers],
                     "bytes": u.params * dtype_bytes, "ready": issue, "needed_by": u.layers[0],
                     "order": 0 if strategy.prefetch else 2})
    # backward: task of layer i is nl + (nl - 1 - i); units in the order backward reaches them
    def task(i: int) -> int:
        return nl + (nl - 1 - i)
    back = sorted(units, key=lambda u: -u.layers[-1])
    gathered = [u for u in back if not (strategy.keep_root and u.root)]
    for j, u in enumerate(gathered):
        first = task(u.layers[-1])
        if strategy.prefetch:  # issued when the unit before it in backward starts (BACKWARD_PRE)
            issue = nl if j == 0 else max(nl, task(gathered[j - 1].layers[-1]))
        else:
            issue = first
        msgs.append({"collective": "allgather", "when": "backward", "layers": [names[i] for i in u.layers],
                     "bytes": u.params * dtype_bytes, "ready": issue, "needed_by": first,
                     "order": 0 if strategy.prefetch else 2})
    for u in back:  # a unit's gradients are reduce-scattered once its last backward layer is done
        msgs.append({"collective": "reduce_scatter", "when": "backward", "layers": [names[i] for i in u.layers],
                     "bytes": u.params * dtype_bytes, "ready": task(u.layers[0]) + 1, "needed_by": None,
                     "order": 1})
    # the lane runs them as they are issued; at the same moment a prefetch goes before the
    # reduce-scatter just issued (BACKWARD_PRE), an on-demand all-gather after it
    msgs.sort(key=lambda m: (m["ready"], m["order"]))
    return [{k: v for k, v in m.items() if k != "order"} for m in msgs]


def schedule_lanes(compute_us: Sequence[float], needs: Sequence[int | None], comm_us: Sequence[float],
                   ready: Sequence[int], compute_slowdown: float = 1.0,
                   comm_slowdown: float = 1.0) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Two lanes, each in its order: compute task i starts when task i-1 has ended and comm task
    needs[i] (if any) has ended; comm task j starts when comm task j-1 has ended and ready[j]
    compute tasks have ended. While both run, compute runs compute_slowdown and comm
    comm_slowdown times slower. Returns the (start, end) of every compute and comm task."""
    nc, nm = len(compute_us), len(comm_us)
    cs: list[tuple[float, float]] = []
    ms: list[tuple[float, float]] = []
    t, k, j = 0.0, 0, 0
    left_c: float | None = None  # compute task k's work left, None before it starts
    left_m: float | None = None
    eps = 1e-9
    while k < nc or j < nm:
        if k < nc and left_c is None:
            w = needs[k]
            if w is None or w < j:
                cs.append((t, t))
                left_c = float(compute_us[k])
        if j < nm and left_m is None and k >= ready[j]:
            ms.append((t, t))
            left_m = float(comm_us[j])
        if left_c is not None and left_c <= eps:
            cs[-1] = (cs[-1][0], t)
            k, left_c = k + 1, None
            continue
        if left_m is not None and left_m <= eps:
            ms[-1] = (ms[-1][0], t)
            j, left_m = j + 1, None
            continue
        if left_c is None and left_m is None:
            raise AssertionError(f"schedule_lanes: deadlock at compute task {k}, comm task {j}")
        both = left_c is not None and left_m is not None
        rate_c = 1.0 / compute_slowdown if both else 1.0
        rate_m = 1.0 / comm_slowdown if both else 1.0
        dt = min(left_c / rate_c if left_c is not None else math.inf, left_m / rate_m if left_m is not None else math.inf)
        t += dt
        if left_c is not None:
            left_c = 0.0 if dt >= left_c / rate_c else max(0.0, left_c - dt * rate_c)
        if left_m is not None:
            left_m = 0.0 if dt >= left_m / rate_m else max(0.0, left_m - dt * rate_m)
    return cs, ms


def _sharded_needs(plan: Sequence[dict[str, Any]], n_compute: int, nl: int,
                   blocking: bool = False) -> list[int | None]:
    """Per compute task, the comm task it waits for (None: none): the all-gathers their layers
    need, and the update its gradients' last reduce-scatter; blocking (Strategy.blocking): also
    every message, by the compute task after its issue (the lane runs them in order: the last is enough)."""
    needs: list[int | None] = [None] * n_compute
    for j, m in enumerate(plan):
        for k in (m["needed_by"], m["ready"] if blocking else None):
            if k is not None and k < n_compute:
                needs[k] = j if needs[k] is None else max(j, needs[k] or 0)
    rs = [j for j, m in enumerate(plan) if m["collective"] == "reduce_scatter"]
    needs[2 * nl] = rs[-1] if rs else None  # the update waits for its reduced gradients
    return needs


def _sharded_clock(cs: Sequence[tuple[float, float]], nl: int, f0: float,
                   io_beside: float) -> Callable[[float], float]:
    """Where the timeline draws a time of the sharded schedule (from the start of forward): from
    f0, forward's compute tasks (the first nl of cs) longer by the prefetched read's cost beside
    them (io_beside, spread in proportion), everything else where it was, as _pass_spans draws an
    all-reduce strategy's forward; a schedule with no forward time puts it before forward."""
    fwd = [(s, e) for s, e in cs[:nl] if e > s]
    busy = sum(e - s for s, e in fwd)
    if busy <= 0:
        return lambda x: f0 + io_beside + x
    k = io_beside / busy
    return lambda x: f0 + x + k * sum(max(0.0, min(e, x) - s) for s, e in fwd)


def _sharded_compute_spans(net: Network, cs: Sequence[tuple[float, float]], n: int, t_u: float,
                           at: Callable[[float], float]) -> list[Span]:
    """Forward's and backward's layers and the update of a sharded strategy on the timeline; cs:
    the compute tasks' (start, end) from the start of forward, drawn at at(time)."""
    nl = len(net.layers)
    tl: list[Span] = []
    order = list(range(nl)) + list(reversed(range(nl)))
    for k, (s, e) in enumerate(cs[:2 * nl]):
        if e > s:
            tl.append({"lane": "forward" if k < nl else "backward", "name": net.layers[order[k]].name,
                       "start_us": at(s), "end_us": at(e)})
    if t_u > 0:
        tl.append({"lane": "update", "name": f"update of 1/{n} of the parameters", "start_us": at(cs[-1][0]),
                   "end_us": at(cs[-1][1])})
    return tl


def _sharded_messages(plan: Sequence[dict[str, Any]], cs: Sequence[tuple[float, float]],
                      ms: Sequence[tuple[float, float]], b0: float,
                      at: Callable[[float], float]) -> tuple[list[Message], list[Span]]:
    """The messages (times from backward's start b0) and their spans on the timeline (drawn at
    at(time)); cs, ms: the compute and comm tasks' (start, end) from forward's start."""
    messages: list[Message] = []
    tl: list[Span] = []
    for m, (s, e) in zip(plan, ms, strict=True):
        ready_at = cs[m["ready"] - 1][1] if m["ready"] > 0 else 0.0
        messages.append(ShardMessage(tuple(m["layers"]), m["bytes"], ready_at - b0, s - b0, e - b0,
                                     m["collective"], m["when"]))
        if e > s:
            label = f"{m['collective']} {m['when']} {message_label(m['layers'])}"
            tl.append(MessageSpan(lane="comm", name=label, start_us=at(s), end_us=at(e), bytes=m["bytes"]))
    return messages, tl


def predict_sharded(net: Network | str, phases: Phases, comm: CommModel | Any | None, strategy: Strategy,
                    workers: int, dtype_bytes: int = 4, message_costs_us: Sequence[float] | None = None) -> Prediction:
    """The iteration of a sharded strategy (ZeRO-1/2/3, FSDP): plan_sharded's messages priced by
    the fits of the reduce-scatter and all-gather that comm carries, else by the cost model's
    reduce_scatter and allgather formulas with its alpha and beta (sharded_message_us; m: the
    whole buffer; costmodel.COSTS, or the cluster's), or message_costs_us (measured times, one per message in plan order; comm
    may then be None), scheduled with forward, backward and the update of 1/N of the parameters
    on two lanes (schedule_lanes). I/O and h2d as predict_iteration."""
    net = load_network(net)
    if workers < 1:
        raise UsageError(f"workers must be >= 1, got {workers}")
    if comm is None and message_costs_us is None:
        raise UsageError("predict_iteration: a comm model is needed for a sharded strategy without measured message times")
    n, nl = workers, len(net.layers)
    fwd, bwd = phases.per_layer(net, "forward"), phases.per_layer(net, "backward")
    t_u = phases.update_us / n  # each rank updates its shard
    plan = plan_sharded(net, strategy, dtype_bytes)
    if message_costs_us is not None:
        if len(message_costs_us) != len(plan):
            raise UsageError(f"message_costs_us: {len(message_costs_us)} times for {len(plan)} messages of {strategy.name}")
        costs = [float(c) for c in message_costs_us]
    else:
        assert comm is not None
        costs = [sharded_message_us(comm, m["collective"], m["bytes"], n) for m in plan]
    compute = fwd + bwd[::-1] + [t_u]
    needs = _sharded_needs(plan, len(compute), nl, strategy.blocking)
    ready = [m["ready"] for m in plan]
    phases = _phases_on_link(phases, comm, n, message_costs_us)
    c_slow, m_slow = phases.slowdowns(strategy.name)
    cs, ms = schedule_lanes(compute, needs, costs, ready, c_slow, m_slow)
    span = max(cs[-1][1], ms[-1][1] if ms else 0.0)  # from the start of forward
    t_f, t_b, t_h2d = phases.forward_us, phases.backward_us, phases.h2d_us
    io_exposed, t_iter, io_beside = _io_exposure(phases, strategy, span)
    b0 = cs[nl][0] if nl < len(cs) else 0.0  # backward's start
    # the read, its wait and the copy as an all-reduce strategy draws them (_batch_spans)
    tl, f0 = _batch_spans(strategy, phases.io_us, t_h2d, io_exposed, io_beside)
    at = _sharded_clock(cs, nl, f0, io_beside)
    tl += _sharded_compute_spans(net, cs, n, t_u, at)
    messages, comm_spans = _sharded_messages(plan, cs, ms, b0, at)
    tl += comm_spans
    comm_exposed = span - t_f - t_b - t_u  # what communication (and contention) adds to compute
    if abs(comm_exposed) <= 1e-9 * max(1.0, span):  # the rounding of a sum, not a time
        comm_exposed = 0.0
    backward_tasks = cs[nl:2 * nl]
    busy = sum(e - s for s, e in cs)  # the compute lane idles only while it waits for a message
    return Prediction(strategy.name, n, phases.batch, t_iter, io_exposed, t_h2d, t_f, t_b, sum(costs),
                      comm_exposed, t_u, messages, sorted(tl, key=lambda s: s["start_us"]),
                      comm_wait_us=max(0.0, span - busy), backward_beside_us=sum(e - s for s, e in backward_tasks),
                      comm_hidden_us=hidden_us(ms, backward_tasks[-1][1] if backward_tasks else 0.0),
                      io_beside_us=io_beside, contention=phases.contention_used if n > 1 else "")

