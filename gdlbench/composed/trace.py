"""The traced iterations of `gdlbench iteration` in the Chrome trace event format, which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

    doc = gdlbench.composed.trace.chrome_trace(result)     # result: an IterationResult; or result.chrome_trace()
    json.dump(doc, open("iteration.json", "w"))

One process per rank: the composed iteration of every strategy, one after another (the median
round of each, times on that rank's clock from the iteration's start, ranks started together by
a barrier), with one track per thread: compute (the main thread, or the CUDA compute stream),
communication (the communication thread, or the NCCL stream) and the I/O prefetch thread. One more
process holds the isolated measurements, laid out as the model composes them for each strategy,
under the same offsets: the two can be read one above the other. Times in microseconds; every
event is a complete event (ph "X") with a duration, and metadata events (ph "M") name every
process and thread.
"""

from __future__ import annotations

from typing import Any

from ..model.phases import Span, message_label

COMPUTE, COMM, IO = 1, 2, 3
GAP_FRACTION = 0.05  # space between consecutive strategies' iterations, of the longest one
MODEL_LANES = {"io": 1, "h2d": 2, "forward": 3, "backward": 4, "comm": 5, "update": 6, "io (prefetch thread)": 7}


def _model_lane(span: Span) -> int:
    """The model's timeline lane as a track; the prefetched read (beside the wait for it) apart."""
    return MODEL_LANES["io (prefetch thread)" if span["lane"] == "io" and "prefetch thread" in span["name"] else span["lane"]]


class TracedSpan(Span):
    """A span of a traced iteration: the thread that ran it, and what the Chrome trace shows with it."""

    thread: int  # COMPUTE, COMM or IO
    args: dict[str, Any]


def iteration_spans(trace: dict[str, Any], layer_names: list[str],
                    message_layers: list[list[str]], labels: list[str] | None = None) -> list[TracedSpan]:
    """One traced iteration as spans: lanes iteration, io, h2d, forward, backward, comm, wait,
    update; threads COMPUTE, COMM, IO. labels: each message's name (default: its layers). A
    layer's span holds any wait for the all-gather it needs (a sharded strategy's)."""
    t = trace
    spans: list[TracedSpan] = []

    def add(lane: str, thread: int, name: str, start: float, end: float, **args: Any) -> None:
        spans.append({"lane": lane, "thread": thread, "name": name, "start_us": start, "end_us": max(start, end),
                      "args": args})

    add("iteration", COMPUTE, "iteration", 0.0, max(t["update_end_us"], t.get("end_us", 0.0)))
    if t["io_prefetch"]:
        add("io", COMPUTE, "wait for the prefetched batch", 0.0, t["io_wait_end_us"])
        add("io", IO, "read the next batch (prefetch thread)", t["io_start_us"], t["io_end_us"])
    elif t["io_end_us"] > t["io_start_us"]:
        add("io", COMPUTE, "read the batch", t["io_start_us"], t["io_end_us"])
    add("h2d", COMPUTE, "copy the batch (h2d)", t["io_wait_end_us"], t["h2d_end_us"])
    n = len(layer_names)
    fwait = t.get("layer_forward_wait_us") or [0.0] * n
    bwait = t.get("layer_backward_wait_us") or [0.0] * n
    prev = t["h2d_end_us"]
    for name, end, wait in zip(layer_names, t["layer_forward_end_us"], fwait, strict=True):
        if wait > 0:  # a sharded strategy's layer waiting for the all-gather of its unit
            add("wait", COMPUTE, f"wait for the all-gather ({name})", prev, prev + wait)
        add("forward", COMPUTE, name, prev + wait, end)
        prev = end
    add("backward", COMPUTE, "zero the activation gradients", t["forward_end_us"], t["zero_end_us"])
    prev = t["zero_end_us"]
    for name, end, wait in reversed(list(zip(layer_names, t["layer_backward_end_us"], bwait, strict=True))):
        if wait > 0:
            add("wait", COMPUTE, f"wait for the all-gather ({name})", prev, prev + wait)
        add("backward", COMPUTE, name, prev + wait, end)
        prev = end
    for i, (ready, s, e) in enumerate(zip(t["message_ready_us"], t["message_start_us"], t["message_end_us"],
                                          strict=True)):
        add("comm", COMM, labels[i] if labels else message_label(message_layers[i]), s, e, message=i, ready_us=ready,
            layers=message_layers[i], **({"compute_waited_us": t["message_wait_us"][i]} if t.get("message_wait_us") else {}))
    if t["comm_end_us"] > t["backward_end_us"]:
        add("wait", COMPUTE, "wait for the messages", t["backward_end_us"], t["comm_end_us"])
    add("update", COMPUTE, "SGD update", t["comm_end_us"], t["update_end_us"])
    return spans


def _meta(pid: int, tid: int, kind: str, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": name}}


def chrome_trace(result: Any) -> dict[str, Any]:
    """result: an IterationResult. Returns {"traceEvents": [...], "displayTimeUnit": "ms",
    "metadata": {...}} (the module docstring says what is where)."""
    cuda = result.device == "cuda"
    layer_names = [la["name"] for la in result.layers]
    events: list[dict[str, Any]] = []
    world = result.world_size
    model_pid = world
    for rank in range(world):
        events.append(_meta(rank, 0, "process_name", f"rank {rank}: composed iteration"))
        events.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
        for tid, name in ((COMPUTE, "compute stream" if cuda else "compute (main thread)"),
                          (COMM, "NCCL stream" if cuda else "communication thread"),
                          (IO, "I/O prefetch thread")):
            events.append(_meta(rank, tid, "thread_name", name))
    events.append(_meta(model_pid, 0, "process_name", "isolated phases (medians) as the model composes them"))
    events.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": model_pid, "tid": 0,
                   "args": {"sort_index": world}})
    for lane, tid in MODEL_LANES.items():
        events.append(_meta(model_pid, tid, "thread_name", lane))

    def extent(run: Any) -> float:  # the prefetch thread's read may end after the iteration
        return float(max([max(t["update_end_us"], t.get("end_us", 0.0), t["io_end_us"]) for t in run.traces]
                         + [sp["end_us"] for sp in run.prediction.timeline] + [run.predicted_us]))

    longest = max([extent(run) for run in result.runs] + [1.0])
    offset = 0.0
    for run in result.runs:
        name = run.strategy.name
        span = extent(run)
        for rank, trace in enumerate(run.traces):
            for sp in iteration_spans(trace, layer_names, run.plan.layers, run.plan.labels):
                label = f"{name}: iteration" if sp["lane"] == "iteration" else sp["name"]
                events.append({"name": label, "cat": sp["lane"], "ph": "X", "ts": offset + sp["start_us"],
                               "dur": sp["end_us"] - sp["start_us"], "pid": rank, "tid": sp["thread"],
                               "args": {"strategy": name, "phase": sp["lane"], **sp["args"]}})
        events.append({"name": f"{name}: predicted", "cat": "iteration", "ph": "X", "ts": offset,
                       "dur": run.predicted_us, "pid": model_pid, "tid": MODEL_LANES["update"],
                       "args": {"strategy": name, "error_pct": run.error_pct}})
        for sp in run.prediction.timeline:
            events.append({"name": sp["name"], "cat": sp["lane"], "ph": "X", "ts": offset + sp["start_us"],
                           "dur": max(0.0, sp["end_us"] - sp["start_us"]), "pid": model_pid,
                           "tid": _model_lane(sp), "args": {"strategy": name, "phase": sp["lane"]}})
        offset += span + GAP_FRACTION * longest
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "metadata": {"tool": "gdlbench iteration", "net": result.net, "batch": result.batch,
                         "device": result.device, "world_size": world,
                         "clock": "CUDA events (host steady clock for the I/O)" if cuda else "steady clock",
                         "strategies": [run.strategy.name for run in result.runs]}}
