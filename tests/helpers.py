"""Shared test helpers, imported by the test modules: the GPU marker and a runner for multi-rank
jobs under the venv's mpiexec (conftest.py holds only pytest's hook).

GPU tests carry @requires_gpu (pytest.mark.gpu). Without a GPU they skip, unless GDL_EXPECT_GPU=1
(scripts/gpu-check.sh sets it on the GPU machine): then they fail, so that a GPU run cannot pass by
skipping."""

from __future__ import annotations

import math
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


def gpu_skip_or_fail(item) -> None:
    """For a GPU test without a GPU: skip, or fail when GDL_EXPECT_GPU=1 (conftest.py calls this)."""
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


def check_fit(f: dict, max_median_error: float = 1.0, loaded: bool = False) -> None:
    """A saved alpha-beta fit (AlphaBetaFit.to_dict) holds together: alpha and beta >= 0, 1/beta as
    its link, the fit itself what fit_alpha_beta makes of its saved points (to 1e-9), every point's
    prediction recomputed from the formula and the fitted numbers, each error and the median from
    64 KiB recomputed, and that median under max_median_error. beta > 0 too (a size sweep that
    costs nothing per byte is a failed fit) unless `loaded`: a sweep timed on a loaded machine
    can come out flat (1-64 KiB at 3-7 ms each, 1 and 4 MiB 788 and 834 us once), and the
    least-squares fit of flat times has beta 0 (then no link)."""
    import statistics

    from gdlbench.primitives import collectives, costmodel

    assert f["alpha_us"] >= 0 and f["beta_us_per_byte"] >= 0, f
    assert f["beta_us_per_byte"] > 0 or loaded, f
    if f["beta_us_per_byte"] > 0:
        assert math.isclose(f["link_gbs"], 1e-3 / f["beta_us_per_byte"], rel_tol=1e-12)
    else:
        assert f["link_gbs"] is None
    again = collectives.fit_alpha_beta([pt["size_bytes"] for pt in f["points"]], [pt["measured_us"] for pt in f["points"]],
                                       f["algo"], f["nranks"], servers=f.get("servers") or 1,
                                       gamma_us_per_byte=f["gamma_us_per_byte"], min_bytes=f["fit_min_bytes"],
                                       regimes=max(1, len(f["regimes"]))).to_dict()
    assert again["gamma_us_per_byte"] == f["gamma_us_per_byte"] and len(again["regimes"]) == len(f["regimes"])
    for got, want in zip([again, *again["regimes"]], [f, *f["regimes"]], strict=True):
        assert got.get("from_bytes") == want.get("from_bytes"), (got, want)
        for key in ("alpha_us", "beta_us_per_byte"):
            assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-15), (key, got, want)
    a, b, g = costmodel.coefficients(f["algo"], f["nranks"], f.get("servers"))
    gamma = f["gamma_us_per_byte"] or 0.0
    errs = []
    assert f["points"]
    for pt in f["points"]:
        m = pt["size_bytes"]
        alpha, beta = f["alpha_us"], f["beta_us_per_byte"]
        for reg in f["regimes"]:
            if m >= reg["from_bytes"]:
                alpha, beta = reg["alpha_us"], reg["beta_us_per_byte"]
        want = a * alpha + m * (b * beta + g * gamma)
        assert math.isclose(pt["predicted_us"], want, rel_tol=1e-9), (pt, want)
        assert math.isclose(pt["rel_error"], abs(want - pt["measured_us"]) / pt["measured_us"], rel_tol=1e-9)
        if m >= 65536:
            errs.append(pt["rel_error"])
    if errs:
        assert math.isclose(f["median_rel_error_64k"], statistics.median(errs), rel_tol=1e-12)
        assert f["median_rel_error_64k"] < max_median_error, f["median_rel_error_64k"]
    else:
        assert f["median_rel_error_64k"] is None
