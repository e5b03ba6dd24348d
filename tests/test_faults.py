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
from gdlbench.primitives import collectives as C
from gdlbench.primitives.compress import check_topk, kept_count, topk_wrong

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
    from gdlbench.primitives import collectives as C
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


# ---- the checks' arithmetic, exactly (survivors of scripts/mutate.py) ---------------------------

def test_conv_check_error_is_relative_to_the_convolution_of_the_magnitudes():
    from gdlbench.primitives.conv import TOLERANCE, ConvShape, check_inputs, compare, expected

    sh = ConvShape(2, 3, 6, 6, 4, 3, 3, (1, 1), (1, 1), bias=True)
    inputs = check_inputs(sh)
    ref, mag = expected(sh, inputs)
    tol = TOLERANCE["float32"]
    near = {k: ref[k] + 0.5 * tol * mag[k] for k in ("y", "dx", "dw", "db")}  # inside the tolerance everywhere
    chk = compare(sh, near, inputs, "float32")
    assert chk["wrong"] == 0 and chk["max_rel_error"] == pytest.approx(0.5 * tol, rel=1e-6)
    for key, pass_ in (("y", "fwd"), ("dx", "bwd-data"), ("dw", "bwd-filter"), ("db", "bwd-filter")):
        far = {k: v.copy() for k, v in near.items()}
        far[key].flat[1] = ref[key].flat[1] + 3 * tol * mag[key].flat[1]
        chk = compare(sh, far, inputs, "float32")
        assert chk["wrong_per_pass"] == {"fwd": 0, "bwd-data": 0, "bwd-filter": 0} | {pass_: 1}, key
        assert chk["max_rel_error"] == pytest.approx(3 * tol, rel=1e-6)
        assert chk["per_pass"][pass_] == pytest.approx(3 * tol, rel=1e-6)


def test_gemm_check_error_is_relative_to_the_product_of_the_magnitudes():
    from gdlbench.primitives.gemm import TOLERANCE, check_rows, compare

    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((9, 5)), rng.standard_normal((5, 7))
    rows = check_rows(9)
    ref, scale = a[rows] @ b, np.abs(a[rows]) @ np.abs(b)
    tol = TOLERANCE["float64"]
    chk = compare(ref + 0.5 * tol * scale, a, b, rows, False, False, "float64")
    assert chk["wrong"] == 0 and chk["passed"] and chk["max_rel_error"] == pytest.approx(0.5 * tol, rel=1e-3)
    bad = ref + 0.5 * tol * scale
    bad[2, 3] = ref[2, 3] + 3 * tol * scale[2, 3]
    chk = compare(bad, a, b, rows, False, False, "float64")
    assert chk["wrong"] == 1 and not chk["passed"] and chk["max_rel_error"] == pytest.approx(3 * tol, rel=1e-3)
    assert chk["checked_rows"] == 9  # every row of a small C


def test_contention_is_priced_from_five_percent_of_backward_beside_messages():
    from gdlbench.composed.iteration import NO_PROGRESS_SLOWDOWN, contention

    def one(ready):  # one 10 us message posted at `ready`, ending 10 us after a 100 us backward
        return contention({"backward_end_us": 100.0, "message_ready_us": [ready], "message_end_us": [110.0]},
                          100.0, [10.0])
    assert one(96.0) == (1.0, 1.0)  # 4 us beside backward: nothing to price
    assert one(95.0) == pytest.approx((1.0, NO_PROGRESS_SLOWDOWN))  # 5 us: priced (the message did nothing beside)
    assert one(94.0) == pytest.approx((1.0, NO_PROGRESS_SLOWDOWN))


def test_topk_kept_count_and_wrong_indices():
    assert [kept_count(n, r) for n, r in ((10, 100.0), (5, 1.0), (3, 1.0), (1000, 10.0), (7, 1.0))] == [1, 2, 1, 50, 3]
    g = np.array([5.0, -4.0, 3.0, 0.5, 0.25, 0.1], dtype=np.float32)  # ratio 1: k = 3, indices 0, 1, 2
    vals = g[[0, 1, 2]]
    assert topk_wrong(g, [0, 1, 2], vals, 1.0) == 0
    assert topk_wrong(g, [0, 1, 6], vals, 1.0) == 2  # an index past the end: wrongly kept, and 2 dropped
    assert topk_wrong(g, [-1, 1, 2], vals, 1.0) == 2  # a negative one the same
    assert topk_wrong(g, [0, 1, 1], g[[0, 1, 1]], 1.0) == 2  # a duplicate: kept twice, and 2 dropped
    assert topk_wrong(g, [0, 1, 2, 3], g[[0, 1, 2, 3]], 1.0) == 1  # one too many


def test_cost_model_tables_and_link_scaling():
    from gdlbench.primitives import costmodel

    assert set(costmodel.ALLREDUCE_ALGOS) == set(C.ALGOS)  # every algorithm the tool runs has a formula
    assert costmodel.HIER_LEADER_BELOW_BYTES == 65536
    # bandwidth x 2 divides every beta, latency x 0.5 multiplies every alpha, in every regime
    alpha, beta, regimes = costmodel.scale_link(2.0, 1e-4, ((0, 3.0, 2e-4), (1024, 4.0, 1e-4)), 2.0, 0.5)
    assert (alpha, beta) == pytest.approx((1.0, 5e-5))
    assert [(m, a, b) for m, a, b in regimes] == [(0, 1.5, pytest.approx(1e-4)), (1024, 2.0, pytest.approx(5e-5))]
