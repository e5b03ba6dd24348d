"""Every correctness check proven to fire: GDLBENCH_FAULT (gdlbench/_fault.py, csrc/common/fault.h)
corrupts K elements of the result an untimed check is about to compare, and each test asserts the
check counts exactly those. Off by default; the timed loops never read it."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest
from helpers import run_cli, run_mpi

import gdlbench
from gdlbench import _core
from gdlbench import collectives as C
from gdlbench.compress import check_topk, kept_count, topk_wrong

K = 3


def test_fault_injection_is_off_by_default():
    assert "GDLBENCH_FAULT" not in os.environ
    assert gdlbench.gemm(64, 48, 32, device="cpu", iters=1, warmup=0).check["wrong"] == 0
    assert check_topk(10.0) == 0


# Each collective and each all-reduce algorithm, on 3 ranks (rd folds a rank; ps with 2 servers;
# hier on one node), every dtype, 2 check rounds: K wrong elements per rank per round.
COLLECTIVE_FAULT_CODE = textwrap.dedent("""
    import json
    from mpi4py import MPI
    import gdlbench
    from gdlbench import collectives as C
    comm = MPI.COMM_WORLD
    out = {}
    for dtype in C.DTYPES:
        for algo in C.ALGOS:
            rows = gdlbench.allreduce([96, 4000], dtype, "sum", algo, "mpi", iters=1, warmup=0, check=2, servers=2)
            out[f"allreduce/{algo}/{dtype}"] = [r.wrong for r in rows]
        out[f"reduce_scatter/{dtype}"] = [r.wrong for r in gdlbench.reduce_scatter([96 * 3], dtype, "max", "mpi",
                                                                                    iters=1, warmup=0, check=2)]
        out[f"allgather/{dtype}"] = [r.wrong for r in gdlbench.allgather([96 * 3], dtype, "mpi", iters=1, warmup=0,
                                                                         check=2)]
        out[f"broadcast/{dtype}"] = [r.wrong for r in gdlbench.broadcast([96], dtype, 1, "mpi", iters=1, warmup=0,
                                                                         check=2)]
    if comm.rank == 0:
        print("RESULT " + json.dumps(out))
""")


def _mpi_with_fault(nranks, fault, *args, timeout=240):
    os.environ["GDLBENCH_FAULT"] = fault
    try:
        return run_mpi(nranks, *args, timeout=timeout)
    finally:
        del os.environ["GDLBENCH_FAULT"]


def test_every_collective_algorithm_and_dtype_counts_injected_wrong_elements():
    p = _mpi_with_fault(3, f"collective={K}", sys.executable, "-c", COLLECTIVE_FAULT_CODE)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.split("RESULT ", 1)[1])
    want = K * 3 * 2  # per rank, per check round
    expected = {f"allreduce/{a}/{d}": [want] * 4 for a in C.ALGOS for d in C.DTYPES}  # 2 sizes x out/in place
    expected |= {f"{c}/{d}": [want] * 2 for c in ("reduce_scatter", "allgather") for d in C.DTYPES}
    expected |= {f"broadcast/{d}": [want] for d in C.DTYPES}
    assert got == expected


@pytest.mark.parametrize("args", [
    ("allreduce", "--algo", "library,ring,rd,tree,ps,hier", "--servers", "2", "-o", "all"),
    ("reduce_scatter", "-o", "all"),
    ("allgather",),
    ("broadcast", "--root", "1"),
])
def test_cli_reports_injected_wrong_elements_and_exits_1(tmp_path, args):
    out = tmp_path / "r.json"
    os.environ["GDLBENCH_FAULT"] = f"collective={K}"
    try:
        p = run_cli(*args, "--size", "384", "-n", "1", "-w", "0", "-c", "2", "--json", str(out), nranks=3)
    finally:
        del os.environ["GDLBENCH_FAULT"]
    assert p.returncode == 1, p.stdout + p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert rows and {r["wrong"] for r in rows} == {K * 3 * 2}


def test_gemm_check_counts_injected_wrong_elements(monkeypatch):
    monkeypatch.setenv("GDLBENCH_FAULT", f"gemm={K}")
    for dtype in ("float32", "float64"):
        chk = gdlbench.gemm(40, 30, 20, dtype=dtype, device="cpu", iters=1, warmup=0).check
        assert chk["wrong"] == K and not chk["passed"], chk  # the first of them NaN
        assert np.isfinite(chk["max_rel_error"]) and chk["max_rel_error"] >= 1.0


def test_gemm_cli_exits_1_on_a_wrong_result(tmp_path):
    out = tmp_path / "g.json"
    os.environ["GDLBENCH_FAULT"] = "gemm=1"  # a NaN alone: the check must count it
    try:
        p = run_cli("gemm", "-m", "32", "-n", "32", "-k", "32", "--iters", "1", "--warmup", "0", "--device", "cpu",
                    "--json", str(out))
    finally:
        del os.environ["GDLBENCH_FAULT"]
    assert p.returncode == 1, p.stdout + p.stderr
    assert [r["wrong"] for r in json.loads(out.read_text())["rows"]] == [1]


@pytest.mark.parametrize("bias", [False, True])
def test_conv_check_counts_injected_wrong_elements(monkeypatch, bias):
    monkeypatch.setenv("GDLBENCH_FAULT", f"conv={K}")
    rows = gdlbench.conv(2, 3, 6, 6, 4, 3, 3, pad=1, bias=bias, device="cpu", iters=1, warmup=0)
    # one corrupted array per pass; bwd-filter checks dw and, with a bias, db
    assert {r.pass_: r.check["wrong"] for r in rows} == {"fwd": K, "bwd-data": K, "bwd-filter": 2 * K if bias else K}
    assert all(not r.check["passed"] for r in rows)


def test_topk_check_counts_dropped_values(monkeypatch):
    assert check_topk(50.0) == 0
    monkeypatch.setenv("GDLBENCH_FAULT", f"topk={K}")
    assert check_topk(50.0) == 2 * K  # both encodes checked: the binding's and the timed loop's
    r = gdlbench.compress(50.0, 20_000, iters=1, warmup=0)
    assert r.wrong == 2 * K


def test_topk_check_does_not_take_k_from_the_kernel():
    """A kernel that keeps one value, or none, is wrong by every value it should have kept."""
    g = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    idx, val = _core.topk_encode(g, 10.0)
    k = kept_count(1000, 10.0)
    assert len(idx) == k == 50 and topk_wrong(g, idx, val, 10.0) == 0
    assert topk_wrong(g, idx[:1], val[:1], 10.0) == k - 1
    assert topk_wrong(g, idx[:0], val[:0], 10.0) == k
    bad = val.copy()
    bad[5] += 1
    assert topk_wrong(g, idx, bad, 10.0) == 1
    swapped = idx.copy()
    swapped[0] = int(np.argmin(np.abs(g)))  # a small value kept in place of a large one
    assert topk_wrong(g, swapped, val, 10.0) == 2 + 1  # one dropped, one wrongly kept, its value not g's
    timed_g, timed_idx, timed_val = _core.topk_encode_timed_output(1000, 10.0)
    assert len(timed_g) == 1000 and topk_wrong(timed_g, timed_idx, timed_val, 10.0) == 0


def test_compress_cli_exits_1_when_the_encode_is_wrong(tmp_path):
    out = tmp_path / "c.json"
    os.environ["GDLBENCH_FAULT"] = "topk=1"
    try:
        p = run_cli("compress", "--ratio", "10", "--values", "20000", "--iters", "1", "--json", str(out))
    finally:
        del os.environ["GDLBENCH_FAULT"]
    assert p.returncode == 1, p.stdout + p.stderr
    assert [r["wrong"] for r in json.loads(out.read_text())["rows"]] == [2]
