"""GEMM against the float64 reference, the result object, and the CLI's contract."""

from __future__ import annotations

import json
import platform
import statistics

import numpy as np
import pytest
from helpers import gpu_module, requires_gpu, run_cli

import gdlbench
from gdlbench.primitives.gemm import TOLERANCE, compare

SHAPES = [(64, 64, 64), (100, 37, 513), (7, 1, 9), (1, 130, 3), (257, 255, 129), (1000, 999, 1001)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("trans", [(False, False), (True, False), (False, True), (True, True)])
def test_cpu_gemm_matches_float64_reference(dtype, shape, trans):
    m, n, k = shape
    r = gdlbench.gemm(m, n, k, dtype, "cpu", iters=2, warmup=1, trans_a=trans[0], trans_b=trans[1])
    assert r.check is not None and r.check["passed"], r.check
    assert r.check["max_rel_error"] <= TOLERANCE[dtype]
    assert r.check["checked_rows"] == min(m, 128)
    assert len(r.measurement.samples_us) == 2 and r.tflops > 0


def test_check_detects_a_wrong_result():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((50, 40)), rng.standard_normal((40, 30))
    rows = np.arange(50)
    c = a @ b
    assert compare(c, a, b, rows, False, False, "float64")["passed"]
    c[3, 7] += 1e-3
    bad = compare(c, a, b, rows, False, False, "float64")
    assert not bad["passed"] and bad["wrong"] == 1


def test_user_numpy_arrays():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((33, 65)).astype(np.float32)
    b = rng.standard_normal((65, 17)).astype(np.float32)
    r = gdlbench.gemm(a=a, b=b, iters=3, warmup=0)
    assert (r.m, r.n, r.k, r.device) == (33, 17, 65, "cpu") and r.passed


def test_result_dict_has_samples_and_stats():
    r = gdlbench.gemm(128, 64, 32, "float32", "cpu", iters=5, warmup=1)
    d = r.to_dict()
    for key in ("time_us", "time_us_min", "time_us_p95", "time_us_max", "time_cv", "samples_us", "tflops", "wrong"):
        assert key in d
    assert len(d["samples_us"]) == 5
    assert d["time_us_min"] <= d["time_us"] <= d["time_us_max"]


def test_measurement_statistics():
    m = gdlbench.Measurement([1.0, 2.0, 3.0, 4.0, 100.0], "steady-clock")
    assert m.median == 3.0 and m.min == 1.0 and m.max == 100.0
    assert m.p95 == pytest.approx(80.8)
    assert m.cv == pytest.approx(np.std([1, 2, 3, 4, 100], ddof=1) / 22.0)
    with pytest.raises(ValueError):
        gdlbench.Measurement([], "steady-clock")


@pytest.mark.parametrize("dtype", ["float32", "tf32", "float16", "bfloat16", "float64"])
@requires_gpu
def test_cuda_gemm_matches_cpu_reference(dtype):
    for m, n, k in [(256, 256, 256), (1000, 999, 1001), (65, 33, 17)]:
        r = gdlbench.gemm(m, n, k, dtype, "cuda", iters=3, warmup=1)
        assert r.check["passed"], (dtype, m, n, k, r.check)


@requires_gpu
def test_cuda_gemm_on_cupy_arrays():
    cupy = gpu_module("cupy")
    a = cupy.random.standard_normal((300, 200), dtype=cupy.float32)
    b = cupy.random.standard_normal((200, 100), dtype=cupy.float32)
    r = gdlbench.gemm(a=a, b=b, iters=3, warmup=1)
    assert r.device == "cuda" and r.passed


def test_cli_gemm_json(tmp_path):
    out = tmp_path / "g.json"
    p = run_cli("gemm", "-m", "64", "-n", "48", "-k", "32", "--device", "cpu", "--iters", "4", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["tool"] == "gdlbench" and doc["command"] == "gemm"
    assert doc["timing"]["clock"] == "steady-clock"
    (row,) = doc["rows"]
    assert (row["m"], row["n"], row["k"]) == (64, 48, 32) and len(row["samples_us"]) == 4
    assert "blas" in doc["env"] and doc["env"]["world_size"] == 1
    # the result: checked (no wrong element, within the float32 tolerance), timed, and its rate 2mnk/t
    assert row["wrong"] == 0 and row["max_rel_error"] <= row["tolerance"] == pytest.approx(2e-5)
    assert row["time_us"] == pytest.approx(statistics.median(row["samples_us"]), rel=1e-9) and row["time_us"] > 0
    assert row["tflops"] == pytest.approx(2 * 64 * 48 * 32 / (row["time_us"] * 1e-6) / 1e12, rel=1e-9)


@pytest.mark.parametrize("argv, message", [
    (["gemm", "--dtype", "int7"], "dtype"),
    (["gemm", "-m", "-5"], "positive"),
    (["gemm", "-m", "0"], "positive"),
    (["gemm", "-m", "abc"], "invalid int"),
    (["gemm", "-m", "100000000", "-n", "100000000", "-k", "8"], "GiB"),
    (["gemm", "--shapes", "2x3"], "MxNxK"),
    (["gemm", "--sweep", "64:32"], "MIN"),
    (["gemm", "--iters", "0"], "iters"),
    (["gemm", "--device", "tpu"], "device"),
    (["gemm", "--json", "/nonexistent-dir/x.json"], "does not exist"),
    (["gemm", "--bogus"], "unrecognized"),
    (["nosuchcommand"], "invalid choice"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, message):
    p = run_cli(*argv)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_cli_cuda_without_gpu_is_a_clean_error():
    if gdlbench.cuda_status()[0] > 0:
        pytest.skip("a GPU is present")
    p = run_cli("gemm", "--device", "cuda", "-m", "64", "-n", "64", "-k", "64")
    assert p.returncode == 2 and "no usable GPU" in p.stderr and "Traceback" not in p.stderr


def test_cli_json_not_written_on_bad_run(tmp_path):
    out = tmp_path / "g.json"
    p = run_cli("gemm", "--dtype", "int7", "--json", str(out))
    assert p.returncode == 2 and not out.exists()


def test_cli_env_runs(tmp_path):
    out = tmp_path / "env.json"
    p = run_cli("env", "--json", str(out))
    assert p.returncode == 0 and "blas" in p.stdout and "mpi" in p.stdout
    # what env is for: the versions and the machine, as this process sees them
    env = json.loads(out.read_text())["env"]
    assert env["gdlbench"] == gdlbench.__version__ and env["python"] == platform.python_version()
    assert env["blas"].startswith("OpenBLAS") and env["mpi"] and env["world_size"] == 1
    assert env["blas_threads"] >= 1 and env["cpu_cores"] >= 1
