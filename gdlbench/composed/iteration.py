"""The SGD iteration skeleton: a network's real layers, every phase measured in isolation, the
composed iteration run for real per strategy, and the model's prediction from the isolated
phases held against it.

    from gdlbench.composed.iteration import Iteration
    result = Iteration("resnet50", batch=4, device="cpu", strategy="wfbp").measure()
    result.summary["error_pct"]

Phases: io (read + decode a batch of JPEGs, gdlbench.io), h2d (on the CPU a memcpy of the batch
into the input buffer), forward and backward (per layer), comm (each message of the strategy's
plan alone, max over ranks), update (SGD with momentum over the flat parameter buffer).

How it measures, in rounds (A B A B, so that the machine's drift falls on both sides):
- A, the isolated round: one iteration without communication, every phase stamped (read, copy,
  each layer's forward, each layer's backward right after its forward, update), as the composed
  iteration runs them, one before every composed iteration of the round; when a strategy
  prefetches, the read-beside round (the same iteration after a warm-up, its next batch read on
  the prefetch thread: what the passes beside the read lose, the read's cost to the compute); then,
  on several ranks, a contention round per plan that overlaps messages with backward (its
  messages alone, then forward, then backward with the plan's messages sent beside it as WFBP
  sends them, after --warmup such rounds) that gives the model how much each slows the other down.
- B: per strategy, its messages alone (each message of its plan, on a communication thread), then
  its composed iteration: io on a prefetch thread (when the strategy prefetches), the messages on
  a communication thread (during backward for WFBP strategies, after it otherwise), then the
  update; every phase stamped on every rank (the trace). The messages alone are timed right
  before the composed iteration they price: on a shared VM the speed of a copy between ranks
  changes for tens of seconds at a time (2-3 x on the 2-core development VM), and a round of
  14 strategies lasts longer than that.
A round's composed time is the max over ranks; its phases are the slowest rank's (whose backward
ended last: the messages wait for it); the model reads the medians over rounds, and the
contention pair of the round whose prediction is the median. Paired: the model priced round by
round from that round's own parts against that round's composed iteration, the median of those
errors (StrategyRun.paired_error_pct), for a machine whose speed switches between states.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .._native import MPI, _core, require_cuda, require_thread_level
from ..common import env
from ..common.errors import UsageError
from ..common.hostmem import require_device, require_host
from ..common.measurement import Measurement, check_device, check_threads, check_timing, median_se
from ..common.output import Column, fmt_float
from ..common.units import option_argv
from ..model.phases import Phases, Prediction, Span, hidden_us, message_label, predict_iteration
from ..model.phases import plan_messages as model_plan_messages
from ..model.phases import plan_sharded as model_plan_sharded
from ..model.strategies import Strategy, get_strategies
from ..nets.network import Network, load_network
from ..primitives.collectives import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from ..primitives.io import BatchReader

# Per-device batch defaults: on a 2-core CPU the command ends in about a minute; on a GPU the
# per-GPU batches of the study (Shi, Wang and Chu): AlexNet 1024, GoogLeNet 128, ResNet-50 64.
DEFAULT_BATCH = {"cpu": {"alexnet": 16, "googlenet": 8, "googlenet-aux": 8, "resnet50": 4},
                 "cuda": {"alexnet": 1024, "googlenet": 128, "googlenet-aux": 128, "resnet50": 64}}
FALLBACK_BATCH = {"cpu": 2, "cuda": 32}


def default_batch(net: str, device: str) -> int:
    return DEFAULT_BATCH[device].get(net, FALLBACK_BATCH[device])


# A sharded plan's message kinds, as the executor numbers them (csrc/common/iteration.h, MessageKind).
MESSAGE_KINDS = {"allreduce": 0, "reduce_scatter": 1, "allgather": 2}


@dataclass(frozen=True)
class IterationRequest:
    """What Iteration measures, checked once when made; to_argv() is the `gdlbench iteration`
    command that measures it again. net: a built-in name, a spec file or a Network (given by its
    origin); strategy: a preset, a comma list, all, or Strategy objects (given by their names).
    `iters` rounds, `warmup` untimed iterations before each composed one; with target_se_pct or
    budget_s, `iters` is the most rounds: the run stops once min_rounds are done and every
    strategy's error has a standard error at most target_se_pct, or once the rounds have taken
    budget_s seconds (target_se_pct and budget_s: None or 0, off). io_threads: threads that read the batch
    (default: the compute threads)."""

    net: str | Network = "resnet50"
    batch: int | None = None
    device: str = "auto"
    strategy: str | tuple[Strategy, ...] = "wfbp"
    iters: int = 5
    warmup: int = 1
    threads: int | None = None
    io: bool = True
    io_dir: str | None = None
    io_threads: int | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    target_se_pct: float | None = None
    min_rounds: int = 5
    budget_s: float | None = None

    def __post_init__(self) -> None:
        if self.batch is not None and not self.batch >= 1:
            raise UsageError(f"iteration: --batch must be >= 1, got {self.batch}")
        check_device(self.device, "iteration")
        if isinstance(self.strategy, str):
            get_strategies(self.strategy)  # bad names fail before any work
        else:
            object.__setattr__(self, "strategy", tuple(self.strategy))
        check_timing(self.iters, self.warmup, "iteration")
        check_threads(self.threads, "iteration")
        if self.io_threads is not None and not 1 <= self.io_threads <= 1024:
            raise UsageError(f"iteration: --io-threads must be from 1 to 1024, got {self.io_threads}")
        for what, option, v in (("target_se_pct", "--target-se", self.target_se_pct),
                                ("budget_s", "--max-seconds", self.budget_s)):
            if v is not None and not (v >= 0 and math.isfinite(v)):
                raise UsageError(f"iteration: {option} must be a number >= 0 (0: off), got {v}")
            object.__setattr__(self, what, v or None)
        if self.min_rounds < 1:
            raise UsageError(f"iteration: --min-rounds must be >= 1, got {self.min_rounds}")
        if not (self.timeout >= 0 and math.isfinite(self.timeout)):
            raise UsageError(f"iteration: --timeout must be a number of seconds >= 0 (0: off), got {self.timeout}")

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that measure this again (under the same launcher and ranks)."""
        net = self.net.origin if isinstance(self.net, Network) else self.net
        strategy = self.strategy if isinstance(self.strategy, str) else ",".join(s.name for s in self.strategy)
        return ["iteration", *option_argv([
            ("--net", net), ("--batch", self.batch), ("--device", self.device), ("--strategy", strategy),
            ("--iters", self.iters), ("--warmup", self.warmup), ("--threads", self.threads), ("--no-io", not self.io),
            ("--io-dir", self.io_dir), ("--io-threads", self.io_threads), ("--timeout", float(self.timeout)),
            ("--target-se", float(self.target_se_pct or 0)), ("--min-rounds", self.min_rounds),
            ("--max-seconds", float(self.budget_s or 0))])]


@dataclass
class MessagePlan:
    """How a strategy sends the gradients: (offset, count, ready_after layer) per message in the
    flat gradient buffer, in sending order, and the layers each message carries. A sharded
    strategy's messages are (offset, count, ready_after, kind, issued_after, needed_by)
    (plan_sharded_messages), and `kinds` names each one's collective."""

    messages: list[tuple[int, ...]]
    layers: list[list[str]]
    kinds: list[str] = field(default_factory=list)  # per message; empty: all all-reduces
    # per message, the model's message it is a piece of (plan_sharded_messages); empty: the same
    priced_as: list[int] = field(default_factory=list)

    def model_costs(self, costs: list[float]) -> list[float]:
        """Per message of the model's plan, its measured cost: its pieces' costs added."""
        if not self.priced_as:
            return costs
        out = [0.0] * (max(self.priced_as) + 1)
        for j, c in zip(self.priced_as, costs, strict=True):
            out[j] += c
        return out

    @property
    def bytes(self) -> list[int]:
        return [4 * m[1] for m in self.messages]

    @property
    def labels(self) -> list[str]:
        """Per message: its collective (sharded plans) and layers, for tables and traces."""
        kinds = self.kinds or ["allreduce"] * len(self.messages)
        return [message_label(names) if kind == "allreduce" else f"{kind} {message_label(names)}"
                for kind, names in zip(kinds, self.layers, strict=True)]


def plan_messages(net: Network, strategy: Strategy, offset_of: Callable[[int], int]) -> MessagePlan:
    """The strategy's messages (model.plan_messages: the model prices exactly what is sent) as
    ranges of the executor's flat gradient buffer; a sharded strategy's: plan_sharded_messages."""
    if strategy.shard:
        return plan_sharded_messages(net, strategy, offset_of)
    messages: list[tuple[int, ...]] = []
    names = []
    for msg in model_plan_messages(net, strategy):
        low, high = min(msg["indices"]), max(msg["indices"])
        start = offset_of(low)
        end = offset_of(high) + net.layers[high].params
        messages.append((start, end - start, low))  # ready once its lowest layer's backward is done
        names.append(msg["layers"])
    return MessagePlan(messages, names)


def plan_sharded_messages(net: Network, strategy: Strategy, offset_of: Callable[[int], int]) -> MessagePlan:
    """A sharded strategy's messages (model.plan_sharded, in its order: the model prices exactly
    what is sent) as (offset, count, ready_after, kind, issued_after, needed_by) over the
    executor's flat buffers. A unit whose parameters lie in several ranges (a transformer's root:
    the embeddings before the blocks, the last norm after them) is sent as one message per range,
    back to back (priced_as: the model's message each is a piece of), where FSDP's flat parameter
    makes it one. issued_after and needed_by count compute tasks as plan_sharded's ready and
    needed_by do; ready_after is the piece's lowest layer."""
    index = {layer.name: i for i, layer in enumerate(net.layers)}
    plan = MessagePlan([], [], [], [])
    for j, msg in enumerate(model_plan_sharded(net, strategy)):
        held = sorted(index[name] for name in msg["layers"] if net.layers[index[name]].params)
        needed_by = -1 if msg["needed_by"] is None else int(msg["needed_by"])
        for piece in _contiguous(net, held, offset_of):
            count = sum(net.layers[i].params for i in piece)
            plan.messages.append((offset_of(piece[0]), count, piece[0], MESSAGE_KINDS[msg["collective"]],
                                  int(msg["ready"]), needed_by))
            plan.layers.append(list(msg["layers"]))
            plan.kinds.append(str(msg["collective"]))
            plan.priced_as.append(j)
    return plan


def _contiguous(net: Network, held: list[int], offset_of: Callable[[int], int]) -> list[list[int]]:
    """`held` (layer indices with parameters, ascending) in runs whose parameters lie together."""
    runs: list[list[int]] = []
    for i in held:
        if runs and offset_of(runs[-1][-1]) + net.layers[runs[-1][-1]].params == offset_of(i):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def executed_algo(strategy: Strategy, workers: int) -> tuple[str, int]:
    """(gdlbench.primitives.collectives algorithm, parameter servers P) the executor sends messages with."""
    if strategy.collective == "ps":
        return "ps", min(strategy.servers or workers, workers)
    return strategy.algo or "library", 1


# The compute thread's passes, each (phase_times' name, the trace stamps it runs between).
PASSES = (("h2d", "io_wait_end_us", "h2d_end_us"), ("forward", "h2d_end_us", "forward_end_us"),
          ("backward", "forward_end_us", "backward_end_us"), ("update", "comm_end_us", "update_end_us"))


def phase_times(trace: dict[str, Any]) -> dict[str, float]:
    """Each phase's duration (us) in one traced iteration: io (the read, wherever it ran), io_wait
    (what the iteration waited for its batch), h2d, forward, backward (zeroing the activation
    gradients included; a sharded strategy's waits for its all-gathers not), comm (the messages'
    time), comm_exposed (after backward), update, comm_wait (compute idle for messages: the waits
    stamped per message, and ZeRO-1/2's all-gathers after the update; the model's
    Prediction.comm_wait_us)."""
    t = trace
    passes = {name: t[end] - t[start] for name, start, end in PASSES}
    passes["forward"] -= sum(t.get("layer_forward_wait_us") or [])
    passes["backward"] -= sum(t.get("layer_backward_wait_us") or [])
    waits = t.get("message_wait_us") or []
    times = {"io": t["io_end_us"] - t["io_start_us"], "io_wait": t["io_wait_end_us"], "h2d": passes["h2d"],
             "forward": passes["forward"], "backward": passes["backward"],
             "comm": sum(e - s for s, e in zip(t["message_start_us"], t["message_end_us"], strict=True)),
             "comm_exposed": t["comm_end_us"] - t["backward_end_us"], "update": passes["update"],
             "comm_wait": sum(waits) + iteration_end(t) - t["update_end_us"]}
    return {k: max(0.0, v) for k, v in times.items()}


def iteration_end(trace: dict[str, Any]) -> float:
    """When a traced iteration ended: its update, or (ZeRO-1/2) the all-gathers after it."""
    return float(max(trace["update_end_us"], trace.get("end_us", 0.0)))


def layer_times(trace: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Per layer (in layer order): forward and backward durations (us) in one traced iteration
    (without a sharded strategy's waits for the all-gathers they need)."""
    fwd_end, bwd_end = trace["layer_forward_end_us"], trace["layer_backward_end_us"]
    n = len(fwd_end)
    fwait = trace.get("layer_forward_wait_us") or [0.0] * n
    bwait = trace.get("layer_backward_wait_us") or [0.0] * n
    fwd = [fwd_end[i] - (fwd_end[i - 1] if i else trace["h2d_end_us"]) - fwait[i] for i in range(n)]
    bwd = [bwd_end[i] - (bwd_end[i + 1] if i + 1 < n else trace["zero_end_us"]) - bwait[i] for i in range(n)]
    return fwd, bwd


def read_beside(probe: dict[str, Any], alone: dict[str, Any]) -> float | None:
    """What a read on the prefetch thread costs the compute beside it (us): in `probe` (an
    iteration that prefetched its next batch, without messages), the time each pass the read
    overlapped (copy, forward, backward, update) took beyond the same pass in `alone` (the
    isolated round before it), plus any part of the read after the iteration's end (the next one
    waits for it). Whole passes, not the read's span: the loss outlasts the read (the caches it
    evicted refill in the layers after it). Signed, so that noise falls on both sides of the
    rounds' median. None when the probe read nothing."""
    s, e = probe["io_start_us"], probe["io_end_us"]
    if not probe["io_prefetch"] or e <= s:
        return None
    took, took_alone = phase_times(probe), phase_times(alone)
    lost = sum(took[name] - took_alone[name] for name, start, end in PASSES
               if min(e, probe[end]) > max(s, probe[start]))
    return float(lost + max(0.0, e - probe["update_end_us"]))


# A contention round whose messages did (next to) nothing beside backward: the most that round
# can say is that they ran this much slower (the model then runs them after backward in effect).
NO_PROGRESS_SLOWDOWN = 1000.0


def contention(trace: dict[str, Any], backward_alone_us: float, message_alone_us: list[float]) -> tuple[float, float] | None:
    """(backward's slowdown, the messages' slowdown) while they ran side by side in a contention
    round (each message posted as its gradients were ready), from that round's stamps and the
    same work's times alone. (1, 1) when they hardly overlapped (nothing to price); None when
    the round cannot be read (no messages, or backward outside the messages took longer than all
    of backward alone: noise beyond what the rates can carry).

    Read the way the model (schedule_shared) runs them: message i occupies the communication
    thread from max(its ready time, message i - 1's end) to its end (a late wake-up of the thread
    is the message's time); while one is in flight, both run at their slowdowns, otherwise each
    at its speed alone. So backward's time without a message beside it did that much of its work,
    the rest it did in the time beside messages; each message's time after backward ended did that
    much of its work, the rest it did beside backward (none of it, where a waiting thread yields
    its core to backward: then NO_PROGRESS_SLOWDOWN). With those two rates the model's schedule
    ends where the round did."""
    b_end = trace["backward_end_us"]
    ends = trace["message_end_us"]
    if not ends or b_end <= 0 or backward_alone_us <= 0:
        return None
    ready = trace.get("message_ready_us") or [0.0] * len(ends)
    beside = comm_done = 0.0
    prev_end = 0.0
    for r, e, c in zip(ready, ends, message_alone_us, strict=True):
        s = max(r, prev_end)
        prev_end = max(prev_end, e)
        overlap = max(0.0, min(e, b_end) - s)
        if overlap <= 0:
            continue
        beside += overlap
        comm_done += max(0.0, c - max(0.0, e - max(s, b_end)))
    if beside < 0.05 * backward_alone_us:
        return 1.0, 1.0
    backward_done = backward_alone_us - (b_end - beside)
    if backward_done <= 0:
        return None
    return max(1.0, beside / backward_done), min(NO_PROGRESS_SLOWDOWN, max(1.0, beside / comm_done if comm_done > 0 else NO_PROGRESS_SLOWDOWN))


def compute_spans(trace: dict[str, Any]) -> list[tuple[float, float]]:
    """The compute lane's busy spans from forward's start to backward's end in one traced
    iteration: every layer without its wait for an all-gather, and the zeroing between the passes."""
    fwd_end, bwd_end = trace["layer_forward_end_us"], trace["layer_backward_end_us"]
    n = len(fwd_end)
    fwait = trace.get("layer_forward_wait_us") or [0.0] * n
    bwait = trace.get("layer_backward_wait_us") or [0.0] * n
    spans, prev = [], trace["h2d_end_us"]
    for end, wait in zip(fwd_end, fwait, strict=True):
        spans.append((prev + wait, end))
        prev = end
    spans.append((trace["forward_end_us"], trace["zero_end_us"]))
    prev = trace["zero_end_us"]
    for i in reversed(range(n)):
        spans.append((prev + bwait[i], bwd_end[i]))
        prev = bwd_end[i]
    return [(s, e) for s, e in spans if e > s]


def sharded_contention(trace: dict[str, Any], compute_alone_us: float,
                       message_alone_us: list[float]) -> tuple[float, float] | None:
    """contention() for a sharded strategy, whose messages run beside forward and backward: from
    a traced iteration of its plan, (compute's slowdown, the messages' slowdown) while both ran.
    Compute's time with no message in flight did that much of its work (forward and backward
    alone: compute_alone_us), the rest it did beside messages; each message's time beside no
    compute did that much of its work, the rest beside compute. (1, 1) when they hardly
    overlapped; None when compute outside the messages took longer than all of it alone."""
    busy = compute_spans(trace)
    beside_each = [sum(max(0.0, min(e, be) - max(s, bs)) for bs, be in busy)
                   for s, e in zip(trace["message_start_us"], trace["message_end_us"], strict=True)]
    beside = sum(beside_each)
    if compute_alone_us <= 0 or beside < 0.05 * compute_alone_us:
        return 1.0, 1.0
    compute_done = compute_alone_us - (sum(e - s for s, e in busy) - beside)
    if compute_done <= 0:
        return None
    comm_done = sum(max(0.0, c - (e - s - b)) for c, s, e, b in zip(
        message_alone_us, trace["message_start_us"], trace["message_end_us"], beside_each, strict=True))
    return (max(1.0, beside / compute_done),
            min(NO_PROGRESS_SLOWDOWN, max(1.0, beside / comm_done if comm_done > 0 else NO_PROGRESS_SLOWDOWN)))


@dataclass
class StrategyRun:
    strategy: Strategy
    plan: MessagePlan
    message_times: list[Measurement]
    composed: Measurement
    traces: list[dict[str, Any]]  # the median round's composed iteration, per rank (us from its start)
    prediction: Prediction
    inside: dict[str, Measurement] = field(default_factory=dict)  # phase_times inside the composed run
    # the model's standard error: the isolated round's whole iteration's median_se, and for a
    # strategy priced with measured contention, what the slowdowns' median_se moves the prediction
    model_se_us: float = 0.0
    # per round, the model priced from that round's own isolated phases, messages alone and
    # contention against that round's composed iteration (signed %, in round order)
    paired_errors_pct: list[float] = field(default_factory=list)

    @property
    def error_se_pct(self) -> float:
        """The error's standard error from the rounds' spread (the isolated round's and the
        composed run's medians, each Measurement.median_se): what a perfect model would still
        show on this machine at one sigma. An error within about twice it says nothing about the
        model."""
        return 100.0 * math.hypot(self.model_se_us, self.composed.median_se) / self.composed.median

    @property
    def trace(self) -> dict[str, Any]:
        """Rank 0's trace of the median round."""
        return self.traces[0]

    @property
    def predicted_us(self) -> float:
        return self.prediction.t_iter_us

    def measured_timeline(self, layer_names: list[str], rank: int = 0) -> SimpleNamespace:
        """A rank's (default 0) traced iteration as spans, in the shape plots.plot_timeline draws
        (the spans the Chrome trace holds: gdlbench.composed.trace.iteration_spans)."""
        from .trace import iteration_spans

        t = self.traces[rank]
        spans: list[Span] = [{"lane": sp["lane"], "name": sp["name"], "start_us": sp["start_us"],
                              "end_us": sp["end_us"]}
                             for sp in iteration_spans(t, layer_names, self.plan.layers, self.plan.labels)
                              if sp["lane"] != "iteration"]
        times = phase_times(t)
        return SimpleNamespace(timeline=spans, t_iter_us=iteration_end(t), comm_us=times["comm"],
                               comm_exposed_us=times["comm_exposed"])

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_us - self.composed.median) / self.composed.median

    @property
    def paired_error_pct(self) -> float | None:
        """The median over rounds of each round's own error (paired_errors_pct). Where the machine
        switches between a fast and a slow state for tens of seconds, the medians of the parts and
        of the whole can fall in different states (error_pct then measures the machine, not the
        model); a round's parts and its composed iteration, timed seconds apart, share one."""
        return float(np.median(self.paired_errors_pct)) if self.paired_errors_pct else None

    @property
    def paired_error_se_pct(self) -> float | None:
        """The standard error of paired_error_pct from the rounds' spread (median_se); None from
        one round."""
        return median_se(self.paired_errors_pct) if len(self.paired_errors_pct) > 1 else None

    def breakdowns(self, layer_names: list[str]) -> list[dict[str, float]]:
        """Every rank's traced iteration (the median round) as exposed phases (traced_breakdown)."""
        return [traced_breakdown(vars(self.measured_timeline(layer_names, r))) for r in range(len(self.traces))]


def traced_breakdown(tl: dict[str, Any]) -> dict[str, float]:
    """Exposed time of each phase in a traced iteration (measured_timeline's spans; the prefetch
    thread's read of the next batch is hidden, the wait for it is not)."""
    spans: list[Span] = tl["timeline"]

    def lane_end(lane: str) -> float:
        return max((s["end_us"] for s in spans if s["lane"] == lane), default=0.0)

    def lane_sum(lane: str) -> float:
        return sum(s["end_us"] - s["start_us"] for s in spans if s["lane"] == lane)

    io = sum(s["end_us"] - s["start_us"] for s in spans if s["lane"] == "io" and "prefetch thread" not in s["name"])
    return {"io": io, "h2d": lane_sum("h2d"), "forward": lane_sum("forward"),
            # comm_exposed_us of a trace: the wait after its (slowed) backward, comm_wait_us of the model
            "backward": lane_sum("backward"), "comm": max(0.0, tl["comm_exposed_us"]),
            "update": lane_sum("update"), "t_iter_us": tl["t_iter_us"], "end_us": lane_end("update"),
            "comm_hidden": hidden_us([(s["start_us"], s["end_us"]) for s in spans if s["lane"] == "comm"],
                                     lane_end("backward"))}


@dataclass
class IterationResult:
    """Every phase alone, each layer alone, and per strategy its messages and the composed
    iteration against the model's prediction."""

    command: ClassVar[str] = "iteration"
    rank_reduction: ClassVar[str] = "max"
    # the strategy table: the model against the composed run (strategy_rows)
    STRATEGY_COLUMNS: ClassVar[list[Column]] = [
        Column("strategy", "strategy"), Column("messages", "messages"),
        Column("comm alone (ms)", "comm_ms", fmt_float(2)), Column("predicted (ms)", "predicted_ms", fmt_float(2)),
        Column("measured (ms)", "measured_ms", fmt_float(2)), Column("p95", "p95_ms", fmt_float(2)),
        Column("error", "error_pct", "{:+.1f} %"), Column("± se", "error_se_pct", "{:.1f} %"),
        Column("paired", "paired_error_pct", "{:+.1f} %"),
        Column("spread", "spread_pct", "{:.1f} %"), Column("img/s/worker", "ips", fmt_float(2)),
        Column("img/s total", "ips_total", fmt_float(2))]
    net: str
    batch: int
    device: str
    world_size: int
    threads: int
    layers: list[dict[str, Any]]
    phases: dict[str, Measurement]
    runs: list[StrategyRun] = field(default_factory=list)
    overlap_efficiency: float = 1.0  # model.Phases.overlap_efficiency, as this run's device implies
    io_threads: int | None = None  # threads that read and decode the batch (None: no I/O phase)
    # per round: read_beside_us (the read-beside round)
    contention: dict[str, Measurement] = field(default_factory=dict)
    # per strategy that overlaps messages with backward, per round: (backward's, the messages'
    # slowdown) from the contention round of its own messages (strategies sending the same
    # messages share one), the pair of the rank the iteration waits for
    slowdowns: dict[str, tuple[Measurement, Measurement]] = field(default_factory=dict)
    # per strategy in slowdowns: the round whose pair the model prices with (its prediction the median)
    slowdown_round: dict[str, int] = field(default_factory=dict)
    isolated_traces: list[dict[str, Any]] = field(default_factory=list)  # the median isolated round, per rank
    # how the convolution algorithms were chosen (the CUDA executor; None on the CPU: one algorithm)
    conv_algorithms: str | None = None
    request: IterationRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def measurement(self) -> Measurement:
        """The composed iteration of the first strategy (each run's is runs[i].composed)."""
        return self.runs[0].composed if self.runs else self.phases["forward"]

    def rows(self) -> list[dict[str, Any]]:
        """Phase rows, then per-layer rows, then per strategy its messages and composed iteration."""
        rows = [{"phase": name, "batch": self.batch, **m.stats(), "samples_us": list(m.samples_us)}
                for name, m in self.phases.items()]
        for layer in self.layers:
            for phase in ("forward", "backward"):
                m = layer[phase]
                rows.append({"layer": layer["name"], "type": layer["type"], "phase": phase, "params": layer["params"],
                             **m.stats(), "samples_us": list(m.samples_us)})
        for run in self.runs:
            for i, (m, nbytes, names) in enumerate(zip(run.message_times, run.plan.bytes, run.plan.layers, strict=True)):
                rows.append({"phase": "message", "strategy": run.strategy.name, "message": i, "size_bytes": nbytes,
                             "layers": names, **m.stats(), "samples_us": list(m.samples_us)})
            c = run.composed
            rows.append({"phase": "iteration", "strategy": run.strategy.name, "batch": self.batch, **c.stats(),
                         "samples_us": list(c.samples_us), "predicted_us": run.predicted_us,
                         "error_pct": run.error_pct, "error_se_pct": run.error_se_pct,
                         "paired_error_pct": run.paired_error_pct, "paired_error_se_pct": run.paired_error_se_pct,
                         "paired_errors_pct": run.paired_errors_pct,
                         "spread_pct": spread_pct(c), "images_per_s": self.batch / (c.median * 1e-6),
                         "images_per_s_total": self.world_size * self.batch / (c.median * 1e-6),
                         "messages": len(run.plan.messages),
                         "inside_us": {k: m.median for k, m in run.inside.items()},
                         # compute idle for messages: the composed run's (median) against the model's
                         "comm_wait_us": run.inside["comm_wait"].median,
                         "predicted_comm_wait_us": run.prediction.comm_wait_us})
        return rows

    def strategy_rows(self) -> list[dict[str, Any]]:
        """Per strategy: the model's prediction against the composed run (STRATEGY_COLUMNS)."""
        rows = []
        for run in self.runs:
            c = run.composed
            rows.append({"strategy": run.strategy.name, "messages": len(run.plan.messages),
                         "comm_ms": sum(m.median for m in run.message_times) / 1e3,
                         "predicted_ms": run.predicted_us / 1e3, "measured_ms": c.median / 1e3,
                         "p95_ms": c.p95 / 1e3, "error_pct": run.error_pct, "error_se_pct": run.error_se_pct,
                         "paired_error_pct": run.paired_error_pct,
                         "spread_pct": spread_pct(c), "ips": self.batch / (c.median * 1e-6),
                         "ips_total": self.world_size * self.batch / (c.median * 1e-6)})
        return rows

    @staticmethod
    def table(results: list[IterationResult]) -> tuple[list[Column], list[dict[str, Any]]]:
        """The CLI's table (gdlbench.Compare): the strategy rows."""
        return IterationResult.STRATEGY_COLUMNS, [row for r in results for row in r.strategy_rows()]

    def phase_table(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per strategy, per phase: its median alone (the isolated round; comm: the messages
        alone), inside the composed run, and the difference in percent."""
        alone = {k: m.median for k, m in self.phases.items()}
        out: dict[str, dict[str, dict[str, float]]] = {}
        for run in self.runs:
            alone_run = alone | {"comm": sum(m.median for m in run.message_times)}
            rows: dict[str, dict[str, float]] = {}
            for phase in ("io", "h2d", "forward", "backward", "comm", "update"):
                if phase not in alone_run or phase not in run.inside:
                    continue
                a, b = alone_run[phase], run.inside[phase].median
                rows[phase] = {"alone_us": a, "inside_us": b, "diff_pct": 100.0 * (b - a) / a if a > 0 else 0.0}
            out[run.strategy.name] = rows
        return out

    @property
    def summary(self) -> dict[str, Any]:
        return {"batch": self.batch, "workers": self.world_size,
                "measured_us": {r.strategy.name: r.composed.median for r in self.runs},
                "predicted_us": {r.strategy.name: r.predicted_us for r in self.runs},
                "error_pct": {r.strategy.name: r.error_pct for r in self.runs},
                "error_se_pct": {r.strategy.name: r.error_se_pct for r in self.runs},
                "paired_error_pct": {r.strategy.name: r.paired_error_pct for r in self.runs},
                "spread_pct": {r.strategy.name: spread_pct(r.composed) for r in self.runs},
                "phases_us": {k: m.median for k, m in self.phases.items()},
                "phase_table": self.phase_table(),
                "forward_sum_of_layers_us": sum(la["forward"].median for la in self.layers),
                "backward_sum_of_layers_us": sum(la["backward"].median for la in self.layers),
                "overlap_efficiency": self.overlap_efficiency, "io_threads": self.io_threads,
                "contention": self.phases_model().contention()}

    def phases_model(self, at: int | None = None) -> Phases:
        """The isolated phases as the model reads them: their medians over the isolated rounds,
        or (at) isolated round `at`'s own."""
        p = self.phases

        def value(m: Measurement) -> float:
            return m.median if at is None else m.samples_us[at]

        slow = {k: max(0.0, m.median) for k, m in self.contention.items()}  # signed samples
        by_strategy = {name: (c.samples_us[self.slowdown_round[name]], m.samples_us[self.slowdown_round[name]])
                       for name, (c, m) in self.slowdowns.items()}
        first = next(iter(by_strategy.values()), (None, None))
        return Phases(batch=self.batch, forward_us=value(p["forward"]), backward_us=value(p["backward"]),
                      io_us=value(p["io"]) if "io" in p else 0.0, h2d_us=value(p["h2d"]),
                      update_us=value(p["update"]),
                      layer_forward_us={la["name"]: value(la["forward"]) for la in self.layers},
                      layer_backward_us={la["name"]: value(la["backward"]) for la in self.layers},
                      net=self.net, workers=self.world_size, source="measured",
                      overlap_efficiency=self.overlap_efficiency, compute_slowdown=first[0], comm_slowdown=first[1],
                      strategy_slowdowns=by_strategy, read_beside_us=slow.get("read_beside_us"),
                      io_threads=self.io_threads)

    def chrome_trace(self) -> dict[str, Any]:
        """The traced iterations in the Chrome trace event format (gdlbench.composed.trace)."""
        from .trace import chrome_trace

        return chrome_trace(self)

    def top_layers(self, n: int = 5) -> list[dict[str, Any]]:
        total = sum(la["forward"].median + la["backward"].median for la in self.layers) or 1.0
        ranked = sorted(self.layers, key=lambda la: la["forward"].median + la["backward"].median, reverse=True)
        return [{"layer": la["name"], "type": la["type"], "forward_us": la["forward"].median,
                 "backward_us": la["backward"].median,
                 "share_pct": 100.0 * (la["forward"].median + la["backward"].median) / total} for la in ranked[:n]]


def executor_bytes(net: Network, batch: int) -> int:
    """What an executor allocates at least: each layer's output and its gradient and the input
    batch and its staging copy, per sample; parameters, gradients and momentum (float32)."""
    per_sample = 2 * sum(math.prod(layer.out_shape) for layer in net.layers) + 2 * math.prod(net.input_shape)
    return 4 * (batch * per_sample + 3 * net.params)


def spread_pct(m: Measurement) -> float:
    """Run-to-run spread of a row: (p75 - p25) / median, in percent."""
    q25, q75 = np.percentile(m.samples_us, [25, 75])
    return 100.0 * float(q75 - q25) / m.median if m.median > 0 else 0.0


def _median_index(values: list[float]) -> int:
    order = sorted(range(len(values)), key=values.__getitem__)
    return order[(len(order) - 1) // 2]


def median_round_pair(rounds: list[list[tuple[float, float]]],
                      price: Callable[[tuple[float, float]], float]) -> tuple[list[tuple[float, float]], int]:
    """Of the contention rounds' (backward, messages) slowdowns, per round per rank: per round the
    pair of the rank the iteration would wait for (the highest price), and the round whose price
    is the median. A round's two rates belong together: they reproduce that round's end, where
    two medians taken apart need not."""
    pairs = [max(ranks, key=price) for ranks in rounds]
    return pairs, _median_index([price(p) for p in pairs])


def price_as_executed(net: Network, phases: Phases, strategy: Strategy, world: int, costs: list[float],
                      pair: tuple[float, float] | None) -> Prediction:
    """The model's prediction of `strategy` as the executor runs it (each parameter-server
    message one push+pull call) from the measured messages' costs, backward and its messages
    at the slowdowns `pair` (None: the phases' own; a sharded strategy's, 2 - overlap_efficiency
    for both, never another plan's)."""
    if strategy.shard:  # without a contention round of its own: the pair overlap_efficiency implies
        default = 2.0 - phases.overlap_efficiency
        pair = pair or (default, default)
    if pair is not None:
        phases = replace(phases, strategy_slowdowns={strategy.name: pair})
    executed = replace(strategy, ps_pull="with_push")
    return predict_iteration(net, phases, None, executed, world, message_costs_us=costs)


def slowest(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Of one round's traces (one per rank), the rank whose backward ended last: the one the
    messages, and so the iteration, wait for."""
    return max(ranks, key=lambda t: t["backward_end_us"])


# One strategy as the executor runs it: (strategy, its messages, the algorithm and the parameter
# servers that send them); and one distinct message list: (messages, algorithm, servers).
_PlanRow = tuple[Strategy, MessagePlan, str, int]
_MessageKey = tuple[Any, ...]


@dataclass
class _Rounds:
    """What the rounds of Iteration.measure collect."""

    iso_traces: list[list[dict[str, Any]]] = field(default_factory=list)  # per isolated round, per rank
    messages: list[list[list[float]]] = field(default_factory=list)  # per plan, per message: its samples
    slowdowns: dict[_MessageKey, list[list[tuple[float, float]]]] = field(default_factory=dict)  # per round, per rank
    read_costs: list[float] = field(default_factory=list)  # per round where every rank measured one
    composed: list[list[tuple[float, list[dict[str, Any]]]]] = field(default_factory=list)  # per plan, per round


def _message_key(plan: _PlanRow) -> _MessageKey:
    """A plan's distinct message list: strategies that send the same messages share it."""
    _, mplan, algo, servers = plan
    return (tuple(mplan.messages), algo, servers)


def _layer_rows(specs: list[dict[str, Any]], iso_traces: list[list[dict[str, Any]]], clock: str) -> list[dict[str, Any]]:
    """Each layer's forward and backward over the isolated rounds (per round, the slowest rank's)."""
    iso_layers = [layer_times(slowest(ranks)) for ranks in iso_traces]
    layers = []
    for i, spec in enumerate(specs):
        fwd = [lt[0][i] for lt in iso_layers]
        bwd = [lt[1][i] for lt in iso_layers]
        layers.append({"name": spec["name"], "type": spec["type"], "params": spec["params"],
                       "forward": Measurement(fwd, clock, "the layer's forward, inside the isolated round"),
                       "backward": Measurement(bwd, clock, "the layer's backward (weights + data), right after "
                                                           "its forward, inside the isolated round")})
    return layers


def _isolated_phases(iso_traces: list[list[dict[str, Any]]], clock: str, device: str,
                    with_io: bool) -> dict[str, Measurement]:
    """Each phase over the isolated rounds (per round, the slowest rank's); io only when read."""
    iso_phases = [phase_times(slowest(ranks)) for ranks in iso_traces]
    regions = {"io": "read and decode the batch in line (gdlbench.io), in the isolated round",
               "h2d": "cudaMemcpyAsync of the batch from pinned host memory" if device == "cuda"
                      else "memcpy of the batch into the input buffer (CPU stand-in for H2D)",
               "forward": "the whole forward pass, in the isolated round",
               "backward": "the whole backward pass (activation gradients zeroed first), right after its forward",
               "update": "SGD with momentum over all parameters, after backward"}
    return {k: Measurement([p[k] for p in iso_phases], clock, region) for k, region in regions.items()
            if k != "io" or with_io}


def _inside_phases(rounds: list[tuple[float, list[dict[str, Any]]]], clock: str) -> dict[str, Measurement]:
    """Each phase inside the composed iteration over its rounds (per round, the slowest rank's)."""
    inside_rounds = [phase_times(slowest(ranks)) for _, ranks in rounds]
    return {ph: Measurement([p[ph] for p in inside_rounds], clock, f"{ph} inside the composed iteration")
            for ph in inside_rounds[0]}


class Iteration:
    """Iteration(request).measure() -> IterationResult, or Iteration(net, batch, device,
    strategy, ...) with IterationRequest's fields as arguments. `iters` rounds (A B, module
    docstring); IterationRequest says how the rounds stop. comm: the communicator (default the
    world); progress: called with a line at each step."""

    # The composed run sends gradients from a communication thread while the main thread computes;
    # the main thread calls MPI (barriers, max over ranks) only while that thread is idle.
    MPI_THREAD_LEVEL = "serialized"

    def __init__(self, net: str | Network | IterationRequest = "resnet50", batch: int | None = None,
                 device: str = "auto", strategy: str | list[Strategy] = "wfbp", *, iters: int = 5, warmup: int = 1,
                 threads: int | None = None, io: bool = True, io_dir: str | None = None,
                 io_threads: int | None = None, comm: MPI.Intracomm | None = None,
                 progress: Callable[[str], None] | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 target_se_pct: float | None = None, min_rounds: int = 5, budget_s: float | None = None) -> None:
        req = net if isinstance(net, IterationRequest) else IterationRequest(
            net, batch, device, strategy if isinstance(strategy, str) else tuple(strategy), iters, warmup, threads,
            io, io_dir, io_threads, timeout, target_se_pct, min_rounds, budget_s)
        self.request = req
        self.net = load_network(req.net)
        self.device, self.device_why = env.resolve_device(req.device)
        self.batch = req.batch if req.batch is not None else default_batch(self.net.name, self.device)
        self.strategies = get_strategies(req.strategy) if isinstance(req.strategy, str) else list(req.strategy)
        self.skipped: list[str] = []
        if self.device == "cuda":  # the CUDA executor sends every message with NCCL's all-reduce
            self.skipped = [s.name for s in self.strategies if s.collective == "ps" or s.shard]
            self.strategies = [s for s in self.strategies if s.collective != "ps" and not s.shard]
            if not self.strategies:
                raise UsageError("iteration --device cuda: parameter-server and sharded strategies run on the CPU "
                                 "executor only")
        self.iters, self.warmup = req.iters, req.warmup
        self.target_se_pct, self.min_rounds, self.budget_s = req.target_se_pct, req.min_rounds, req.budget_s
        self.timeout = float(req.timeout)  # a message or iteration without progress this long ends the job
        self._require_memory()
        self.threads = req.threads or env.default_threads()
        self.io, self.io_dir, self.io_threads = req.io, req.io_dir, req.io_threads
        require_thread_level(self.MPI_THREAD_LEVEL, "the composed iteration (its communication thread)")
        self.comm = comm or env.world()
        self.progress = progress or (lambda _msg: None)

    def _require_memory(self) -> None:
        """UsageError when the executor's buffers do not fit this device (each rank on this node)."""
        need = executor_bytes(self.net, self.batch)
        what = f"iteration --net {self.net.name} --batch {self.batch}: the executor's buffers (at least)"
        if self.device == "cuda":
            require_device(require_cuda(), need, what)
        else:
            local = env.local_ranks()
            require_host(need * local, what + (f", {local} ranks on this node" if local > 1 else ""))

    @property
    def may_stop_early(self) -> bool:
        """Whether --target-se or --max-seconds may end the run before `iters` rounds."""
        return bool(self.target_se_pct or self.budget_s)

    def overlap_efficiency(self) -> float:
        """0 when this CPU's compute threads fill every core: the communication and the prefetched
        I/O that a strategy overlaps with compute are then CPU work on the same cores, and hide
        nothing. 1 on a GPU (NCCL, copy engines) or with idle cores left for them. (Communication
        beside backward is priced from the measured contention when there is one.)"""
        if self.device == "cuda":
            return 1.0
        return 0.0 if env.local_ranks() * self.threads >= env.usable_cores() else 1.0

    def io_reader(self) -> BatchReader | None:
        """The batch reader the iterations call (in line, or on the prefetch thread); None when the
        iteration reads no data (io=False). The caller closes it."""
        if not self.io:
            return None
        from ..primitives.io import (  # not `from . import io`: gdlbench.io is the function
            BatchReader,
            Dataset,
        )

        dataset = Dataset.ensure(self.io_dir, images=max(64, 4 * self.batch))
        return BatchReader(dataset, self.batch, threads=self.io_threads or self.threads, decode=True)

    def _enough(self, rounds: int, iso_traces: list[list[dict[str, Any]]],
                composed: list[list[tuple[float, list[dict[str, Any]]]]], started: float) -> bool:
        """Whether the rounds so far are enough (class docstring); every rank gets rank 0's answer."""
        if not self.may_stop_early or rounds < self.min_rounds:
            return False
        stop = False
        if self.comm.Get_rank() == 0:
            stop = self.budget_s is not None and time.monotonic() - started >= self.budget_s
            if not stop and self.target_se_pct is not None:
                whole = Measurement([max(t["update_end_us"] for t in ranks) for ranks in iso_traces], "steady-clock")
                se = max(100.0 * math.hypot(whole.median_se, c.median_se) / c.median
                         for c in (Measurement([s for s, _ in rounds_k], "steady-clock") for rounds_k in composed))
                stop = se <= self.target_se_pct
        return bool(self.comm.bcast(stop, root=0))

    def _build_net(self, specs: list[dict[str, Any]]) -> tuple[Any, str, str | None]:
        """The executor's net: (the net, its clock, on cuda what the convolutions' algorithm
        search did, else None)."""
        if self.device != "cuda":
            return _core.Net(specs, self.batch), "steady-clock", None
        cuda = require_cuda()
        before = cuda.conv_search_stats()
        net = cuda.Net(specs, self.batch)
        after = cuda.conv_search_stats()
        searched, reused = after["searched"] - before["searched"], after["reused"] - before["reused"]
        conv_algorithms = None
        if searched + reused:
            conv_algorithms = (f"searched once when the net was built, as torch's cudnn.benchmark "
                               f"(cudnnFind*Ex, per shape): {searched} shape(s) searched, {reused} layer(s) "
                               "took an earlier search of their shape")
        return net, "cuda-events", conv_algorithms

    def _plans(self, net: Any, world: int) -> list[_PlanRow]:
        """Per strategy: its messages, and the algorithm and servers the executor sends them with."""
        plans = []
        for strategy in self.strategies:
            algo, servers = executed_algo(strategy, world)
            if self.device == "cuda":
                algo = "library"  # ncclAllReduce
            plans.append((strategy, plan_messages(self.net, strategy, net.layer_param_offset), algo, servers))
        return plans

    def _isolated(self, net: Any, io_fn: Callable[[], Any] | None, warmup: int, rounds: _Rounds) -> None:
        """One isolated round. One before every composed iteration, so that the isolated samples
        span the run as the composed ones do (the machine's speed drifts over seconds); after the
        run's first, without warm-up: the composed iteration before it has warmed the state."""
        _, t = net.time_iteration(messages=[], overlap=False, algo="library", servers=1, comm=self.comm, io=io_fn,
                                  prefetch=False, warmup=warmup, iters=1)
        rounds.iso_traces.append(self.comm.allgather(t))

    def _read_beside(self, net: Any, io_fn: Callable[[], Any] | None, rounds: _Rounds) -> None:
        """The isolated round again, its next batch read on the prefetch thread, after one warm-up
        iteration that prefetches too: the state every composed iteration runs in."""
        _, t = net.time_iteration(messages=[], overlap=False, algo="library", servers=1, comm=self.comm, io=io_fn,
                                  prefetch=True, warmup=1, iters=1)
        got = self.comm.allgather(read_beside(t, rounds.iso_traces[-1][self.comm.Get_rank()]))
        if all(g is not None for g in got):
            rounds.read_costs.append(max(got))

    def _messages_alone(self, net: Any, plan: _PlanRow) -> list[float]:
        """One sample of each of the plan's messages alone, each right after --warmup untimed sends
        of itself in every round, as the composed iteration it prices runs after --warmup untimed
        iterations: cold, after the other work of a round, a parameter server's messages took 1.4 x
        their time warm (GPT-2 small, 2 ranks; benchmarks/RESULTS.md section 8)."""
        _, mplan, algo, servers = plan
        samples = net.time_messages(messages=mplan.messages, algo=algo, servers=servers, comm=self.comm,
                                    warmup=self.warmup, iters=1, timeout_s=self.timeout)
        return [sample[0] for sample in samples]

    def _contention(self, net: Any, contend: dict[_MessageKey, _PlanRow], rounds: _Rounds) -> None:
        """Backward beside each message list, posted as backward produces its gradients (a sharded
        plan: forward and backward beside its messages, posted as its iteration posts them, after
        --warmup such iterations): the slowdowns of both against the messages alone right before,
        per rank."""
        for key, plan in contend.items():
            _, mplan, algo, servers = plan
            alone = self._messages_alone(net, plan)
            mine = phase_times(rounds.iso_traces[-1][self.comm.Get_rank()])
            if mplan.kinds:
                _, t = net.time_iteration(messages=mplan.messages, overlap=False, algo=algo, servers=servers,
                                          comm=self.comm, io=None, prefetch=False, warmup=self.warmup, iters=1,
                                          timeout_s=self.timeout)
                got = self.comm.allgather(sharded_contention(t, mine["forward"] + mine["backward"], alone))
            else:
                _, t = net.time_contention(messages=mplan.messages, algo=algo, servers=servers, comm=self.comm,
                                           warmup=self.warmup, timeout_s=self.timeout)
                got = self.comm.allgather(contention(t, mine["backward"], alone))
            if all(g is not None for g in got):
                rounds.slowdowns[key].append(got)

    def _composed(self, net: Any, plans: list[_PlanRow], io_fn: Callable[[], Any] | None,
                  rounds: _Rounds) -> None:
        """One composed iteration per plan, each after an isolated round (the first's is the round's
        own) and the plan's messages alone."""
        for k, (strategy, mplan, algo, servers) in enumerate(plans):
            if k > 0:
                self._isolated(net, io_fn, 0, rounds)
            for i, sample in enumerate(self._messages_alone(net, plans[k])):
                rounds.messages[k][i].append(sample)
            samples, t = net.time_iteration(messages=mplan.messages, overlap=strategy.overlap == "wfbp", algo=algo,
                                            servers=servers, comm=self.comm, io=io_fn,
                                            prefetch=strategy.io_prefetch, warmup=self.warmup, iters=1,
                                            timeout_s=self.timeout)
            rounds.composed[k].append((samples[0], self.comm.allgather(t)))

    def _run_rounds(self, net: Any, plans: list[_PlanRow], io_fn: Callable[[], Any] | None) -> _Rounds:
        """The rounds (module docstring): each the phases alone, the read beside compute,
        contention, then every plan's messages alone and composed iteration."""
        # Contention, on several ranks: backward beside the messages of each plan that overlaps them
        # with it, posted as that plan's strategies post them (each distinct plan once per round).
        contend = {} if self.comm.Get_size() == 1 else {_message_key(p): p for p in plans
                                                        if p[0].overlap == "wfbp"}
        # The read beside compute, when a strategy prefetches it.
        probe_read = io_fn is not None and any(s.io_prefetch for s, *_ in plans)
        rounds = _Rounds(messages=[[[] for _ in p[1].messages] for p in plans], slowdowns={k: [] for k in contend},
                        composed=[[] for _ in plans])
        started = time.monotonic()
        for r in range(self.iters):
            self.progress(f"round {r + 1} of {'at most ' if self.may_stop_early else ''}{self.iters}: phases alone" + (", the read beside" if probe_read else "")
                          + (", contention" if contend else "")
                          + f", then {len(plans)} times messages alone and a composed iteration")
            self._isolated(net, io_fn, self.warmup if r == 0 else 0, rounds)
            if probe_read:
                self._read_beside(net, io_fn, rounds)
            self._contention(net, contend, rounds)
            self._composed(net, plans, io_fn, rounds)
            if self._enough(r + 1, rounds.iso_traces, rounds.composed, started):
                break
        return rounds

    def _contention_pair(self, result: IterationResult, strategy: Strategy,
                         rounds_pairs: list[list[tuple[float, float]]] | None,
                         priced: Callable[[tuple[float, float] | None], Prediction],
                         clock: str) -> tuple[float, float] | None:
        """The (backward, messages) slowdowns to price `strategy` at: the median round's pair of
        the measured contention, recorded in `result` (None: none measured)."""
        if not rounds_pairs:
            return None
        t_iter = {p: priced(p).t_iter_us for ranks in rounds_pairs for p in ranks}
        pairs, median_round = median_round_pair(rounds_pairs, t_iter.__getitem__)
        result.slowdowns[strategy.name] = (
            Measurement([c for c, _ in pairs], clock, "backward beside the messages / backward alone"),
            Measurement([m for _, m in pairs], "steady-clock", "messages beside backward / messages alone"))
        result.slowdown_round[strategy.name] = median_round
        return pairs[median_round]

    def _paired_errors(self, result: IterationResult, k: int, plan: _PlanRow, rounds: _Rounds,
                       round_phases: list[Phases], pair: tuple[float, float] | None) -> list[float]:
        """Per round, the model priced from that round's own parts (the isolated round right
        before plan k's composed iteration, its messages alone, and the round's contention pair
        when every round has one, else `pair`) against that round's composed iteration, in %."""
        strategy, mplan = plan[0], plan[1]
        composed = rounds.composed[k]
        slow = result.slowdowns.get(strategy.name)
        pairs: list[tuple[float, float] | None] = [pair] * len(composed)
        if slow is not None and len(slow[0].samples_us) == len(composed):
            pairs = list(zip(slow[0].samples_us, slow[1].samples_us, strict=True))
        errors = []
        for r, (composed_us, _) in enumerate(composed):
            costs = mplan.model_costs([samples[r] for samples in rounds.messages[k]])
            iso = round_phases[r * len(rounds.composed) + k]
            predicted = price_as_executed(self.net, iso, strategy, result.world_size, costs, pairs[r]).t_iter_us
            errors.append(100.0 * (predicted - composed_us) / composed_us)
        return errors

    def _strategy_run(self, result: IterationResult, k: int, plan: _PlanRow, rounds: _Rounds, clock: str,
                      model_phases: Phases, isolated_whole: Measurement, round_phases: list[Phases]) -> StrategyRun:
        """Plan k's messages alone, its composed iteration, and the model's prediction of it from
        the isolated phases (model_phases) and the messages' measured costs, with its standard error."""
        strategy, mplan = plan[0], plan[1]
        msg = [Measurement(s, "steady-clock", "one message alone (and, on a GPU, its stream sync), max over ranks")
               for s in rounds.messages[k]]
        composed = rounds.composed[k]
        samples = [s for s, _ in composed]
        costs = mplan.model_costs([m.median for m in msg])
        priced = partial(price_as_executed, self.net, model_phases, strategy, result.world_size, costs)
        rounds_pairs = rounds.slowdowns.get(_message_key(plan)) if strategy.overlap == "wfbp" else None
        pair = self._contention_pair(result, strategy, rounds_pairs, priced, clock)
        pred = priced(pair)
        model_se = isolated_whole.median_se
        if pair is not None:  # the contention rounds' noise, at one sigma either way
            cs, cm = result.slowdowns[strategy.name]
            moved = [priced((max(1.0, pair[0] + sign * cs.median_se), max(1.0, pair[1] + sign * cm.median_se)))
                     .t_iter_us for sign in (1, -1)]
            model_se = math.hypot(model_se, (moved[0] - moved[1]) / 2)
        return StrategyRun(strategy, mplan, msg,
                           Measurement(samples, "steady-clock", "one composed iteration, max over ranks"),
                           composed[_median_index(samples)][1], pred, _inside_phases(composed, clock), model_se,
                           self._paired_errors(result, k, plan, rounds, round_phases, pair))

    def measure(self) -> IterationResult:
        """Build the net, run the rounds (class docstring), then per strategy the model against
        its composed iteration."""
        _core.set_blas_threads(self.threads)
        _core.set_compute_threads(self.threads)
        _core.keep_freed_memory(1 << 30)  # as `gdlbench allreduce`: MPI's temporary buffers stay mapped
        specs = self.net.layer_specs()
        world = self.comm.Get_size()
        self.progress(f"building {self.net.name} at batch {self.batch} ({self.net.params:,} parameters)")
        net, clock, conv_algorithms = self._build_net(specs)
        reader = self.io_reader()
        io_fn = reader.read_next if reader else None
        plans = self._plans(net, world)
        rounds = self._run_rounds(net, plans, io_fn)
        if reader:
            reader.close()
        iso_traces = rounds.iso_traces
        # The isolated round's whole iteration per round (max over ranks): the model's noise.
        isolated_whole = Measurement([max(t["update_end_us"] for t in ranks) for ranks in iso_traces], clock)
        mid = _median_index([max(t["update_end_us"] for t in ranks) for ranks in iso_traces])
        result = IterationResult(self.net.name, self.batch, self.device, world, self.threads,
                                 _layer_rows(specs, iso_traces, clock),
                                 _isolated_phases(iso_traces, clock, self.device, with_io=bool(reader)),
                                 overlap_efficiency=self.overlap_efficiency(), isolated_traces=iso_traces[mid],
                                 io_threads=(self.io_threads or self.threads) if self.io else None,
                                 conv_algorithms=conv_algorithms)
        if rounds.read_costs:
            result.contention["read_beside_us"] = Measurement(
                rounds.read_costs, clock, "compute time lost to the read on the prefetch thread beside it, max over ranks")
        # before any strategy's slowdowns are recorded in result: the medians, and each isolated
        # round's own (one before every composed iteration: round r, plan k's is r * plans + k)
        model_phases = result.phases_model()
        round_phases = [result.phases_model(at=i) for i in range(len(iso_traces))]
        for k, plan in enumerate(plans):
            result.runs.append(self._strategy_run(result, k, plan, rounds, clock, model_phases, isolated_whole,
                                                  round_phases))
        result.request = self.request
        return result
