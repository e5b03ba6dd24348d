"""Two-level clusters: nodes of G workers joined by a fast intra-node link (PCIe, NVLink, shared
memory) and a slower inter-node link (Ethernet, InfiniBand), and the cost of every all-reduce
algorithm on them.

Each level has its own alpha (us per message step), beta (us per byte) and gamma (us per byte
reduced): from a two-level fit (`gdlbench allreduce --fit` on several nodes writes
summary.fit.levels.intra/.inter), from the shipped link presets (LINKS, each with its source), or
from numbers given by hand. With N workers in M = N/G nodes (consecutive ranks share a node), and
`links_per_node` inter-node links per node shared by its G workers (s = G / links_per_node
messages share one link when every worker of a node crosses at once), every algorithm's counts on
each level live beside its one-level formula in costmodel.COSTS (`two_level`, printed as
`two_level_formula`; docs/model.md derives them). With one node (N <= G) every algorithm is its
one-level formula on the intra-node link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..common.errors import UsageError
from ..common.paths import read_json
from ..primitives import costmodel
from ..primitives.costmodel import INTER, INTER_SHARED, INTRA, INTRA_RSAG
from .phases import link_at_level


@dataclass(frozen=True)
class Link:
    """One level's link: latency alpha (us per message step), bandwidth (GB/s, 1e9 B/s, per
    direction), reduction gamma (us per byte; 0 for presets) and where the figures come from."""

    name: str
    alpha_us: float
    gbs: float
    gamma_us_per_byte: float = 0.0
    source: str = ""
    regimes: tuple[costmodel.Regime, ...] = ()  # a piecewise fit's (costmodel.regime_params)

    def __post_init__(self) -> None:
        for what, v in (("alpha_us", self.alpha_us), ("gbs", self.gbs), ("gamma_us_per_byte", self.gamma_us_per_byte)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise UsageError(f"link {self.name}: {what} must be a finite number >= 0, got {v!r}")
        if self.gbs <= 0:
            raise UsageError(f"link {self.name}: bandwidth must be > 0 GB/s")

    @property
    def beta_us_per_byte(self) -> float:
        return 1e6 / (self.gbs * 1e9)

    def params(self, m: float) -> tuple[float, float]:
        """(alpha_us, beta_us_per_byte) for a message of m bytes (the regime that holds it)."""
        return costmodel.regime_params(self.alpha_us, self.beta_us_per_byte, self.regimes, m)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "alpha_us": self.alpha_us, "gbs": self.gbs,
                "beta_us_per_byte": self.beta_us_per_byte, "gamma_us_per_byte": self.gamma_us_per_byte,
                "source": self.source,
                "regimes": costmodel.regimes_to_json(self.regimes)}

    @classmethod
    def from_fit(cls, fit: dict[str, Any], name: str, source: str) -> Link:
        """A level of `allreduce --fit` (summary.fit.levels.intra or .inter: one fit's to_dict())."""
        try:
            beta = float(fit["beta_us_per_byte"])
            regimes = costmodel.regimes_from_json(fit.get("regimes"))
            # beta 0: the fit found no size term (all latency); 1e12 GB/s stands for "free"
            return cls(name, float(fit["alpha_us"]), 1e-3 / beta if beta > 0 else 1e12,
                       float(fit.get("gamma_us_per_byte") or 0.0), source, regimes)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{source}: cannot read the {name} fit: {exc}") from None


_ALPHA_NOTE = "alpha is gdlbench's order-of-magnitude assumption, not from the source"

# Bandwidths per direction. Sources: the standards' line rates and the vendors' data sheets.
LINKS: dict[str, Link] = {link.name: link for link in (
    Link("pcie3", 1.0, 15.754, source="PCI-SIG PCIe 3.0 x16: 8 GT/s per lane, 128b/130b encoding = "
         f"15.75 GB/s per direction; {_ALPHA_NOTE}"),
    Link("pcie4", 1.0, 31.508, source="PCI-SIG PCIe 4.0 x16: 16 GT/s per lane, 128b/130b = 31.5 GB/s per "
         f"direction; {_ALPHA_NOTE}"),
    Link("pcie5", 1.0, 63.015, source="PCI-SIG PCIe 5.0 x16: 32 GT/s per lane, 128b/130b = 63.0 GB/s per "
         f"direction; {_ALPHA_NOTE}"),
    Link("nvlink3", 1.0, 300.0, source="NVIDIA A100 data sheet: NVLink 3rd generation 600 GB/s per GPU "
         f"(both directions, 12 links) = 300 GB/s per direction; {_ALPHA_NOTE}"),
    Link("nvlink4", 1.0, 450.0, source="NVIDIA H100 SXM data sheet: NVLink 4th generation 900 GB/s per GPU "
         f"(both directions, 18 links) = 450 GB/s per direction; {_ALPHA_NOTE}"),
    Link("10gbe", 20.0, 1.25, source="IEEE 802.3ae 10 Gb/s Ethernet line rate = 1.25 GB/s; "
         f"{_ALPHA_NOTE} (TCP)"),
    Link("25gbe", 20.0, 3.125, source="IEEE 802.3by 25 Gb/s Ethernet line rate = 3.125 GB/s; "
         f"{_ALPHA_NOTE} (TCP)"),
    Link("100gbe", 10.0, 12.5, source="IEEE 802.3ba 100 Gb/s Ethernet line rate = 12.5 GB/s; "
         f"{_ALPHA_NOTE} (TCP or RoCE)"),
    Link("ib-edr", 2.0, 12.5, source="InfiniBand Trade Association: EDR 4x = 100 Gb/s data rate = 12.5 GB/s; "
         f"{_ALPHA_NOTE}"),
    Link("ib-hdr", 2.0, 25.0, source="InfiniBand Trade Association: HDR 4x = 200 Gb/s = 25 GB/s; "
         f"{_ALPHA_NOTE}"),
    Link("ib-ndr", 2.0, 50.0, source="InfiniBand Trade Association: NDR 4x = 400 Gb/s = 50 GB/s; "
         f"{_ALPHA_NOTE}"),
)}
_LINK_ALIASES = {"pcie3.0": "pcie3", "pcie4.0": "pcie4", "pcie5.0": "pcie5", "edr": "ib-edr", "hdr": "ib-hdr",
                 "ndr": "ib-ndr", "10g": "10gbe", "25g": "25gbe", "100g": "100gbe"}


def link(spec: Any, level: str) -> Link:
    """A preset name (LINKS), or {"alpha_us", "gbs" (or "beta_us_per_byte"), "gamma_us_per_byte"}."""
    if isinstance(spec, Link):
        return spec
    if isinstance(spec, str):
        key = spec.strip().lower()
        key = _LINK_ALIASES.get(key, key)
        if key not in LINKS:
            raise UsageError(f"{level} link: unknown preset {spec!r} ({', '.join(LINKS)}), "
                             "or give alpha_us and gbs")
        return LINKS[key]
    if isinstance(spec, dict):
        try:
            gbs = float(spec["gbs"]) if "gbs" in spec else 1e-3 / float(spec["beta_us_per_byte"])
            return Link(str(spec.get("name", level)), float(spec["alpha_us"]), gbs,
                        float(spec.get("gamma_us_per_byte") or 0.0), str(spec.get("source", "given")))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            raise UsageError(f"{level} link: needs alpha_us and gbs (or beta_us_per_byte > 0): {exc}") from None
    raise UsageError(f"{level} link: expected a preset name or an object, got {spec!r}")


@dataclass(frozen=True)
class Cluster:
    """Nodes of `per_node` workers; `intra` joins the workers of a node, `inter` the nodes.
    links_per_node: inter-node links (NICs) per node that its workers share. `intra_rsag` and
    `inter_shared`: the same links measured as hier runs them (costmodel.INTRA_RSAG,
    INTER_SHARED); None (presets, files) prices them from `intra` and from `inter` shared s ways."""

    per_node: int
    intra: Link
    inter: Link
    links_per_node: int = 1
    nodes: int | None = None  # the shape the file or fit described; predictions take any N
    algo: str = "library"  # for strategies that name none (the executor's default, MPI_Allreduce)
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    intra_rsag: Link | None = None
    inter_shared: Link | None = None
    machine: str | None = None  # where a fitted cluster was measured (env.cpu); None: presets, by hand

    def __post_init__(self) -> None:
        if isinstance(self.per_node, bool) or not isinstance(self.per_node, int) or self.per_node < 1:
            raise UsageError(f"cluster: workers per node must be a positive integer, got {self.per_node!r}")
        if not isinstance(self.links_per_node, int) or self.links_per_node < 1:
            raise UsageError(f"cluster: links per node must be a positive integer, got {self.links_per_node!r}")
        if self.links_per_node > self.per_node:  # the model gives a worker one link at most
            raise UsageError(f"cluster: {self.links_per_node} links per node for {self.per_node} workers per node; "
                             "each worker uses one link at most, give at most one link per worker")
        if self.nodes is not None and (not isinstance(self.nodes, int) or self.nodes < 1):
            raise UsageError(f"cluster: nodes must be a positive integer, got {self.nodes!r}")

    def shape(self, n: int) -> tuple[int, int]:
        """(M nodes, G workers per node) for n workers: full nodes of per_node (the last may hold fewer)."""
        g = min(self.per_node, n)
        return math.ceil(n / g), g

    def link_at(self, n: int) -> str | None:
        """The link n workers' messages cross, for the contention that prices them (model.Phases.on_link):
        within one node the intra-node link; across nodes every message crosses the inter-node link,
        the slower one, whose contention then prices the whole message (the model's messages are
        not split by level). None: a cluster not measured (presets, links given by hand)."""
        if self.machine is None:
            return None
        return link_at_level(self.shape(n)[0] > 1, self.machine)

    def time_us(self, algo: str, m: float, n: int, servers: int | None = None) -> float:
        """One all-reduce of m bytes per worker among n workers (costmodel's two-level counts)."""
        if n <= 1:
            return 0.0
        M, G = self.shape(n)
        shape = costmodel.TwoLevelShape(n, M, G, self.links_per_node, servers)
        terms = costmodel.two_level_terms(algo, shape, m)
        # a level measured as it runs, else the plain link (shared s ways where s workers cross at once)
        links = {INTRA: (self.intra, 1.0), INTER: (self.inter, 1.0),
                 INTRA_RSAG: (self.intra_rsag, 1.0) if self.intra_rsag else (self.intra, 1.0),
                 INTER_SHARED: (self.inter_shared, 1.0) if self.inter_shared else (self.inter, shape.share)}
        alpha, beta = {}, {}
        for level, (link_, times) in links.items():
            a, b = link_.params(terms.at_bytes.get(level, m))
            alpha[level], beta[level] = a, b * times
        g1 = self.intra.gamma_us_per_byte
        g2 = self.inter.gamma_us_per_byte or g1
        gamma = {INTRA: g1, INTRA_RSAG: g1, INTER: g2, INTER_SHARED: g2}
        return terms.time_us(m, alpha, beta, gamma)

    def scaled(self, bandwidth: float = 1.0, latency: float = 1.0) -> Cluster:
        """What-if: the inter-node link (the one every algorithm across nodes waits for) with its
        bandwidth times `bandwidth` and its latency times `latency`, in every regime."""
        if bandwidth == 1 and latency == 1:
            return self

        def scale(x: Link) -> Link:
            alpha, _, regimes = costmodel.scale_link(x.alpha_us, x.beta_us_per_byte, x.regimes, bandwidth, latency)
            return replace(x, alpha_us=alpha, gbs=x.gbs * bandwidth, regimes=regimes)

        note = f"inter-node link scaled: bandwidth x {bandwidth:g}, latency x {latency:g}"
        return replace(self, inter=scale(self.inter), notes=(*self.notes, note),
                       inter_shared=None if self.inter_shared is None else scale(self.inter_shared))

    # The communication-model interface predict_iteration uses (as model.CommModel).
    @property
    def formula(self) -> str:
        return self.algo

    def allreduce_us(self, algo: str, m: float, n: int, servers: int | None = None) -> float:
        return self.time_us(costmodel.canonical(algo), m, n, servers)

    def push_us(self, m: float, n: int, servers: int) -> float:
        """A parameter-server push: half the push/pull link time, and the servers' reduction."""
        if n <= 1:
            return 0.0
        full = self.time_us("ps", m, n, servers)
        gamma = self.intra.gamma_us_per_byte
        if self.shape(n)[0] > 1:
            gamma = self.inter.gamma_us_per_byte or gamma
        reduce = n / servers * m * gamma
        return (full - reduce) / 2 + reduce

    def pull_us(self, m: float, n: int, servers: int) -> float:
        return self.time_us("ps", m, n, servers) - self.push_us(m, n, servers)

    def to_dict(self) -> dict[str, Any]:
        return {"algo": self.algo, "formula": costmodel.cost(self.algo).two_level_formula,
                "per_node": self.per_node, "nodes": self.nodes, "links_per_node": self.links_per_node,
                "intra": self.intra.to_dict(), "inter": self.inter.to_dict(), "source": self.source,
                **{k: v.to_dict() for k, v in (("intra_rsag", self.intra_rsag), ("inter_shared", self.inter_shared))
                   if v is not None},
                "notes": list(self.notes), "machine": self.machine}

    def describe(self) -> str:
        shape = f"{self.nodes} nodes x {self.per_node}" if self.nodes else f"{self.per_node} per node"
        return (f"{shape}; intra {self.intra.name} ({self.intra.gbs:.3g} GB/s, alpha {self.intra.alpha_us:.3g} us), "
                f"inter {self.inter.name} ({self.inter.gbs:.3g} GB/s, alpha {self.inter.alpha_us:.3g} us, "
                f"{self.links_per_node} per node)"
                + ("; also measured as hier runs them" if self.intra_rsag or self.inter_shared else ""))


def one_level_us(algo: str, m: float, n: int, alpha: float, beta: float, gamma: float = 0.0,
                 servers: int | None = None) -> float:
    """The one-level formula of `algo` (costmodel.COSTS; hier on one level: its reduce-scatter +
    all-gather)."""
    if n <= 1:
        return 0.0
    return costmodel.time_us(algo, m, n, alpha, beta, gamma, servers)


def from_fit_levels(levels: dict[str, Any], nodes: int, per_node: int, source: str,
                    machine: str | None = None) -> Cluster:
    """The cluster an `allreduce --fit` on several nodes measured (summary.fit.levels)."""
    if not isinstance(levels, dict) or "intra" not in levels or "inter" not in levels:
        raise UsageError(f"{source}: summary.fit.levels needs both intra and inter fits")
    inter = Link.from_fit(levels["inter"], "inter", f"{source} (inter-node fit)")
    if per_node > 1 and isinstance(levels["intra"], dict):
        intra = Link.from_fit(levels["intra"], "intra", f"{source} (intra-node fit)")
    else:  # never priced: with one worker per node nothing crosses an intra-node link
        intra = Link("none", 0.0, 1e9, source="one rank per node: no intra-node link")
    # measured as hier runs them (older reports have neither; with one rank per node they are intra's and inter's)
    def as_run(key: str) -> Link | None:
        fit = levels.get(key)
        return Link.from_fit(fit, key, f"{source} ({key} fit)") if per_node > 1 and isinstance(fit, dict) else None

    return Cluster(per_node, intra, inter, nodes=nodes, source=source, intra_rsag=as_run("intra_rsag"),
                   inter_shared=as_run("inter_shared"), machine=machine)


def load_cluster(path: str | Path) -> Cluster:
    """A cluster file: {"nodes": 4, "per_node": 8, "intra": "nvlink4" | {...}, "inter": "ib-hdr" | {...},
    "links_per_node": 1}, or a saved `gdlbench allreduce --fit --json` report of a multi-node run."""
    doc = read_json(path, "--cluster")
    if not isinstance(doc, dict):
        raise UsageError(f"--cluster {path}: expected a JSON object")
    summary = doc.get("summary")
    if isinstance(summary, dict) and isinstance(summary.get("fit"), dict) and "levels" in summary["fit"]:
        topo = (doc.get("env") or {}).get("topology") or {}
        per_node = topo.get("ranks_per_node")
        if not per_node:
            raise UsageError(f"--cluster {path}: env.topology.ranks_per_node is missing (or the nodes differ)")
        cpu = (doc.get("env") or {}).get("cpu")
        return from_fit_levels(summary["fit"]["levels"], int(topo.get("nodes") or 1), int(per_node), str(path),
                               machine=str(cpu) if cpu else "an unnamed machine")
    for key in ("per_node", "intra", "inter"):
        if key not in doc:
            raise UsageError(f"--cluster {path}: missing {key!r} (a cluster file has nodes, per_node, intra, "
                             "inter; or give an `allreduce --fit --json` report of a multi-node run)")
    per_node, nodes, links = doc["per_node"], doc.get("nodes"), doc.get("links_per_node", 1)
    for what, v in (("per_node", per_node), ("nodes", nodes), ("links_per_node", links)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise UsageError(f"--cluster {path}: {what} must be an integer, got {v!r}")
    return Cluster(per_node, link(doc["intra"], "intra"), link(doc["inter"], "inter"), links, nodes,
                   source=str(path))
