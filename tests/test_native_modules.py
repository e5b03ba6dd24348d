"""The native modules as the loader sees them: what they export, and the CUDA commands in a fresh
process (nothing imported before gdlbench, as a user's first command)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from helpers import NEUTRAL_CWD, mpi_env, requires_gpu, run_cli

from gdlbench import _native

# The C++ runtime's entry points (libstdc++, libsupc++, libgcc). A module that exports them, because
# its toolchain linked the runtime statically, interposes on the copy every other library uses:
# loaded first, it captured libstdc++'s own std::call_once state and cuDNN 9's cudnnCreate jumped
# to a null __once_call on the GPU machine (the g++ CMake found there links libstdc++ statically).
RUNTIME_PREFIXES = ("__cxa_", "__gxx_personality", "__once_proxy", "_ZSt11__once_call", "_ZSt15__once_callable",
                    "_Unwind_", "_ZSt9terminate", "_ZSt20__throw_")


def _modules() -> list[str]:
    return [m.__file__ for m in (_native._core, _native._cuda) if m is not None]


def _exported(path: str) -> list[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


@pytest.mark.native
@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm (binutils)")
@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.rsplit("/", 1)[-1].split(".")[0])
def test_modules_do_not_export_the_cxx_runtime(path):
    leaked = [s for s in _exported(path) if s.startswith(RUNTIME_PREFIXES)]
    assert not leaked, f"{path} exports C++ runtime symbols (link with --exclude-libs,ALL): {leaked[:8]}"


@requires_gpu
@pytest.mark.parametrize("args", [
    ("conv", "--device", "cuda", "-n", "2", "-c", "16", "-H", "14", "-k", "16", "--iters", "2"),
    ("layer", "--layer", "alexnet-norm1,alexnet-fc6", "-b", "2", "--device", "cuda", "-n", "2", "-w", "1"),
    ("iteration", "--net", "alexnet", "--batch", "2", "--device", "cuda", "--strategy", "serial,wfbp",
     "-n", "2", "-w", "1"),
], ids=lambda a: a[0])
def test_cuda_commands_in_a_fresh_process(args):
    """cuDNN, cuBLAS and NCCL as the first command of a fresh process meets them: the in-process GPU
    tests run after pytest has imported numpy, which loads libstdc++ first and hid a crash."""
    p = run_cli(*args, timeout=300)
    assert p.returncode == 0, f"gdlbench {' '.join(args)}: rc {p.returncode}\n{p.stderr[-2000:]}"


@requires_gpu
def test_cuda_library_call_in_a_fresh_process():
    code = "import gdlbench; r = gdlbench.conv(device='cuda', iters=2, warmup=1); print(len(r))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=mpi_env(),
                       cwd=NEUTRAL_CWD)
    assert p.returncode == 0, f"rc {p.returncode}\n{p.stderr[-2000:]}"
