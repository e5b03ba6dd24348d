"""`gdlbench iteration --trace`: the Chrome trace event format's rules (what Perfetto and
chrome://tracing need), one track per thread per rank, and every phase of every strategy there;
and the trace's stamps, which the model's table and the timeline plot read."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import run_cli

from gdlbench.composed.iteration import Iteration, layer_times, phase_times
from gdlbench.composed.trace import COMM, COMPUTE, IO, chrome_trace

MLP = str(Path(__file__).parent / "data" / "mlp.json")
CONVNET = str(Path(__file__).parent / "data" / "convnet.json")
PHASES = {"io", "h2d", "forward", "backward", "comm", "update"}


def check_chrome_trace(doc: dict) -> dict[int, dict[int, list[dict]]]:
    """The format's rules; returns the complete events per process and thread."""
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    names: dict[tuple, str] = {}
    tracks: dict[int, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    depth: dict[tuple, int] = defaultdict(int)
    for ev in doc["traceEvents"]:
        for key in ("name", "ph", "ts", "pid", "tid"):
            assert key in ev, (key, ev)
        assert isinstance(ev["ts"], (int, float)) and isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            if ev["name"] in ("process_name", "thread_name"):
                key = (ev["pid"],) if ev["name"] == "process_name" else (ev["pid"], ev["tid"])
                assert key not in names, f"{key} named twice"
                names[key] = ev["args"]["name"]
        elif ev["ph"] == "X":
            assert ev["dur"] >= 0, ev
            tracks[ev["pid"]][ev["tid"]].append(ev)
        elif ev["ph"] in ("B", "E"):
            depth[(ev["pid"], ev["tid"])] += 1 if ev["ph"] == "B" else -1
            assert depth[(ev["pid"], ev["tid"])] >= 0, ev
        else:
            pytest.fail(f"unexpected phase type {ev['ph']!r}")
    assert all(d == 0 for d in depth.values()), "begin/end events do not balance"
    for pid, threads in tracks.items():
        assert (pid,) in names, f"process {pid} has no name"
        for tid, events in threads.items():
            assert (pid, tid) in names, f"thread {pid}/{tid} has no name"
            # one track per thread: its events nest (a span inside another, or after it), never cross
            stack: list[float] = []
            for ev in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
                while stack and ev["ts"] >= stack[-1] - 1e-6:
                    stack.pop()
                assert not stack or ev["ts"] + ev["dur"] <= stack[-1] + 1e-3, f"crossing spans on {pid}/{tid}: {ev}"
                stack.append(ev["ts"] + ev["dur"])
    return tracks


def test_trace_of_two_ranks_follows_the_format(tmp_path):
    out = tmp_path / "trace.json"
    p = run_cli("iteration", "--net", CONVNET, "--batch", "2", "--strategy", "serial,wfbp,wfbp-fusion,mxnet",
                "--iters", "2", "--warmup", "1", "--threads", "1", "--io-dir", str(tmp_path), "--trace", str(out),
                nranks=2)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    tracks = check_chrome_trace(doc)
    assert set(tracks) == {0, 1, 2}  # two ranks, then the isolated phases as the model composes them
    strategies = ["serial", "wfbp", "wfbp-fusion", "mxnet"]
    for rank in (0, 1):
        threads = tracks[rank]
        assert set(threads) == {COMPUTE, COMM, IO}
        for name in strategies:
            phases = {ev["cat"] for evs in threads.values() for ev in evs if ev["args"]["strategy"] == name}
            assert phases >= PHASES, (rank, name, phases)
        assert all(ev["cat"] == "comm" for ev in threads[COMM])
    model_phases = {ev["cat"] for evs in tracks[2].values() for ev in evs}
    assert model_phases >= PHASES
    # the strategies follow one another in time on every rank
    starts = [next(ev["ts"] for ev in tracks[0][COMPUTE] if ev["name"] == f"{s}: iteration") for s in strategies]
    assert starts == sorted(starts)


def test_trace_stamps_in_order_and_the_table_reads_them():
    r = Iteration(CONVNET, batch=2, device="cpu", strategy="serial,wfbp", iters=2, warmup=0, io=False).measure()
    for run in r.runs:
        assert len(run.traces) == 1
        t = run.trace
        assert 0 <= t["io_wait_end_us"] <= t["h2d_end_us"] <= t["forward_end_us"] <= t["zero_end_us"]
        assert t["zero_end_us"] <= t["backward_end_us"] <= t["comm_end_us"] <= t["update_end_us"]
        fwd, bwd = layer_times(t)
        assert all(x >= 0 for x in fwd + bwd)
        assert sum(fwd) == pytest.approx(phase_times(t)["forward"], rel=1e-6)
        assert sum(bwd) + (t["zero_end_us"] - t["forward_end_us"]) == pytest.approx(phase_times(t)["backward"])
        # each message starts once ready, in order
        for ready, start, end in zip(t["message_ready_us"], t["message_start_us"], t["message_end_us"], strict=True):
            assert ready <= start + 1e-3 and start <= end
        assert set(r.phase_table()[run.strategy.name]) == {"h2d", "forward", "backward", "comm", "update"}
    tracks = check_chrome_trace(chrome_trace(r))
    assert set(tracks) == {0, 1}
    # the measured timeline plot reads the same spans
    names = [la["name"] for la in r.layers]
    spans = r.runs[1].measured_timeline(names).timeline
    assert {s["lane"] for s in spans} >= {"h2d", "forward", "backward", "comm", "update"}
    assert sum(s["name"] in names for s in spans if s["lane"] == "backward") == len(names)


def test_trace_with_io_prefetch_has_the_prefetch_thread(tmp_path):
    r = Iteration(MLP, batch=2, device="cpu", strategy="serial,prefetch", iters=2, warmup=1, io=True,
                  io_dir=str(tmp_path)).measure()
    serial, prefetch = r.runs
    assert not serial.trace["io_prefetch"] and prefetch.trace["io_prefetch"]
    assert serial.trace["io_end_us"] > serial.trace["io_start_us"]
    tracks = check_chrome_trace(r.chrome_trace())
    io_events = [ev for ev in tracks[0][IO]]
    assert io_events and all(ev["args"]["strategy"] == "prefetch" for ev in io_events)


def test_trace_option_rejects_an_unwritable_path():
    p = run_cli("iteration", "--net", MLP, "--no-io", "--trace", "/proc/nope/trace.json")
    assert p.returncode == 2 and "--trace" in p.stderr and len(p.stderr.strip().splitlines()) == 1
