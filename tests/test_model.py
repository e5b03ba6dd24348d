"""The performance model on small hand-computed cases (docs/model.md), the strategies, and the
predict command's contract."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from helpers import run_cli

from gdlbench.cli import main
from gdlbench.common.errors import UsageError
from gdlbench.model.phases import (
    CommModel,
    Phases,
    load_comm_model,
    make_buckets,
    predict_iteration,
    predict_scaling,
    schedule_shared,
)
from gdlbench.model.strategies import PRESETS, Strategy, get_strategies
from gdlbench.nets.network import load_network
from gdlbench.primitives import costmodel
from gdlbench.primitives.costmodel import time_us as comm_time_us

# Three fc layers without bias: gradients of 64, 64 and 32 bytes (fp32).
NET3 = {"name": "three", "input": [4, 1, 1], "layers": [
    {"name": "fc1", "type": "fc", "out_features": 4, "bias": False},
    {"name": "fc2", "type": "fc", "out_features": 4, "bias": False},
    {"name": "fc3", "type": "fc", "out_features": 2, "bias": False},
]}
# t_f = 30 (10 per layer); t_b = 60: fc3 30, fc2 20, fc1 10, so in backward order fc3 is ready at
# 30, fc2 at 50, fc1 at 60.
PH3 = Phases(batch=8, forward_us=30, backward_us=60, io_us=5, h2d_us=2, update_us=3,
             layer_forward_us={"fc1": 10, "fc2": 10, "fc3": 10},
             layer_backward_us={"fc1": 10, "fc2": 20, "fc3": 30}, net="three")
# ring, N = 2: 2(N-1)alpha + 2(N-1)/N m beta = 8 + 0.25 m: fc3 (32 B) 16, fc2 (64 B) 24, fc1 24.
RING = CommModel("ring", alpha_us=4.0, beta_us_per_byte=0.25)


def strat(**kw) -> Strategy:
    return Strategy("test", **kw)


def test_comm_formulas_by_hand():
    m, a, b, g = 1000, 2.0, 0.01, 0.001
    assert comm_time_us("ring", m, 4, a, b, g) == pytest.approx(12 + 15 + 0.75)
    assert comm_time_us("rd", m, 5, a, b, g) == pytest.approx(3 * (2 + 10 + 1))  # ceil(log2 5) = 3
    assert comm_time_us("rd", m, 4, a, b, g) == pytest.approx(2 * 13)
    assert comm_time_us("tree", m, 4, a, b, g) == pytest.approx(2 * 2 * 12 + 2 * 1)
    # incast: a server hears from the 3 other workers in turn, on the push and on the pull
    assert comm_time_us("ps", m, 4, a, b, g, servers=2) == pytest.approx(2 * (3 * 2 + 2 * 1000 * 0.01) + 2 * 1000 * 0.001)
    assert comm_time_us("library", m, 4, a, b, g) == pytest.approx(2 * 2 * 2 + 15 + 0.75)
    for algo in ("ring", "rd", "tree", "ps", "library"):
        assert comm_time_us(algo, m, 1, a, b, g) == 0.0  # one worker aggregates nothing
    # long names are aliases of the short ones, in one place
    assert comm_time_us("recursive_doubling", m, 8, a, b) == comm_time_us("rd", m, 8, a, b)
    assert costmodel.canonical("binomial-tree") == "tree" and costmodel.canonical("parameter_server") == "ps"
    assert comm_time_us("ps", m, 8, a, b) == comm_time_us("ps", m, 8, a, b, servers=8)  # P defaults to N
    # ps is its push plus its pull
    assert comm_time_us("ps", m, 8, a, b, g, servers=2) == pytest.approx(
        comm_time_us("ps_push", m, 8, a, b, g, servers=2) + comm_time_us("ps_pull", m, 8, a, b, g, servers=2))
    with pytest.raises(UsageError, match="no cost model"):
        comm_time_us("butterfly", m, 4, a, b)


def test_serial():
    p = predict_iteration(NET3, PH3, RING, strat(overlap="none", io_prefetch=False), 2)
    assert p.comm_us == pytest.approx(16 + 24 + 24)
    assert p.t_iter_us == pytest.approx(5 + 2 + 30 + 60 + 64 + 3)
    assert sum(p.breakdown().values()) == pytest.approx(p.t_iter_us)
    assert [m.layers for m in p.messages] == [("fc3",), ("fc2",), ("fc1",)]
    assert [(m.start_us, m.end_us) for m in p.messages] == [(60, 76), (76, 100), (100, 124)]


def test_prefetch_hides_io_up_to_the_rest_of_the_iteration():
    s = strat(overlap="none", io_prefetch=True)
    assert predict_iteration(NET3, PH3, RING, s, 2).t_iter_us == pytest.approx(2 + 30 + 60 + 64 + 3)
    slow_io = replace(PH3, io_us=200)
    p = predict_iteration(NET3, slow_io, RING, s, 2)
    assert p.io_us == pytest.approx(200 - (30 + 60 + 64 + 3))
    assert p.t_iter_us == pytest.approx(43 + 2 + 157)


def test_wfbp_recurrence_three_layers_by_hand():
    p = predict_iteration(NET3, PH3, RING, strat(overlap="wfbp"), 2)
    # fc3: r=30, s=30, e=46; fc2: r=50, s=50, e=74; fc1: r=60, s=max(60, 74)=74, e=98
    assert [(m.ready_us, m.start_us, m.end_us) for m in p.messages] == [(30, 30, 46), (50, 50, 74), (60, 74, 98)]
    assert p.t_iter_us == pytest.approx(2 + 30 + max(60, 98) + 3)
    assert p.comm_exposed_us == pytest.approx(38)
    # fast communication hides all but the last message (fc1's, ready when backward ends)
    fast = CommModel("ring", 0.5, 0.0)
    q = predict_iteration(NET3, PH3, fast, strat(overlap="wfbp"), 2)
    assert q.t_iter_us == pytest.approx(2 + 30 + 60 + 1 + 3) and q.comm_exposed_us == pytest.approx(1)


def test_fusion_buckets():
    assert make_buckets([32, 64, 64], None) == [[0], [1], [2]]
    assert make_buckets([32, 64, 64], 96) == [[0, 1], [2]]
    assert make_buckets([32, 64, 64], 10**9) == [[0, 1, 2]]
    assert make_buckets([100, 1, 1], 50) == [[0], [1, 2]]
    p = predict_iteration(NET3, PH3, RING, strat(overlap="wfbp", bucket_bytes=96), 2)
    # bucket [fc3, fc2] (96 B) ready at 50, 8 + 24 = 32 -> 82; [fc1] ready 60, starts 82, ends 106
    assert [(m.layers, m.bytes, m.ready_us, m.start_us, m.end_us) for m in p.messages] == [
        (("fc3", "fc2"), 96, 50, 50, 82), (("fc1",), 64, 60, 82, 106)]
    assert p.t_iter_us == pytest.approx(2 + 30 + 106 + 3)
    one = predict_iteration(NET3, PH3, RING, strat(overlap="wfbp", bucket_bytes=10**9), 2)
    assert one.t_iter_us == pytest.approx(2 + 30 + 60 + (8 + 40) + 3)


def test_schedule_shared():
    # alone (slowdowns 1): the WFBP recurrence; message 0 ready after layer 0 (t = 3), 1 after layer 2
    assert schedule_shared([3, 2, 5], [0, 2], [4, 1]) == ([3, 5, 10], [(3, 7), (10, 11)])
    # sharing the cores half and half from t = 3: layer 1 ends at 7 with half of message 0 sent,
    # message 0 ends at 11, layer 2 runs alone from 11 with 3 left -> 14; message 1 14 -> 15
    assert schedule_shared([3, 2, 5], [0, 2], [4, 1], 2, 2) == ([3, 7, 14], [(3, 11), (14, 15)])
    # work is conserved when both always run: slowdown 2 each pays backward + messages
    ends, spans = schedule_shared([10], [-1], [10], 2, 2)
    assert ends == [20] and spans == [(0, 20)]
    assert schedule_shared([], [], []) == ([], [])
    assert schedule_shared([0, 4], [1, 1], [0, 0]) == ([0, 4], [(4, 4), (4, 4)])


def test_schedule_shared_per_layer_slowdowns():
    # message 0 (10 us) ready after layer 0 runs beside layer 1 only: layer 1's own slowdown decides
    assert schedule_shared([4, 4], [0], [10], [1.0, 2.0]) == ([4, 12], [(4, 14)])
    assert schedule_shared([4, 4], [0], [10], [3.0, 1.0]) == ([4, 8], [(4, 14)])
    assert schedule_shared([4, 4], [0], [10], [2.0, 2.0]) == schedule_shared([4, 4], [0], [10], 2.0)
    with pytest.raises(ValueError, match="2 layers"):
        schedule_shared([4, 4], [0], [10], [2.0])


def test_memory_bound_layers_take_the_memory_slowdown():
    base = Phases(batch=4, forward_us=10, backward_us=20, compute_slowdown=1.2, comm_slowdown=1.1,
                  layer_memory_share={"a": 0.5, "b": 1.0})
    assert base.backward_slowdowns("ddp", ["a", "b", "c"]) == [1.2, 1.2, 1.2]  # no memory_slowdown: as before
    p = replace(base, memory_slowdown=2.0)
    assert p.backward_slowdowns("ddp", ["a", "b", "c"]) == pytest.approx([1.6, 2.0, 1.2])
    assert p.contention()["memory_slowdown"] == 2.0
    # a strategy's own pair was measured with backward's real mix: no correction on top
    own = replace(p, strategy_slowdowns={"ddp": (1.5, 1.0)})
    assert own.backward_slowdowns("ddp", ["a", "b"]) == [1.5, 1.5]
    for bad in ({"memory_slowdown": 0.5}, {"memory_slowdown": True}, {"layer_memory_share": {"a": 1.5}},
                {"layer_memory_share": {"a": "x"}}):
        with pytest.raises(UsageError, match="memory"):
            replace(base, **bad)
    # read from a phases JSON: the backward rows' memory_share, the contention's memory_slowdown
    doc = {"args": {"batch": 4}, "summary": {"contention": {"compute_slowdown": 1.2, "comm_slowdown": 1.0,
                                                            "memory_slowdown": 1.8}},
           "rows": [{"phase": "forward", "time_us": 10}, {"layer": "a", "phase": "backward", "time_us": 15,
                                                          "memory_share": 0.25},
                    {"layer": "b", "phase": "backward", "time_us": 5}]}
    q = Phases.from_dict(doc)
    assert q.memory_slowdown == 1.8 and q.layer_memory_share == {"a": 0.25}
    assert q.backward_slowdowns(None, ["a", "b"]) == pytest.approx([1.35, 1.2])


def test_measured_contention_prices_the_overlap():
    from gdlbench.composed.iteration import NO_PROGRESS_SLOWDOWN, contention

    # backward alone 100; messages alone 60 (two of 30); side by side backward took 150 and the
    # messages ended at 90 (before backward): backward did 100 - 60 = 40 of its work in 90 us
    t = {"backward_end_us": 150.0, "message_start_us": [0.0, 45.0], "message_end_us": [45.0, 90.0]}
    sc, sm = contention(t, 100.0, [30.0, 30.0])
    assert sc == pytest.approx(90 / 40) and sm == pytest.approx(90 / 60)
    # backward ended first (at 80): the second message's 30 us after it did 30 us of its work (at
    # its speed alone, as the model runs it), so beside backward the messages did 30 of 60
    t = {"backward_end_us": 80.0, "message_start_us": [0.0, 50.0], "message_end_us": [50.0, 110.0]}
    sc, sm = contention(t, 70.0, [30.0, 30.0])
    assert sc == pytest.approx(80 / 70) and sm == pytest.approx(80 / 30)
    # posted as their gradients were ready (40 and 100), the thread late by 5 us on the first (the
    # message's time from its ready time): 30 + 30 beside backward, which ran 70 of its 130 alone
    t = {"backward_end_us": 130.0, "message_ready_us": [40.0, 100.0], "message_start_us": [45.0, 100.0],
         "message_end_us": [70.0, 140.0]}
    sc, sm = contention(t, 100.0, [20.0, 20.0])
    assert sc == pytest.approx(60 / 30) and sm == pytest.approx(60 / 30)
    # the model run with the rates read from a round ends where that round ended: a round made by
    # schedule_shared itself gives its rates back
    for layer_us, ready_after, cost_us, rates in [([30, 20, 25, 25], [0, 2], [30, 40], (1.5, 2.5)),
                                                   ([10, 50, 5], [0, 1, 2], [5, 60, 8], (1.2, 3.0)),
                                                   ([40, 40], [-1, 0], [10, 10], (2.0, 1.3))]:
        ends, spans = schedule_shared(layer_us, ready_after, cost_us, *rates)
        t = {"backward_end_us": ends[-1], "message_ready_us": [ends[r] if r >= 0 else 0.0 for r in ready_after],
             "message_start_us": [s for s, _ in spans], "message_end_us": [e for _, e in spans]}
        assert contention(t, sum(layer_us), cost_us) == pytest.approx(rates)
    assert contention({"backward_end_us": 80.0, "message_start_us": [], "message_end_us": []}, 70.0, []) is None
    # posted early but done only after backward (a waiting thread that yields its core to it): the
    # first message's 40 us after backward cover its 30 alone, so beside backward the messages did
    # nothing, and backward ran at its speed alone
    t = {"backward_end_us": 100.0, "message_ready_us": [20.0, 60.0], "message_start_us": [20.0, 140.0],
         "message_end_us": [140.0, 175.0]}
    assert contention(t, 100.0, [30.0, 30.0]) == pytest.approx((1.0, NO_PROGRESS_SLOWDOWN))
    ends, spans = schedule_shared([50, 50], [0, 1], [30, 30], 1.0, NO_PROGRESS_SLOWDOWN)
    assert ends == [50, 100] and spans[-1][1] == pytest.approx(160, abs=0.1)  # as if sent after backward
    # posted as backward ends: hardly beside it, nothing to price (not another plan's rates)
    t = {"backward_end_us": 100.0, "message_ready_us": [98.0], "message_start_us": [98.0], "message_end_us": [130.0]}
    assert contention(t, 100.0, [30.0]) == (1.0, 1.0)
    # backward outside the messages slower than all of it alone: the round cannot be read
    t = {"backward_end_us": 200.0, "message_ready_us": [150.0], "message_start_us": [150.0], "message_end_us": [210.0]}
    assert contention(t, 100.0, [30.0]) is None
    # measured slowdowns go into the model and through the phases JSON
    ph = replace(PH3, compute_slowdown=1.5, comm_slowdown=1.2)
    assert Phases.from_dict(ph.to_report()).slowdowns() == (1.5, 1.2)
    assert PH3.slowdowns() == (1.0, 1.0) and replace(PH3, overlap_efficiency=0.0).slowdowns() == (2.0, 2.0)
    with pytest.raises(UsageError):
        replace(PH3, compute_slowdown=0.5)
    slow = predict_iteration(NET3, replace(PH3, compute_slowdown=2.0, comm_slowdown=2.0), RING,
                             strat(overlap="wfbp"), 2)
    fast = predict_iteration(NET3, PH3, RING, strat(overlap="wfbp"), 2)
    assert slow.t_iter_us > fast.t_iter_us
    # each overlapping strategy priced with the contention of its own messages; others take the pair
    ph = replace(PH3, compute_slowdown=1.0, comm_slowdown=1.0, strategy_slowdowns={"x": (2.0, 2.0)})
    back = Phases.from_dict(json.loads(json.dumps(ph.to_report())))
    assert back.strategy_slowdowns == {"x": (2.0, 2.0)} and back.slowdowns("x") == (2.0, 2.0)
    assert back.slowdowns("y") == back.slowdowns() == (1.0, 1.0)
    assert predict_iteration(NET3, ph, RING, Strategy("x", overlap="wfbp"), 2).t_iter_us == pytest.approx(
        slow.t_iter_us)
    assert predict_iteration(NET3, ph, RING, Strategy("y", overlap="wfbp"), 2).t_iter_us == pytest.approx(
        fast.t_iter_us)
    for bad in ({"x": {"compute_slowdown": 0.5, "comm_slowdown": 1.0}}, {"x": {"comm_slowdown": 2.0}}, {"x": 3},
                ["x"]):
        doc = ph.to_report()
        doc["summary"]["contention"]["by_strategy"] = bad
        with pytest.raises(UsageError, match="by_strategy"):
            Phases.from_dict(doc)


def test_the_contention_pair_comes_from_one_round():
    from gdlbench.composed.iteration import median_round_pair

    # per round, per rank: (backward's, the messages' slowdown); priced here as their product
    rounds = [[(1.2, 4.0), (1.5, 1.0)], [(1.1, 1.1), (1.0, 1.0)], [(2.0, 1.0), (1.9, 1.0)]]
    pairs, i = median_round_pair(rounds, lambda p: p[0] * p[1])
    assert pairs == [(1.2, 4.0), (1.1, 1.1), (2.0, 1.0)]  # the slowest rank's pair in each round
    assert pairs[i] == (2.0, 1.0)  # prices 4.8, 1.21, 2.0: the median round's pair, not (1.2, 1.1)
    assert median_round_pair([[(1.3, 2.0)]], lambda p: p[0])[1] == 0


def test_read_beside_compute_is_measured_and_priced():
    from gdlbench.composed.iteration import read_beside

    # alone: h2d 0-1, forward 1-11 (10), zero 11-12, backward 12-32 (20), update 32-35
    alone = {"io_wait_end_us": 0.0, "h2d_end_us": 1.0, "layer_forward_end_us": [11.0], "zero_end_us": 12.0,
             "layer_backward_end_us": [32.0], "comm_end_us": 32.0, "update_end_us": 35.0, "io_prefetch": False,
             "io_start_us": 0.0, "io_end_us": 0.0, "forward_end_us": 11.0, "backward_end_us": 32.0,
             "message_ready_us": [], "message_start_us": [], "message_end_us": []}
    # the read ran 1-16 beside forward, which took 15 instead of 10
    probe = alone | {"h2d_end_us": 1.0, "layer_forward_end_us": [16.0], "forward_end_us": 16.0, "zero_end_us": 17.0,
                     "backward_end_us": 37.0,
                     "layer_backward_end_us": [37.0], "comm_end_us": 37.0, "update_end_us": 40.0,
                     "io_prefetch": True, "io_start_us": 1.0, "io_end_us": 16.0}
    assert read_beside(probe, alone) == pytest.approx(5.0)
    # the loss outlasts the read: all of the pass it ran in counts, not only the read's span
    assert read_beside(probe | {"io_end_us": 3.0}, alone) == pytest.approx(5.0)
    # signed: a pass that ran faster than alone (noise) counts against the rounds' median
    assert read_beside(probe | {"io_end_us": 3.0, "layer_forward_end_us": [10.0], "forward_end_us": 10.0},
                       alone) == pytest.approx(-1.0)
    # a read that outlasts the iteration: the next iteration waits for the rest
    assert read_beside(probe | {"io_end_us": 45.0}, alone) == pytest.approx(5.0 + 5.0)
    assert read_beside(alone, alone) is None
    # the model: prefetching strategies pay the measured cost, not t_io; serial pays t_io
    ph = replace(PH3, io_us=20.0, overlap_efficiency=0.0)
    pre = strat(io_prefetch=True)
    assert predict_iteration(NET3, ph, RING, pre, 2).io_us == pytest.approx(20.0)
    measured = replace(ph, read_beside_us=7.0)
    assert predict_iteration(NET3, measured, RING, pre, 2).io_us == pytest.approx(7.0)
    assert predict_iteration(NET3, measured, RING, strat(io_prefetch=False), 2).io_us == pytest.approx(20.0)
    assert Phases.from_dict(measured.to_report()).read_beside_us == 7.0
    assert measured.with_batch(2 * ph.batch).read_beside_us == pytest.approx(14.0)
    with pytest.raises(UsageError):
        replace(PH3, read_beside_us=-1.0)


def test_parameter_server():
    # N = 2, P = 1: 2(alpha + 2 m beta) = 8 + m: fc3 40, fc2 72, fc1 72
    ps = strat(collective="ps", servers=1)
    p = predict_iteration(NET3, PH3, RING, ps, 2)
    assert p.comm_us == pytest.approx(184)
    assert p.t_iter_us == pytest.approx(2 + 30 + 60 + 184 + 3)
    w = predict_iteration(NET3, PH3, RING, replace(ps, overlap="wfbp"), 2)
    assert [m.end_us for m in w.messages] == [70, 142, 214]
    assert w.t_iter_us == pytest.approx(2 + 30 + 214 + 3)
    # pushes overlap backward (4 + 0.5 m: 20, 36, 36 -> ends 50, 86, 122), pulls (the same) after
    tf = predict_iteration(NET3, PH3, RING, replace(ps, overlap="wfbp", ps_pull="after_push"), 2)
    assert [m.end_us for m in tf.messages] == [50, 86, 122]
    assert tf.t_iter_us == pytest.approx(2 + 30 + 122 + 3 + 92)
    # P = N = 2 halves each server's load
    p2 = predict_iteration(NET3, PH3, RING, replace(ps, servers=2), 2)
    assert p2.comm_us == pytest.approx(sum(2 * (4 + m * 0.25) for m in (32, 64, 64)))


def test_one_worker_has_no_communication_and_scaling():
    for s in PRESETS.values():
        p = predict_iteration(NET3, PH3, RING, s, 1)
        assert p.comm_us == 0 and p.comm_exposed_us == 0
    rows = predict_scaling(NET3, PH3, RING, [strat(overlap="wfbp")], [1, 2, 4])
    t1 = 2 + 30 + 60 + 3
    assert rows[0]["t_iter_us"] == pytest.approx(t1) and rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[1]["speedup"] == pytest.approx(2 * t1 / 133)
    assert rows[1]["efficiency"] == pytest.approx(t1 / 133)
    assert rows[1]["images_per_s"] == pytest.approx(2 * 8 / 133e-6)


def test_timeline_lanes():
    p = predict_iteration(NET3, PH3, RING, strat(overlap="wfbp"), 2)
    lanes = {s["lane"] for s in p.timeline}
    assert lanes == {"io", "h2d", "forward", "backward", "comm", "update"}
    bwd = [s for s in p.timeline if s["lane"] == "backward"]
    assert [s["name"] for s in bwd] == ["fc3", "fc2", "fc1"] and bwd[0]["start_us"] == pytest.approx(32)
    comm = [s for s in p.timeline if s["lane"] == "comm"]
    assert comm[-1]["end_us"] == pytest.approx(32 + 98)
    upd = [s for s in p.timeline if s["lane"] == "update"][0]
    assert upd["end_us"] == pytest.approx(p.t_iter_us)
    json.dumps(p.to_dict(timeline=True))


def test_per_layer_times_filled_by_macs_and_scaled():
    net = load_network(NET3)
    ph = Phases(batch=1, forward_us=30, backward_us=100, layer_backward_us={"fc3": 10})
    # fc1 and fc2 (16 MACs each) share the 90 the fc3 row leaves
    assert ph.per_layer(net, "backward") == pytest.approx([45, 45, 10])
    assert ph.per_layer(net, "forward") == pytest.approx([12, 12, 6])  # by MACs 16:16:8
    scaled = Phases(batch=1, forward_us=30, backward_us=120, layer_backward_us={"fc1": 10, "fc2": 20, "fc3": 30})
    assert scaled.per_layer(net, "backward") == pytest.approx([20, 40, 60])


def test_phases_json_roundtrip_and_errors(tmp_path):
    doc = PH3.to_report()
    back = Phases.from_dict(doc)
    assert (back.batch, back.forward_us, back.backward_us, back.io_us, back.h2d_us, back.update_us) == (8, 30, 60, 5, 2, 3)
    assert back.layer_backward_us == PH3.layer_backward_us and back.net == "three"
    # the first row of a phase counts; per-layer rows alone give the total
    doc2 = {"args": {"batch": 4}, "rows": [{"phase": "forward", "time_us": 7}, {"phase": "forward", "time_us": 9},
                                          {"layer": "fc1", "phase": "backward", "time_us": 3},
                                          {"layer": "fc2", "phase": "backward", "time_us": 4}]}
    ph = Phases.from_dict(doc2)
    assert ph.forward_us == 7 and ph.backward_us == 7 and ph.io_us == 0
    with pytest.raises(UsageError, match="no batch"):
        Phases.from_dict({"rows": [{"phase": "forward", "time_us": 1}, {"phase": "backward", "time_us": 1}]})
    with pytest.raises(UsageError, match="no backward"):
        Phases.from_dict({"args": {"batch": 2}, "rows": [{"phase": "forward", "time_us": 1}]})
    with pytest.raises(UsageError, match="time_us"):
        Phases.from_dict({"args": {"batch": 2}, "rows": [{"phase": "forward", "time_us": -1}]})
    with pytest.raises(UsageError, match="rows"):
        Phases.from_dict({"summary": {}})


def test_comm_model_loader_shapes(tmp_path):
    fit = {"algo": "ring", "alpha_us": 3.0, "beta_us_per_byte": 1e-4, "gamma_us_per_byte": 1e-5}
    cm = CommModel.from_dict(fit)
    assert (cm.algo, cm.alpha_us, cm.beta_us_per_byte, cm.gamma_us_per_byte) == ("ring", 3.0, 1e-4, 1e-5)
    assert cm.predict_us(1000, 4) == pytest.approx(comm_time_us("ring", 1000, 4, 3.0, 1e-4, 1e-5))
    saved = {"summary": {"fit": {"ring": {"alpha_us": 1, "beta_us_per_byte": 2e-4},
                                 "recursive_doubling": {"alpha_us": 2, "beta_us_per_byte": 3e-4}}}}
    path = tmp_path / "ar.json"
    path.write_text(json.dumps(saved))
    assert load_comm_model(path).alpha_us == 1 and load_comm_model(path).gamma_us_per_byte == 0
    rd = load_comm_model(path, "rd")
    assert rd.formula == "rd" and rd.alpha_us == 2
    assert CommModel.from_dict({"summary": {"fit": [{"algo": "tree", "alpha_s": 1e-6, "beta_s_per_byte": 1e-9}]}}
                               ).formula == "tree"
    lib = CommModel.from_dict({"fit": {"mpi": {"alpha_us": 1, "beta_us_per_byte": 1e-4}}})
    assert lib.formula == "library" and not lib.note  # the library's fit is priced by its own formula
    other = CommModel.from_dict({"fit": {"butterfly": {"alpha_us": 1, "beta_us_per_byte": 1e-4}}})
    assert other.formula == "ring" and "ring" in other.note
    assert CommModel.from_dict(replace(cm, source="x")).alpha_us == 3.0  # an object with to_dict()
    both_modes = [{"algo": "ps", "inplace": True, "alpha_us": 2, "beta_us_per_byte": 1e-4},
                  {"algo": "ps", "inplace": False, "alpha_us": 9, "beta_us_per_byte": 1e-4}]
    for order in (both_modes, both_modes[::-1]):  # in place, as the gradients are reduced, whatever the order
        assert CommModel.from_dict({"summary": {"fit": order}}, "ps").alpha_us == 2
    with pytest.raises(UsageError, match="no fit for algorithm"):
        load_comm_model(path, "tree")
    with pytest.raises(UsageError, match="several fits"):
        CommModel.from_dict({"summary": {"fit": {"tree": fit, "recursive_doubling": fit}}})
    with pytest.raises(UsageError, match="no summary.fit"):
        CommModel.from_dict({"summary": {}})
    with pytest.raises(UsageError, match="beta"):
        CommModel.from_dict({"alpha_us": 1})
    with pytest.raises(UsageError, match=">= 0"):
        CommModel("ring", -1, 0)
    bw = CommModel.from_bandwidth("ring", 1.0, 10.0)
    assert bw.beta_us_per_byte == pytest.approx(1e-4) and bw.to_dict()["link_gbs"] == pytest.approx(10)


def test_comm_model_with_the_sharded_collectives_fits_round_trips_through_json(tmp_path):
    rs = CommModel("reduce_scatter", 4.0, 3e-4, 1e-4, source="rs.json", regimes=((0, 1.0, 5e-4), (65536, 4.0, 3e-4)))
    ag = CommModel("allgather", 2.0, 2e-4, source="ag.json")
    cm = CommModel("library", 7.0, 1e-3, 2e-5, source="ar.json", regimes=((0, 2.0, 2e-3), (1 << 20, 7.0, 1e-3)))
    cm = cm.with_fits(rs, ag)
    doc = json.loads(json.dumps(cm.to_dict()))
    assert sorted(doc["collectives"]) == ["allgather", "reduce_scatter"]
    assert doc["collectives"]["reduce_scatter"]["alpha_us"] == 4.0
    assert CommModel.from_dict(doc) == cm  # every field, the fits' regimes and sources included
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    assert load_comm_model(path) == replace(cm, source=str(path))  # (the source: the file read)
    assert load_comm_model(path).fit_for("allgather") == ag
    # the fits as their commands write them, beside the all-reduce report, in any order
    report = {"summary": {"fit": [{"algo": "library", "alpha_us": 7.0, "beta_us_per_byte": 1e-3}]}}
    files = {}
    for name, doc_ in (("ar", report), ("rs", {"summary": {"fit": [
            {"algo": "reduce_scatter", "inplace": False, "alpha_us": 9.0, "beta_us_per_byte": 1e-4},
            {"algo": "reduce_scatter", "inplace": True, "alpha_us": 4.0, "beta_us_per_byte": 3e-4,
             "gamma_us_per_byte": 1e-4}]}}), ("ag", {"summary": {"fit": [ag.to_dict()]}})):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(doc_))
    loaded = load_comm_model([files["rs"], files["ar"], files["ag"]], "library")
    assert (loaded.algo, loaded.alpha_us, loaded.source) == ("library", 7.0, str(files["ar"]))
    own = loaded.fit_for("reduce_scatter")
    assert own is not None and (own.alpha_us, own.gamma_us_per_byte, own.source) == (4.0, 1e-4, str(files["rs"]))
    assert loaded.fit_for("allgather").beta_us_per_byte == 2e-4
    from gdlbench.whatif.scaling import comm_model_from
    assert comm_model_from(from_file=f"{files['ar']},{files['ag']}", algo="library").fit_for("allgather") is not None
    with pytest.raises(UsageError, match="no all-reduce fit"):
        load_comm_model([files["rs"], files["ag"]])
    with pytest.raises(UsageError, match="a second reduce_scatter fit"):
        load_comm_model([files["ar"], files["rs"], files["rs"]])
    with pytest.raises(UsageError, match="a second all-reduce fit"):
        load_comm_model([files["ar"], files["ar"]])
    with pytest.raises(UsageError, match="cannot read the fit"):
        CommModel.from_dict({**doc, "collectives": ["reduce_scatter"]})
    with pytest.raises(UsageError, match="collective fits are"):
        CommModel.from_dict({**doc, "collectives": {"ring": doc["collectives"]["allgather"]}})


def test_old_comm_model_files_still_load(tmp_path):
    """A CommModel.to_dict() written before the collectives' fits (no "collectives"), and an
    allreduce report: the same model as before, with no fits of its own."""
    old = {"algo": "library", "alpha_us": 7.0, "beta_us_per_byte": 1e-3, "gamma_us_per_byte": 2e-5,
           "formula": "library", "link_gbs": 1.0, "source": "ar.json", "note": "",
           "regimes": [{"from_bytes": 0, "alpha_us": 2.0, "beta_us_per_byte": 2e-3},
                       {"from_bytes": 1048576, "alpha_us": 7.0, "beta_us_per_byte": 1e-3}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    cm = load_comm_model(path)
    assert cm.collective_fits == () and cm.fit_for("reduce_scatter") is None
    assert cm.to_dict() == old | {"source": str(path)}  # written back the same, no "collectives" key
    assert cm.regimes == ((0, 2.0, 2e-3), (1 << 20, 7.0, 1e-3))
    report = {"summary": {"fit": [{"algo": "library", "alpha_us": 7.0, "beta_us_per_byte": 1e-3}]}}
    assert CommModel.from_dict(report).collective_fits == ()


def test_presets():
    names = [s.name for s in get_strategies("all")]
    assert {"serial", "prefetch", "wfbp", "wfbp-fusion", "ps", "caffe-mpi", "cntk", "mxnet", "tensorflow"} <= set(names)
    for s in PRESETS.values():
        assert s.assumptions and s.source and s.describe()
    assert PRESETS["wfbp-fusion"].bucket_bytes == 25 * 2**20
    assert PRESETS["cntk"].overlap == "none" and PRESETS["mxnet"].collective == "ps"
    (f,) = get_strategies("wfbp-fusion", bucket_bytes=1000)
    assert f.bucket_bytes == 1000
    (p,) = get_strategies("ps", servers=3)
    assert p.servers == 3
    with pytest.raises(UsageError, match="unknown strategy"):
        get_strategies("horovod")
    with pytest.raises(UsageError, match="overlap"):
        Strategy("x", overlap="sometimes")


def test_strategy_ordering_on_a_real_net():
    """Overlap never loses to no overlap; prefetch never loses to serial."""
    net = load_network("resnet50")
    ph = Phases.synthetic(net, 32, gflops=5000)
    cm = CommModel.from_bandwidth("ring", 5.0, 10.0)
    t = {s.name: predict_iteration(net, ph, cm, s, 16).t_iter_us for s in PRESETS.values()}
    assert t["wfbp"] <= t["prefetch"] <= t["serial"]
    assert t["mxnet"] <= t["ps"]
    assert t["cntk"] == pytest.approx(t["prefetch"])


# ---- the predict command ----------------------------------------------------------------------


@pytest.fixture
def phases_file(tmp_path):
    path = tmp_path / "phases.json"
    path.write_text(json.dumps(Phases.synthetic("alexnet", 64, gflops=2000).to_report()))
    return path


def test_cli_predict_json(tmp_path, phases_file):
    out = tmp_path / "pred.json"
    p = run_cli("predict", "--phases", str(phases_file), "--alpha", "5", "--bandwidth", "10",
                "--workers", "1,2,4,8", "--strategy", "wfbp,cntk", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "speedup" in p.stdout and "Caffe" not in p.stdout and "cntk" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["command"] == "predict" and len(doc["rows"]) == 8
    rows = {(r["strategy"], r["workers"]): r for r in doc["rows"]}
    assert rows[("wfbp", 1)]["speedup"] == pytest.approx(1.0)
    assert rows[("wfbp", 8)]["efficiency"] == pytest.approx(rows[("wfbp", 8)]["speedup"] / 8)
    assert rows[("cntk", 8)]["t_iter_us"] >= rows[("wfbp", 8)]["t_iter_us"]
    assert doc["summary"]["comm_model"]["alpha_us"] == 5 and doc["summary"]["batch"] == 64
    assert doc["summary"]["strategies"][0]["assumptions"]


def test_cli_predict_from_fit_and_plots(tmp_path, phases_file, capsys):
    pytest.importorskip("matplotlib")
    fit = tmp_path / "ar.json"
    fit.write_text(json.dumps({"summary": {"fit": {"ring": {"alpha_us": 5, "beta_us_per_byte": 1e-4}}}}))
    pngs = [tmp_path / f"{k}.png" for k in ("s", "b", "t")]
    code = main(["predict", "--phases", str(phases_file), "--from", str(fit), "--workers", "1,4,16",
                 "--csv", str(tmp_path / "p.csv"), "--plot", str(pngs[0]), "--plot-breakdown", str(pngs[1]),
                 "--plot-timeline", str(pngs[2]), "--plot-strategy", "caffe-mpi", "--json", str(tmp_path / "p.json")])
    assert code == 0, capsys.readouterr().err
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "p.csv").read_text().count("\n") == 1 + 3 * len(PRESETS)
    # the prediction is the fit's: serial sends its messages one after another after backward, each
    # a ring all-reduce of 2(N-1) alpha + 2(N-1)/N bytes beta, with alpha 5 us and beta 1e-4 us/B
    doc = json.loads((tmp_path / "p.json").read_text())
    model = doc["summary"]["comm_model"]
    assert (model["alpha_us"], model["beta_us_per_byte"], model["formula"]) == (5, 1e-4, "ring")
    assert {(r["strategy"], r["workers"]) for r in doc["rows"]} == {(s, n) for s in PRESETS for n in (1, 4, 16)}
    serial = {r["workers"]: r for r in doc["rows"] if r["strategy"] == "serial"}
    gbytes = doc["summary"]["gradient_bytes"]
    for n in (4, 16):
        ring = serial[n]["messages"] * 2 * (n - 1) * 5 + 2 * (n - 1) / n * gbytes * 1e-4
        assert serial[n]["comm_us"] == pytest.approx(ring, rel=1e-9)
        assert serial[n]["t_iter_us"] == pytest.approx(serial[1]["t_iter_us"] + serial[n]["comm_exposed_us"], rel=1e-9)
    assert serial[1]["comm_us"] == 0 and serial[1]["speedup"] == pytest.approx(1.0)


@pytest.mark.parametrize("extra, message", [
    ([], "give --phases FILE"),
    (["--phases", "PH"], "no communication model"),
    (["--phases", "PH", "--alpha", "1"], "one of --beta"),
    (["--phases", "PH", "--beta", "1e-4"], "--alpha"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1e-4", "--bandwidth", "3"], "one of --beta"),
    (["--phases", "PH", "--alpha", "-1", "--beta", "1e-4"], ">= 0"),
    (["--phases", "PH", "--alpha", "1", "--bandwidth", "0"], "> 0"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--workers", "0,2"], "positive"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--workers", "a"], "integers"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--strategy", "nope"], "unknown strategy"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--net", "resnet50"], "measured on alexnet"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--algo", "butterfly"], "unknown algorithm"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--bucket", "12XB"], "unit"),
    (["--phases", "PH", "--from", "FIT"], "no summary.fit"),
    (["--phases", "PH", "--from", "FIT", "--alpha", "1"], "not both"),
    (["--phases", "/nonexistent/p.json", "--alpha", "1", "--beta", "1"], "no such file"),
    (["--phases", "BAD", "--alpha", "1", "--beta", "1"], "not valid JSON"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--json", "/nonexistent-dir/x.json"], "does not exist"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--plot-strategy", "wfbp"], "--plot-timeline"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--batch", "0"], "--batch must be >= 1"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--compress", "0.5"], "ratio must be"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--link-scale", "2:-1"], "latency factor"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--link-scale", "a"], "BW[:LAT]"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--io-threads", "0"], "--io-threads"),
    (["--phases", "PH", "--alpha", "1", "--beta", "1", "--compress", "x:y"], "RATIO"),
])
def test_cli_predict_bad_input_exit_2(tmp_path, phases_file, capsys, extra, message):
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "fit.json").write_text(json.dumps({"summary": {}}))
    subs = {"PH": str(phases_file), "BAD": str(tmp_path / "bad.json"), "FIT": str(tmp_path / "fit.json")}
    out = tmp_path / "never.json"
    argv = ["predict", *[subs.get(a, a) for a in extra]]
    if "--json" not in argv:
        argv += ["--json", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_cli_predict_algo_names_a_library_fit(tmp_path, phases_file, capsys):
    fit = tmp_path / "ar.json"
    fit.write_text(json.dumps({"summary": {"fit": {"mpi": {"alpha_us": 5, "beta_us_per_byte": 1e-4},
                                                   "ring": {"alpha_us": 9, "beta_us_per_byte": 1e-4}}}}))
    out = tmp_path / "p.json"
    assert main(["predict", "--phases", str(phases_file), "--from", str(fit), "--algo", "mpi",
                 "--workers", "1,2", "--strategy", "wfbp", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"]["comm_model"]["alpha_us"] == 5 and doc["summary"]["comm_model"]["formula"] == "library"
    capsys.readouterr()


def test_cli_predict_bad_input_subprocess(phases_file):
    p = run_cli("predict", "--phases", str(phases_file))
    assert p.returncode == 2 and "no communication model" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_synthetic_phases_are_plausible():
    ph = Phases.synthetic("resnet50", 64, gflops=10_000)
    # 2 x 4.09 G x 64 / 10 TFLOP/s = 52 ms forward, backward twice that
    assert ph.forward_us == pytest.approx(2 * 4.0892e9 * 64 / 1e13 * 1e6, rel=1e-3)
    assert ph.backward_us == pytest.approx(2 * ph.forward_us)
    assert math.isclose(sum(ph.layer_backward_us.values()), ph.backward_us)


def test_measured_message_times_replace_the_comm_model():
    from gdlbench.model.phases import plan_messages

    s = strat(overlap="wfbp", bucket_bytes=96)
    plan = plan_messages(NET3, s)
    assert plan == [{"layers": ["fc3", "fc2"], "indices": [2, 1], "bytes": 96},
                    {"layers": ["fc1"], "indices": [0], "bytes": 64}]
    p = predict_iteration(NET3, PH3, None, s, 2, message_costs_us=[10, 5])
    assert [(m.start_us, m.end_us) for m in p.messages] == [(50, 60), (60, 65)]
    assert p.t_iter_us == pytest.approx(2 + 30 + 65 + 3)
    with pytest.raises(UsageError, match="2 messages"):
        predict_iteration(NET3, PH3, None, s, 2, message_costs_us=[1, 2, 3])
    with pytest.raises(UsageError, match="comm model is needed"):
        predict_iteration(NET3, PH3, None, s, 2)
    tf = strat(collective="ps", overlap="wfbp", ps_pull="after_push")
    q = predict_iteration(NET3, PH3, None, tf, 2, message_costs_us=[1, 1, 1], pull_costs_us=[2, 2, 2])
    assert q.t_iter_us == pytest.approx(2 + 30 + 61 + 3 + 6)


def test_plot_functions_take_measured_data(tmp_path):
    pytest.importorskip("matplotlib")
    from gdlbench.study import plots

    spans = [{"lane": "forward", "name": "f", "start_us": 0, "end_us": 10},
             {"lane": "backward", "name": "b", "start_us": 10, "end_us": 30},
             {"lane": "comm", "name": "grad", "start_us": 12, "end_us": 35}]
    assert plots.plot_spans(spans, tmp_path / "m.png", t_iter_us=36).stat().st_size > 1000
    p = predict_iteration(NET3, PH3, RING, strat(overlap="wfbp"), 2)
    bars = [p, ("measured", {"forward": 31, "backward": 59, "comm": 40, "update": 3})]
    assert plots.plot_breakdown(bars, tmp_path / "b.png").stat().st_size > 1000
    with pytest.raises(UsageError, match="metric"):
        plots.plot_scaling([{"strategy": "x", "workers": 1, "speedup": 1}], tmp_path / "s.png", metric="bogus")


def test_fuzzed_phases_and_fits_fail_only_with_usage_errors():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                        st.text(max_size=4), st.sampled_from(list(("io", "forward", "backward", "comm", "ring"))))
    json_values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
            ["phase", "layer", "time_us", "batch", "rows", "args", "summary", "fit", "alpha_us", "beta_us_per_byte",
             "gamma_us_per_byte", "algo", "ring", "net", "env", "world_size"]), inner, max_size=4)), max_leaves=12)
    row = st.fixed_dictionaries({"phase": st.one_of(st.sampled_from(["io", "forward", "backward"]), json_values),
                                 "time_us": json_values}, optional={"layer": json_values, "batch": json_values})
    doc = st.fixed_dictionaries({"rows": st.one_of(st.lists(row, max_size=4), json_values)},
                                optional={"args": json_values, "summary": json_values, "env": json_values})

    @settings(max_examples=150, deadline=None)
    @given(st.one_of(doc, json_values))
    def check(d):
        try:
            Phases.from_dict(d)
        except UsageError:
            pass
        try:
            CommModel.from_dict(d)
        except UsageError:
            pass

    check()


@pytest.mark.mpi
def test_cli_predict_under_mpiexec_prints_once(tmp_path, phases_file):
    # env.collect() holds a collective: every rank must reach it, or rank 0 waits forever
    out = tmp_path / "p.json"
    p = run_cli("predict", "--phases", str(phases_file), "--alpha", "5", "--bandwidth", "6", "--workers", "1,4",
                "--strategy", "wfbp", "--json", str(out), nranks=2, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("gdlbench predict: alexnet") == 1
    assert json.loads(out.read_text())["env"]["world_size"] == 2


def test_user_strategy_file(tmp_path):
    path = tmp_path / "my-ddp.json"
    path.write_text(json.dumps({"overlap": "wfbp", "bucket_bytes": 96, "assumptions": "mine"}))
    (s,) = get_strategies(str(path))
    assert (s.name, s.overlap, s.bucket_bytes, s.source) == ("my-ddp", "wfbp", 96, str(path))
    assert predict_iteration(NET3, PH3, RING, s, 2).t_iter_us == pytest.approx(2 + 30 + 106 + 3)
    for doc, message in (({"overlap": "wfbp", "bucket": 3}, "unknown field"), ({"io_prefetch": 1}, "wrong type"),
                         ({"overlap": "later"}, "overlap"), ([1], "expected an object")):
        path.write_text(json.dumps(doc))
        with pytest.raises(UsageError, match=message):
            get_strategies(str(path))
    with pytest.raises(UsageError, match="no such file"):
        get_strategies(str(tmp_path / "none.json"))


def test_cli_predict_measures_the_phases_on_the_spot(tmp_path):
    from pathlib import Path

    from helpers import run_cli

    mlp = str(Path(__file__).parent / "data" / "mlp.json")
    out = tmp_path / "p.json"
    p = run_cli("predict", "--net", mlp, "--batch", "2", "--device", "cpu", "--workers", "1,4", "--alpha", "5",
                "--bandwidth", "10", "--strategy", "serial", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["phases"]["source"].startswith("measured on the spot")
    assert [r["workers"] for r in doc["rows"]] == [1, 4]
    # the measured phases are real times, and the prediction prices them with the link given:
    # serial on 4 workers adds each message's ring all-reduce, 2(N-1) alpha + 2(N-1)/N bytes / 10 GB/s
    one, four = doc["rows"]
    assert all(one[k] > 0 for k in ("forward_us", "backward_us", "update_us")) and one["batch"] == 2
    assert one["comm_us"] == 0 and one["t_iter_us"] >= one["forward_us"] + one["backward_us"]
    ring = four["messages"] * 2 * 3 * 5 + 2 * 3 / 4 * doc["summary"]["gradient_bytes"] / 10e3
    assert four["comm_us"] == pytest.approx(ring, rel=1e-9)
    assert four["t_iter_us"] == pytest.approx(one["t_iter_us"] + four["comm_exposed_us"], rel=1e-9)
    assert four["speedup"] == pytest.approx(4 * one["t_iter_us"] / four["t_iter_us"], rel=1e-9)
    assert four["images_per_s"] == pytest.approx(4 * 2 / (four["t_iter_us"] * 1e-6), rel=1e-9)


def test_overlap_efficiency_zero_hides_nothing():
    """On a CPU whose cores the compute fills, overlapped messages and prefetched I/O are work on
    the same cores: WFBP pays backward plus every message, prefetch pays the whole read."""
    from dataclasses import replace

    from gdlbench.model.phases import CommModel, Phases, predict_iteration
    from gdlbench.model.strategies import get_strategies
    from gdlbench.nets.network import load_network

    net = load_network("alexnet")
    base = Phases.synthetic(net, 8, gflops=100.0)
    comm = CommModel("ring", 10.0, 1e-3)
    wfbp, serial, prefetch = (get_strategies(n)[0] for n in ("wfbp", "serial", "prefetch"))
    hidden = predict_iteration(net, base, comm, wfbp, 2)
    shared = predict_iteration(net, replace(base, overlap_efficiency=0.0), comm, wfbp, 2)
    t_c = sum(comm.predict_us(g.bytes, 2) for g in net.gradient_messages())
    assert shared.comm_exposed_us == pytest.approx(t_c)
    assert hidden.comm_exposed_us < shared.comm_exposed_us
    pre = predict_iteration(net, replace(base, overlap_efficiency=0.0), comm, prefetch, 2)
    ser = predict_iteration(net, replace(base, overlap_efficiency=0.0), comm, serial, 2)
    assert pre.t_iter_us == pytest.approx(ser.t_iter_us)
    with pytest.raises(UsageError):
        replace(base, overlap_efficiency=1.5)


def test_predict_with_more_servers_than_one_worker_prices_the_single_worker_too():
    """--servers P with a ps strategy: the speedup's t_iter(1) has one worker, so one server (the
    iteration_model benchmark's 2-rank predict stopped with 'servers must be between 1 and ...')."""
    from gdlbench import cli
    from gdlbench.cli.commands.predict import request_from_args
    from gdlbench.whatif.prediction import evaluate

    rows = evaluate(request_from_args(cli.build_parser().parse_args(
        ["predict", "--net", "alexnet", "--strategy", "ps,mxnet", "--alpha", "5", "--bandwidth", "10",
         "--workers", "1,2,4", "--servers", "4"]))).rows
    assert {(r["strategy"], r["workers"]) for r in rows} == {(s, n) for s in ("ps", "mxnet") for n in (1, 2, 4)}
    one = [r for r in rows if r["workers"] == 1]
    assert all(r["t_iter_us"] > 0 and r["efficiency"] == pytest.approx(1.0) for r in one), one


def test_exposed_communication_as_a_trace_shows_it_is_never_more_than_the_messages():
    """Backward slowed beside the messages goes into comm_exposed_us (from backward alone's end),
    which can exceed every message's time; the wait after the slowed backward (comm_wait_us,
    what a trace shows) cannot. backward_beside_us + comm_wait_us = backward_us + comm_exposed_us."""
    from dataclasses import replace

    from gdlbench.model.phases import CommModel, Phases, predict_iteration
    from gdlbench.model.strategies import get_strategies
    from gdlbench.nets.network import load_network

    net = load_network("alexnet")
    slowed = replace(Phases.synthetic(net, 8, gflops=100.0), compute_slowdown=3.0, comm_slowdown=1000.0)
    comm = CommModel("ring", 10.0, 1e-5)
    for name in ("mxnet", "wfbp", "wfbp-fusion", "serial", "zero2", "fsdp"):
        p = predict_iteration(net, slowed, comm, get_strategies(name)[0], 2)
        assert 0 <= p.comm_wait_us <= p.comm_us * (1 + 1e-9), name
        if name in ("zero2", "fsdp"):  # forward and the update run beside messages too
            continue
        assert p.backward_beside_us + p.comm_wait_us == pytest.approx(p.backward_us + p.comm_exposed_us), name
        assert 0 <= p.comm_hidden_us <= p.backward_beside_us + 1e-9, name
    mxnet = predict_iteration(net, slowed, comm, get_strategies("mxnet")[0], 2)
    assert mxnet.comm_exposed_us > mxnet.comm_us  # the case the study compared wrongly


@pytest.mark.parametrize("t_io", [20_000.0, 5_000_000.0])  # hidden behind compute; longer than it
def test_a_prefetched_reads_cost_beside_compute_shows_as_compute_in_the_traced_breakdown(t_io):
    """The model's exposed read = what it costs the compute beside it (read_beside_us) + the wait for
    a read that outlasts compute; a trace shows the first as slower forward, the second as the wait:
    breakdown_of splits it so (the study's I/O component against the measured one)."""
    from gdlbench.study.run import breakdown_of

    phases = replace(Phases.synthetic("resnet50", 8), io_us=t_io, read_beside_us=3_000.0)
    pred = predict_iteration("resnet50", phases, RING, get_strategies("wfbp")[0], 2)
    assert pred.io_beside_us == 3_000.0
    compute = pred.t_iter_us - pred.h2d_us - pred.io_us  # forward, backward, communication, update
    assert pred.io_us == pytest.approx(max(3_000.0, t_io - compute))
    parts = breakdown_of(pred.to_dict())
    assert parts["io"] == pytest.approx(pred.io_us - 3_000.0)
    assert parts["forward"] == pytest.approx(pred.forward_us + 3_000.0)
    assert sum(parts.values()) == pytest.approx(pred.t_iter_us)  # nothing lost or counted twice
    serial = predict_iteration("resnet50", phases, RING, get_strategies("serial")[0], 2)
    assert serial.io_beside_us == 0.0 and breakdown_of(serial.to_dict())["io"] == serial.io_us
    # the timeline draws it the same way: the wait only what is not beside compute, forward
    # longer by the read's cost beside it, and everything after forward where it was
    tl = pred.timeline
    waits = [sp for sp in tl if sp["name"] == "wait for the prefetched batch"]
    assert sum(sp["end_us"] - sp["start_us"] for sp in waits) == pytest.approx(pred.io_us - 3_000.0)
    fwd = [sp for sp in tl if sp["lane"] == "forward"]
    assert sum(sp["end_us"] - sp["start_us"] for sp in fwd) == pytest.approx(pred.forward_us + 3_000.0)
    assert fwd[0]["start_us"] == pytest.approx(pred.io_us - 3_000.0 + pred.h2d_us)
    first_backward = min(sp["start_us"] for sp in tl if sp["lane"] == "backward")
    assert fwd[-1]["end_us"] == pytest.approx(first_backward)
    assert first_backward == pytest.approx(pred.io_us + pred.h2d_us + pred.forward_us)
    read = next(sp for sp in tl if sp["name"] == "read the next batch (prefetch thread)")
    assert read["start_us"] == pytest.approx(fwd[0]["start_us"])  # the prefetch starts with forward
    assert max(sp["end_us"] for sp in tl if sp["lane"] == "update") == pytest.approx(pred.t_iter_us)


def _covered(spans, start, end):
    """The length of [start, end] that no span covers (0: every moment drawn)."""
    gap, clock = 0.0, start
    for sp in sorted(spans, key=lambda sp: sp["start_us"]):
        gap += max(0.0, min(sp["start_us"], end) - clock)
        clock = max(clock, sp["end_us"])
    return gap + max(0.0, end - clock)


@pytest.mark.parametrize("t_io", [20_000.0, 5_000_000.0])
@pytest.mark.parametrize("name", ["wfbp", "serial", "zero1", "zero2", "zero3", "fsdp"])
def test_a_sharded_strategys_timeline_draws_the_read_as_the_others_do(name, t_io):
    """Issue 33: a sharded strategy's predicted timeline started forward after the whole exposed read
    and drew nothing before it (no wait, the read's cost beside forward a blank). Now every strategy:
    the wait for a prefetched batch only what is not beside compute, forward longer by the read's
    cost beside it, the prefetch starting with forward, every moment up to t_iter drawn."""
    phases = replace(Phases.synthetic("resnet50", 8), io_us=t_io, read_beside_us=3_000.0)
    strategy = get_strategies(name)[0]
    pred = predict_iteration("resnet50", phases, RING, strategy, 2)
    tl = pred.timeline
    beside = 3_000.0 if strategy.io_prefetch else 0.0
    assert pred.io_beside_us == beside
    waits = [sp for sp in tl if sp["name"] == "wait for the prefetched batch"]
    assert sum(sp["end_us"] - sp["start_us"] for sp in waits) == pytest.approx(pred.io_us - beside if beside else 0.0)
    fwd = [sp for sp in tl if sp["lane"] == "forward"]
    assert sum(sp["end_us"] - sp["start_us"] for sp in fwd) == pytest.approx(pred.forward_us + beside)
    if beside:
        read = next(sp for sp in tl if sp["name"] == "read the next batch (prefetch thread)")
        assert read["start_us"] == pytest.approx(pred.io_us - beside + pred.h2d_us)  # with forward
        assert read["end_us"] - read["start_us"] == pytest.approx(t_io)
    else:
        read = next(sp for sp in tl if sp["name"] == "read the batch")
        assert (read["start_us"], read["end_us"]) == (0.0, pytest.approx(t_io))
    assert min(sp["start_us"] for sp in fwd) >= pred.io_us - beside + pred.h2d_us - 1e-6
    assert max(sp["end_us"] for sp in tl) == pytest.approx(pred.t_iter_us)
    drawn = [sp for sp in tl if sp["name"] != "read the next batch (prefetch thread)"]
    assert _covered(drawn, 0.0, pred.t_iter_us) == pytest.approx(0.0, abs=1e-6 * pred.t_iter_us)


def test_contention_belongs_to_the_link_it_was_measured_on():
    """Measured slowdowns price messages over their own link; over another link (a cluster's
    inter-node level, a formula) the default for an unmeasured link, 2 - overlap_efficiency."""
    from gdlbench.model.cluster import Cluster, Link

    shm = "intra-node link of cpu X"
    ph = replace(PH3, compute_slowdown=2.0, comm_slowdown=2.0, contention_link=shm)
    wfbp = strat(overlap="wfbp")  # one message per layer: fc3 16 us ready at 30, fc2 24 at 50, fc1 24 at 60
    # its own link, both 2x: fc3's message and layer fc2 share 30-62, fc2 alone to 66; fc2's message
    # and fc1 share 66-86, the message alone to 100; fc1's 100-124. t = h2d 2 + t_f 30 + 124 + t_u 3
    own = predict_iteration(NET3, ph, replace(RING, link=shm), wfbp, 2)
    assert [x for m in own.messages for x in (m.start_us, m.end_us)] == pytest.approx([30, 62, 66, 100, 100, 124])
    assert own.t_iter_us == pytest.approx(159)
    assert own.to_dict()["contention"] == f"measured on this link ({shm})"
    # a formula (no measured link): 2 - 1 = 1 for both, the plain WFBP recurrence: 30-46, 50-74, 74-98
    formula = predict_iteration(NET3, ph, RING, wfbp, 2)
    assert [x for m in formula.messages for x in (m.start_us, m.end_us)] == pytest.approx([30, 46, 50, 74, 74, 98])
    assert formula.t_iter_us == pytest.approx(133)
    assert formula.contention.startswith("assumed for an unmeasured link: 2 - overlap_efficiency = 1 ")
    # the same link timings on a cluster measured on cpu X: one node (N = 2 <= 2 per node) crosses
    # the intra-node link the contention was measured on; 2 nodes x 1 cross the inter-node link
    link = Link("l", 4.0, 0.004)  # alpha 4 us, beta 0.25 us/B: RING's numbers
    one_node = Cluster(2, link, link, algo="ring", machine="cpu X")
    two_nodes = Cluster(1, link, link, algo="ring", machine="cpu X")
    assert one_node.link_at(2) == shm and two_nodes.link_at(2) == "inter-node link of cpu X"
    assert predict_iteration(NET3, ph, one_node, wfbp, 2).t_iter_us == pytest.approx(159)
    across = predict_iteration(NET3, ph, two_nodes, wfbp, 2)
    assert across.t_iter_us == pytest.approx(133)
    assert "messages over inter-node link of cpu X" in across.contention and shm in across.contention
    # overlap_efficiency 0: the unmeasured default is 2 for both, as measured here
    assert predict_iteration(NET3, replace(ph, overlap_efficiency=0.0), two_nodes, wfbp, 2).t_iter_us == \
        pytest.approx(159 + 5)  # + the prefetched read beside compute, (1 - 0) t_io
    # a strategy's own pair is the link's too; a contention whose link is not recorded applies as given
    by = replace(PH3, strategy_slowdowns={"test": (2.0, 2.0)}, contention_link=shm)
    assert predict_iteration(NET3, by, two_nodes, wfbp, 2).t_iter_us == pytest.approx(133)
    assert predict_iteration(NET3, replace(ph, contention_link=None), two_nodes, wfbp, 2).t_iter_us == \
        pytest.approx(159)
    # messages measured alone in the same run crossed the contention's link: kept
    assert predict_iteration(NET3, ph, None, wfbp, 2, message_costs_us=[16, 24, 24]).t_iter_us == pytest.approx(159)
    assert predict_iteration(NET3, ph, two_nodes, wfbp, 1).contention == ""  # one worker sends nothing


def test_a_reports_link_comes_from_its_env():
    from gdlbench.model.phases import measured_link

    env = {"cpu": "cpu X", "topology": {"nodes": 1, "ranks_per_node": 2}}
    assert measured_link({"env": env}) == "intra-node link of cpu X"
    assert measured_link({"env": {**env, "topology": {"nodes": 2}}}) == "inter-node link of cpu X"
    assert measured_link({"env": {"world_size": 2}}) is None and measured_link({}) is None
    doc = replace(PH3, compute_slowdown=1.5, comm_slowdown=1.2).to_report() | {"env": env}
    back = Phases.from_dict(doc)
    assert back.contention_link == "intra-node link of cpu X"
    assert Phases.from_dict(back.to_report()).contention_link == "intra-node link of cpu X"  # kept in the JSON
    doc["summary"]["contention"]["link"] = 3
    with pytest.raises(UsageError, match="contention.link"):
        Phases.from_dict(doc)
