"""The rules the CUDA backend runs by, tested without a GPU: which GPU a rank takes, which stream an
array's producer must be waited on, that nothing queues work on the legacy default stream, and that a
GPU run cannot pass by skipping its GPU tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HAVE_GPU, NEUTRAL_CWD, gpu_module, requires_gpu, run_mpi

from gdlbench.common.env import assign_gpus, device_rule
from gdlbench.common.errors import UsageError
from gdlbench.primitives.gemm import producer_stream

ROOT = Path(__file__).resolve().parent.parent


def same(n: int) -> list[str]:
    """n GPUs as every rank sees them without CUDA_VISIBLE_DEVICES (PCI bus ids, CUDA's order)."""
    return [f"00000000:{0x18 + 0x10 * i:02X}:00.0" for i in range(n)]


@pytest.mark.parametrize("requested, visible, local_rank, want", [
    ("auto", [same(1)], 0, ("cuda", 0)),
    ("auto", [same(4)] * 4, 3, ("cuda", 3)),     # each rank of a node its own GPU: local rank -> GPU
    ("auto", [same(8)] * 2, 1, ("cuda", 1)),
    ("cuda", [same(2)] * 2, 1, ("cuda", 1)),
    ("auto", [same(1)] * 2, 1, ("cpu", None)),   # two ranks, one GPU: auto stays on the CPU (NCCL would refuse)
    ("auto", [[]], 0, ("cpu", None)),
    ("cpu", [same(4)], 0, ("cpu", None)),
    # One GPU per rank through CUDA_VISIBLE_DEVICES (Slurm --gpus-per-task, torchrun): each rank's
    # device 0, a different physical GPU each.
    ("cuda", [[g] for g in same(4)], 2, ("cuda", 0)),
    ("auto", [[g] for g in same(2)], 1, ("cuda", 0)),
    # The launcher's order need not be the bus order; bus ids differ only in case.
    ("cuda", [[same(2)[1]], [same(2)[0].lower()]], 0, ("cuda", 0)),
    # Two GPUs per rank, disjoint: each its first.
    ("cuda", [same(4)[:2], same(4)[2:]], 1, ("cuda", 0)),
    # Rank 0 sees both, rank 1 only the first: rank 0 must take the second (a matching, not greedy).
    ("cuda", [same(2), same(2)[:1]], 0, ("cuda", 1)),
    ("cuda", [same(2), same(2)[:1]], 1, ("cuda", 0)),
])
def test_device_rule_gives_each_rank_of_a_node_its_own_gpu(requested, visible, local_rank, want):
    device, index, why = device_rule(requested, "no driver", local_rank, visible)
    assert (device, index) == want, why


def test_each_rank_of_a_node_gets_a_different_physical_gpu():
    for visible in ([same(4)] * 4, [[g] for g in same(4)], [same(4)[2:], same(4)[:2], same(4)]):
        got = assign_gpus(visible)
        assert None not in got
        buses = [visible[r][i] for r, i in enumerate(got)]
        assert len(set(buses)) == len(buses), (visible, got)


def test_device_rule_refuses_cuda_when_ranks_outnumber_gpus():
    with pytest.raises(UsageError, match="2 ranks on this node but 1 distinct GPU"):
        device_rule("cuda", "", 1, [same(1)] * 2)
    # One GPU per rank, but the launcher gave two ranks the same one.
    with pytest.raises(UsageError, match=r"local rank\(s\) 1 would share one"):
        device_rule("cuda", "", 0, [same(2)[:1], same(2)[:1]])
    with pytest.raises(UsageError, match="no usable GPU: no driver"):
        device_rule("cuda", "no driver", 0, [[]])
    with pytest.raises(UsageError, match="expected auto, cpu or cuda"):
        device_rule("tpu", "", 0, [same(1)])


def test_device_rule_says_why_auto_stays_on_the_cpu():
    assert "2 ranks on this node but 1 distinct GPU" in device_rule("auto", "", 0, [same(1)] * 2)[2]


# Two ranks on one node, each shown one GPU by its launcher (faked: no GPU needed): both take
# --device cuda, each its device 0; shown the same GPU, both refuse (exit 2, one line).
FAKE_GPU_CODE = """
import sys
from mpi4py import MPI
from gdlbench.common import env
from gdlbench.common.errors import UsageError
rank = MPI.COMM_WORLD.rank
chosen = []
class FakeCuda:
    def set_device(self, index):
        chosen.append(index)
buses = {"own": [f"00000000:{0x18 + 0x10 * rank:02X}:00.0"], "shared": ["00000000:18:00.0"]}[sys.argv[1]]
env.visible_gpus = lambda: (buses, "")
env.require_cuda = lambda: FakeCuda()
try:
    device, why = env.resolve_device("cuda")
except UsageError as e:
    print(f"rank {rank}: refused: {e}")
    sys.exit(2)
print(f"rank {rank}: {device} {chosen} {why}")
"""


def test_a_launcher_that_gives_each_rank_one_gpu_is_not_refused():
    p = run_mpi(2, sys.executable, "-c", FAKE_GPU_CODE, "own", timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    for r in range(2):
        assert f"rank {r}: cuda [0]" in p.stdout, p.stdout
    shared = run_mpi(2, sys.executable, "-c", FAKE_GPU_CODE, "shared", timeout=120)
    assert shared.returncode != 0 and "would share one" in shared.stdout, (shared.stdout, shared.stderr)


@pytest.mark.parametrize("cai, want", [
    ({}, None),                      # version 2 producers name no stream
    ({"stream": None}, None),        # "no synchronisation needed"
    ({"stream": 1}, 1),              # the legacy default stream
    ({"stream": 2}, 2),              # the per-thread default stream
    ({"stream": 0x7F00DEAD0000}, 0x7F00DEAD0000),  # a cudaStream_t
])
def test_producer_stream_follows_the_cuda_array_interface(cai, want):
    assert producer_stream(cai) == want


@pytest.mark.parametrize("bad", [0, -3, True, 1.5, "1"])
def test_producer_stream_refuses_what_the_interface_forbids(bad):
    with pytest.raises(UsageError, match="stream"):
        producer_stream({"stream": bad})


def test_no_cuda_code_uses_the_legacy_default_stream():
    """The process stream is non-blocking: it does not wait for the legacy stream, so a
    cudaMemcpy/cudaMemset there would race with it. Every copy and fill goes through the stream."""
    sources = [*ROOT.glob("csrc/cuda/*.cu"), *ROOT.glob("csrc/cuda/*.h"), *ROOT.glob("csrc/bindings/bind_cuda*.cpp")]
    assert sources
    legacy = re.compile(r"\bcuda(Memcpy|Memset|Memcpy2D|Memcpy3D)\s*\(")
    offenders = [f"{p.name}:{n}" for p in sources for n, line in enumerate(p.read_text().splitlines(), 1)
                 if legacy.search(line)]
    assert not offenders, offenders


@pytest.mark.skipif(HAVE_GPU, reason="checks what happens without a GPU")
def test_gpu_tests_fail_rather_than_skip_when_a_gpu_is_expected():
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
           str(ROOT / "tests" / "test_gemm.py")]
    env = {**os.environ, "GDL_EXPECT_GPU": "1"}
    expected = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300, cwd=NEUTRAL_CWD)
    assert expected.returncode == 1, expected.stdout[-2000:]
    assert "GDL_EXPECT_GPU=1 but no GPU" in expected.stdout and " skipped" not in expected.stdout
    env["GDL_EXPECT_GPU"] = "0"
    relaxed = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300, cwd=NEUTRAL_CWD)
    assert relaxed.returncode == 0 and " skipped" in relaxed.stdout, relaxed.stdout[-2000:]


@requires_gpu
def test_the_ranks_gpu_is_made_current_and_kept():
    from gdlbench._native import _cuda
    from gdlbench.common import env
    assert env.resolve_device("cuda")[0] == "cuda"
    assert _cuda.current_device() == 0  # one rank: local rank 0
    _cuda.DeviceBuffer(16)  # work began on it
    _cuda.set_device(0)  # choosing it again is fine
    if _cuda.device_status()[0] > 1:
        with pytest.raises(ValueError, match="after work began"):
            _cuda.set_device(1)


@requires_gpu
def test_cuda_gemm_waits_for_a_cupy_nonblocking_stream():
    import gdlbench
    cupy = gpu_module("cupy")
    with cupy.cuda.Stream(non_blocking=True):
        a = cupy.random.standard_normal((512, 256), dtype=cupy.float32)
        b = cupy.random.standard_normal((256, 128), dtype=cupy.float32) * 2
        r = gdlbench.gemm(a=a, b=b, iters=3, warmup=1)
    assert r.device == "cuda" and r.passed
