"""Sharded data parallelism in the model (ZeRO-1/2/3, FSDP: strategies.SHARDED, model.predict_sharded):
the messages each strategy sends, their volume against an all-reduce's, the limits (N = 1 costs
nothing), and the schedule of prefetched all-gathers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gdlbench.common.errors import UsageError
from gdlbench.model.phases import (
    CommModel,
    Phases,
    plan_messages,
    plan_sharded,
    predict_iteration,
    schedule_lanes,
    shard_units,
    sharded_message_us,
    sharded_pricing,
)
from gdlbench.model.strategies import PRESETS, SHARDED, get_strategies
from gdlbench.nets.network import load_network

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
    from gdlbench.model.phases import Compression
    with pytest.raises(UsageError, match="all-reduce strategies only"):
        predict_iteration(GPT, PH, BETA, SHARDED["zero1"], 2, compress=Compression(10))
    from gdlbench.model.strategies import Strategy
    with pytest.raises(UsageError, match="ZeRO stage"):
        Strategy("x", shard=4)
    with pytest.raises(UsageError, match="goes with collective"):
        Strategy("x", shard=1, collective="ps")


def test_sharded_on_a_two_level_cluster():
    # reduce-scatter + all-gather as a flat ring across nodes: ZeRO-1 moves what ring's all-reduce does
    from gdlbench.model import cluster
    c = cluster.Cluster(8, cluster.link("nvlink4", "--intra"), cluster.link("ib-hdr", "--inter"), 1, 4, algo="ring")
    ddp = get_strategies("wfbp-fusion", bucket_bytes=10**12)[0]  # one bucket, as ZeRO-1's
    ring = predict_iteration(GPT, PH, c, ddp, 32).comm_us
    assert predict_iteration(GPT, PH, c, SHARDED["zero1"], 32).comm_us == pytest.approx(ring)
    assert predict_iteration(GPT, PH, c, SHARDED["zero3"], 32).comm_us > 1.4 * ring


def test_strategy_file_with_shard(tmp_path):
    from gdlbench.model.strategies import load_strategy
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


# A hand-made comm model: the all-reduce's fit, and the reduce-scatter's and all-gather's own fits.
AR = CommModel("library", alpha_us=10.0, beta_us_per_byte=1e-3, gamma_us_per_byte=2e-5, source="ar.json")
RS = CommModel("reduce_scatter", alpha_us=5.0, beta_us_per_byte=2e-4, gamma_us_per_byte=1e-4, source="rs.json")
AG = CommModel("allgather", alpha_us=3.0, beta_us_per_byte=1e-4, source="ag.json")


def test_sharded_messages_use_their_collectives_fit_where_there_is_one_else_the_formula():
    both, rs_only = AR.with_fits(RS, AG), AR.with_fits(RS)
    m = 1e6
    # own fit, N = 2: ceil(log2 2) a + (N-1)/N m (b + g) for the reduce-scatter, no g for the all-gather
    assert sharded_message_us(both, "reduce_scatter", m, 2) == pytest.approx(5 + 0.5e6 * 3e-4, rel=1e-12)  # 155
    assert sharded_message_us(both, "allgather", m, 2) == pytest.approx(3 + 0.5e6 * 1e-4, rel=1e-12)  # 53
    assert sharded_message_us(both, "reduce_scatter", m, 4) == pytest.approx(2 * 5 + 0.75e6 * 3e-4, rel=1e-12)  # 235
    # no fit of its own: the same formula with the all-reduce fit's alpha, beta (and gamma)
    assert sharded_message_us(AR, "reduce_scatter", m, 2) == pytest.approx(10 + 0.5e6 * 1.02e-3, rel=1e-12)  # 520
    assert sharded_message_us(AR, "allgather", m, 2) == pytest.approx(10 + 0.5e6 * 1e-3, rel=1e-12)  # 510
    assert sharded_message_us(rs_only, "allgather", m, 2) == pytest.approx(510, rel=1e-12)
    # the whole iteration: ZeRO-1 sends one reduce-scatter and one all-gather of the whole gradient
    g = 4 * PSI  # 497,759,232 B
    assert [(x["collective"], x["bytes"]) for x in plan_sharded(GPT, SHARDED["zero1"])] == [
        ("reduce_scatter", g), ("allgather", g)]
    expected = {both: 74_668.8848 + 24_890.9616, rs_only: 74_668.8848 + 248_889.616,
                AR: 253_867.20832 + 248_889.616}
    for comm, total in expected.items():
        assert predict_iteration(GPT, PH, comm, SHARDED["zero1"], 2).comm_us == pytest.approx(total, rel=1e-12)
    # ZeRO-3's 39 messages, each by its collective's fit
    plan = plan_sharded(GPT, SHARDED["zero3"])
    by_hand = sum((5 + x["bytes"] / 2 * 3e-4) if x["collective"] == "reduce_scatter" else (3 + x["bytes"] / 2 * 1e-4)
                  for x in plan)
    assert predict_iteration(GPT, PH, both, SHARDED["zero3"], 2).comm_us == pytest.approx(by_hand, rel=1e-12)
    # the all-reduce strategies are the all-reduce fit's, whatever else the model carries
    ddp = get_strategies("ddp")[0]
    assert predict_iteration(GPT, PH, both, ddp, 2).t_iter_us == predict_iteration(GPT, PH, AR, ddp, 2).t_iter_us
    # what predict states
    assert sharded_pricing(rs_only, "reduce_scatter") == "reduce_scatter: its own fit (rs.json)"
    assert sharded_pricing(rs_only, "allgather").startswith("allgather: no fit of its own, its formula (")
    assert "with the library fit's alpha and beta" in sharded_pricing(rs_only, "allgather")


def test_the_collectives_fits_follow_the_link_what_if_and_refuse_nonsense():
    fast = AR.with_fits(RS, AG).scaled(bandwidth=2.0, latency=0.5)
    rs = fast.fit_for("reduce_scatter")
    assert rs is not None and (rs.alpha_us, rs.beta_us_per_byte, rs.gamma_us_per_byte) == (2.5, 1e-4, 1e-4)
    assert AR.with_fits(RS).with_fits(replace(RS, alpha_us=1.0)).fit_for("reduce_scatter").alpha_us == 1.0
    with pytest.raises(UsageError, match="collective fits are reduce_scatter and allgather"):
        AR.with_fits(replace(AR, algo="ring"))
    with pytest.raises(UsageError, match="two fits of the same collective"):
        replace(AR, collective_fits=(RS, RS))


@pytest.mark.mpi
def test_measured_reduce_scatter_and_allgather_fits_price_predict(tmp_path):
    """`reduce_scatter --fit` and `allgather --fit` on 2 ranks, and predict --from with them beside
    an all-reduce fit: ZeRO-1's two messages are priced by the measured fits, and predict says so."""
    import json

    from helpers import run_cli

    files, fits = {}, {}
    for c in ("reduce_scatter", "allgather"):
        files[c] = tmp_path / f"{c}.json"
        p = run_cli(c, "-b", "64K", "-e", "4M", "-f", "4", "--mode", "in", "--on", "comm-thread", "--fit",
                    "--fit-regimes", "1", "-n", "3", "-w", "1", "--json", str(files[c]), nranks=2)
        assert p.returncode == 0, p.stderr[-2000:]
        fit = json.loads(files[c].read_text())["summary"]["fit"]
        assert [f["algo"] for f in fit] == [c] and len(fit[0]["points"]) == 4
        fits[c] = fit[0]
    ar, phases_file = tmp_path / "ar.json", tmp_path / "phases.json"
    ar.write_text(json.dumps({"summary": {"fit": {"library": {"alpha_us": 10, "beta_us_per_byte": 1e-3}}}}))
    phases_file.write_text(json.dumps(PH.to_report()))
    out = tmp_path / "p.json"
    p = run_cli("predict", "--phases", str(phases_file), "--strategy", "zero1", "--workers", "2",
                "--from", f"{files['allgather']},{ar},{files['reduce_scatter']}", "--json", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    thread = "timed on a communication thread, as the iteration sends"
    assert f"reduce_scatter: its own fit ({files['reduce_scatter']}; {thread})" in " ".join(p.stdout.split())
    doc = json.loads(out.read_text())["summary"]
    model = CommModel.from_dict(doc["comm_model"])
    for c, fit in fits.items():  # the measured numbers, as the files hold them
        own = model.fit_for(c)
        assert own is not None and (own.alpha_us, own.beta_us_per_byte) == (fit["alpha_us"], fit["beta_us_per_byte"])
        assert own.timed_on == fit["on"] == "comm-thread"  # kept through the saved model
    assert model.fit_for("reduce_scatter").gamma_us_per_byte == fits["reduce_scatter"]["gamma_us_per_byte"] > 0
    assert doc["sharded_pricing"][1] == f"allgather: its own fit ({files['allgather']}; {thread})"
