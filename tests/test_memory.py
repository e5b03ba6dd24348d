"""The memory model (gdlbench.model.memory): the ZeRO paper's worked example, activations per layer
against Korthikanti et al.'s formula, checkpointing, buffers, and predict --memory-limit."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli

from gdlbench.common.errors import UsageError
from gdlbench.model.memory import (
    activation_bytes,
    activations,
    backward_peak,
    buffers,
    bytes_per_param,
    memory_per_worker,
    model_states,
)
from gdlbench.model.phases import shard_units
from gdlbench.model.strategies import SHARDED, get_strategies
from gdlbench.nets.network import load_network


@pytest.mark.parametrize("stage, gb", [(0, 120.0), (1, 31.40625), (2, 16.640625), (3, 1.875)])
def test_zero_paper_example(stage, gb):
    # Rajbhandari et al. (SC20), figure 1: 7.5B parameters, N = 64, mixed-precision Adam (K = 12):
    # 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
    assert sum(model_states(7_500_000_000, 64, stage, "adam", "mixed")) == pytest.approx(gb * 1e9, rel=1e-12)


def test_bytes_per_param():
    assert bytes_per_param("adam", "mixed") == (2, 2, 12)
    assert bytes_per_param("adam", "fp32") == (4, 4, 8)
    assert bytes_per_param("sgd", "fp32") == (4, 4, 4)
    assert bytes_per_param("sgd", "mixed") == (2, 2, 8)
    with pytest.raises(UsageError, match="--optimizer"):
        bytes_per_param("lamb", "fp32")


@pytest.mark.parametrize("name, s, h, a", [("gpt2-small", 1024, 768, 12), ("gpt2-medium:seq=256", 256, 1024, 16)])
def test_gpt_block_activations_match_korthikanti(name, s, h, a):
    # 34 s b h + 5 a s^2 b bytes per block at 16-bit activations (arXiv 2205.05198, eq. 1), b = 1
    net = load_network(name)
    block = sum(activation_bytes(lay, 2) for lay in net.layers if lay.block == "h.0")
    assert block == 34 * s * h + 5 * a * s * s


def test_activations_scale_with_batch_and_checkpointing():
    net = load_network("gpt2-small:seq=128")
    s, h, v, layers = 128, 768, 50257, 12
    per_block = 34 * s * h + 5 * 12 * s * s
    outside = 8 * s + s * h + 2 * s * h + 2 * s * h + 4 * s * v  # ids, dropout mask, ln_f, lm_head, loss (fp32)
    assert activations(net, 1) == layers * per_block + outside
    assert activations(net, 4) == 4 * activations(net, 1)
    # checkpointing keeps each block's input (2 s h) and recomputes one block at a time
    assert activations(net, 1, checkpointing=True) == layers * 2 * s * h + per_block + outside
    assert activations(net, 1, precision="fp32") > activations(net, 1)
    # a net without blocks is not changed by checkpointing
    assert activations("resnet50", 2, checkpointing=True) == activations("resnet50", 2)


def test_memory_per_strategy_gpt2_medium():
    psi = 354_823_168
    ddp = get_strategies("wfbp-fusion")[0]
    m0 = memory_per_worker("gpt2-medium", ddp, 8, 4)
    assert (m0.params, m0.grads, m0.optimizer) == (2 * psi, 2 * psi, 12 * psi)
    assert m0.buffers == 2 * psi  # DDP's buckets hold a copy of the gradients
    m3 = memory_per_worker("gpt2-medium", SHARDED["zero3"], 8, 4)
    assert (m3.params, m3.grads, m3.optimizer) == (2 * psi / 8, 2 * psi / 8, 12 * psi / 8)
    assert m3.activations == m0.activations
    totals = [memory_per_worker("gpt2-medium", SHARDED[n], 8, 4).total for n in ("zero1", "zero2", "zero3")]
    # at batch 4 x 1024 tokens backward peaks at its start, before any gradient exists: sharding the
    # gradients (zero2) does not lower the peak; at batch 1 x 128 it peaks at its end, and does
    assert m0.total > totals[0] == totals[1] > totals[2]
    small = [memory_per_worker("gpt2-medium:seq=128", SHARDED[n], 8, 1).total for n in ("zero1", "zero2", "zero3")]
    assert small[0] > small[1] > small[2]
    one = memory_per_worker("gpt2-medium", SHARDED["fsdp"], 1, 4)
    assert one.buffers == 0 and one.model_states == 16 * psi
    assert m0.total == m0.params + m0.optimizer + m0.buffers + m0.backward_peak


def test_backward_peak_ends():
    # fp32, no sharding: at a small batch backward peaks at its end (every gradient, plus the tied
    # table's two parts before autograd sums them: InputBuffer::add); at a large one at its start
    # (every activation, the loss's two fp32 gradients of the logits, nothing else yet)
    net = load_network("gpt2-small:seq=128")
    psi, table = net.params, 50257 * 768
    assert backward_peak(net, 1, precision="fp32") == pytest.approx(4 * psi + 2 * 4 * table, rel=1e-3)
    b, v, s = 64, 50257, 128
    start = activations(net, b, "fp32") + b * 2 * 4 * v * s
    assert backward_peak(net, b, precision="fp32") == start
    # stage >= 2: the gradients kept are 1/N (the tied table's parts still whole before the sum)
    assert backward_peak(net, 1, 4, 2, "fp32") == pytest.approx(4 * psi / 4 + 2 * 4 * table, rel=2e-2)
    # checkpointing lowers the start of backward; an untied head has no table transient
    ckpt = backward_peak(net, b, precision="fp32", checkpointing=True)
    assert ckpt < start
    # at the start of backward with checkpointing: what activations() counts but the recomputed
    # block (none is recomputed yet: every block's input once), and the loss's two gradients
    block = sum(activation_bytes(lay, 4) for lay in net.layers if lay.block == "h.11")
    assert ckpt == activations(net, b, "fp32", checkpointing=True) - b * block + b * 2 * 4 * v * s
    untied = load_network("transformer:layers=2:hidden=64:heads=2:seq=16:vocab=100")
    assert backward_peak(untied, 1, precision="fp32") >= 4 * untied.params


def test_ddp_buckets_on_one_worker_and_pytorch_zero():
    net = load_network("gpt2-small:seq=128")
    ddp = get_strategies("ddp")[0]
    # PyTorch DDP allocates its Reducer's buckets whatever the world size (measured, docs/model.md)
    assert buffers(net, ddp, 1, "fp32") == buffers(net, ddp, 2, "fp32") == 4 * net.params
    # ZeroRedundancyOptimizer under DDP: DDP's buckets, optimizer states 1/N
    z1 = memory_per_worker(net, SHARDED["zero1"], 2, 2, "adam", "fp32", impl="pytorch")
    assert z1.buffers == 4 * net.params and z1.optimizer == 8 * net.params / 2
    # FSDP SHARD_GRAD_OP: the shard at rest, one unit's full gradient in the buffers, and each
    # unit's unsharded parameters until its backward ends: at the start of backward all of them
    # (a large batch peaks there), at its end only the root's; one worker: NO_SHARD, nothing gathered
    z2 = memory_per_worker(net, SHARDED["zero2"], 2, 2, "sgd", "fp32", impl="pytorch")
    assert z2.params == 4 * net.params / 2
    assert z2.buffers == 4 * max(u.params for u in shard_units(net))
    b = 64
    big = backward_peak(net, b, 2, 2, "fp32", unsharded_to_backward=True)
    assert big == backward_peak(net, b, 2, 2, "fp32") + 4 * net.params
    assert memory_per_worker(net, SHARDED["zero2"], 1, 2, "sgd", "fp32", impl="pytorch").buffers == 0
    with pytest.raises(UsageError, match="impl"):
        memory_per_worker(net, SHARDED["zero2"], 2, 2, impl="megatron")


def test_predict_memory_limit(tmp_path):
    phases = tmp_path / "ph.json"
    phases.write_text(json.dumps({"args": {"net": "gpt2-medium", "batch": 8}, "rows": [
        {"phase": "forward", "time_us": 300000}, {"phase": "backward", "time_us": 600000},
        {"phase": "update", "time_us": 20000}]}))
    out = tmp_path / "p.json"
    p = run_cli("predict", "--phases", str(phases), "--strategy", "wfbp-fusion,zero1,zero2,zero3,fsdp",
                "--workers", "1,8", "--alpha", "10", "--bandwidth", "100", "--grad-dtype", "bfloat16",
                "--memory-limit", "30GB", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "N = 1: no strategy fits" in p.stdout and "N = 8: the fastest strategy that fits is" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["summary"]["memory"]["limit_bytes"] == 30e9
    fits = {(r["strategy"], r["workers"]): r["fits"] for r in doc["rows"]}
    assert not fits[("wfbp-fusion", 8)] and fits[("zero3", 8)] and not fits[("zero3", 1)]
    low = doc["summary"]["memory"]["lowest_stage_that_fits"]
    assert low["1"] is None and low["8"]["stage"] in (1, 2, 3) and "lowest ZeRO stage that fits is" in p.stdout
    stages = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "wfbp-fusion": 0}
    assert low["8"]["stage"] == min(stages[r["strategy"]] for r in doc["rows"] if r["workers"] == 8 and r["fits"])
    best = doc["summary"]["memory"]["fastest_that_fits"]["8"]
    assert best == min((r for r in doc["rows"] if r["workers"] == 8 and r["fits"]), key=lambda r: r["t_iter_us"])[
        "strategy"]


def test_predict_bad_memory_limit_is_one_line():
    p = run_cli("predict", "--net", "gpt2-small", "--alpha", "1", "--beta", "1", "--memory-limit", "80XB")
    assert p.returncode == 2 and "unknown unit 'XB'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_predict_gpt2_medium_80gb_cluster(tmp_path):
    # issue 35: predict --net gpt2-medium --memory-limit 80GB on a preset cluster of 80 GB devices
    # (4 nodes x 8, NVLink 4 inside, InfiniBand HDR between), bf16, batch 22 x 1024 tokens: the
    # replicated strategies and one worker do not fit, the sharded ones do from N = 8
    import gdlbench as g

    phases = tmp_path / "ph.json"
    phases.write_text(json.dumps(g.Phases.synthetic("gpt2-medium", 22, gflops=300e3).to_report()))
    out = tmp_path / "p.json"
    p = run_cli("predict", "--phases", str(phases), "--net", "gpt2-medium", "--strategy", "ddp,zero1,zero2,zero3,fsdp",
                "--nodes", "4", "--per-node", "8", "--intra", "nvlink4", "--inter", "ib-hdr",
                "--grad-dtype", "bfloat16", "--memory-limit", "80GB", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "N = 1: no strategy fits" in p.stdout and "NO" in p.stdout
    doc = json.loads(out.read_text())
    fits = {(r["strategy"], r["workers"]): r["fits"] for r in doc["rows"]}
    assert not fits[("ddp", 8)] and not fits[("ddp", 32)] and fits[("fsdp", 8)] and fits[("zero3", 32)]
    for n in (8, 16, 32):
        best = doc["summary"]["memory"]["fastest_that_fits"][str(n)]
        fit = [r for r in doc["rows"] if r["workers"] == n and r["fits"]]
        assert best == min(fit, key=lambda r: r["t_iter_us"])["strategy"]
        assert f"N = {n}: the fastest strategy that fits is {best}" in p.stdout
    for r in doc["rows"]:
        assert r["fits"] == (r["memory_total_bytes"] <= 80e9)


def _torch_twin():
    """benchmarks/memory_validation.py: a gdlbench net rebuilt as a plain torch module."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import memory_validation

    return memory_validation


@pytest.mark.parametrize("name", ["gpt2-small:seq=16", "bert-base:seq=16"])
def test_torch_twin_has_the_same_parameters(name):
    torch = pytest.importorskip("torch")
    mv = _torch_twin()
    net = load_network(name)
    model = mv.build_model(net)
    assert sum(p.numel() for p in model.parameters()) == net.params
    g = torch.Generator().manual_seed(0)
    loss = model(torch.randint(0, 1000, (2, 16), generator=g), mv.make_labels(net, 2, torch, g))
    assert loss.ndim == 0 and float(loss.detach()) > 0


_SMALL = "transformer:layers=2:hidden=64:heads=2:seq=32:vocab=5000"  # vocab 5000: the tokens below


def _live_peak(mv, net, model, opt, batch: int) -> int:
    """The most bytes torch's CPU allocator holds during the third of three SGD steps of `model`
    (the profiler's memory timeline), on seeded random tokens of `net`'s sequence."""
    import torch

    timeline = pytest.importorskip("torch.profiler._memory_profiler")
    from torch.profiler import ProfilerActivity, profile

    seq = net.input_shape[1]
    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 5000, (batch, seq), generator=g), mv.make_labels(net, batch, torch, g)) for _ in range(3)]

    def step(i: int) -> None:
        opt.zero_grad(set_to_none=True)
        model(*data[i]).backward()
        opt.step()

    step(0)
    step(1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step(2)
    _, sizes = timeline.MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(torch.device("cpu"))
    return max(sum(s) for s in sizes)


@pytest.mark.parametrize("batch", [2, 32])
def test_model_against_torch_allocations(batch):
    # the peak of what torch's CPU allocator holds over a training step (the profiler's memory
    # timeline), SGD with momentum, fp32, no wrapper: parameters + momentum + backward peak. At
    # batch 2 backward peaks at its end, at batch 32 at its start; measured within 2 % (torch 2.14)
    torch = pytest.importorskip("torch")
    mv = _torch_twin()
    net = load_network(_SMALL)
    torch.manual_seed(0)
    model = mv.build_model(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    live = _live_peak(mv, net, model, opt, batch)
    predicted = memory_per_worker(net, SHARDED["zero3"], 1, batch, "sgd", "fp32").total
    assert predicted == pytest.approx(live, rel=0.05)


def test_framework_memory_is_added_to_every_total(tmp_path):
    # the process's own memory outside the tensor allocator (libraries, heaps, a CUDA context): one
    # constant per worker, the same for every strategy, N and batch; the parts do not move
    net = load_network("gpt2-small:seq=128")
    for name, n, b in (("ddp", 1, 2), ("zero2", 2, 12), ("fsdp", 1, 2), ("fsdp", 8, 4)):
        s = get_strategies(name)[0]
        bare = memory_per_worker(net, s, n, b, "sgd", "fp32", impl="pytorch")
        own = memory_per_worker(net, s, n, b, "sgd", "fp32", impl="pytorch", framework=173e6)
        assert own.total == pytest.approx(bare.total + 173e6, rel=1e-12)
        assert own.to_dict()["framework_bytes"] == 173e6 and bare.to_dict()["framework_bytes"] == 0
        assert (own.params, own.backward_peak, own.buffers) == (bare.params, bare.backward_peak, bare.buffers)
    with pytest.raises(UsageError, match="framework"):
        memory_per_worker(net, get_strategies("ddp")[0], 1, 2, framework=-1.0)
    phases = tmp_path / "ph.json"
    phases.write_text(json.dumps({"args": {"net": "gpt2-small", "batch": 2}, "rows": [
        {"phase": "forward", "time_us": 1000}, {"phase": "backward", "time_us": 2000}]}))
    docs = []
    for extra in ([], ["--framework-memory", "1GB"]):
        out = tmp_path / f"p{len(extra)}.json"
        p = run_cli("predict", "--phases", str(phases), "--strategy", "ddp,fsdp", "--workers", "1,4", "--alpha", "1",
                    "--bandwidth", "10", "--memory-limit", "80GB", "--json", str(out), *extra)
        assert p.returncode == 0, p.stderr
        docs.append(json.loads(out.read_text()))
    for a, b in zip(docs[0]["rows"], docs[1]["rows"], strict=True):
        assert b["memory_total_bytes"] == pytest.approx(a["memory_total_bytes"] + 1e9)
        assert b["memory_framework_bytes"] == 1e9
    p = run_cli("predict", "--net", "gpt2-small", "--alpha", "1", "--beta", "1", "--memory-limit", "80GB",
                "--framework-memory", "-3GB")
    assert p.returncode == 2 and "--framework-memory" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_fsdp_no_shard_allocates_what_the_model_says(tmp_path):
    # FSDP on one rank (NO_SHARD: flat parameters, each unit's flat gradient made by its views'
    # backward): the peak of torch's allocator over a step is the model's, without the framework's
    # own memory (measured on BERT-base at sequence 128: 1509.0 MB live against 1509.5 predicted)
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    mv = _torch_twin()
    net = load_network(_SMALL)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        wrapped, opt = mv.wrap(mv.build_model(net), "fsdp", "sgd", 1)
        live = _live_peak(mv, net, wrapped, opt, 2)
    finally:
        dist.destroy_process_group()
    predicted = memory_per_worker(net, SHARDED["fsdp"], 1, 2, "sgd", "fp32").total
    assert predicted == pytest.approx(live, rel=0.05)
