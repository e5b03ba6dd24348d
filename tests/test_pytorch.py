"""A real PyTorch job's trace as gdlbench phases (import-trace), the ddp preset's buckets against
DDP's own, predict on an imported trace, and the gloo backend. Needs torch (the `torch` extra):
without it these skip, except where GDL_EXPECT_TORCH=1 (.ci/run sets it for the README's test
command), where they fail, so that CI cannot pass by skipping them."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import mpi_env, run_cli

from gdlbench.model.phases import make_buckets, plan_messages
from gdlbench.model.strategies import PRESETS, get_strategies
from gdlbench.model.torch_trace import import_trace
from gdlbench.nets.network import load_network

JOB = Path(__file__).parent / "torchjobs" / "mlp_ddp.py"
FSDP_JOB = Path(__file__).parent / "torchjobs" / "mlp_fsdp.py"


def _torch():
    if os.environ.get("GDL_EXPECT_TORCH", "0") not in ("", "0"):
        import torch  # CI installs the torch extra: a missing torch fails there

        return torch
    return pytest.importorskip("torch")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_job(out: Path, world: int, *extra: str, job: Path = JOB) -> Path:
    _torch()
    out.mkdir(parents=True, exist_ok=True)
    port = str(_port())
    procs = [subprocess.Popen([sys.executable, str(job), str(out), *extra],
                              env=mpi_env() | {"RANK": str(r), "WORLD_SIZE": str(world), "MASTER_PORT": port},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    return out


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    return _run_job(tmp_path_factory.mktemp("one"), 1)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    return _run_job(tmp_path_factory.mktemp("two"), 2)


def test_import_one_rank(one_rank: Path) -> None:
    t = import_trace(one_rank / "trace-0.json", batch=16)
    ddp = json.loads((one_rank / "ddp.json").read_text())
    assert len(t.steps) == 3 and t.world_size == 1 and t.backend == "gloo"
    # every parameter's gradient, ready last layer first, with its exact size
    assert [g.bytes for g in t.gradients] == list(reversed(ddp["param_bytes"]))
    assert [g.shape for g in t.gradients] == [(10,), (10, 1024), (1024,), (1024, 1024), (1024,), (1024, 256)]
    ready = [g.ready_us for g in t.gradients]
    assert ready == sorted(ready) and 0 < ready[0] and ready[-1] <= t.median("backward_us")
    for s in t.steps:  # the phases account for the whole step
        parts = s.io_us + s.h2d_us + s.forward_us + s.backward_us + s.exposed_comm_us + s.update_us
        assert parts == pytest.approx(s.total_us, abs=0.01)
        assert s.io_us > 0 and s.forward_us > 0 and s.backward_us > 0 and s.update_us > 0
    net = load_network(t.network_spec())
    assert net.params == sum(ddp["param_bytes"]) // 4
    # DDP's buckets after its rebuild, as the trace shows them sent and as its logging data says
    rebuilt = [int(b) for b in ddp["rebuilt"].split(",")]
    assert [m["bytes"] for m in plan_messages(net, PRESETS["ddp"])] == rebuilt
    assert [m.bytes for m in t.steps[-1].messages] == rebuilt
    assert len(rebuilt) == 2 and rebuilt[0] > 2**20  # the first bucket closes at 1 MiB


def test_import_two_ranks_reads_the_collectives(two_ranks: Path) -> None:
    t = import_trace(two_ranks / "trace-0.json", batch=16)
    ddp = json.loads((two_ranks / "ddp.json").read_text())
    assert t.world_size == 2
    rebuilt = [int(b) for b in ddp["rebuilt"].split(",")]
    for s in t.steps:
        assert [m.bytes for m in s.messages] == rebuilt
        for m in s.messages:  # launched during backward, run on gloo's thread after the launch
            assert m.start_us is not None and m.end_us is not None
            assert m.launch_us <= m.start_us + 1e3 and m.start_us <= m.end_us
    doc = t.phases_doc()
    assert doc["summary"]["workers"] == 2 and doc["summary"]["exposed_comm_us"] >= 0
    # a share per gradient row (and the tail's); the MLP's weights' gradients are matrix products
    shares = [r["memory_share"] for r in doc["rows"] if r.get("phase") == "backward" and "layer" in r]
    assert len(shares) in (len(t.gradients), len(t.gradients) + 1) and all(0 <= x <= 1 for x in shares)
    assert 0 < doc["summary"]["backward_memory_share"] < 1


@pytest.mark.parametrize("extra", [("--bucket-cap-mb", "0.5"), ("--bucket-cap-mb", "0.03", "--hidden", "512"),
                                   ("--find-unused",)])
def test_ddp_preset_buckets_as_ddp_builds_them(tmp_path: Path, extra: tuple[str, ...]) -> None:
    """Other caps (an explicit cap applies to the first bucket too), and DDP's initial buckets: with
    find_unused_parameters DDP never rebuilds, and keeps buckets assigned in parameter order (limits
    [1 MiB, cap]) and then reversed, which the preset (DDP after its rebuild) does not model."""
    out = _run_job(tmp_path, 1, *extra)
    ddp = json.loads((out / "ddp.json").read_text())
    t = import_trace(out / "trace-0.json", batch=16)
    if "--find-unused" in extra:
        assert ddp["rebuilt"] is None
        sizes = ddp["param_bytes"]
        strategy = PRESETS["ddp"]
        initial = [sum(sizes[i] for i in b) for b in make_buckets(sizes, strategy.bucket_bytes, strategy.first_bucket_bytes)]
        assert list(reversed(initial)) == [int(b) for b in ddp["initial"].split(",")]
        sent = [m.bytes for m in t.steps[-1].messages]  # and its map of the parameters used (one int each)
        assert sent == list(reversed(initial)) + [len(sizes) * 4]
        return
    cap = float(extra[1])
    strategy = get_strategies("ddp", bucket_bytes=int(cap * 2**20))[0]
    rebuilt = [int(b) for b in ddp["rebuilt"].split(",")]
    assert len(rebuilt) > 1
    assert [m["bytes"] for m in plan_messages(load_network(t.network_spec()), strategy)] == rebuilt
    r = run_cli("import-trace", str(out / "trace-0.json"), "--batch", "16", "--bucket", str(int(cap * 2**20)))
    assert r.returncode == 0 and f"the ddp preset plans {len(rebuilt)}: the same" in r.stdout, r.stdout


def test_make_buckets_first_bucket() -> None:
    assert make_buckets([3, 3, 3, 3, 3], 6, 2) == [[0], [1, 2], [3, 4]]
    assert make_buckets([3, 3, 3, 3, 3], 6) == [[0, 1], [2, 3], [4]]
    assert make_buckets([1, 1, 5], 4, 10) == [[0, 1, 2]]
    assert get_strategies("ddp", bucket_bytes=4096)[0].first_bucket_bytes is None
    assert PRESETS["ddp"].first_bucket_bytes == 2**20 and PRESETS["ddp"].bucket_bytes == 25 * 2**20


def test_import_trace_cli_and_predict_to_1024(one_rank: Path, tmp_path: Path) -> None:
    phases = tmp_path / "phases.json"
    r = run_cli("import-trace", str(one_rank / "trace-0.json"), "--batch", "16", "--json", str(phases))
    assert r.returncode == 0, r.stderr
    assert "the ddp preset plans 2: the same" in r.stdout
    out = tmp_path / "p.json"
    r = run_cli("predict", "--phases", str(phases), "--strategy", "ddp", "--nodes", "128", "--per-node", "8",
                "--intra", "nvlink4", "--inter", "ib-ndr", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [row["workers"] for row in rows][-1] == 1024
    one = next(row for row in rows if row["workers"] == 1)
    doc = json.loads(phases.read_text())
    assert one["t_iter_us"] == pytest.approx(sum(row["time_us"] for row in doc["rows"] if "layer" not in row))
    assert all(row["t_iter_us"] >= one["t_iter_us"] for row in rows)
    assert rows[-1]["comm_us"] > 0


def _trace(tmp_path: Path, events: object, name: str = "t.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(events))
    return str(path)


def test_memory_share_splits_backward_by_operator_kind() -> None:
    from gdlbench.model.torch_trace import _memory_share

    def span(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, object]:
        return {"name": name, "ts": ts, "dur": dur, "tid": tid}

    bwd = [span("autograd::engine::evaluate_function: MmBackward0", 0, 100),
           span("autograd::engine::evaluate_function: ReluBackward0", 100, 50),
           span("autograd::engine::evaluate_function: AddmmBackward0", 150, 40, tid=2)]
    ops = [*bwd, span("aten::matmul", 10, 70), span("aten::mm", 15, 60),  # nested: counted once
           span("aten::threshold_backward", 100, 50), span("aten::addmm", 150, 10, tid=2),
           span("aten::mm", 160, 30, tid=1)]  # another thread's span: not inside this one
    # gradient 0 ready at 100 (the mm's 70 of 100 compute-bound), the tail holds the rest
    assert _memory_share(bwd, ops, [100.0]) == pytest.approx([0.3, (50 + 30) / 90])
    assert _memory_share(bwd, ops, [100.0, 150.0]) == pytest.approx([0.3, 1.0, 0.75])


def test_bad_traces(tmp_path: Path, one_rank: Path) -> None:
    good = json.loads((one_rank / "trace-0.json").read_text())
    no_step = dict(good, traceEvents=[e for e in good["traceEvents"] if not str(e.get("name")).startswith("ProfilerStep")])
    no_bwd = dict(good, traceEvents=[e for e in good["traceEvents"] if "evaluate_function" not in str(e.get("name"))])
    no_shapes = dict(good, traceEvents=[{k: v for k, v in e.items() if k != "args"} for e in good["traceEvents"]])
    (tmp_path / "bin.json").write_bytes(b"\x00\x01binary")
    (tmp_path / "g.json.gz").write_bytes(gzip.compress(b"{not json"))
    cases = {
        str(tmp_path / "missing.json"): "cannot read",
        str(tmp_path / "bin.json"): "not a Chrome trace JSON",
        str(tmp_path / "g.json.gz"): "not a Chrome trace JSON",
        _trace(tmp_path, {"a": 1}, "obj.json"): "no traceEvents",
        _trace(tmp_path, {"traceEvents": [{"ph": "X", "name": "x", "ts": 0, "dur": 1, "cat": "python_function"}]},
               "py.json"): "not a torch.profiler trace",
        _trace(tmp_path, dict(good, traceEvents=[*good["traceEvents"], {"ph": "X", "name": "sgemm", "ts": 0, "dur": 1,
                                                                         "cat": "kernel"}]), "gpu.json"):
            "GPU kernels",
        _trace(tmp_path, no_step, "nostep.json"): "no step boundary",
        _trace(tmp_path, no_bwd, "nobwd.json"): "no backward",
        _trace(tmp_path, no_shapes, "noshapes.json"): "record_shapes",
    }
    for path, words in cases.items():
        r = run_cli("import-trace", path, "--batch", "4")
        assert r.returncode == 2, (path, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, (path, r.stderr)
    r = run_cli("import-trace", str(one_rank / "trace-0.json"), "--batch", "0")
    assert r.returncode == 2 and "--batch" in r.stderr


def test_gzip_trace(one_rank: Path, tmp_path: Path) -> None:
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress((one_rank / "trace-0.json").read_bytes()))
    a, b = import_trace(gz, batch=16), import_trace(one_rank / "trace-0.json", batch=16)
    assert a.median("total_us") == b.median("total_us") and len(a.gradients) == len(b.gradients)


@pytest.mark.mpi
def test_gloo_allreduce_exact_fit_and_contention(tmp_path: Path) -> None:
    _torch()
    out = tmp_path / "g.json"
    # up to 16 MiB and 6 iterations a size: on a loaded machine (CI) 4 MiB and 4 iterations once
    # fitted beta = 0 (the largest size no slower than noise allowed)
    r = run_cli("allreduce", "--backend", "gloo", "-b", "64K", "-e", "16M", "-f", "4", "--fit", "--fit-regimes", "1",
                "-n", "6", "-w", "1", "--beside-compute", "--json", str(out), nranks=2, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["backend"] == "gloo"
    assert [row["size_bytes"] for row in doc["rows"]] == [65536, 262144, 1048576, 4194304, 16777216]
    assert [row["wrong"] for row in doc["rows"]] == [0] * 5 and all(row["inplace"] for row in doc["rows"])
    fit = doc["summary"]["fit"][0]
    assert fit["algo"] == "ring" and fit["beta_us_per_byte"] > 0  # gloo's all-reduce is a ring
    c = doc["summary"]["contention"]
    assert c["compute_slowdown"] >= 1 and c["comm_slowdown"] >= 1 and c["memory_slowdown"] >= 1
    assert c["size_bytes"] == 16777216 and all(c["measured"][k] > 0 for k in ("compute_slowdown", "memory_slowdown"))
    assert c["measured"]["allreduce_alone_us"] > 0


@pytest.mark.mpi
def test_gloo_usage_errors() -> None:
    _torch()
    for args, words in ((("--backend", "gloo", "--size", "1M", "--dtype", "float16"), "nothing to run"),
                        (("--backend", "gloo", "--size", "1M", "--beside-compute"), "--beside-compute"),
                        (("--backend", "glue", "--size", "1M"), "expected auto, mpi, nccl or gloo")):
        r = run_cli("allreduce", *args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
    from gdlbench.common.errors import UsageError
    from gdlbench.primitives import gloo

    with pytest.raises(UsageError, match="gloo times allreduce, broadcast, reduce_scatter, allgather, not alltoall"):
        gloo.bench("alltoall", 4, "float32", None, 0, 1, 1, 1, 10.0, 0, None)


@pytest.mark.mpi
@pytest.mark.parametrize("coll", ["reduce_scatter", "allgather"])
def test_gloo_reduce_scatter_and_allgather_exact_and_fit(tmp_path: Path, coll: str) -> None:
    """FSDP's forms on gloo (reduce_scatter_tensor; all_gather into views of one buffer), every
    element checked exactly, fitted as the all-reduce is."""
    _torch()
    out = tmp_path / "g.json"
    # up to 16 MiB and 6 iterations a size, as the all-reduce's test (a smaller sweep on a loaded
    # machine once fitted beta = 0)
    r = run_cli(coll, "--backend", "gloo", "-b", "64K", "-e", "16M", "-f", "4", "--fit", "--fit-regimes", "1",
                "-n", "6", "-w", "1", "--json", str(out), nranks=2, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["backend"] == "gloo"
    assert [row["size_bytes"] for row in doc["rows"]] == [65536, 262144, 1048576, 4194304, 16777216]
    assert [row["wrong"] for row in doc["rows"]] == [0] * 5 and all(row["time_us"] > 0 for row in doc["rows"])
    fit = doc["summary"]["fit"][0]
    assert fit["algo"] == coll and fit["beta_us_per_byte"] > 0


_DESTROYED_AT_EXIT = r"""
import atexit, os
import torch.distributed as dist
from mpi4py import MPI
# one write per line (the ranks share the pipe); registered before gloo's own handler, so it
# runs after it (atexit runs last in, first out)
atexit.register(lambda: os.write(1, f"initialized after exit: {dist.is_initialized()}\n".encode()))
from gdlbench.primitives import gloo
samples, wrong = gloo.bench("allgather", 1024, "float32", None, 0, 1, 2, 1, 60.0, 0, MPI.COMM_WORLD)
os.write(1, f"wrong: {wrong}\n".encode())
"""


@pytest.mark.mpi
def test_gloo_group_destroyed_at_exit() -> None:
    """Every rank destroys its gloo group before the interpreter's teardown: a group left to it
    aborted 3 runs in 15 of `allgather --backend gloo` with "terminate called without an active
    exception"."""
    _torch()
    from helpers import run_mpi

    r = run_mpi(2, sys.executable, "-c", _DESTROYED_AT_EXIT, timeout=120)
    assert r.returncode == 0 and "terminate" not in r.stderr, r.stderr
    assert r.stdout.count("wrong: 0") == 2 and r.stdout.count("initialized after exit: False") == 2, r.stdout


def test_comm_wait_is_the_idle_time_after_backward() -> None:
    """comm_wait_us leaves out backward's own slowdown beside the messages; comm_exposed_us holds it."""
    from dataclasses import replace

    from gdlbench.model.phases import CommModel, Phases, predict_iteration

    net = load_network("alexnet")
    phases = Phases.synthetic(net, 8)
    comm = CommModel("ring", 10.0, 1e-3)
    alone = predict_iteration(net, phases, comm, PRESETS["ddp"], 4)
    assert alone.comm_wait_us == pytest.approx(alone.comm_exposed_us)
    shared = predict_iteration(net, replace(phases, compute_slowdown=1.5, comm_slowdown=1.0), comm, PRESETS["ddp"], 4)
    assert shared.comm_exposed_us > shared.comm_wait_us >= 0
    assert shared.t_iter_us == pytest.approx(phases.h2d_us + phases.io_us + phases.forward_us + phases.backward_us
                                             + shared.comm_exposed_us + phases.update_us)


@pytest.fixture(scope="module")
def fsdp_one(tmp_path_factory) -> Path:
    return _run_job(tmp_path_factory.mktemp("fsdp1"), 1, job=FSDP_JOB)


@pytest.fixture(scope="module")
def fsdp_two(tmp_path_factory) -> Path:
    return _run_job(tmp_path_factory.mktemp("fsdp2"), 2, job=FSDP_JOB)


def test_import_fsdp_one_rank_units_are_the_jobs(fsdp_one: Path, one_rank: Path) -> None:
    """An FSDP job's gradients are its units' flat parameters: the net predict shards has the job's
    units, the root (ready last) in no block and kept, the blocks gathered."""
    from gdlbench.model.phases import plan_sharded, shard_units
    from gdlbench.model.strategies import SHARDED

    t = import_trace(fsdp_one / "trace-0.json", batch=16)
    units = json.loads((fsdp_one / "units.json").read_text())["units"]  # root first, then the blocks
    assert t.fsdp and t.world_size == 1 and any("FSDP job" in n for n in t.notes)
    assert [g.bytes // 4 for g in t.gradients] == list(reversed(units[1:])) + units[:1]
    net = load_network(t.network_spec())
    got = shard_units(net)
    assert [(u.params, u.root) for u in got] == [(units[0], True)] + [(n, False) for n in units[1:]]
    plan = plan_sharded(net, SHARDED["fsdp"])
    gathers = [m["bytes"] // 4 for m in plan if m["collective"] == "allgather"]
    assert sorted(gathers) == sorted(units + units[1:])  # forward every unit, backward all but the root
    assert t.phases_doc()["summary"]["fsdp"] is True
    ddp = import_trace(one_rank / "trace-0.json", batch=16)  # a DDP job's: a gradient per parameter, no units
    assert not ddp.fsdp and all("block" not in lay for lay in ddp.network_spec()["layers"])


def test_import_fsdp_two_ranks_messages_and_blocked_comm(fsdp_two: Path) -> None:
    """On 2 ranks: FSDP's all-gathers (list form on CPU tensors) and reduce-scatters, each the whole
    unit's bytes, paired with gloo's spans; its communication blocks the job's thread."""
    t = import_trace(fsdp_two / "trace-0.json", batch=16)
    units = json.loads((fsdp_two / "units.json").read_text())["units"]
    assert t.fsdp and t.world_size == 2
    for s in t.steps:
        gathers = [m.bytes // 4 for m in s.messages if m.name == "c10d::allgather_"]
        scatters = [m.bytes // 4 for m in s.messages if m.name == "c10d::_reduce_scatter_base_"]
        assert sorted(gathers) == sorted(units + units[1:]) and gathers[0] == units[0]  # the root first
        assert scatters == list(reversed(units[1:])) + units[:1]
        assert all(m.start_us is not None and m.end_us is not None and m.start_us <= m.end_us for m in s.messages)
        spans = sum(m.end_us - m.start_us + m.launch_dur_us for m in s.messages
                    if m.end_us is not None and m.start_us is not None)
        assert 0 < s.comm_blocked_us <= spans + 1.0
        assert s.exposed_comm_us < s.comm_blocked_us  # waited inside forward and backward, not after


def test_blocking_strategy_serialises_every_message() -> None:
    """Strategy.blocking (FSDP on CPU tensors with gloo): the compute waits for each message where it
    is issued, so the step is compute plus every message; without it the prefetches hide some."""
    from dataclasses import replace

    from gdlbench.model.phases import CommModel, Phases, predict_iteration
    from gdlbench.model.strategies import SHARDED, load_strategy

    net = load_network("gpt2")
    phases = Phases.synthetic(net, 1)
    comm = CommModel("ring", 10.0, 1e-4)
    fsdp = SHARDED["fsdp"]
    over = predict_iteration(net, phases, comm, fsdp, 2)
    block = predict_iteration(net, phases, comm, replace(fsdp, blocking=True), 2)
    compute = phases.forward_us + phases.backward_us + phases.update_us / 2
    assert block.comm_wait_us == pytest.approx(block.comm_us)
    assert block.t_iter_us >= compute + block.comm_us - 1e-6
    assert over.comm_wait_us < block.comm_wait_us and over.t_iter_us < block.t_iter_us
    s = load_strategy(str(Path(__file__).parent.parent / "benchmarks" / "fsdp_gloo.json"))
    assert s.blocking and s.shard == 3 and s.keep_root and s.prefetch
