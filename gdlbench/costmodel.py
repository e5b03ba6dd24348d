"""The communication cost model: one table of every algorithm's alpha-beta-gamma formula.

A message of m bytes among N ranks costs

    t(m) = sum over levels l of (A_l alpha_l + B_l m beta_l) + G m gamma

alpha_l: microseconds per message step on level l; beta_l: microseconds per byte on level l's
link; gamma: microseconds per byte reduced. A, B, G are the algorithm's counts at N ranks (P
servers): how many steps it takes, how many bytes cross the busiest link, how many bytes a rank
reduces. Today every algorithm runs on one level, LINK; a two-level network adds its levels
(intra-node, inter-node) as further keys of `Terms.latency`/`Terms.bandwidth`, and a hierarchical
algorithm is one more `Cost` entry whose terms name them.

The fit (collectives.fit_alpha_beta), the iteration model (model.py), `gdlbench predict` and the
printed formulas all read `COSTS`; docs/model.md derives each formula. Names: the CLI's short ones
(library, ring, rd, tree, ps) are the keys; `canonical()` accepts the long forms as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .errors import UsageError

LINK = "link"  # the one level of a single-level network


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
    """A, B per level and G: t = sum_l (A_l alpha_l + B_l m beta_l) + G m gamma."""

    latency: Mapping[str, float]
    bandwidth: Mapping[str, float]
    reduction: float = 0.0

    @classmethod
    def one_level(cls, a: float, b: float, g: float = 0.0) -> Terms:
        return cls({LINK: float(a)}, {LINK: float(b)}, float(g))

    def abg(self, level: str = LINK) -> tuple[float, float, float]:
        """(A, B, G) on one level: what a single-level fit solves for."""
        return self.latency.get(level, 0.0), self.bandwidth.get(level, 0.0), self.reduction

    def time_us(self, m: float, alpha_us: Mapping[str, float], beta_us_per_byte: Mapping[str, float],
                gamma_us_per_byte: float = 0.0) -> float:
        t = sum(a * alpha_us[lvl] for lvl, a in self.latency.items() if a)
        t += m * sum(b * beta_us_per_byte[lvl] for lvl, b in self.bandwidth.items() if b)
        return t + m * self.reduction * gamma_us_per_byte


@dataclass(frozen=True)
class Cost:
    """One algorithm's (or library collective's) cost: its formula as printed and its terms."""

    name: str
    formula: str
    terms: Callable[[Shape], Terms]
    collective: str = "allreduce"
    aliases: tuple[str, ...] = ()
    parts: tuple[str, ...] = field(default=())  # entries it is the sum of (ps: push + pull)


def _ps_push(s: Shape) -> Terms:
    """The push: a server's link carries (N/P) m in, and it reduces (N/P) m."""
    load = s.nranks / s.servers if s.nranks > 1 else 0.0
    return Terms.one_level(1 if s.nranks > 1 else 0, load, load)


def _ps_pull(s: Shape) -> Terms:
    load = s.nranks / s.servers if s.nranks > 1 else 0.0
    return Terms.one_level(1 if s.nranks > 1 else 0, load)


def _sum(*entries: Callable[[Shape], Terms]) -> Callable[[Shape], Terms]:
    def terms(s: Shape) -> Terms:
        parts = [e(s) for e in entries]
        levels = {lvl for p in parts for lvl in (*p.latency, *p.bandwidth)}
        return Terms({lvl: sum(p.latency.get(lvl, 0.0) for p in parts) for lvl in levels},
                     {lvl: sum(p.bandwidth.get(lvl, 0.0) for p in parts) for lvl in levels},
                     sum(p.reduction for p in parts))
    return terms


_ENTRIES = (
    Cost("ring", "2(N-1) a + 2(N-1)/N m b + (N-1)/N m g",
         lambda s: Terms.one_level(2 * (s.nranks - 1), 2 * s.share, s.share)),
    Cost("library", "2 ceil(log2 N) a + 2(N-1)/N m b + (N-1)/N m g  (MPICH's large-message all-reduce: "
                    "recursive-halving reduce-scatter + recursive-doubling all-gather)",
         lambda s: Terms.one_level(2 * s.log2, 2 * s.share, s.share), aliases=("mpi", "nccl")),
    Cost("rd", "ceil(log2 N) (a + m b + m g)",
         lambda s: Terms.one_level(s.log2, s.log2, s.log2),
         aliases=("recursive_doubling", "recursive-doubling", "doubling")),
    Cost("tree", "2 ceil(log2 N) (a + m b) + ceil(log2 N) m g",
         lambda s: Terms.one_level(2 * s.log2, 2 * s.log2, s.log2),
         aliases=("binomial", "binomial_tree", "binomial-tree")),
    Cost("hier", "2(N-1) a + 2(N-1)/N m b + (N-1)/N m g  (one level: its reduce-scatter + all-gather; "
                 "two levels: gdlbench.cluster)",
         lambda s: Terms.one_level(2 * (s.nranks - 1), 2 * s.share, s.share), aliases=("hierarchical",)),
    Cost("ps", "2 (a + (N/P) m b) + (N/P) m g", _sum(_ps_push, _ps_pull),
         aliases=("parameter_server", "parameter-server"), parts=("ps_push", "ps_pull")),
    Cost("ps_push", "a + (N/P) m b + (N/P) m g", _ps_push),
    Cost("ps_pull", "a + (N/P) m b", _ps_pull),
    Cost("reduce_scatter", "ceil(log2 N) a + (N-1)/N m b + (N-1)/N m g  (m: total buffer)",
         lambda s: Terms.one_level(s.log2, s.share, s.share), collective="reduce_scatter"),
    Cost("allgather", "ceil(log2 N) a + (N-1)/N m b  (m: total buffer)",
         lambda s: Terms.one_level(s.log2, s.share), collective="allgather"),
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
    return terms(name, nranks, servers).time_us(m, {LINK: alpha_us}, {LINK: beta_us_per_byte}, gamma_us_per_byte)


def formula(name: str) -> str:
    return cost(name).formula
