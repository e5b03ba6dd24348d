"""The iteration executor and skeleton: message plans, isolated phases, the composed run (one and
two ranks), the all-reduced gradients, and the phases JSON that predict reads back."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from helpers import requires_gpu, run_cli, run_mpi

from gdlbench import _core
from gdlbench.composed.iteration import NO_PROGRESS_SLOWDOWN, Iteration, plan_messages
from gdlbench.model.phases import Phases
from gdlbench.model.strategies import get_strategies
from gdlbench.nets.network import load_network

MLP = str(Path(__file__).parent / "data" / "mlp.json")


@pytest.mark.parametrize("name", ["serial", "wfbp", "wfbp-fusion", "caffe-mpi"])
def test_message_plan_covers_every_gradient_once(name):
    net = load_network(MLP)
    exe = _core.Net(net.layer_specs(), 2)
    plan = plan_messages(net, get_strategies(name)[0], exe.layer_param_offset)
    covered = np.zeros(exe.param_count, dtype=int)
    for offset, count, ready_after in plan.messages:
        covered[offset:offset + count] += 1
        # ready after its lowest layer, which backward reaches last
        assert exe.layer_param_offset(ready_after) == offset
    assert (covered == 1).all()
    assert sum(plan.bytes) == 4 * net.params


def test_iteration_api_one_rank():
    r = Iteration(MLP, batch=8, device="cpu", strategy="serial,wfbp", iters=2, warmup=0, io=False).measure()
    assert set(r.phases) == {"h2d", "forward", "backward", "update"}
    # an isolated round before every composed iteration: 2 rounds x 2 strategies
    assert len(r.phases["forward"].samples_us) == 4
    assert len(r.layers) == len(load_network(MLP).layers)
    for run in r.runs:
        assert len(run.composed.samples_us) == 2 and run.predicted_us > 0
        # the error is the model's against the composed run, and within what this 1-rank MLP allows
        assert run.error_pct == pytest.approx(100 * (run.predicted_us - run.composed.median) / run.composed.median)
        assert run.error_se_pct == pytest.approx(
            100 * math.hypot(run.model_se_us, run.composed.median_se) / run.composed.median)
        assert abs(run.error_pct) < 50 + 3 * run.error_se_pct, (run.error_pct, run.error_se_pct)
        assert len(run.trace["layer_backward_end_us"]) == len(r.layers)
        # the trace is in order: forward, backward, comm, update
        t = run.trace
        assert t["forward_end_us"] <= t["backward_end_us"] <= t["comm_end_us"] <= t["update_end_us"]
    rows = r.rows()
    assert {row["phase"] for row in rows} >= {"forward", "backward", "update", "iteration", "message"}


def _composed_numbers(doc: dict, batch: int, workers: int) -> list[dict]:
    """The composed iteration rows' figures, each derived from its own samples: time the median,
    images/s the batch over it (times the workers in total), the error the prediction's against
    it, and the summary's per-strategy figures the rows'."""
    its = [r for r in doc["rows"] if r["phase"] == "iteration"]
    assert its
    summary = doc["summary"]
    for r in its:
        name, t = r["strategy"], r["time_us"]
        assert t > 0 and t == pytest.approx(statistics.median(r["samples_us"]), rel=1e-9), r
        assert r["images_per_s"] == pytest.approx(batch / (t * 1e-6), rel=1e-9)
        assert r["images_per_s_total"] == pytest.approx(workers * r["images_per_s"], rel=1e-9)
        assert r["predicted_us"] > 0 and r["error_pct"] == pytest.approx(100 * (r["predicted_us"] - t) / t, rel=1e-9)
        assert (summary["measured_us"][name], summary["predicted_us"][name], summary["error_pct"][name]) == \
            (t, r["predicted_us"], r["error_pct"])
    return its


def test_phases_json_round_trip_into_the_model(tmp_path):
    out = tmp_path / "it.json"
    p = run_cli("iteration", "--net", MLP, "--batch", "4", "--no-io", "--strategy", "serial", "--iters", "2",
                "--warmup", "0", "--device", "cpu", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    phases = Phases.from_dict(doc)
    assert phases.batch == 4 and phases.forward_us > 0 and len(phases.layer_forward_us) == 6
    assert "error_pct" in doc["summary"] and "serial" in doc["summary"]["predicted_us"]
    assert doc["summary"]["error_se_pct"]["serial"] >= 0
    assert [r["strategy"] for r in _composed_numbers(doc, batch=4, workers=1)] == ["serial"]
    pred = tmp_path / "p.json"
    q = run_cli("predict", "--net", MLP, "--phases", str(out), "--workers", "1,2,4", "--alpha", "5", "--beta", "0.0001",
                "--strategy", "serial", "--json", str(pred))
    assert q.returncode == 0, q.stderr
    rows = json.loads(pred.read_text())["rows"]
    assert [r["workers"] for r in rows] == [1, 2, 4]
    # one worker sends nothing; more pay the model's all-reduce of the MLP's gradients on top
    assert rows[0]["comm_us"] == 0 and rows[0]["speedup"] == pytest.approx(1.0)
    assert rows[1]["comm_us"] > 0 and rows[2]["comm_us"] > rows[1]["comm_us"]
    assert rows[2]["t_iter_us"] - rows[0]["t_iter_us"] == pytest.approx(rows[2]["comm_exposed_us"], rel=1e-6)


GRADIENT_CHECK_CODE = f"""
import json, os, sys
import numpy as np, gdlbench
from gdlbench import _core
from gdlbench.composed.iteration import plan_messages
from gdlbench.nets.network import load_network
from gdlbench.model.strategies import get_strategies
from mpi4py import MPI
net = load_network({MLP!r})
ref = _core.Net(net.layer_specs(), 4)  # one iteration alone: the same batch (labels advance per iteration)
ref.time_iteration(messages=[], overlap=False, algo="library", servers=1, comm=MPI.COMM_SELF,
                   io=None, prefetch=False, warmup=0, iters=1)
expected = 2 * ref.grads()
if sys.argv[1] != "0":  # test-only: the executor's gradients read back with K of them wrong
    os.environ["GDLBENCH_FAULT"] = "grads=" + sys.argv[1]
wrong = {{}}
for name, algo, servers in (("serial", "library", 1), ("wfbp", "ring", 1), ("wfbp-fusion", "rd", 1),
                            ("mxnet", "ps", 2), ("tensorflow", "ps", 1), ("wfbp", "hier", 1)):
    exe = _core.Net(net.layer_specs(), 4)
    plan = plan_messages(net, get_strategies(name)[0], exe.layer_param_offset)
    exe.time_iteration(messages=plan.messages, overlap=name != "serial", algo=algo, servers=servers,
                       comm=MPI.COMM_WORLD, io=None, prefetch=False, warmup=0, iters=1)
    got = exe.grads()
    wrong[name + "/" + algo] = int(np.count_nonzero(~np.isclose(got, expected, rtol=1e-6, atol=1e-7)))
print("WRONG " + json.dumps(wrong))
"""


@pytest.mark.parametrize("fault", [0, 2])
def test_allreduced_gradients_on_two_ranks(fault):
    """The executor's all-reduced gradients on 2 ranks, every algorithm (hier included), against
    twice one rank's; with GDLBENCH_FAULT=grads=K the check must count exactly K per rank."""
    p = run_mpi(2, __import__("sys").executable, "-c", GRADIENT_CHECK_CODE, str(fault))
    assert p.returncode == 0, p.stdout + p.stderr
    # the two ranks' lines can reach the launcher's stdout glued together: find each object, not each line
    per_rank = [json.loads(m) for m in re.findall(r"WRONG (\{[^{}]*\})", p.stdout)]
    names = {"serial/library", "wfbp/ring", "wfbp-fusion/rd", "mxnet/ps", "tensorflow/ps", "wfbp/hier"}
    assert per_rank == [dict.fromkeys(names, fault)] * 2


def test_cli_two_ranks_compares_strategies(tmp_path):
    out = tmp_path / "it2.json"
    p = run_cli("iteration", "--net", MLP, "--batch", "4", "--no-io", "--strategy", "serial,wfbp,wfbp-fusion",
                "--iters", "2", "--warmup", "0", "--threads", "1", "--json", str(out), "--full", nranks=2)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["env"]["world_size"] == 2
    its = [r for r in doc["rows"] if r["phase"] == "iteration"]
    assert [r["strategy"] for r in its] == ["serial", "wfbp", "wfbp-fusion"]
    assert all(r["images_per_s_total"] == pytest.approx(2 * r["images_per_s"]) for r in its)
    assert _composed_numbers(doc, batch=4, workers=2) == its
    assert p.stdout.count("composed iteration per strategy") == 1  # rank 0 alone prints
    # contention measured only for the strategies that overlap, each with its own messages
    contention = doc["summary"]["contention"]
    by = contention["by_strategy"]
    assert set(by) == {"wfbp", "wfbp-fusion"}
    for name, v in by.items():  # read from the round (contention(), tested in test_model.py), not defaulted
        assert 1 <= v["compute_slowdown"] <= NO_PROGRESS_SLOWDOWN and 1 <= v["comm_slowdown"] <= NO_PROGRESS_SLOWDOWN
        assert Phases.from_dict(doc).slowdowns(name) == (v["compute_slowdown"], v["comm_slowdown"])
    assert (contention["compute_slowdown"], contention["comm_slowdown"]) == tuple(by["wfbp"].values())
    text = " ".join(p.stdout.split())
    assert all(f"contention, measured with the messages of {name}" in text for name in by)
    # where the compute threads fill every core, the output warns that WFBP messages can stall
    full = doc["summary"]["overlap_efficiency"] == 0
    assert ("the communication thread has no core of its own" in " ".join(p.stdout.split())) == full


def test_rounds_stop_when_the_error_is_known_well_enough():
    # a target any run meets: min_rounds, no more; a budget already spent: min_rounds too
    for kw in ({"target_se_pct": 1e9}, {"target_se_pct": 1e-9, "budget_s": 1e-9}, {"budget_s": 1e-9}):
        r = Iteration(MLP, batch=2, device="cpu", strategy="serial", iters=30, warmup=0, io=False, min_rounds=3,
                      **kw).measure()
        assert len(r.runs[0].composed.samples_us) == 3, kw
    # without a target: every round
    r = Iteration(MLP, batch=2, device="cpu", strategy="serial", iters=4, warmup=0, io=False, min_rounds=3).measure()
    assert len(r.runs[0].composed.samples_us) == 4


class WrappedNet:
    """An executor's net with some of its timed loops overridden (the rest passed through), built
    by Iteration in place of the net itself (wrap_built_nets)."""

    def __init__(self, net):
        self.net = net

    def __getattr__(self, name):
        return getattr(self.net, name)


def wrap_built_nets(monkeypatch, wrapper):
    build = Iteration._build_net

    def wrapped_build(self, specs):
        net, *rest = build(self, specs)
        return (wrapper(net), *rest)

    monkeypatch.setattr(Iteration, "_build_net", wrapped_build)


def test_messages_alone_are_warmed_in_every_round(monkeypatch):
    """Each round's messages alone come after --warmup untimed sends of each, as the composed
    iteration they price comes after --warmup untimed iterations (cold, after the rest of a round,
    GPT-2 small's parameter-server messages took 1.4 x their time warm)."""
    warmups: list[int] = []

    class Recording(WrappedNet):
        def time_messages(self, **kwargs):
            warmups.append(kwargs["warmup"])
            return self.net.time_messages(**kwargs)

    wrap_built_nets(monkeypatch, Recording)
    Iteration(MLP, batch=2, device="cpu", strategy="serial,wfbp", iters=3, warmup=2, io=False).measure()
    assert warmups == [2] * 6  # 3 rounds of 2 plans


def _scaled(value, factor):
    """A trace or samples with every time multiplied by factor (flags left alone)."""
    if isinstance(value, dict):
        return {k: _scaled(v, factor) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scaled(v, factor) for v in value)
    return value * factor if isinstance(value, float) else value


def test_paired_error_prices_each_round_from_its_own_parts(monkeypatch):
    """A machine that switches between a fast and a 3 x slower state: in rounds 2 and 3 a plan's
    parts and composed iteration are all slow, in round 4 its parts are fast and its composed
    iteration slow. Every call replays its first timing (scaled), so that the load of the machine
    running the test does not enter: each round's own error is then the model's, e, where parts and
    whole shared a state, and (1 + e) / 3 - 1 in round 4; the medians of the parts fall in the fast
    state and the composed median in the slow one, so the medians' error is round 4's (the
    machine); the paired error, each round priced from its own isolated round and messages alone
    (round r, plan k: the isolated round r * plans + k), is e."""
    slow = {0: {2: "all", 3: "all", 4: "composed"}, 1: {0: "all", 1: "all", 4: "composed"}}  # plan -> round
    plans, slot = 2, [-1]
    first: dict = {}

    def factor(part):
        r, k = divmod(slot[0], plans)
        state = slow[k].get(r)
        return 3.0 if state == "all" or (state == "composed" and part == "composed") else 1.0

    def replayed(kind, kwargs, timed):
        got = timed(**kwargs)  # run for real (the ranks' hand-shakes, the warm-ups), time as the first
        return first.setdefault((kind, tuple(map(tuple, kwargs["messages"]))), got)

    class Switching(WrappedNet):
        def time_iteration(self, **kwargs):
            if not kwargs["messages"]:
                slot[0] += 1  # each plan's slot of a round begins with its isolated round
            part = "composed" if kwargs["messages"] else "parts"
            return _scaled(replayed("iteration", kwargs, self.net.time_iteration), factor(part))

        def time_messages(self, **kwargs):
            return _scaled(replayed("messages", kwargs, self.net.time_messages), factor("parts"))

    wrap_built_nets(monkeypatch, Switching)
    r = Iteration(MLP, batch=2, device="cpu", strategy="serial,wfbp", iters=5, warmup=1, io=False).measure()
    assert slot[0] == 5 * plans - 1
    for run in r.runs:
        e = run.paired_errors_pct
        assert len(e) == 5
        assert e[1:4] == pytest.approx([e[0]] * 3, abs=1e-6), (run.strategy.name, e)  # a state shared: e
        switched = 100 * ((1 + e[0] / 100) / 3 - 1)
        assert e[4] == pytest.approx(switched, abs=1e-6)
        assert run.error_pct == pytest.approx(switched, abs=1e-6)  # the medians: the machine's switch
        assert run.paired_error_pct == pytest.approx(e[0], abs=1e-6)  # paired: the model's own error
    assert r.phases_model(at=3).forward_us == r.phases["forward"].samples_us[3]
    # one round: a paired error, no standard error, and rows the JSON writer takes (no NaN)
    monkeypatch.undo()
    one = Iteration(MLP, batch=2, device="cpu", strategy="serial", iters=1, warmup=0, io=False).measure()
    assert one.runs[0].paired_error_se_pct is None and len(one.runs[0].paired_errors_pct) == 1
    json.dumps(one.rows(), allow_nan=False)


def test_first_screen_of_a_users_net(tmp_path):
    """`iteration --net FILE` measures a user's network; on one worker the first screen measures one
    strategy, says why, fits 100 columns and ends with what to try next; --full is the long form."""
    out = tmp_path / "first.json"
    p = run_cli("iteration", "--net", CONVNET, "--batch", "2", "--iters", "3", "--warmup", "0", "--device", "cpu",
                "--json", str(out))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    text = " ".join(p.stdout.split())
    assert "where the time goes" in text and "model error" in text and "± " in text
    assert "strategies (how gradients are sent, what overlaps) differ only with several workers" in text
    assert [line for line in lines if not line.startswith("  ")][-1].startswith("next: ")  # the last paragraph
    assert "next: mpiexec -n 2 gdlbench iteration --net " + CONVNET in text
    doc = json.loads(out.read_text())
    assert [r["strategy"] for r in doc["rows"] if r["phase"] == "iteration"] == ["serial"]
    assert doc["summary"]["rounds"] == 3 and doc["args"]["strategy"] == "serial"
    (it,) = _composed_numbers(doc, batch=2, workers=1)
    assert len(it["samples_us"]) == 3  # one composed iteration per round
    # a budget spent after --min-rounds stops the run early: the tables say the rounds it made
    full = run_cli("iteration", "--net", CONVNET, "--batch", "2", "--iters", "6", "--min-rounds", "2",
                   "--max-seconds", "0.001", "--warmup", "0", "--device", "cpu", "--no-io", "--full")
    assert full.returncode == 0, full.stderr
    assert "composed iteration per strategy" in full.stdout
    assert "2 rounds (of at most 6)" in " ".join(full.stdout.split())
    assert all(s in full.stdout for s in ("serial", "prefetch", "wfbp", "wfbp-fusion"))


@pytest.mark.parametrize("argv, iters, target_se, budget", [
    ([], 30, 1.0, 20.0),  # adaptive: at most 30 rounds, stopped at 1 % se or 20 s
    (["--iters", "7"], 7, None, None),  # --iters N: exactly N rounds
    (["--iters", "7", "--max-seconds", "5"], 7, None, 5.0),  # early stops only where asked for
    (["--iters", "7", "--target-se", "2"], 7, 2.0, None),
    (["--target-se", "0", "--max-seconds", "0"], 30, None, None),
])
def test_iters_asks_for_exactly_that_many_rounds(argv, iters, target_se, budget):
    from gdlbench.cli import build_parser
    from gdlbench.cli.commands.iteration import request_from_args

    req = request_from_args(build_parser().parse_args(["iteration", "--net", "alexnet", *argv]))
    assert (req.iters, req.target_se_pct, req.budget_s) == (iters, target_se, budget)


def test_help_states_each_commands_own_defaults():
    """--iters and --warmup say the defaults the command uses (iteration, io, copy, compress set their own)."""
    from gdlbench.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, iters, warmup in (("iteration", "rounds, exactly (default: at most 30", 1), ("io", "(default 10)", 2),
                                ("copy", "(default 10)", 2), ("compress", "(default 5)", 1), ("update", "(default 20)", 5)):
        parser = sub.choices[name]
        helps = {a.dest: " ".join((a.help or "").split()) for a in parser._actions}
        assert iters in helps["iters"], (name, helps["iters"])
        assert helps["warmup"] == f"untimed warm-up iterations (default {warmup})", name
        assert parser.get_default("warmup") == warmup, name


@pytest.mark.parametrize("argv, message", [
    (["--target-se", "-1"], "--target-se"),
    (["--max-seconds", "nan"], "--max-seconds"),
    (["--net", "nosuchnet"], "nosuchnet"),
    (["--batch", "0"], "batch"),
    (["--strategy", "bogus"], "bogus"),
    (["--iters", "0"], "iters"),
])
def test_iteration_bad_input(argv, message):
    p = run_cli("iteration", *argv, "--no-io")
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and message in p.stderr


def test_iteration_with_io_prefetch(tmp_path):
    r = Iteration(MLP, batch=2, device="cpu", strategy="serial,prefetch", iters=2, warmup=0, io=True,
                  io_dir=str(tmp_path)).measure()
    assert r.phases["io"].median > 0
    assert (tmp_path / "gdlbench-dataset.json").exists()
    serial, prefetch = r.runs
    # without prefetch the iteration waits for the whole read
    assert serial.trace["io_wait_end_us"] > 0 and serial.prediction.io_us == r.phases["io"].median
    # the read-beside round measured what the prefetched read costs the compute, once per round,
    # and the model prices the prefetch strategy's read with it (or with what outlasts compute)
    beside = r.contention["read_beside_us"]
    assert len(beside.samples_us) == 2
    assert beside.median <= prefetch.prediction.io_us <= max(beside.median, r.phases["io"].median)

CONVNET = str(Path(__file__).parent / "data" / "convnet.json")


def test_convnet_gradients_match_finite_differences():
    """The executor's backward through conv, bn, relu, a residual add, pooling, fc and the loss:
    d(loss)/d(w) for the largest-gradient weight of each parametrised layer against a central
    difference of the loss the forward computes."""
    net = load_network(CONVNET)
    specs = net.layer_specs()
    exe = _core.Net(specs, 2)
    exe.forward_backward()
    grads = exe.grads()
    assert np.isfinite(grads).all()
    checked = 0
    for i, spec in enumerate(specs):
        if not spec["params"]:
            continue
        lo = exe.layer_param_offset(i)
        j = lo + int(np.argmax(np.abs(grads[lo:lo + spec["params"]])))
        w = float(exe.params()[j])
        h = 1e-2 * max(1.0, abs(w))
        losses = []
        for v in (w + h, w - h):
            exe.set_param(j, v)
            exe.forward_backward()
            losses.append(exe.output())
        exe.set_param(j, w)
        numeric = (losses[0] - losses[1]) / (2 * h)
        assert numeric == pytest.approx(grads[j], rel=0.05, abs=1e-4), (spec["name"], numeric, grads[j])
        checked += 1
    assert checked == 5  # conv1, bn1, conv2, conv3, fc


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_gpu)])
def test_training_stays_at_a_training_runs_scale(device):
    """Iterations train the net, so each must see a new batch (here: new labels). Trained on one
    fixed batch the net memorized it, the loss and gradients shrank into denormals, and a CPU's
    backward slowed several fold (GoogLeNet, batch 8: 0.54 to 3.7 s within 24 iterations)."""
    from mpi4py import MPI

    net = load_network(CONVNET)
    if device == "cpu":
        exe = _core.Net(net.layer_specs(), 4)
    else:
        from gdlbench._native import _cuda

        exe = _cuda.Net(net.layer_specs(), 4)
    exe.forward_backward()
    grad0 = float(np.abs(exe.grads()).max())
    exe.time_iteration(messages=[], overlap=False, algo="library", servers=1, comm=MPI.COMM_WORLD, io=None,
                       prefetch=False, warmup=0, iters=300)
    exe.forward_backward()
    grads = exe.grads()
    tiny = np.finfo(np.float32).tiny
    classes = net.layer_specs()[-1]["in_shapes"][0][0]
    assert exe.output() > 0.5 * math.log(classes), exe.output()  # a memorized batch: about 0
    assert float(np.abs(grads).max()) > 0.01 * grad0
    assert not np.any((grads != 0) & (np.abs(grads) < tiny))


@requires_gpu
@pytest.mark.parametrize("net_file", [MLP, CONVNET])
def test_cuda_executor_gradients_match_the_cpu_executor(net_file):
    from gdlbench._native import _cuda

    net = load_network(net_file)
    cpu = _core.Net(net.layer_specs(), 4)
    gpu = _cuda.Net(net.layer_specs(), 4)
    cpu.forward_backward()
    gpu.forward_backward()
    g_cpu, g_gpu = cpu.grads(), gpu.grads()
    scale = np.abs(g_cpu).max()
    assert np.abs(g_gpu - g_cpu).max() <= 1e-3 * scale, np.abs(g_gpu - g_cpu).max() / scale


@requires_gpu
@pytest.mark.parametrize("name", ["resnet50", "googlenet"])
def test_cuda_executor_gradients_of_the_deep_nets_match_the_cpu_executor(name):
    """ResNet-50 and GoogLeNet at batch 2: the GPU's gradients against the CPU executor's, per
    layer's parameter block (the same initial parameters, inputs and labels on both). fp32 on both,
    summed in different orders through up to 50 layers: each block's difference within 1 % of that
    block's gradient norm, or of 1e-3 of the largest block's where a block's own is tiny."""
    from gdlbench._native import _cuda

    net = load_network(name)
    specs = net.layer_specs()
    cpu = _core.Net(specs, 2)
    gpu = _cuda.Net(specs, 2)
    cpu.forward_backward()
    gpu.forward_backward()
    g_cpu, g_gpu = cpu.grads().astype(np.float64), gpu.grads().astype(np.float64)
    assert np.isfinite(g_gpu).all()
    offsets = [cpu.layer_param_offset(i) for i in range(len(specs))] + [cpu.param_count]
    blocks = [(specs[i]["name"], offsets[i], offsets[i + 1])
              for i in range(len(specs)) if offsets[i + 1] > offsets[i]]
    largest = max(np.linalg.norm(g_cpu[a:b]) for _, a, b in blocks)
    bad = []
    for layer, a, b in blocks:
        ref = np.linalg.norm(g_cpu[a:b])
        diff = np.linalg.norm(g_gpu[a:b] - g_cpu[a:b])
        if diff > max(1e-2 * ref, 1e-3 * largest):
            bad.append((layer, diff / max(ref, 1e-30)))
    assert not bad, bad[:10]


@requires_gpu
def test_cuda_executor_searches_conv_algorithms_once_per_shape():
    """As cudnn.benchmark: the executor's convolutions search when the net is built, once per shape;
    a second net of the same shapes searches nothing; the iteration says so."""
    from gdlbench._native import _cuda

    specs = load_network("resnet50").layer_specs()
    convs = sum(1 for s in specs if s["type"] == "conv")
    before = _cuda.conv_search_stats()
    _cuda.Net(specs, 2)
    mid = _cuda.conv_search_stats()
    searched, reused = mid["searched"] - before["searched"], mid["reused"] - before["reused"]
    # ResNet-50 repeats shapes: some layers reuse a search even in a fresh process (and earlier
    # tests in this one may have searched some of these shapes already)
    assert searched + reused == convs and reused > 0, (searched, reused, convs)
    _cuda.Net(specs, 2)
    after = _cuda.conv_search_stats()
    assert after["searched"] == mid["searched"] and after["reused"] - mid["reused"] == convs
    r = Iteration(CONVNET, batch=4, device="cuda", strategy="serial", iters=1, warmup=0, io=False).measure()
    assert r.conv_algorithms and "searched once when the net was built" in r.conv_algorithms


@requires_gpu
def test_cuda_iteration_runs():
    r = Iteration(CONVNET, batch=8, device="cuda", strategy="serial,wfbp,ps", iters=2, warmup=1, io=False).measure()
    assert [run.strategy.name for run in r.runs] == ["serial", "wfbp"]
    assert r.phases["forward"].clock == "cuda-events"
    for run in r.runs:
        assert run.composed.median > 0 and len(run.trace["message_end_us"]) == len(run.plan.messages)


# A peer that hangs during the executor's timed loops: rank 1 stops itself (SIGSTOP: it never
# exits, so only the watchdog can end the job) while both ranks time messages or iterations.
HANG_CODE = f"""
import os, signal, sys, threading
from mpi4py import MPI
from gdlbench import _core
from gdlbench.composed.iteration import plan_messages
from gdlbench.nets.network import load_network
from gdlbench.model.strategies import get_strategies
net = load_network({MLP!r})
exe = _core.Net(net.layer_specs(), 2)
plan = plan_messages(net, get_strategies("wfbp")[0], exe.layer_param_offset)
if MPI.COMM_WORLD.rank == 1:
    threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
if sys.argv[1] == "messages":
    exe.time_messages(messages=plan.messages, algo="ring", servers=1, comm=MPI.COMM_WORLD, warmup=0, iters=10**8,
                      timeout_s=3)
elif sys.argv[1] == "contention":  # rounds of backward beside its messages, until the peer stops
    for _ in range(10**8):
        exe.time_contention(messages=plan.messages, algo="ring", servers=1, comm=MPI.COMM_WORLD, warmup=0, timeout_s=3)
else:
    exe.time_iteration(messages=plan.messages, overlap=True, algo="ring", servers=1, comm=MPI.COMM_WORLD, io=None,
                       prefetch=False, warmup=0, iters=10**8, timeout_s=3)
"""


@pytest.mark.parametrize("loop", ["messages", "iteration", "contention"])
def test_a_hung_peer_ends_the_timed_loops(loop):
    import sys
    import time

    start = time.monotonic()
    p = run_mpi(2, sys.executable, "-c", HANG_CODE, loop, timeout=60)
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert time.monotonic() - start < 1.5 + 3 + 15
    assert "made no progress for 3 s" in p.stderr, p.stderr


CUDA_HANG_CODE = HANG_CODE.replace("from gdlbench import _core", "from gdlbench import _core, env\nfrom gdlbench._native import _cuda").replace(
    "exe = _core.Net(", "env.resolve_device('cuda')\nexe = _cuda.Net(").replace('"ring"', '"library"')


@requires_gpu
@pytest.mark.parametrize("loop", ["messages", "iteration", "contention"])
def test_a_hung_peer_ends_the_cuda_executors_loops(loop):
    """As above, on the CUDA executor (NCCL): the watchdog is armed before the NCCL communicator is
    built, in every timed loop. Needs two GPUs (one per rank)."""
    import sys
    import time

    from gdlbench._native import _cuda

    if _cuda.device_status()[0] < 2:
        pytest.skip("needs 2 GPUs: one per rank")
    start = time.monotonic()
    p = run_mpi(2, sys.executable, "-c", CUDA_HANG_CODE, loop, timeout=120)
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert time.monotonic() - start < 1.5 + 3 + 60
    assert "made no progress for 3 s" in p.stderr, p.stderr


def test_a_phase_difference_is_in_percent_unless_the_phase_is_small():
    """The 'alone vs inside' table: a phase under 1 % of the iteration gets its difference in ms
    (a 10 us 1-rank all-reduce that waits 0.7 ms for its thread printed "+6900.0 %")."""
    from gdlbench.cli.commands.iteration import phase_difference

    assert phase_difference({"alone_us": 300e3, "inside_us": 306e3, "diff_pct": 2.0}, 1e6) == "+2.0 %"
    assert phase_difference({"alone_us": 10.0, "inside_us": 700.0, "diff_pct": 6900.0}, 1e6) == "+0.69 ms"
    assert phase_difference({"alone_us": 10e3, "inside_us": 9e3, "diff_pct": -10.0}, 1e6) == "-10.0 %"
