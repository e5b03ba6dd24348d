"""The sharded strategies run for real by the CPU executor (ZeRO-1/2/3, FSDP): their plans over the
flat buffers, the parameters after real iterations on 1 and 2 ranks against the replicated
all-reduce strategy's (the sharded update must give the same parameters), a plan that does not fit
the net refused, and `gdlbench iteration` measuring them against the model."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_mpi

from gdlbench import _core
from gdlbench.composed.iteration import MESSAGE_KINDS, NO_PROGRESS_SLOWDOWN, plan_messages
from gdlbench.model.phases import plan_sharded
from gdlbench.model.strategies import SHARDED, get_strategies
from gdlbench.nets.network import load_network

CONVNET = str(Path(__file__).parent / "data" / "convnet.json")
# parameters not divisible by 2 ranks (fc1: 4 x 3 + 3 = 15), so the shards are uneven
ODD = {"name": "odd", "input": [4, 1, 1], "layers": [
    {"name": "fc1", "type": "fc", "out_features": 3}, {"name": "relu1", "type": "relu"},
    {"name": "fc2", "type": "fc", "out_features": 5}, {"name": "loss", "type": "softmax_xent"}]}


@pytest.mark.parametrize("name", list(SHARDED))
def test_sharded_plan_is_the_models_over_the_flat_buffers(name):
    net = load_network(CONVNET)
    exe = _core.Net(net.layer_specs(), 2)
    strategy = SHARDED[name]
    plan = plan_messages(net, strategy, exe.layer_param_offset)
    model = plan_sharded(net, strategy)
    assert len(plan.messages) == len(model) and plan.kinds == [m["collective"] for m in model]
    assert plan.bytes == [m["bytes"] for m in model]
    for (offset, _count, _, kind, issued, needed), m in zip(plan.messages, model, strict=True):
        assert kind == MESSAGE_KINDS[m["collective"]] and issued == m["ready"]
        assert needed == (-1 if m["needed_by"] is None else m["needed_by"])
        assert offset == min(exe.layer_param_offset(i) for i, la in enumerate(net.layers) if la.name in m["layers"])
    # every gradient reduce-scattered once
    covered = np.zeros(exe.param_count, dtype=int)
    for offset, count, *_ in (m for m, k in zip(plan.messages, plan.kinds, strict=True) if k == "reduce_scatter"):
        covered[offset:offset + count] += 1
    assert (covered == 1).all()


@pytest.mark.parametrize("strategy", ["zero3", "fsdp", "zero1"])
def test_a_unit_whose_layers_lie_apart_is_sent_piece_by_piece(strategy):
    """A transformer's root unit (the embeddings before the blocks, the last norm after them) holds
    two ranges of the flat buffers: the executor sends one message per range, back to back, each
    priced as a piece of the model's message (its cost the pieces' added)."""
    from gdlbench.model.phases import plan_sharded

    gpt = load_network("transformer:layers=2:hidden=16:heads=2:seq=4:vocab=11")
    offsets, at = {}, 0
    for i, layer in enumerate(gpt.layers):
        offsets[i] = at
        at += layer.params
    plan = plan_messages(gpt, SHARDED[strategy], offsets.__getitem__)
    model = plan_sharded(gpt, SHARDED[strategy])
    assert sorted(set(plan.priced_as)) == list(range(len(model)))
    index = {layer.name: i for i, layer in enumerate(gpt.layers)}
    for j, msg in enumerate(model):  # the pieces of message j tile its layers' parameters, in order
        pieces = [m for m, k in zip(plan.messages, plan.priced_as, strict=True) if k == j]
        want = sum(gpt.layers[index[n]].params for n in msg["layers"])
        assert sum(p[1] for p in pieces) == want
        assert all(p[0] + p[1] <= q[0] or q[0] + q[1] <= p[0] for p in pieces for q in pieces if p is not q)
    if strategy != "zero1":  # the root: embeddings (+ the tied head) and ln_f apart
        assert len(plan.messages) > len(model)
    assert plan.model_costs([1.0] * len(plan.messages)) == [
        float(plan.priced_as.count(j)) for j in range(len(model))]


def _run_one(exe, messages, iters=1):
    from mpi4py import MPI

    return exe.time_iteration(messages=messages, overlap=False, algo="library", servers=1, comm=MPI.COMM_WORLD,
                              io=None, prefetch=False, warmup=0, iters=iters)


def _first(ms, kind, change):
    """The plan with its first message of `kind` changed."""
    i = next(i for i, m in enumerate(ms) if m[3] == kind)
    return ms[:i] + [change(ms[i])] + ms[i + 1:]


@pytest.mark.parametrize("name, mutate, message", [
    ("zero3", lambda ms: [m for m in ms if m != ms[-1]], "the reduce-scatters"),  # a gradient never reduced
    ("zero3", lambda ms: _first(ms, 2, lambda m: (*m[:4], 1, 0)), "must be posted before it"),  # gathered too late
    ("zero3", lambda ms: _first(ms, 2, lambda m: (*m[:5], 3)), "not all read at or after"),  # before its layer
    ("zero1", lambda ms: _first(ms, 1, lambda m: (*m[:4], 1, -1)), "after the backward of its layers"),
    ("zero1", lambda ms: [m for m in ms if m[3] != 2], "the all-gathers"),  # the update never gathered
    ("zero3", lambda ms: [(*m[:3], 7, *m[4:]) for m in ms], "kind 7"),
])
def test_a_mismatched_plan_is_refused(name, mutate, message):
    net = load_network(CONVNET)
    exe = _core.Net(net.layer_specs(), 2)
    plan = plan_messages(net, SHARDED[name], exe.layer_param_offset)
    with pytest.raises(Exception, match=message):
        _run_one(exe, mutate(plan.messages))


def test_sharded_and_allreduce_messages_do_not_mix():
    net = load_network(CONVNET)
    exe = _core.Net(net.layer_specs(), 2)
    sharded = plan_messages(net, SHARDED["zero1"], exe.layer_param_offset).messages
    allreduce = plan_messages(net, get_strategies("wfbp")[0], exe.layer_param_offset).messages
    with pytest.raises(Exception, match="all-reduce in a sharded plan"):
        _run_one(exe, sharded + [(*m, 0, 0, -1) for m in allreduce])


SAME_UPDATE_CODE = f"""
import json, sys
import numpy as np
from mpi4py import MPI
from gdlbench import _core
from gdlbench.composed.iteration import plan_messages
from gdlbench.nets.network import load_network
from gdlbench.model.strategies import get_strategies
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
out = {{}}
for spec in ({CONVNET!r}, {json.dumps(ODD)!r}):
    net = load_network(json.loads(spec) if spec.startswith("{{") else spec)
    def run(name, iters=2):
        exe = _core.Net(net.layer_specs(), 3)
        plan = plan_messages(net, get_strategies(name)[0], exe.layer_param_offset)
        _, trace = exe.time_iteration(messages=plan.messages, overlap=name != "serial", algo="library", servers=1,
                                      comm=comm, io=None, prefetch=False, warmup=0, iters=iters)
        return exe, plan, trace
    ref, _, _ = run("serial")
    expected = ref.params()
    for name in ("zero1", "zero2", "zero3", "fsdp"):
        exe, plan, trace = run(name)
        got = exe.params()
        # this rank's blocks hold the updated parameters; ZeRO-1/2 gathered the rest after the update,
        # ZeRO-3/FSDP gather them before the next forward: take every rank's blocks
        mine = np.zeros(exe.param_count, dtype=bool)
        for (offset, count, *_), kind in zip(plan.messages, plan.kinds):
            if kind == "reduce_scatter":
                q, rem = divmod(count, size)  # comm::block: the first count % size blocks one more
                lo, n = rank * q + min(rank, rem), q + (rank < rem)
                mine[offset + lo:offset + lo + n] = True
        blocks = comm.allgather((np.flatnonzero(mine), got[mine]))
        whole = np.full(exe.param_count, np.nan, dtype=np.float32)
        for idx, vals in blocks:
            whole[idx] = vals
        key = net.name + "/" + name
        out[key] = {{"max_diff": float(np.nanmax(np.abs(whole - expected))), "nan": int(np.isnan(whole).sum()),
                    "moved": float(np.abs(expected - _core.Net(net.layer_specs(), 3).params()).max()),
                    "local_same": bool(np.allclose(got, expected, rtol=1e-6, atol=1e-7)),
                    "waits": len(trace["message_wait_us"]) == len(plan.messages)}}
print("SAME " + json.dumps(out))
"""


@pytest.mark.parametrize("nranks", [1, 2])
def test_sharded_update_gives_the_replicated_parameters(nranks):
    """Two iterations of each sharded strategy against the all-reduce strategy (serial) on the same
    data and labels: every parameter equal (the convnet, and a net whose counts 2 does not divide).
    ZeRO-1/2 hold them all on every rank after the iteration; ZeRO-3/FSDP their own blocks (the
    second iteration's forward ran on gathered parameters, so a wrong gather shows in its update)."""
    p = run_mpi(nranks, sys.executable, "-c", SAME_UPDATE_CODE, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    per_rank = [json.loads(m) for m in re.findall(r"SAME (\{.*?\}\})", p.stdout)]
    assert len(per_rank) == nranks
    for got in per_rank:
        assert set(got) == {f"{net}/{s}" for net in ("convnet", "odd") for s in SHARDED}
        for key, v in got.items():
            assert v["nan"] == 0 and v["waits"], (key, v)
            assert v["moved"] > 1e-4, key  # the parameters did change
            assert v["max_diff"] <= 1e-6 * max(1.0, v["moved"]) + 1e-7, (key, v)
            if key.endswith(("zero1", "zero2")) or nranks == 1:
                assert v["local_same"], key  # gathered after the update: whole on every rank


def _check_contention_lines(text: str, by: dict) -> None:
    """The printed contention lines against the JSON's pairs (by_strategy), exactly as far as they
    are printed: each strategy on one line, its two slowdowns those of the JSON; the lines list
    together the strategies whose rounds read the same pair (under load, when the messages hardly
    overlap compute, several plans read (1, 1) and share a line), named by how they post."""
    lines = re.findall(r"contention, measured with the messages of ([\w, -]+?) posted as (.+?) them: (\w+) "
                       r"([\d.]+)x slower beside them, the messages (?:([\d.]+)x slower|(made next to no progress))", text)
    named = [n for line in lines for n in line[0].split(", ")]
    assert sorted(named) == sorted(by), (named, by)
    for names, posted, lane, compute, messages, stalled in lines:
        names = names.split(", ")
        sharded = {n for n in names if n in SHARDED}
        assert (posted, lane) == (("backward produces", "backward") if not sharded else
                                  ("their iteration posts", "compute") if sharded == set(names) else
                                  ("each strategy posts", "compute")), (names, posted, lane)
        assert all(by[n] == by[names[0]] for n in names), (names, by)
        pair = by[names[0]]
        assert f"{pair['compute_slowdown']:.3f}" == compute, (names, pair, compute)
        assert (f"{pair['comm_slowdown']:.3f}" == messages) if not stalled else pair["comm_slowdown"] >= NO_PROGRESS_SLOWDOWN / 2, pair


def test_cli_measures_and_predicts_the_sharded_strategies(tmp_path):
    out = tmp_path / "sharded.json"
    p = run_cli("iteration", "--net", CONVNET, "--batch", "2", "--no-io", "--strategy", "wfbp,sharded",
                "--iters", "2", "--warmup", "0", "--threads", "1", "--json", str(out), "--full", nranks=2)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    its = {r["strategy"]: r for r in doc["rows"] if r["phase"] == "iteration"}
    assert list(its) == ["wfbp", "zero1", "zero2", "zero3", "fsdp"]
    for name in SHARDED:
        r = its[name]
        assert r["time_us"] > 0 and r["predicted_us"] > 0
        assert r["error_pct"] == pytest.approx(100 * (r["predicted_us"] - r["time_us"]) / r["time_us"])
        assert r["messages"] == len(plan_sharded(CONVNET, SHARDED[name]))
        # compute idle for messages (the all-gathers' waits, ZeRO-1/2's gathers after the update),
        # measured and the model's, for the components
        assert r["comm_wait_us"] >= 0 and r["predicted_comm_wait_us"] >= 0
    # contention measured per plan that overlaps its messages with compute: ZeRO-1's never do
    by = doc["summary"]["contention"].get("by_strategy", {})
    assert set(by) <= {"wfbp", "zero2", "zero3", "fsdp"}
    text = " ".join(p.stdout.split())
    for name in ("zero2", "zero3", "fsdp"):  # read from its round, or priced as overlap efficiency says
        assert name in by or re.search(rf"contention of [^:]*\b{name}\b[^:]*: no round could be read", text)
    _check_contention_lines(text, by)
    # zero3 and fsdp send the same messages here, priced alike: the same rounds, the same pair
    assert plan_sharded(CONVNET, SHARDED["zero3"]) == plan_sharded(CONVNET, SHARDED["fsdp"])
    assert ("zero3" in by) == ("fsdp" in by) and by.get("zero3") == by.get("fsdp")
    # the table: measured and the model's prediction per strategy, as for the all-reduce strategies
    assert "measured (ms)" in p.stdout and "predicted (ms)" in p.stdout
    for name in SHARDED:
        row = next(line for line in p.stdout.splitlines() if re.match(rf"\W*{name}\b", line))
        assert len(re.findall(r"\d+\.\d+", row)) >= 3, row  # measured, model (ms), error


def test_cli_one_rank_zero3(tmp_path):
    p = run_cli("iteration", "--net", CONVNET, "--batch", "2", "--no-io", "--strategy", "zero3", "--iters", "2",
                "--warmup", "0", "--threads", "1")
    assert p.returncode == 0, p.stderr
    row = next(line for line in p.stdout.splitlines() if re.match(r"\W*zero3\b", line))
    assert len(re.findall(r"\d+\.\d+", row)) >= 3, row  # measured, model (ms), error


def test_the_trace_holds_the_waits_for_the_all_gathers():
    from gdlbench.composed.iteration import Iteration, layer_times, phase_times
    from gdlbench.composed.trace import chrome_trace, iteration_spans

    r = Iteration(CONVNET, batch=2, device="cpu", strategy="zero3,zero1,serial", iters=1, warmup=0, io=False,
                  threads=1).measure()
    names = [la["name"] for la in r.layers]
    for run in r.runs:
        t = run.trace
        fwait, bwait = t["layer_forward_wait_us"], t["layer_backward_wait_us"]
        assert len(fwait) == len(bwait) == len(names) and min(fwait + bwait) >= 0
        assert len(t["message_wait_us"]) == len(run.plan.messages)
        # forward and backward without the waits; the waits are compute idle for messages
        times = phase_times(t)
        assert times["forward"] == pytest.approx(t["forward_end_us"] - t["h2d_end_us"] - sum(fwait))
        assert times["comm_wait"] == pytest.approx(sum(t["message_wait_us"]) + t["end_us"] - t["update_end_us"])
        fwd, bwd = layer_times(t)
        assert sum(fwd) == pytest.approx(times["forward"]) and min(fwd + bwd) >= 0
        if run.strategy.name == "zero3":  # only its layers wait for all-gathers; each wait is a span
            spans = iteration_spans(t, names, run.plan.layers, run.plan.labels)
            waits = [s for s in spans if s["name"].startswith("wait for the all-gather")]
            assert len(waits) == sum(1 for w in fwait + bwait if w > 0)
            assert any(s["name"].startswith("allgather") for s in spans if s["lane"] == "comm")
        elif run.strategy.name == "zero1":
            assert not any(fwait + bwait) and t["end_us"] >= t["update_end_us"]
        else:  # an all-reduce strategy: compute waits for its messages after backward, nowhere else
            assert not any(fwait + bwait) and t["end_us"] == t["update_end_us"]
            assert times["comm_wait"] == pytest.approx(times["comm_exposed"])
    assert chrome_trace(r)["traceEvents"]


def test_sharded_contention_reads_both_lanes():
    from gdlbench.composed.iteration import sharded_contention

    # forward 0-10 and backward 10-30 (one layer each, backward's after a 2 us wait for its
    # all-gather); one message from 0 to 20, 10 us alone: beside compute for 18 us
    t = {"h2d_end_us": 0.0, "layer_forward_end_us": [10.0], "forward_end_us": 10.0, "zero_end_us": 10.0,
         "layer_backward_end_us": [30.0], "layer_forward_wait_us": [0.0], "layer_backward_wait_us": [2.0],
         "message_start_us": [0.0], "message_end_us": [20.0]}
    # compute busy 28 us, 10 of them alone: with 22 us of work alone, 12 done in the 18 beside
    c, m = sharded_contention(t, 22.0, [10.0])
    assert c == pytest.approx(18 / 12) and m == pytest.approx(18 / (10 - 2))
    assert sharded_contention(t, 5.0, [10.0]) is None  # compute outside the message took longer than all of it alone
    assert sharded_contention(t, 100.0, [10.0])[0] == 1.0  # faster beside the message than alone: no slowdown
    t["message_start_us"], t["message_end_us"] = [30.0], [40.0]  # after compute: nothing to price
    assert sharded_contention(t, 22.0, [10.0]) == (1.0, 1.0)
