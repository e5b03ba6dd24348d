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
from conftest import HAVE_GPU, NEUTRAL_CWD, gpu_module, requires_gpu

from gdlbench.env import device_rule
from gdlbench.errors import UsageError
from gdlbench.gemm import producer_stream

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("requested, gpus, local_rank, local_size, want", [
    ("auto", 1, 0, 1, ("cuda", 0)),
    ("auto", 4, 3, 4, ("cuda", 3)),     # each rank of a node its own GPU: local rank -> GPU
    ("auto", 8, 1, 2, ("cuda", 1)),
    ("cuda", 2, 1, 2, ("cuda", 1)),
    ("auto", 1, 1, 2, ("cpu", None)),   # two ranks, one GPU: auto stays on the CPU (NCCL would refuse)
    ("auto", 0, 0, 1, ("cpu", None)),
    ("cpu", 4, 0, 1, ("cpu", None)),
])
def test_device_rule_gives_each_rank_of_a_node_its_own_gpu(requested, gpus, local_rank, local_size, want):
    device, index, why = device_rule(requested, gpus, "no driver", local_rank, local_size)
    assert (device, index) == want, why


def test_device_rule_refuses_cuda_when_ranks_outnumber_gpus():
    with pytest.raises(UsageError, match="2 ranks on this node but 1 GPU"):
        device_rule("cuda", 1, "", 1, 2)
    with pytest.raises(UsageError, match="no usable GPU: no driver"):
        device_rule("cuda", 0, "no driver", 0, 1)
    with pytest.raises(UsageError, match="expected auto, cpu or cuda"):
        device_rule("tpu", 1, "", 0, 1)


def test_device_rule_says_why_auto_stays_on_the_cpu():
    assert "2 ranks on this node but 1 GPU" in device_rule("auto", 1, "", 0, 2)[2]


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
    sources = [*ROOT.glob("csrc/cuda/*.cu"), *ROOT.glob("csrc/cuda/*.h"), *ROOT.glob("csrc/bind_cuda*.cpp")]
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
    from gdlbench import env
    from gdlbench._native import _cuda
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
