"""Shared test helpers: the GPU marker and a runner for multi-rank jobs under the venv's mpiexec.

GPU tests carry @requires_gpu (pytest.mark.gpu). Without a GPU they skip, unless GDL_EXPECT_GPU=1
(scripts/gpu-check.sh sets it on the GPU machine): then they fail, so that a GPU run cannot pass by
skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import gdlbench

_BIN = Path(sys.executable).parent
# The venv's own launcher and console script; where gdlbench was installed without them (the GPU
# machine's --target install), the mpiexec on PATH and `python -m gdlbench`.
MPIEXEC = _BIN / "mpiexec" if (_BIN / "mpiexec").exists() else Path(shutil.which("mpiexec") or _BIN / "mpiexec")
GDLBENCH_CMD = [str(_BIN / "gdlbench")] if (_BIN / "gdlbench").exists() else [sys.executable, "-m", "gdlbench"]
# Subprocesses run outside the checkout, so that they import the installed gdlbench (with its
# native modules), not the source folder.
NEUTRAL_CWD = tempfile.gettempdir()
HAVE_GPU = gdlbench.cuda_status()[0] > 0
EXPECT_GPU = os.environ.get("GDL_EXPECT_GPU", "0") not in ("", "0")
requires_gpu = pytest.mark.gpu


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is None or HAVE_GPU:
        return
    why = f"no GPU: {gdlbench.cuda_status()[1]}"
    if EXPECT_GPU:
        pytest.fail(f"GDL_EXPECT_GPU=1 but {why}", pytrace=False)
    pytest.skip(why)


def gpu_module(name: str):
    """Import a module a GPU test needs (CuPy, say): skip without it, fail when a GPU is expected."""
    if EXPECT_GPU:
        return __import__(name)
    return pytest.importorskip(name)


def mpi_env() -> dict:
    env = dict(os.environ)
    # The same tests pass with Open MPI, which refuses root and oversubscription without these.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe", PYTHONUNBUFFERED="1")
    return env


def run_mpi(nranks: int, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """`mpiexec -n N <args>`; args starting with '-c' or a .py path run under this Python."""
    cmd = [str(MPIEXEC), "-n", str(nranks), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env(), cwd=NEUTRAL_CWD)


def run_cli(*args: str, nranks: int = 0, timeout: float = 180) -> subprocess.CompletedProcess:
    """The gdlbench CLI as a user runs it: alone, or under mpiexec with nranks ranks."""
    cli = [*GDLBENCH_CMD, *args]
    if nranks:
        return run_mpi(nranks, *cli, timeout=timeout)
    return subprocess.run(cli, capture_output=True, text=True, timeout=timeout, env=mpi_env(), cwd=NEUTRAL_CWD)
