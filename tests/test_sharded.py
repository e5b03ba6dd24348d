"""Sharded data parallelism in the model (ZeRO-1/2/3, FSDP: strategies.SHARDED, model.predict_sharded):
the messages each strategy sends, their volume against an all-reduce's, the limits (N = 1 costs
nothing), and the schedule of prefetched all-gathers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gdlbench.errors import UsageError
from gdlbench.model import (
    CommModel,
    Phases,
    plan_messages,
    plan_sharded,
    predict_iteration,
    schedule_lanes,
    shard_units,
)
from gdlbench.network import load_network
from gdlbench.strategies import PRESETS, SHARDED, get_strategies

GPT = load_network("gpt2-small:seq=64")
PSI = 124_439_808  # parameters
ROOT = 50257 * 768 + 1024 * 768 + 2 * 768  # wte, wpe, ln_f
BLOCK = 12 * 768 * 768 + 13 * 768
PH = Phases.synthetic(GPT, 4, gflops=2_000.0)
BETA = CommModel("ring", alpha_us=0.0, beta_us_per_byte=1e-4)  # bandwidth only: cost = volume


def test_units_of_gpt2_are_root_and_blocks():
    units = shard_units(GPT)
    assert [u.name for u in units] == ["root"] + [f"h.{i}" for i in range(12)]
    assert units[0].root and units[0].params == ROOT and {u.params for u in units[1:]} == {BLOCK}
    # the tied LM head uses wte: it is in the root unit, which backward gathers before it
    assert [GPT.layers[i].name for i in units[0].layers] == ["wte+wpe", "ln_f", "lm_head"]
    assert sum(u.params for u in units) == PSI
    # a net without blocks: one unit per layer with parameters
    assert [u.name for u in shard_units("alexnet")][:2] == ["conv1", "conv2"]


@pytest.mark.parametrize("name, rs, ag", [("zero1", 1, 1), ("zero2", 1, 1), ("zero3", 13, 26), ("fsdp", 13, 25)])
def test_number_and_sizes_of_messages(name, rs, ag):
    plan = plan_sharded(GPT, SHARDED[name])
    got_rs = [m["bytes"] for m in plan if m["collective"] == "reduce_scatter"]
    got_ag = [m["bytes"] for m in plan if m["collective"] == "allgather"]
    assert (len(got_rs), len(got_ag)) == (rs, ag)
    assert sum(got_rs) == 4 * PSI  # every gradient reduce-scattered once
    if name in ("zero1", "zero2"):  # DeepSpeed's 5e8-element bucket holds all of GPT-2 small
        assert got_ag == [4 * PSI]
    else:
        assert sorted(set(got_rs)) == [4 * BLOCK, 4 * ROOT]
        # all-gathered before forward and (but FSDP's root) before backward
        assert sum(got_ag) == 4 * (2 * PSI - (ROOT if name == "fsdp" else 0))


def test_bucketed_zero2_reduce_scatters_as_ddp_buckets():
    s = get_strategies("zero2", bucket_bytes=25 * 2**20)[0]
    ddp = get_strategies("wfbp-fusion")[0]
    rs = [m for m in plan_sharded(GPT, s) if m["collective"] == "reduce_scatter"]
    assert [m["bytes"] for m in rs] == [m["bytes"] for m in plan_messages(GPT, ddp)]
    assert rs[0]["ready"] < rs[-1]["ready"]  # overlapped: ready as backward fills each bucket


@pytest.mark.parametrize("n", [2, 8, 64])
def test_volume_zero12_equal_allreduce_zero3_one_and_a_half(n):
    ddp = predict_iteration(GPT, PH, BETA, get_strategies("wfbp-fusion")[0], n).comm_us
    allreduce = 2 * (n - 1) / n * 4 * PSI * 1e-4
    assert ddp == pytest.approx(allreduce)
    for name, factor in (("zero1", 1.0), ("zero2", 1.0), ("zero3", 1.5)):
        got = predict_iteration(GPT, PH, BETA, SHARDED[name], n).comm_us
        assert got == pytest.approx(factor * allreduce), name
    fsdp = predict_iteration(GPT, PH, BETA, SHARDED["fsdp"], n).comm_us
    assert fsdp == pytest.approx((n - 1) / n * 4 * (3 * PSI - ROOT) * 1e-4)


@pytest.mark.parametrize("name", sorted(SHARDED))
def test_one_worker_costs_nothing(name):
    ring = CommModel("ring", alpha_us=50.0, beta_us_per_byte=1e-3)
    p = predict_iteration(GPT, PH, ring, SHARDED[name], 1)
    assert p.comm_us == 0 and p.comm_exposed_us == pytest.approx(0, abs=1e-6)
    assert p.t_iter_us == pytest.approx(predict_iteration(GPT, PH, ring, get_strategies("prefetch")[0], 1).t_iter_us)
    assert sum(p.breakdown().values()) == pytest.approx(p.t_iter_us)


def test_update_is_sharded_and_breakdown_sums():
    ring = CommModel("ring", alpha_us=20.0, beta_us_per_byte=1e-5)
    ph = replace(PH, update_us=8000.0)
    for name in SHARDED:
        p = predict_iteration(GPT, ph, ring, SHARDED[name], 8)
        assert p.update_us == pytest.approx(1000.0)
        assert sum(p.breakdown().values()) == pytest.approx(p.t_iter_us)


def test_fsdp_schedule_prefetches_and_waits():
    ring = CommModel("ring", alpha_us=20.0, beta_us_per_byte=1e-4)
    p = predict_iteration(GPT, PH, ring, SHARDED["fsdp"], 8)
    spans = {(s["lane"], s["name"]): s for s in p.timeline}
    h0, h1 = spans[("forward", "h.0.attn")], spans[("forward", "h.1.attn")]
    gather_h1 = next(s for s in p.timeline if s["lane"] == "comm" and s["name"].startswith("allgather forward h.1."))
    assert gather_h1["end_us"] <= h1["start_us"] + 1e-6  # the block waits for its parameters
    assert gather_h1["start_us"] < h0["end_us"]  # prefetched: it runs beside h.0's compute
    # without prefetch the iteration is no faster
    slow = predict_iteration(GPT, PH, ring, replace(SHARDED["fsdp"], prefetch=False), 8)
    assert slow.t_iter_us >= p.t_iter_us - 1e-6
    # BACKWARD_PRE: in backward the next unit's all-gather goes before the current reduce-scatter
    kinds = [(m.collective, m.when) for m in p.messages]
    first_rs = kinds.index(("reduce_scatter", "backward"))
    assert kinds[first_rs - 1] == ("allgather", "backward")


def test_schedule_lanes_by_hand():
    # compute 10, 10 (the second needs comm 0), comm 0 (5, ready at once), comm 1 (4, after task 0)
    cs, ms = schedule_lanes([10, 10], [None, 0], [5, 4], [0, 1])
    assert cs == [(0, 10), (10, 20)] and ms == [(0, 5), (10, 14)]
    # the same, contention 2 x on both while they overlap: comm 0 runs 0-10 (5 of work at rate 1/2)
    cs, ms = schedule_lanes([10, 10], [None, 0], [5, 4], [0, 1], 2.0, 2.0)
    assert ms[0] == pytest.approx((0, 10)) and cs[0] == pytest.approx((0, 15))
    # compute task 1 waits for a slow message
    cs, ms = schedule_lanes([1, 1], [None, 0], [7], [0])
    assert cs[1] == (7, 8)


def test_sharded_strategies_are_named_not_in_all():
    assert {s.name for s in get_strategies("sharded")} == set(SHARDED)
    assert [s.name for s in get_strategies("wfbp,sharded")] == ["wfbp", *SHARDED]
    assert not {s.name for s in get_strategies("all")} & set(SHARDED)
    both = [s.name for s in get_strategies("all,sharded,wfbp")]  # groups inside a list, each name once
    assert both == [*PRESETS, *SHARDED] and len(both) == len(set(both))
    assert "ZeRO" in SHARDED["zero3"].source and "FSDP" in SHARDED["fsdp"].source
    assert "reduce-scatter" in SHARDED["zero2"].describe()


def test_measured_message_times_price_the_sharded_plan():
    # the times the executor measures, one per plan_sharded message, in place of the comm model's
    for name in SHARDED:
        plan = plan_sharded(GPT, SHARDED[name])
        costs = [BETA.allreduce_us(m["collective"], m["bytes"], 4) for m in plan]
        by_model = predict_iteration(GPT, PH, BETA, SHARDED[name], 4)
        measured = predict_iteration(GPT, PH, None, SHARDED[name], 4, message_costs_us=costs)
        assert measured.t_iter_us == pytest.approx(by_model.t_iter_us, rel=1e-12)
        slower = predict_iteration(GPT, PH, None, SHARDED[name], 4, message_costs_us=[2 * c for c in costs])
        assert slower.comm_us == pytest.approx(2 * by_model.comm_us) and slower.t_iter_us >= measured.t_iter_us
        with pytest.raises(UsageError, match="times for"):
            predict_iteration(GPT, PH, None, SHARDED[name], 4, message_costs_us=costs[1:])
    with pytest.raises(UsageError, match="comm model is needed"):
        predict_iteration(GPT, PH, None, SHARDED["zero3"], 4)


def test_all_reduce_planning_and_compression_refuse_sharded():
    with pytest.raises(UsageError, match="not all-reduce messages"):
        plan_messages(GPT, SHARDED["zero2"])
    from gdlbench.model import Compression
    with pytest.raises(UsageError, match="all-reduce strategies only"):
        predict_iteration(GPT, PH, BETA, SHARDED["zero1"], 2, compress=Compression(10))
    from gdlbench.strategies import Strategy
    with pytest.raises(UsageError, match="ZeRO stage"):
        Strategy("x", shard=4)
    with pytest.raises(UsageError, match="goes with collective"):
        Strategy("x", shard=1, collective="ps")


def test_sharded_on_a_two_level_cluster():
    # reduce-scatter + all-gather as a flat ring across nodes: ZeRO-1 moves what ring's all-reduce does
    from gdlbench import cluster
    c = cluster.Cluster(8, cluster.link("nvlink4", "--intra"), cluster.link("ib-hdr", "--inter"), 1, 4, algo="ring")
    ddp = get_strategies("wfbp-fusion", bucket_bytes=10**12)[0]  # one bucket, as ZeRO-1's
    ring = predict_iteration(GPT, PH, c, ddp, 32).comm_us
    assert predict_iteration(GPT, PH, c, SHARDED["zero1"], 32).comm_us == pytest.approx(ring)
    assert predict_iteration(GPT, PH, c, SHARDED["zero3"], 32).comm_us > 1.4 * ring


def test_strategy_file_with_shard(tmp_path):
    from gdlbench.strategies import load_strategy
    f = tmp_path / "my-zero.json"
    f.write_text('{"shard": 3, "prefetch": false, "overlap": "wfbp"}')
    s = load_strategy(str(f))
    assert (s.name, s.shard, s.prefetch) == ("my-zero", 3, False)
    assert len([m for m in plan_sharded(GPT, s) if m["collective"] == "allgather"]) == 26
    for bad, message in (('{"shard": 5}', "ZeRO stage"), ('{"shard": true}', "wrong type"),
                         ('{"prefetch": 1}', "wrong type")):
        f.write_text(bad)
        with pytest.raises(UsageError, match=message):
            load_strategy(str(f))
