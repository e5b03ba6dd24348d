"""benchmarks/peer_timing.py, the way the GPU comparison scripts time their PyTorch peer, checked
without a GPU against a stand-in for torch.cuda that counts calls and gives each queued call 10 us
of device time; and the comparison scripts, without a GPU, stop in one line with exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import HAVE_GPU, NEUTRAL_CWD

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import peer_timing  # noqa: E402

CALL_US = 10.0


class FakeCuda:
    """Device time advances CALL_US per op call launched; events read the device clock when
    recorded; a graph replays its captured calls. Synchronisations are counted."""

    def __init__(self):
        self.clock_us = 0.0
        self.syncs = 0
        self.capturing: list | None = None

    def launch(self) -> None:
        if self.capturing is not None:
            self.capturing.append(1)
        else:
            self.clock_us += CALL_US

    def make(self):
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = cuda.clock_us

            def synchronize(self):
                cuda.syncs += 1

            def elapsed_time(self, other):
                return (other.t - self.t) / 1000.0  # ms

        class CUDAGraph:
            def __init__(self):
                self.calls = 0

            def replay(self):
                cuda.clock_us += self.calls * CALL_US

        class graph:  # noqa: N801 (torch's name)
            def __init__(self, g):
                self.g = g

            def __enter__(self):
                cuda.capturing = []

            def __exit__(self, *exc):
                self.g.calls, cuda.capturing = len(cuda.capturing), None

        class Stream:
            def wait_stream(self, other):
                pass

        class stream:  # noqa: N801
            def __init__(self, s):
                pass

            def __enter__(self):
                pass

            def __exit__(self, *exc):
                pass

        def synchronize():
            cuda.syncs += 1

        return SimpleNamespace(cuda=SimpleNamespace(Event=Event, CUDAGraph=CUDAGraph, graph=graph, Stream=Stream,
                                                    stream=stream, current_stream=Stream,
                                                    synchronize=synchronize))


@pytest.mark.parametrize("method", ["graph", "queued"])
def test_the_peer_is_timed_per_call_over_many_calls(method):
    fake = FakeCuda()
    torch = fake.make()
    calls = []

    def op():
        calls.append(1)
        fake.launch()

    samples = peer_timing.time_peer(torch, op, method=method, calls=20, samples=3, warmup=4)
    assert samples == [pytest.approx(CALL_US)] * 3  # per call: the span over 20 calls / 20
    # warm-up 4, then 20 captured once (graph) or 20 per sample (queued)
    assert len(calls) == 4 + (20 if method == "graph" else 3 * 20)
    assert fake.syncs <= 3 + 3  # a few before timing and one per sample: none per call
    assert "20 calls" in peer_timing.describe(method, 20)


def test_the_peer_timing_refuses_what_it_cannot_do():
    torch = FakeCuda().make()
    with pytest.raises(ValueError, match="method"):
        peer_timing.time_peer(torch, lambda: None, method="events", calls=1, samples=1, warmup=0)
    with pytest.raises(ValueError, match=">= 1"):
        peer_timing.time_peer(torch, lambda: None, method="queued", calls=0, samples=1, warmup=0)


@pytest.mark.skipif(HAVE_GPU, reason="checks the scripts without a GPU")
@pytest.mark.parametrize("script", ["gemm_vs_torch_gpu.py", "conv_vs_torch_gpu.py", "copy_update_vs_torch_gpu.py",
                                    "iteration_vs_torch_gpu.py", "nccl_vs_nccl_tests.py"])
def test_the_comparison_scripts_stop_in_one_line_without_a_gpu(script):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script)], capture_output=True, text=True,
                       timeout=120, cwd=NEUTRAL_CWD)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and "GPU" in p.stderr, p.stderr


def test_time_host_times_each_call_after_the_warm_up():
    calls = []
    samples = peer_timing.time_host(lambda: calls.append(1), warmup=2, iters=3)
    assert len(calls) == 5 and len(samples) == 3 and all(s >= 0 for s in samples)
