"""The communication cost model: one table of every algorithm's alpha-beta-gamma formula.

A message of m bytes among N ranks costs

    t(m) = sum over levels l of (A_l alpha_l + B_l m beta_l) + G m gamma

alpha_l: microseconds per message step on level l; beta_l: microseconds per byte on level l's
link; gamma: microseconds per byte reduced. A, B, G are the algorithm's counts at N ranks (P
servers): how many steps it takes, how many bytes cross the busiest link, how many bytes a rank
reduces. On a single-level network every count sits on one level, LINK. On a two-level cluster
(nodes of G workers, gdlbench.model.cluster) each entry's `two_level` counts name the levels INTRA and
INTER, each with its own alpha, beta and gamma; `two_level_terms` reads them.

The fit (collectives.fit_alpha_beta), the iteration model (model.py), `gdlbench predict` and the
printed formulas all read `COSTS`; docs/model.md derives each formula. Names: the CLI's short ones
(library, ring, rd, tree, ps) are the keys; `canonical()` accepts the long forms as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..common.errors import UsageError

LINK = "link"  # the one level of a single-level network
INTRA, INTER = "intra", "inter"  # the levels of a two-level cluster
# The same two links run another way, each priced by its own measurement where the fit made one
# (gdlbench.model.cluster): INTRA_RSAG, the reduce-scatter and all-gather inside every node at once, as
# hier runs them (else INTRA); INTER_SHARED, every local rank of a node crossing at once, each
# with its own buffer, as hier's shards and rd's exchanges do (else INTER with its beta times s,
# the workers sharing a node's link). Counts on INTER_SHARED leave s out: it is in the price.
INTRA_RSAG, INTER_SHARED = "intra_rsag", "inter_shared"
HIER_LEADER_BELOW_BYTES = 64 * 1024  # hier's variant switch, as csrc/comm/hier.cpp (kHierLeaderBelowBytes)


@dataclass(frozen=True)
class Shape:
    """What the counts depend on: N ranks, and P servers for the parameter server."""

    nranks: int
    servers: int = 1

    def __post_init__(self) -> None:
        if self.nranks < 1:
            raise UsageError(f"nranks must be >= 1, got {self.nranks}")
        if not 1 <= self.servers <= self.nranks:
            raise UsageError(f"servers must be between 1 and the number of ranks ({self.nranks}), got {self.servers}")

    @property
    def log2(self) -> int:
        """ceil(log2 N): the rounds of a doubling or tree algorithm (0 on one rank)."""
        return math.ceil(math.log2(self.nranks)) if self.nranks > 1 else 0

    @property
    def share(self) -> float:
        """(N-1)/N: the part of a buffer that crosses a rank's link in a ring or halving pass."""
        return (self.nranks - 1) / self.nranks


@dataclass(frozen=True)
class Terms:
    """A, B and G per level: t = sum_l (A_l alpha_l + B_l m beta_l + G_l m gamma_l)."""

    latency: Mapping[str, float]
    bandwidth: Mapping[str, float]
    reduction: Mapping[str, float] = field(default_factory=dict)
    # per level, the size of the level's own all-reduce (what its fit measured) that moves what
    # the algorithm's steps move there: the regime of a piecewise fit is read at that size
    # (default m). hier's inter-node all-reduce of m/G shards runs in the m/G regime, not m's.
    at_bytes: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def one_level(cls, a: float, b: float, g: float = 0.0, level: str = LINK) -> Terms:
        return cls({level: float(a)}, {level: float(b)}, {level: float(g)})

    def abg(self, level: str = LINK) -> tuple[float, float, float]:
        """(A, B, G) on one level: what a single-level fit solves for."""
        return self.latency.get(level, 0.0), self.bandwidth.get(level, 0.0), self.reduction.get(level, 0.0)

    def time_us(self, m: float, alpha_us: Mapping[str, float], beta_us_per_byte: Mapping[str, float],
                gamma_us_per_byte: Mapping[str, float]) -> float:
        t = sum(a * alpha_us[lvl] for lvl, a in self.latency.items() if a)
        t += m * sum(b * beta_us_per_byte[lvl] for lvl, b in self.bandwidth.items() if b)
        return t + m * sum(g * gamma_us_per_byte[lvl] for lvl, g in self.reduction.items() if g)


@dataclass(frozen=True)
class TwoLevelShape:
    """N workers on M nodes of G (the last may hold fewer); s workers of a node share one
    inter-node link when all of them cross at once (G / links per node); P servers for ps."""

    nranks: int
    nodes: int
    per_node: int
    links_per_node: int = 1
    servers: int | None = None

    @property
    def share(self) -> float:
        return max(1.0, self.per_node / self.links_per_node)

    @property
    def log2_intra(self) -> int:
        return Shape(self.per_node).log2

    @property
    def log2_inter(self) -> int:
        return Shape(self.nodes).log2


def _levels(intra: tuple[float, float, float], inter: tuple[float, float, float],
            inter_at: float | None = None, *, intra_level: str = INTRA, inter_level: str = INTER) -> Terms:
    """Terms from (A, B, G) inside a node and across nodes (on the levels named); inter_at: the
    size of the inter-node all-reduce whose regime prices the inter-node steps (Terms.at_bytes;
    default m)."""
    a, x = intra_level, inter_level
    return Terms({a: intra[0], x: inter[0]}, {a: intra[1], x: inter[1]}, {a: intra[2], x: inter[2]},
                 {} if inter_at is None else {x: inter_at})


def _ring2(s: TwoLevelShape, m: float) -> Terms:
    # every one of the flat ring's 2(N-1) steps waits for its slowest hop, the inter-node one; a
    # step moves m/N, as the first (halving) step of an inter-node all-reduce of 2m/N does
    n = s.nranks
    return _levels((0, 0, 0), (2 * (n - 1), 2 * (n - 1) / n, (n - 1) / n), inter_at=2 * m / n)


def _rd2(s: TwoLevelShape, m: float) -> Terms:
    # each step across nodes: every worker of a node exchanges all of m with its partner at once
    lg, lm = s.log2_intra, s.log2_inter
    return _levels((lg, lg, lg), (lm, lm, lm), inter_level=INTER_SHARED)


def _tree2(s: TwoLevelShape, m: float) -> Terms:
    lg, lm = s.log2_intra, s.log2_inter
    return _levels((2 * lg, 2 * lg, lg), (2 * lm, 2 * lm, lm))


def _library2(s: TwoLevelShape, m: float) -> Terms:
    # Priced on INTER, the link alone times s, not INTER_SHARED: on a communicator of several nodes
    # MPICH crosses from one rank per node (node reduce, the node leaders' all-reduce of m, node
    # broadcast; forcing MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=smp gave auto's times), and with one
    # link per node s (m/G) is that leader's m.
    g, mm, n = s.per_node, s.nodes, s.nranks
    return _levels((2 * s.log2_intra, 2 * (g - 1) / g, 0),
                   (2 * s.log2_inter, 2 * (mm - 1) / mm * s.share / g, (n - 1) / n), inter_at=m / g)


def _hier2(s: TwoLevelShape, m: float) -> Terms:
    g, mm, lg, lm = s.per_node, s.nodes, s.log2_intra, s.log2_inter
    if m < HIER_LEADER_BELOW_BYTES:  # reduce to the leader, the library all-reduce among leaders, broadcast
        return _levels((2 * lg, 2 * lg, lg), (2 * lm, 2 * (mm - 1) / mm, (mm - 1) / mm))
    # reduce-scatter inside, the library all-reduce of each m/G shard across (every local rank's
    # at once), all-gather inside
    return _levels((2 * (g - 1), 2 * (g - 1) / g, (g - 1) / g),
                   (2 * lm, 2 * (mm - 1) / mm / g, (mm - 1) / mm / g), inter_at=m / g,
                   intra_level=INTRA_RSAG, inter_level=INTER_SHARED)


def _ps2(s: TwoLevelShape, m: float) -> Terms:
    # P = N servers, one per worker: a node's links carry what its workers push to (and pull from)
    # servers on other nodes
    # servers; incast as _ps_push: a server hears from the per_node - 1 other workers of its node and
    # the N - per_node of the others, one message after another, on the push and on the pull
    p = s.servers or s.nranks
    crossing = s.per_node * (s.nodes - 1) / s.nodes / s.links_per_node
    return _levels((2 * (s.per_node - 1), 0, 0), (2 * (s.nranks - s.per_node), 2 * crossing, s.nranks / p))


def _rsag2(reduce: bool) -> Callable[[TwoLevelShape, float], Terms]:
    """A reduce-scatter (reduce) or all-gather of m bytes in all on a cluster: a flat ring of N-1
    steps of m/N, each waiting for its inter-node hop (half of _ring2: ZeRO's pair of them costs
    what the ring all-reduce does)."""
    def terms(s: TwoLevelShape, m: float) -> Terms:
        n = s.nranks
        return _levels((0, 0, 0), (n - 1, (n - 1) / n, (n - 1) / n if reduce else 0.0), inter_at=2 * m / n)
    return terms


@dataclass(frozen=True)
class Cost:
    """One algorithm's (or library collective's) cost: its formula as printed and its terms."""

    name: str
    formula: str
    terms: Callable[[Shape], Terms]
    collective: str = "allreduce"
    aliases: tuple[str, ...] = ()
    parts: tuple[str, ...] = field(default=())  # entries it is the sum of (ps: push + pull)
    two_level: Callable[[TwoLevelShape, float], Terms] | None = None  # counts on a cluster, at m bytes
    two_level_formula: str = ""


def _ps_push(s: Shape) -> Terms:
    """The push: a server's link carries (N/P) m in, and it reduces (N/P) m. Incast: a server hears
    from each of the N-1 other workers (the servers sit on worker ranks), one message after
    another through its one link, N-1 latencies, however many servers there are."""
    load = s.nranks / s.servers if s.nranks > 1 else 0.0
    return Terms.one_level(s.nranks - 1, load, load)


def _ps_pull(s: Shape) -> Terms:
    """The pull: a server's link carries (N/P) m out, to each of the N-1 other workers in turn."""
    load = s.nranks / s.servers if s.nranks > 1 else 0.0
    return Terms.one_level(s.nranks - 1, load)


def _sum(*entries: Callable[[Shape], Terms]) -> Callable[[Shape], Terms]:
    def terms(s: Shape) -> Terms:
        parts = [e(s) for e in entries]
        levels = {lvl for p in parts for lvl in (*p.latency, *p.bandwidth)}
        return Terms({lvl: sum(p.latency.get(lvl, 0.0) for p in parts) for lvl in levels},
                     {lvl: sum(p.bandwidth.get(lvl, 0.0) for p in parts) for lvl in levels},
                     {lvl: sum(p.reduction.get(lvl, 0.0) for p in parts) for lvl in levels})
    return terms


_ENTRIES = (
    Cost("ring", "2(N-1) a + 2(N-1)/N m b + (N-1)/N m g",
         lambda s: Terms.one_level(2 * (s.nranks - 1), 2 * s.share, s.share),
         two_level=_ring2, two_level_formula="2(N-1) (a2 + m/N b2) + (N-1)/N m g2"),
    Cost("library", "2 ceil(log2 N) a + 2(N-1)/N m b + (N-1)/N m g  (MPICH's large-message all-reduce: "
                    "recursive-halving reduce-scatter + recursive-doubling all-gather)",
         lambda s: Terms.one_level(2 * s.log2, 2 * s.share, s.share), aliases=("mpi", "nccl"),
         two_level=_library2, two_level_formula="2 log2 G a1 + 2(G-1)/G m b1 + 2 log2 M a2 + 2(M-1)/M s (m/G) b2 "
                                                "+ (N-1)/N m g2"),
    Cost("rd", "ceil(log2 N) (a + m b + m g)",
         lambda s: Terms.one_level(s.log2, s.log2, s.log2),
         aliases=("recursive_doubling", "recursive-doubling", "doubling"),
         two_level=_rd2, two_level_formula="log2 G (a1 + m b1 + m g1) + log2 M (a2 + s m b2 + m g2)"),
    Cost("tree", "2 ceil(log2 N) (a + m b) + ceil(log2 N) m g",
         lambda s: Terms.one_level(2 * s.log2, 2 * s.log2, s.log2),
         aliases=("binomial", "binomial_tree", "binomial-tree"),
         two_level=_tree2, two_level_formula="2 log2 G (a1 + m b1) + log2 G m g1 + 2 log2 M (a2 + m b2) "
                                             "+ log2 M m g2"),
    Cost("hier", "2(N-1) a + 2(N-1)/N m b + (N-1)/N m g  (one level: its reduce-scatter + all-gather; "
                 "two levels: gdlbench.model.cluster)",
         lambda s: Terms.one_level(2 * (s.nranks - 1), 2 * s.share, s.share), aliases=("hierarchical",),
         two_level=_hier2,
         two_level_formula="2(G-1) a1 + 2(G-1)/G m b1 + (G-1)/G m g1 + 2 log2 M a2 + 2(M-1)/M s (m/G) b2 "
                           "+ (M-1)/M (m/G) g2; below 64 KiB: 2 log2 G (a1 + m b1) + log2 G m g1 + "
                           "2 log2 M a2 + 2(M-1)/M m b2 + (M-1)/M m g2 (via the node leaders)"),
    Cost("ps", "2 ((N-1) a + (N/P) m b) + (N/P) m g  ((N-1) a: incast, a server hears from every worker)",
         _sum(_ps_push, _ps_pull),
         aliases=("parameter_server", "parameter-server"), parts=("ps_push", "ps_pull"),
         two_level=_ps2, two_level_formula="2 (G-1) a1 + 2 ((N-G) a2 + G(M-1)/M / links m b2) + (N/P) m g2"),
    Cost("ps_push", "(N-1) a + (N/P) m b + (N/P) m g", _ps_push),
    Cost("ps_pull", "(N-1) a + (N/P) m b", _ps_pull),
    Cost("reduce_scatter", "ceil(log2 N) a + (N-1)/N m b + (N-1)/N m g  (m: total buffer)",
         lambda s: Terms.one_level(s.log2, s.share, s.share), collective="reduce_scatter",
         two_level=_rsag2(True), two_level_formula="(N-1) (a2 + m/N b2) + (N-1)/N m g2  (a flat ring)"),
    Cost("allgather", "ceil(log2 N) a + (N-1)/N m b  (m: total buffer)",
         lambda s: Terms.one_level(s.log2, s.share), collective="allgather",
         two_level=_rsag2(False), two_level_formula="(N-1) (a2 + m/N b2)  (a flat ring)"),
    Cost("broadcast", "ceil(log2 N) (a + m b)  (binomial tree)",
         lambda s: Terms.one_level(s.log2, s.log2), collective="broadcast"),
)
COSTS: dict[str, Cost] = {c.name: c for c in _ENTRIES}
ALLREDUCE_ALGOS = tuple(c.name for c in _ENTRIES if c.collective == "allreduce" and not c.name.startswith("ps_"))
_ALIASES = {alias: c.name for c in _ENTRIES for alias in (c.name, *c.aliases)}


def canonical(name: str) -> str:
    """The table's key for an algorithm name (short or long form); UsageError if there is none."""
    key = str(name).strip().lower().replace(" ", "_")
    if key not in _ALIASES:
        raise UsageError(f"no cost model for algorithm {name!r} ({', '.join(COSTS)})")
    return _ALIASES[key]


def known(name: str) -> bool:
    return str(name).strip().lower().replace(" ", "_") in _ALIASES


def cost(name: str) -> Cost:
    return COSTS[canonical(name)]


def terms(name: str, nranks: int, servers: int | None = None) -> Terms:
    """The counts of `name` at N ranks (servers: P for ps; default N)."""
    return cost(name).terms(Shape(nranks, servers or nranks if canonical(name).startswith("ps") else 1))


def coefficients(name: str, nranks: int, servers: int | None = None) -> tuple[float, float, float]:
    """(A, B, G) of a single-level formula: t(m) = A alpha + B m beta + G m gamma."""
    return terms(name, nranks, servers).abg()


def time_us(name: str, m: float, nranks: int, alpha_us: float, beta_us_per_byte: float,
            gamma_us_per_byte: float = 0.0, servers: int | None = None) -> float:
    """One message of m bytes among N ranks on a single-level network."""
    return terms(name, nranks, servers).time_us(m, {LINK: alpha_us}, {LINK: beta_us_per_byte},
                                                {LINK: gamma_us_per_byte})


def two_level_terms(name: str, shape: TwoLevelShape, m: float) -> Terms:
    """The counts of `name` for m bytes per worker on a cluster; on one node, its single-level
    formula on the intra-node link."""
    c = cost(name)
    if shape.nodes == 1:
        return Terms.one_level(*terms(name, shape.nranks, shape.servers).abg(), level=INTRA)
    if c.two_level is None:
        have = ", ".join(k for k, e in COSTS.items() if e.two_level is not None)
        raise UsageError(f"no two-level cost model for {name!r} ({have})")
    return c.two_level(shape, m)


# One link's piecewise alpha-beta fit: (from_bytes, alpha_us, beta_us_per_byte) per regime, ascending.
# The fit (collectives.AlphaBetaFit), the flat model (model.CommModel) and the cluster's links
# (cluster.Link) all hold their regimes so, and read them with the three functions below.
Regime = tuple[int, float, float]


def regime_params(alpha_us: float, beta_us_per_byte: float, regimes: Sequence[Regime],
                  m: float) -> tuple[float, float]:
    """(alpha_us, beta_us_per_byte) for a message of m bytes: the last regime that starts at or
    below m; (alpha_us, beta_us_per_byte) themselves when there is none."""
    a, b = alpha_us, beta_us_per_byte
    for start, ra, rb in regimes:
        if m >= start:
            a, b = ra, rb
    return a, b


def regimes_to_json(regimes: Sequence[Regime]) -> list[dict[str, float]]:
    return [{"from_bytes": m, "alpha_us": a, "beta_us_per_byte": b} for m, a, b in regimes]


def regimes_from_json(items: Any) -> tuple[Regime, ...]:
    """The regimes of a fit's JSON (None or [] : one regime); KeyError, TypeError or ValueError
    on a malformed entry, for the caller to report with its source."""
    return tuple((int(r["from_bytes"]), float(r["alpha_us"]), float(r["beta_us_per_byte"])) for r in items or [])


def scale_link(alpha_us: float, beta_us_per_byte: float, regimes: tuple[Regime, ...],
               bandwidth: float, latency: float) -> tuple[float, float, tuple[Regime, ...]]:
    """What-if of one link: its bandwidth times `bandwidth` (beta divided) and its latency times
    `latency` (alpha multiplied), in every regime (from_bytes, alpha, beta); UsageError unless both
    factors are numbers > 0."""
    for what, v in (("bandwidth", bandwidth), ("latency", latency)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise UsageError(f"link scale: {what} factor must be a number > 0, got {v!r}")
    return (alpha_us * latency, beta_us_per_byte / bandwidth,
            tuple((m, a * latency, b / bandwidth) for m, a, b in regimes))


def formula(name: str) -> str:
    return cost(name).formula
