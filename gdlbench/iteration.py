"""The SGD iteration skeleton: a network's real layers, every phase measured in isolation, the
composed iteration run for real per strategy, and the model's prediction from the isolated
phases held against it.

    from gdlbench.iteration import Iteration
    result = Iteration("resnet50", batch=4, device="cpu", strategy="wfbp").measure()
    result.summary["error_pct"]

Phases (DESIGN.md section 3): io (read + decode a batch of JPEGs, gdlbench.io), h2d (on the CPU a
memcpy of the batch into the input buffer), forward and backward (per layer, each layer alone),
comm (each message of the strategy's plan alone, max over ranks), update (SGD with momentum over
the flat parameter buffer). The composed iteration runs io on a prefetch thread (when the strategy
prefetches), the messages on a communication thread (during backward for WFBP strategies, after
it otherwise), then the update; one sample per iteration, max over ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import ClassVar

from . import env
from ._native import MPI, _core, require_cuda
from .errors import UsageError
from .measurement import Measurement
from .model import Phases, Prediction, predict_iteration
from .model import plan_messages as model_plan_messages
from .network import Network, load_network
from .strategies import Strategy, get_strategies

# Per-device batch defaults: on a 2-core CPU the command ends in about a minute; on a GPU the
# per-GPU batches of the study (Shi, Wang and Chu): AlexNet 1024, GoogLeNet 128, ResNet-50 64.
DEFAULT_BATCH = {"cpu": {"alexnet": 16, "googlenet": 8, "googlenet-aux": 8, "resnet50": 4},
                 "cuda": {"alexnet": 1024, "googlenet": 128, "googlenet-aux": 128, "resnet50": 64}}
FALLBACK_BATCH = {"cpu": 2, "cuda": 32}


def default_batch(net: str, device: str) -> int:
    return DEFAULT_BATCH[device].get(net, FALLBACK_BATCH[device])


@dataclass
class MessagePlan:
    """How a strategy sends the gradients: (offset, count, ready_after layer) per message in the
    flat gradient buffer, in sending order, and the layers each message carries."""

    messages: list[tuple[int, int, int]]
    layers: list[list[str]]

    @property
    def bytes(self) -> list[int]:
        return [4 * count for _, count, _ in self.messages]


def plan_messages(net: Network, strategy: Strategy, offset_of: Callable[[int], int]) -> MessagePlan:
    """The strategy's messages (model.plan_messages: the model prices exactly what is sent) as
    ranges of the executor's flat gradient buffer."""
    messages, names = [], []
    for msg in model_plan_messages(net, strategy):
        low, high = min(msg["indices"]), max(msg["indices"])
        start = offset_of(low)
        end = offset_of(high) + net.layers[high].params
        messages.append((start, end - start, low))  # ready once its lowest layer's backward is done
        names.append(msg["layers"])
    return MessagePlan(messages, names)


def executed_algo(strategy: Strategy, workers: int) -> tuple[str, int]:
    """(gdlbench.collectives algorithm, parameter servers P) the executor sends messages with."""
    if strategy.collective == "ps":
        return "ps", min(strategy.servers or workers, workers)
    return strategy.algo or "library", 1


@dataclass
class StrategyRun:
    strategy: Strategy
    plan: MessagePlan
    message_times: list[Measurement]
    composed: Measurement
    trace: dict  # the last composed iteration on rank 0 (us from its start), for the timeline
    prediction: Prediction

    @property
    def predicted_us(self) -> float:
        return self.prediction.t_iter_us

    def measured_timeline(self, layer_names: list[str]) -> SimpleNamespace:
        """The traced iteration as spans, in the shape plots.plot_timeline draws."""
        t = self.trace
        spans = [{"lane": "io", "name": "wait for the batch", "start_us": 0.0, "end_us": t["io_wait_end_us"]},
                 {"lane": "h2d", "name": "copy the batch", "start_us": t["io_wait_end_us"], "end_us": t["h2d_end_us"]},
                 {"lane": "forward", "name": "forward", "start_us": t["h2d_end_us"], "end_us": t["forward_end_us"]}]
        prev = t["forward_end_us"]
        for i in reversed(range(len(layer_names))):
            end = t["layer_backward_end_us"][i]
            spans.append({"lane": "backward", "name": layer_names[i], "start_us": prev, "end_us": end})
            prev = end
        comm = 0.0
        for i, (s0, e0) in enumerate(zip(t["message_start_us"], t["message_end_us"], strict=True)):
            names = self.plan.layers[i]
            label = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]} ({len(names)} grads)"
            spans.append({"lane": "comm", "name": label, "start_us": s0, "end_us": e0})
            comm += e0 - s0
        spans.append({"lane": "update", "name": "SGD update", "start_us": t["comm_end_us"], "end_us": t["update_end_us"]})
        spans = [s for s in spans if s["end_us"] > s["start_us"]]
        return SimpleNamespace(timeline=spans, t_iter_us=t["update_end_us"], comm_us=comm,
                               comm_exposed_us=t["comm_end_us"] - t["backward_end_us"])

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_us - self.composed.median) / self.composed.median


@dataclass
class IterationResult:
    """Every phase alone, each layer alone, and per strategy its messages and the composed
    iteration against the model's prediction."""

    command: ClassVar[str] = "iteration"
    rank_reduction: ClassVar[str] = "max"
    net: str
    batch: int
    device: str
    world_size: int
    threads: int
    layers: list[dict]
    phases: dict[str, Measurement]
    runs: list[StrategyRun] = field(default_factory=list)
    overlap_efficiency: float = 1.0  # model.Phases.overlap_efficiency, as this run's device implies

    @property
    def measurement(self) -> Measurement:
        """The composed iteration of the first strategy (each run's is runs[i].composed)."""
        return self.runs[0].composed if self.runs else self.phases["forward"]

    def rows(self) -> list[dict]:
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
                         "error_pct": run.error_pct, "images_per_s": self.batch / (c.median * 1e-6),
                         "images_per_s_total": self.world_size * self.batch / (c.median * 1e-6),
                         "messages": len(run.plan.messages)})
        return rows

    @property
    def summary(self) -> dict:
        return {"batch": self.batch, "workers": self.world_size,
                "measured_us": {r.strategy.name: r.composed.median for r in self.runs},
                "predicted_us": {r.strategy.name: r.predicted_us for r in self.runs},
                "error_pct": {r.strategy.name: r.error_pct for r in self.runs},
                "phases_us": {k: m.median for k, m in self.phases.items()},
                "forward_sum_of_layers_us": sum(la["forward"].median for la in self.layers),
                "backward_sum_of_layers_us": sum(la["backward"].median for la in self.layers),
                "overlap_efficiency": self.overlap_efficiency}

    def phases_model(self) -> Phases:
        """The isolated phases as the model reads them."""
        p = self.phases
        return Phases(batch=self.batch, forward_us=p["forward"].median, backward_us=p["backward"].median,
                      io_us=p["io"].median if "io" in p else 0.0, h2d_us=p["h2d"].median,
                      update_us=p["update"].median,
                      layer_forward_us={la["name"]: la["forward"].median for la in self.layers},
                      layer_backward_us={la["name"]: la["backward"].median for la in self.layers},
                      net=self.net, workers=self.world_size, source="measured",
                      overlap_efficiency=self.overlap_efficiency)

    def top_layers(self, n: int = 5) -> list[dict]:
        total = sum(la["forward"].median + la["backward"].median for la in self.layers) or 1.0
        ranked = sorted(self.layers, key=lambda la: la["forward"].median + la["backward"].median, reverse=True)
        return [{"layer": la["name"], "type": la["type"], "forward_us": la["forward"].median,
                 "backward_us": la["backward"].median,
                 "share_pct": 100.0 * (la["forward"].median + la["backward"].median) / total} for la in ranked[:n]]


class Iteration:
    """Iteration(net, batch, device, strategy).measure() -> IterationResult."""

    def __init__(self, net: str | Network = "resnet50", batch: int | None = None, device: str = "auto",
                 strategy: str | list[Strategy] = "wfbp", *, iters: int = 5, warmup: int = 1,
                 threads: int | None = None, io: bool = True, io_dir: str | None = None,
                 io_threads: int | None = None, comm: MPI.Intracomm | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.net = load_network(net)
        self.device, self.device_why = env.resolve_device(device)
        self.batch = batch if batch is not None else default_batch(self.net.name, self.device)
        if self.batch < 1:
            raise UsageError(f"--batch must be >= 1, got {self.batch}")
        self.strategies = get_strategies(strategy) if isinstance(strategy, str) else list(strategy)
        self.skipped: list[str] = []
        if self.device == "cuda":  # the CUDA executor sends every message with NCCL's all-reduce
            self.skipped = [s.name for s in self.strategies if s.collective == "ps"]
            self.strategies = [s for s in self.strategies if s.collective != "ps"]
            if not self.strategies:
                raise UsageError("iteration --device cuda: parameter-server strategies run on the CPU executor only")
        if iters < 1 or warmup < 0:
            raise UsageError(f"need iters >= 1 and warmup >= 0, got {iters} and {warmup}")
        self.iters, self.warmup = iters, warmup
        self.threads = threads or env.default_threads()
        self.io, self.io_dir, self.io_threads = io, io_dir, io_threads
        self.comm = comm or MPI.COMM_WORLD
        self.progress = progress or (lambda _msg: None)

    def overlap_efficiency(self) -> float:
        """0 when this CPU's compute threads fill every core: the communication and the prefetched
        I/O that a strategy overlaps with compute are then CPU work on the same cores, and hide
        nothing. 1 on a GPU (NCCL, copy engines) or with idle cores left for them."""
        if self.device == "cuda":
            return 1.0
        return 0.0 if env.local_ranks() * self.threads >= env.usable_cores() else 1.0

    def _io_reader(self):
        """(the loader the composed iteration calls, t_io measured alone), or (None, None)."""
        if not self.io:
            return None, None
        from .io import (  # not `from . import io`: gdlbench.io is the function
            BatchReader,
            Dataset,
            time_read,
        )

        dataset = Dataset.ensure(self.io_dir, images=max(64, 4 * self.batch))
        threads = self.io_threads or self.threads
        alone = time_read(dataset, self.batch, threads=threads, decode=True, iters=self.iters,
                              warmup=self.warmup).measurement
        return BatchReader(dataset, self.batch, threads=threads, decode=True), alone

    def measure(self) -> IterationResult:
        _core.set_blas_threads(self.threads)
        _core.set_compute_threads(self.threads)
        specs = self.net.layer_specs()
        self.progress(f"building {self.net.name} at batch {self.batch} ({self.net.params:,} parameters)")
        if self.device == "cuda":
            cuda = require_cuda()
            net = cuda.Net(specs, self.batch)
            clock = "cuda-events"
        else:
            net = _core.Net(specs, self.batch)
            clock = "steady-clock"
        plan = dict(warmup=self.warmup, iters=self.iters)
        self.progress("forward, layer by layer")
        fwd = net.time_forward(**plan)
        self.progress("backward, layer by layer")
        bwd = net.time_backward(**plan)
        layers = []
        for spec, f, b in zip(specs, fwd, bwd, strict=True):
            layers.append({"name": spec["name"], "type": spec["type"], "params": spec["params"],
                           "forward": Measurement(f, clock, "the layer's forward alone"),
                           "backward": Measurement(b, clock, "the layer's backward (weights + data) alone")})
        phases: dict[str, Measurement] = {}
        reader, io_meas = self._io_reader()
        io_fn = reader.read_next if reader else None
        if io_meas is not None:
            phases["io"] = io_meas
        h2d = ("cudaMemcpyAsync of the batch from pinned host memory" if self.device == "cuda"
               else "memcpy of the batch into the input buffer (CPU stand-in for H2D)")
        phases["h2d"] = Measurement(net.time_h2d(**plan), clock, h2d)
        phases["forward"] = Measurement(net.time_forward_pass(**plan), clock, "the whole forward pass")
        phases["backward"] = Measurement(net.time_backward_pass(**plan), clock,
                                         "the whole backward pass (activation gradients zeroed first)")
        phases["update"] = Measurement(net.time_update(**plan), clock, "SGD with momentum over all parameters")
        result = IterationResult(self.net.name, self.batch, self.device, self.comm.Get_size(), self.threads, layers,
                                 phases, overlap_efficiency=self.overlap_efficiency())
        model_phases = result.phases_model()
        for strategy in self.strategies:
            mplan = plan_messages(self.net, strategy, net.layer_param_offset)
            algo, servers = executed_algo(strategy, self.comm.Get_size())
            if self.device == "cuda":
                algo = "library"  # ncclAllReduce
            self.progress(f"{strategy.name}: {len(mplan.messages)} messages alone, then the composed iteration")
            msg = [Measurement(s, "steady-clock", "one message alone (and, on a GPU, its stream sync), max over ranks")
                   for s in net.time_messages(mplan.messages, algo, servers, self.comm, **plan)]
            samples, trace = net.time_iteration(mplan.messages, strategy.overlap == "wfbp", algo, servers, self.comm,
                                                io_fn, strategy.io_prefetch, **plan)
            composed = Measurement(samples, "steady-clock", "one composed iteration, max over ranks")
            executed = replace(strategy, ps_pull="with_push")  # each message is one push+pull call here
            pred = predict_iteration(self.net, model_phases, None, executed, self.comm.Get_size(),
                                     message_costs_us=[m.median for m in msg])
            result.runs.append(StrategyRun(strategy, mplan, msg, composed, trace, pred))
        if reader:
            reader.close()
        return result
