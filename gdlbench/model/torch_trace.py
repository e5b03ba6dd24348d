"""A PyTorch training job's own profiler trace as the phases gdlbench models.

The user profiles a few steps of their job with torch.profiler (docs/pytorch.md):

    with torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=3),
                                on_trace_ready=lambda p: p.export_chrome_trace("trace.json")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

and `import_trace("trace.json", batch=...)` reads the Chrome/Kineto JSON that export_chrome_trace
writes (".json" or ".json.gz"). Per profiled step (a `ProfilerStep#N` span of the main thread):

- io: the main thread's `enumerate(DataLoader)#...` spans (the wait for the next batch);
- h2d: top-level `aten::to` / `aten::_to_copy` / `aten::copy_` before backward, outside the
  data loader (the batch's copy to the device);
- forward: the rest of the time before backward (zero_grad, forward, loss);
- backward: from the first `autograd::engine::evaluate_function` span to the end of the last,
  on any thread; each parameter's gradient is ready at the end of its
  `evaluate_function: torch::autograd::AccumulateGrad` span (which holds DDP's hook), its size
  from the `torch::autograd::AccumulateGrad` op's input shape and type (record_shapes);
- exposed communication: the main thread's idle time between the end of backward and the
  optimizer step (DDP's finalize waits there for its last all-reduces);
- update: the rest of the step after backward (DDP's copy of the reduced buckets into the
  gradients, the optimizer step);
- messages: the collectives the job launched (`c10d::allreduce_`; FSDP's `c10d::allgather_` and
  `c10d::_reduce_scatter_base_`; their sizes, the whole buffer) and their spans on the communication
  threads (`gloo:all_reduce`, `gloo:all_gather`, the nccl ones);
- comm_blocked: the time in the step that communication runs (its spans, and the launch ops' own
  spans on the job's thread: gloo's reduce-scatter clones its whole input there) while the job's
  thread runs no other operator (`aten::`): the communication the job waited for, wherever it waited (DDP: after
  backward; FSDP on CPU tensors, whose collectives block where they are issued: in forward and
  backward too).

An FSDP job (its `FullyShardedDataParallel.*` spans in the trace) accumulates one gradient per FSDP
unit (its flat parameter, use_orig_params=False): each gradient is a unit. The network then marks
each as a block of its own, but the gradient ready last (the root unit: the modules outside the
wrapped ones, first in forward, the embeddings of a transformer), which stays in no block: the
units `predict --strategy fsdp` gathers are the job's (gdlbench.model.phases.shard_units).

The phases are the medians over the profiled steps. Jobs that run on the CPU only, in this
version: a trace with GPU kernels is refused (there the phases are the kernels' times on their
streams, not the CPU spans that launched them). The gradients become a network of "params"
layers in forward order (the reverse of the order their gradients became ready), one per
gradient, so that the model's backward order is the job's own; DDP's buckets (the `ddp` preset)
are then built from these sizes in that order, as DDP rebuilds them after its first step.

Why a parser of our own: Holistic Trace Analysis reads these traces but centres on GPU kernels
(its breakdowns need a GPU stream) and brings pandas and plotly; Chakra converts PyTorch's
execution trace (a second, separate recording) into its protobuf graph. What this needs is a
dozen span names of the Chrome JSON that torch writes, so plain json keeps the dependency at zero
and the rules stated here.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import UsageError

STEP = "ProfilerStep#"
DATA = "enumerate(DataLoader)#"
BACKWARD = "autograd::engine::evaluate_function: "
ACCUMULATE = "torch::autograd::AccumulateGrad"
OPTIMIZER = "Optimizer.step#"
H2D_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")
# the collectives DDP and FSDP launch on the job's thread: DDP's all-reduce; FSDP's all-gather (on CPU
# tensors the list form, c10d::allgather_, into views of the whole buffer) and reduce-scatter
LAUNCH_OPS = ("c10d::allreduce_", "c10d::allgather_", "c10d::_allgather_base_", "c10d::_reduce_scatter_base_",
              "c10d::reduce_scatter_")
# their spans on the communication threads (gloo runs _reduce_scatter_base_ as an all-reduce of the whole buffer)
COMM_SPANS = ("gloo:all_reduce", "nccl:all_reduce", "gloo:all_gather", "nccl:all_gather", "gloo:reduce_scatter",
              "nccl:reduce_scatter")
FSDP = "FullyShardedDataParallel."  # FSDP's own spans (its hooks): the trace is an FSDP job's
DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2, "bfloat16": 2,
               "long int": 8, "int": 4}
TAIL = "backward tail"  # the backward work after the last gradient (a layer without parameters)
# Operators bound by arithmetic (matrix products, convolutions, attention). The rest of backward
# (normalisations, activations, softmax, embeddings, accumulation) streams memory, and slows more
# while communication copies and sends beside it (gdlbench.primitives.gloo.contention measures both kinds).
COMPUTE_BOUND = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul",
                 "aten::linear", "aten::_addmm_activation")
COMPUTE_BOUND_PREFIXES = ("aten::_scaled_dot_product", "aten::convolution", "aten::_convolution",
                          "aten::mkldnn_convolution", "aten::cudnn_convolution")


@dataclass(frozen=True)
class Gradient:
    """One parameter's gradient: its shape, bytes, and when it became ready (us from the start of
    backward, the median over the profiled steps)."""

    shape: tuple[int, ...]
    bytes: int
    ready_us: float


@dataclass(frozen=True)
class TracedMessage:
    """A collective the job launched: its size, when the main thread launched it and when the
    communication thread ran it (us from the start of backward)."""

    name: str
    bytes: int
    launch_us: float
    start_us: float | None
    end_us: float | None
    launch_dur_us: float = 0.0  # the launch op's own span on the job's thread (gloo's reduce-scatter clones its input there)


@dataclass
class StepPhases:
    """One profiled step, in microseconds."""

    step: str
    total_us: float
    io_us: float
    h2d_us: float
    forward_us: float
    backward_us: float
    exposed_comm_us: float
    update_us: float
    gradients: list[Gradient]
    messages: list[TracedMessage]
    # the profiler's recorded spans that started in each phase (what its own cost scales with)
    events: dict[str, int] = field(default_factory=dict)
    grad_events: list[int] = field(default_factory=list)  # recorded in backward before each gradient was ready
    # per gradient (and last, the tail after the last one): the share of backward's time up to it
    # spent outside the compute-bound operators (COMPUTE_BOUND)
    memory_share: list[float] = field(default_factory=list)
    comm_blocked_us: float = 0.0  # communication while the job's thread ran no operator (module docstring)

    def without_profiler_cost(self, us_per_event: float) -> StepPhases:
        """This step with the profiler's cost taken out: us_per_event for every span it recorded."""
        def less(t: float, n: int) -> float:
            return max(0.0, t - us_per_event * n)

        e = self.events
        grads = [Gradient(g.shape, g.bytes, less(g.ready_us, n)) for g, n in zip(self.gradients, self.grad_events,
                                                                                 strict=True)]
        parts = {k: less(getattr(self, f"{k}_us"), e.get(k, 0)) for k in ("io", "h2d", "forward", "backward", "update")}
        total = sum(parts.values()) + self.exposed_comm_us
        return StepPhases(self.step, total, parts["io"], parts["h2d"], parts["forward"], parts["backward"],
                          self.exposed_comm_us, parts["update"], grads, self.messages, dict(e), list(self.grad_events),
                          list(self.memory_share), self.comm_blocked_us)


@dataclass
class ImportedTrace:
    """A job's profiled steps and their medians (module docstring)."""

    source: str
    batch: int
    world_size: int
    backend: str | None
    steps: list[StepPhases]
    name: str = "pytorch-job"
    notes: list[str] = field(default_factory=list)
    profiler_us_per_event: float = 0.0  # the profiler's cost taken out of every recorded span
    fsdp: bool = False  # an FSDP job's: one gradient per FSDP unit (module docstring)

    def median(self, key: str) -> float:
        return statistics.median(float(getattr(s, key)) for s in self.steps)

    def spread(self, key: str) -> float:
        """(max - min) / median over the profiled steps."""
        values = [float(getattr(s, key)) for s in self.steps]
        med = statistics.median(values)
        return (max(values) - min(values)) / med if med > 0 else 0.0

    @property
    def gradients(self) -> list[Gradient]:
        """The gradients in the order they became ready, ready times the medians over the steps."""
        first = self.steps[0].gradients
        return [Gradient(g.shape, g.bytes, statistics.median(s.gradients[i].ready_us for s in self.steps))
                for i, g in enumerate(first)]

    @property
    def memory_shares(self) -> list[float]:
        """Per gradient, then the tail: the median over the steps of StepPhases.memory_share."""
        return [statistics.median(s.memory_share[i] for s in self.steps)
                for i in range(len(self.steps[0].memory_share))]

    def network_spec(self) -> dict[str, Any]:
        """The job's gradients as a gdlbench network: "params" layers in forward order (the
        reverse of the ready order), then nothing; a layer without parameters first in forward
        order takes the backward work after the last gradient."""
        grads = self.gradients
        layers: list[dict[str, Any]] = []
        backward = self.median("backward_us")
        if grads and backward > grads[-1].ready_us:
            layers.append({"name": TAIL, "type": "params", "shapes": []})
        width = len(str(len(grads)))
        for i in reversed(range(len(grads))):
            g = grads[i]
            layer = {"name": _grad_name(i, g, width), "type": "params", "shapes": [list(g.shape)]}
            if self.fsdp and i < len(grads) - 1:  # an FSDP unit of its own; the last ready is the root's
                layer["block"] = f"unit{i:0{width}d}"
            layers.append(layer)
        return {"name": self.name, "input": [1, 1, 1], "layers": layers,
                "description": f"the gradients of the job traced in {self.source}, in forward order",
                "source": self.source}

    def phases_doc(self) -> dict[str, Any]:
        """The phases JSON that `gdlbench predict --phases` reads (gdlbench.model.phases), with the
        network of the job's gradients beside it ("network") and the trace's own measurements
        ("trace")."""
        grads = self.gradients
        width = len(str(len(grads)))
        backward = self.median("backward_us")
        rows: list[dict[str, Any]] = [{"phase": ph, "time_us": self.median(f"{ph}_us")}
                                      for ph in ("io", "h2d", "forward", "backward", "update")]
        prev = 0.0
        shares = self.memory_shares
        for i, g in enumerate(grads):
            rows.append({"layer": _grad_name(i, g, width), "phase": "backward", "time_us": max(0.0, g.ready_us - prev),
                         "memory_share": shares[i]})
            prev = max(prev, g.ready_us)
        if backward > prev and grads:
            rows.append({"layer": TAIL, "phase": "backward", "time_us": backward - prev, "memory_share": shares[-1]})
        layer_rows = [r for r in rows if "layer" in r]
        spent = sum(r["time_us"] for r in layer_rows)
        return {
            "command": "import-trace",
            "args": {"net": self.name, "batch": self.batch, "trace": self.source},
            "env": {"world_size": self.world_size},
            "summary": {"batch": self.batch, "workers": self.world_size, "backend": self.backend,
                        "steps": len(self.steps), "step_us": self.median("total_us"),
                        "step_spread": self.spread("total_us"),
                        "exposed_comm_us": self.median("exposed_comm_us"),
                        "comm_blocked_us": self.median("comm_blocked_us"), "fsdp": self.fsdp,
                        "gradient_bytes": sum(g.bytes for g in grads), "gradients": len(grads),
                        "backward_memory_share": sum(r["time_us"] * r["memory_share"] for r in layer_rows) / spent
                        if spent > 0 else 0.0,
                        "profiler_us_per_event": self.profiler_us_per_event},
            "network": self.network_spec(),
            "rows": rows,
            "trace": {"steps": [_step_dict(s) for s in self.steps], "notes": self.notes},
        }


def _grad_name(i: int, g: Gradient, width: int) -> str:
    return f"grad{i:0{width}d} {'x'.join(map(str, g.shape)) or 'scalar'}"


def _step_dict(s: StepPhases) -> dict[str, Any]:
    return {"step": s.step, "total_us": s.total_us, "io_us": s.io_us, "h2d_us": s.h2d_us, "forward_us": s.forward_us,
            "backward_us": s.backward_us, "exposed_comm_us": s.exposed_comm_us, "update_us": s.update_us,
            "comm_blocked_us": s.comm_blocked_us,
            "events": s.events, "messages": [{"name": m.name, "bytes": m.bytes, "launch_us": m.launch_us, "start_us": m.start_us,
                          "end_us": m.end_us} for m in s.messages]}


# ---------------------------------------------------------------------------------------------


def _load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"trace {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        doc = json.loads(text)
    except (OSError, EOFError, ValueError):
        raise UsageError(f"trace {path}: not a Chrome trace JSON (torch.profiler's export_chrome_trace writes "
                         "one; other profilers' formats are not read)") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UsageError(f"trace {path}: no traceEvents: not a Chrome trace")
    return doc


def _spans(doc: dict[str, Any], path: str) -> list[dict[str, Any]]:
    out = []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur, name = e.get("ts"), e.get("dur"), e.get("name")
        if (isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and isinstance(name, str)
                and math.isfinite(ts) and math.isfinite(dur) and dur >= 0):
            out.append(e)
    if any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in out):
        raise UsageError(f"trace {path}: the job ran GPU kernels: this version reads CPU jobs only (on a GPU the "
                         "phases are the kernels' times, not the CPU spans that launched them)")
    if not any(e.get("cat") in ("cpu_op", "user_annotation") for e in out):
        raise UsageError(f"trace {path}: no PyTorch operator spans (cpu_op): not a torch.profiler trace, "
                         "or the CPU activity was not recorded (activities=[ProfilerActivity.CPU, ...])")
    return out


def _dims_bytes(e: dict[str, Any], path: str) -> tuple[tuple[int, ...], int]:
    args = e.get("args") or {}
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        raise UsageError(f"trace {path}: {e['name']} has no input shapes: profile with record_shapes=True "
                         "(the gradient and message sizes come from them)")
    shape = dims[0]
    while shape and isinstance(shape[0], list):  # a tensor list: its first tensor
        shape = shape[0]
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise UsageError(f"trace {path}: {e['name']} has an unreadable input shape {dims[0]!r}")
    dtype = types[0] if isinstance(types, list) and types and isinstance(types[0], str) else "float"
    size = DTYPE_BYTES.get(dtype, 4)
    return tuple(shape), math.prod(shape) * size


def _inside(e: dict[str, Any], start: float, end: float) -> bool:
    return bool(start <= e["ts"] and e["ts"] + e["dur"] <= end + 1e-3)


def _top_level(spans: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans not inside another span of the list (same thread)."""
    out: list[dict[str, Any]] = []
    end_by_tid: dict[Any, float] = {}
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end_by_tid.get(e.get("tid"), -math.inf):
            out.append(e)
            end_by_tid[e.get("tid")] = e["ts"] + e["dur"]
    return out


def _union(spans: Sequence[dict[str, Any]], start: float, end: float) -> float:
    """The time within [start, end] covered by the spans."""
    covered, edge = 0.0, start
    for e in sorted(spans, key=lambda e: e["ts"]):
        s, t = max(e["ts"], edge), min(e["ts"] + e["dur"], end)
        if t > s:
            covered += t - s
            edge = t
    return covered


def _compute_bound(name: str) -> bool:
    return name in COMPUTE_BOUND or name.startswith(COMPUTE_BOUND_PREFIXES)


def _memory_share(bwd: Sequence[dict[str, Any]], inside: Sequence[dict[str, Any]],
                  ready_at: Sequence[float]) -> list[float]:
    """Per gradient, and last for the tail after the last one: the share of the backward work
    that ended since the gradient before it spent outside compute-bound operators."""
    compute = _top_level([e for e in inside if _compute_bound(e["name"])])
    by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in compute:
        by_tid.setdefault(e.get("tid"), []).append(e)
    starts = {tid: [e["ts"] for e in es] for tid, es in by_tid.items()}
    total = [0.0] * (len(ready_at) + 1)
    bound = [0.0] * (len(ready_at) + 1)
    for e in _top_level(bwd):
        end = e["ts"] + e["dur"]
        i = bisect.bisect_left(ready_at, end - 1e-3)  # the first gradient ready when it ended
        ops, at = by_tid.get(e.get("tid"), []), starts.get(e.get("tid"), [])
        first, last = bisect.bisect_left(at, e["ts"]), bisect.bisect_right(at, end)
        total[i] += e["dur"]
        bound[i] += sum(op["dur"] for op in ops[first:last] if _inside(op, e["ts"], end))
    return [1.0 - b / t if t > 0 else 0.0 for b, t in zip(bound, total, strict=True)]


def _runs(spans: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each launched collective's span on a communication thread: the k-th launch runs as the
    k-th communication span (process groups run their collectives in launch order). A run can
    outlast the step that launched it, so the two are paired over the whole trace."""
    launches = sorted((e for e in spans if e["name"] in LAUNCH_OPS), key=lambda e: e["ts"])
    runs = sorted((e for e in spans if e["name"] in COMM_SPANS), key=lambda e: e["ts"])
    return {id(launch): run for launch, run in zip(launches, runs, strict=False)}


def _message_bytes(e: dict[str, Any], path: str, world: int) -> int:
    """A launched collective's whole buffer: all-reduce's tensor; reduce-scatter's input (its second
    argument, the first is the rank's output); all-gather's input times the ranks."""
    args = e.get("args") or {}
    dims, types = args.get("Input Dims"), args.get("Input type")
    if e["name"] == "c10d::allreduce_" or not isinstance(dims, list) or len(dims) < 2:
        return _dims_bytes(e, path)[1]
    moved = dict(e, args={"Input Dims": [dims[1]], "Input type": types[1:] if isinstance(types, list) else types})
    nbytes = _dims_bytes(moved, path)[1]
    return nbytes * world if "allgather" in e["name"] else nbytes


def _blocked(inside: Sequence[dict[str, Any]], main: Any, s0: float, s1: float) -> float:
    """The time in [s0, s1] that communication runs (its spans, and the launch ops on the job's
    thread: gloo's reduce-scatter clones its input there) while the job's thread runs no other
    operator."""
    launches = [e for e in inside if e.get("tid") == main and e["name"] in LAUNCH_OPS]
    comm = sorted((e for e in inside if e["name"] in COMM_SPANS or e in launches), key=lambda e: e["ts"])
    ops = _top_level([e for e in inside if e.get("tid") == main and e["name"].startswith("aten::")
                      and not any(_inside(e, c["ts"], c["ts"] + c["dur"]) for c in launches)])
    total, edge = 0.0, s0
    for c in comm:
        a, b = max(c["ts"], edge), min(c["ts"] + c["dur"], s1)
        if b > a:
            total += (b - a) - _union([o for o in ops if o["ts"] < b and o["ts"] + o["dur"] > a], a, b)
            edge = b
    return total


def _step(step: dict[str, Any], spans: Sequence[dict[str, Any]], runs: dict[int, dict[str, Any]],
          path: str, world: int = 1) -> StepPhases | None:
    s0, s1 = step["ts"], step["ts"] + step["dur"]
    main = step.get("tid")
    inside = [e for e in spans if _inside(e, s0, s1) and e is not step]
    bwd = [e for e in inside if e["name"].startswith(BACKWARD)]
    if not bwd:
        return None
    b0 = min(e["ts"] for e in bwd)
    b1 = max(e["ts"] + e["dur"] for e in bwd)
    on_main = [e for e in inside if e.get("tid") == main]
    data = [e for e in on_main if e["name"].startswith(DATA) and e["ts"] < b0]
    io = _union(data, s0, b0)
    # copies outside every other span (a copy inside the model's forward, or the data loader's, is theirs)
    copies = [e for e in _top_level([e for e in on_main if e["ts"] < b0]) if e["name"] in H2D_OPS]
    h2d = _union(copies, s0, b0)
    forward = max(0.0, (b0 - s0) - io - h2d)

    ready: list[Gradient] = []
    ops = [e for e in inside if e["name"] == ACCUMULATE]
    for outer in sorted((e for e in bwd if e["name"] == BACKWARD + ACCUMULATE), key=lambda e: e["ts"] + e["dur"]):
        inner = next((e for e in ops if e.get("tid") == outer.get("tid")
                      and _inside(e, outer["ts"], outer["ts"] + outer["dur"])), None)
        if inner is None:
            raise UsageError(f"trace {path}: an AccumulateGrad step without its operator span "
                             "(profile with record_shapes=True and the CPU activity)")
        shape, nbytes = _dims_bytes(inner, path)
        ready.append(Gradient(shape, nbytes, outer["ts"] + outer["dur"] - b0))

    opt = [e for e in on_main if e["name"].startswith(OPTIMIZER) and e["ts"] >= b1]
    tail_end = min((e["ts"] for e in opt), default=s1)
    after = _top_level([e for e in on_main if e["ts"] >= b1 and e["ts"] < tail_end])
    exposed = max(0.0, (tail_end - b1) - _union(after, b1, tail_end))
    update = max(0.0, (s1 - b1) - exposed)

    messages = []
    for e in sorted((e for e in on_main if e["name"] in LAUNCH_OPS), key=lambda e: e["ts"]):
        nbytes = _message_bytes(e, path, world)
        run = runs.get(id(e))
        messages.append(TracedMessage(e["name"], nbytes, e["ts"] - b0,
                                      None if run is None else run["ts"] - b0,
                                      None if run is None else run["ts"] + run["dur"] - b0, e["dur"]))
    recorded = sorted(e["ts"] for e in inside if e["name"] not in COMM_SPANS)  # the communication threads' aside
    in_data = sum(1 for e in inside if any(_inside(e, d["ts"], d["ts"] + d["dur"]) for d in data))
    in_copies = sum(1 for e in inside if any(_inside(e, c["ts"], c["ts"] + c["dur"]) for c in copies))
    before = sum(1 for t in recorded if t < b0)
    events = {"io": in_data, "h2d": in_copies, "forward": max(0, before - in_data - in_copies),
              "backward": sum(1 for t in recorded if b0 <= t < b1), "update": sum(1 for t in recorded if t >= b1)}
    first = bisect.bisect_left(recorded, b0)
    grad_events = [bisect.bisect_left(recorded, b0 + g.ready_us) - first for g in ready]
    return StepPhases(step["name"], step["dur"], io, h2d, forward, b1 - b0, exposed, update, ready, messages,
                      events, grad_events, _memory_share(bwd, inside, [b0 + g.ready_us for g in ready]),
                      _blocked(inside, main, s0, s1))


def _distributed(doc: dict[str, Any]) -> tuple[int, str | None]:
    """(world size, backend) from the trace's distributedInfo (torch writes it): (1, None) without."""
    found = doc.get("distributedInfo")
    info: dict[str, Any] = found if isinstance(found, dict) else {}
    world = info.get("world_size", 1)
    backend = info.get("backend")
    return (world if isinstance(world, int) and world >= 1 else 1), (backend if isinstance(backend, str) else None)


def import_trace(path: str | Path, batch: int, name: str | None = None, step_us: float | None = None) -> ImportedTrace:
    """The profiled steps of a torch.profiler Chrome trace (module docstring). batch: the
    per-worker batch the job ran (the trace does not record it). step_us: the job's step time
    without the profiler (its own log's, on the traced configuration): the profiler's cost, the
    difference spread evenly over the spans it recorded, is taken out of every phase and every
    gradient's ready time. Without it the phases hold that cost (on CPU jobs with record_shapes,
    about 20 us a span: 5-15 % of a step)."""
    if step_us is not None and (isinstance(step_us, bool) or not isinstance(step_us, (int, float))
                                or not math.isfinite(step_us) or step_us <= 0):
        raise UsageError(f"--step-ms must be a positive number, got {step_us!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise UsageError(f"--batch must be a positive integer, got {batch!r}")
    where = str(path)
    doc = _load(path)
    spans = _spans(doc, where)
    steps = sorted((e for e in spans if e["name"].startswith(STEP)), key=lambda e: e["ts"])
    if not steps:
        raise UsageError(f"trace {where}: no step boundary (no ProfilerStep# spans): call prof.step() after each "
                         "training step inside the profiler")
    world, backend = _distributed(doc)
    runs = _runs(spans)
    parsed = [p for p in (_step(s, spans, runs, where, world) for s in steps) if p is not None]
    if not parsed:
        raise UsageError(f"trace {where}: no backward in the profiled steps (no autograd evaluate_function spans): "
                         "profile whole training steps")
    counts = {len(p.gradients) for p in parsed}
    if len(counts) > 1 or 0 in counts:
        raise UsageError(f"trace {where}: the profiled steps have {sorted(counts)} gradients: every step must "
                         "compute the same parameters' gradients (record_shapes=True)")
    shapes = [[g.shape for g in p.gradients] for p in parsed]
    if any(s != shapes[0] for s in shapes):
        raise UsageError(f"trace {where}: the gradients became ready in different orders in different steps")
    notes = []
    if world > 1:
        notes.append(f"traced on {world} ranks: backward's times hold that run's communication beside it, so a "
                     "prediction that adds a measured contention (allreduce --beside-compute) counts it twice; "
                     "profile one rank to predict other configurations")
    if len(parsed) < len(steps):
        notes.append(f"{len(steps) - len(parsed)} profiled step(s) without backward left out")
    cost = 0.0
    if step_us is not None:
        profiled = statistics.median(p.total_us for p in parsed)
        events = statistics.median(sum(p.events.values()) for p in parsed)
        cost = max(0.0, (profiled - step_us) / events) if events else 0.0
        if profiled < step_us:
            notes.append(f"the profiled steps ({profiled / 1e3:.1f} ms) are faster than the step without the profiler "
                         f"({step_us / 1e3:.1f} ms): nothing taken out")
        parsed = [p.without_profiler_cost(cost) for p in parsed]
        notes.append(f"the profiler's cost taken out: {cost:.2f} us for each of the {events:.0f} spans of a step "
                     f"(profiled {profiled / 1e3:.1f} ms, without the profiler {step_us / 1e3:.1f} ms)")
    else:
        notes.append("the profiler's own cost is in these times (give the step time without the profiler to "
                     "take it out)")
    fsdp = any(e["name"].startswith(FSDP) for e in spans)
    if fsdp:
        notes.append(f"an FSDP job: its {len(parsed[0].gradients)} gradients are its units' flat parameters, the last "
                     "ready the root unit's")
    return ImportedTrace(where, batch, world, backend, parsed, name or Path(where).name.split(".")[0], notes, cost,
                         fsdp)
