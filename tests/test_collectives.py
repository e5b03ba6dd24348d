"""Collectives: every algorithm and dtype checked exactly under mpiexec -n 2 and -n 4, the JSON
contract, the alpha-beta fit, a rank that dies or hangs mid-sweep, bad input, launcher mismatch."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    GDLBENCH_CMD,
    MPIEXEC,
    NEUTRAL_CWD,
    check_fit,
    mpi_env,
    requires_gpu,
    run_cli,
    run_mpi,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

import gdlbench.primitives.collectives as C
from gdlbench.cli.commands.allreduce import sweep_sizes
from gdlbench.common.errors import UsageError
from gdlbench.primitives import costmodel

pytestmark = pytest.mark.mpi


def _json_rows(path) -> list[dict]:
    doc = json.loads(path.read_text())
    assert doc["tool"] == "gdlbench" and doc["timing"]["rank_reduction"] == "max"
    assert doc["timing"]["clock"] == "steady-clock"
    return doc["rows"]


def _all_correct(rows: list[dict], iters: int) -> None:
    """Every row exact, its time the median of its samples, and algbw its size over that time."""
    assert rows
    for r in rows:
        assert r["wrong"] == 0, r
        assert len(r["samples_us"]) == iters, r
        assert r["time_us_min"] <= r["time_us"] <= r["time_us_max"]
        assert r["time_us"] == pytest.approx(statistics.median(r["samples_us"]), rel=1e-9), r
        assert r["time_us"] > 0 and r["algbw_gbs"] == pytest.approx(r["size_bytes"] / r["time_us"] / 1e3, rel=1e-9), r


def test_allreduce_100MB_two_ranks(tmp_path):
    out = tmp_path / "a.json"
    p = run_cli("allreduce", "--size", "100MB", "-n", "3", "-w", "1", "--json", str(out), nranks=2)
    assert p.returncode == 0, p.stderr
    assert "#wrong" in p.stdout and "Out of bounds values : 0 OK" in p.stdout
    assert "1000-based" in p.stdout  # the size convention is stated
    rows = _json_rows(out)
    _all_correct(rows, 3)
    assert {r["inplace"] for r in rows} == {False, True}
    r = rows[0]
    assert r["size_bytes"] == 100_000_000 and r["count"] == 25_000_000 and r["nranks"] == 2
    assert math.isclose(r["busbw_gbs"], r["algbw_gbs"] * 1.0)  # 2(N-1)/N = 1 for N = 2


@pytest.mark.parametrize("nranks", [2, 4])
def test_every_algorithm_and_dtype_exact(tmp_path, nranks):
    out = tmp_path / "a.json"
    servers = str(nranks - 1)  # P servers of N ranks, an uneven split on 4 ranks
    p = run_cli("allreduce", "-b", "8", "-e", "1M", "-f", "8", "-c", "1", "--algo", "all", "-d", "all",
                "--servers", servers, "-n", "1", "-w", "0", "--json", str(out), nranks=nranks)
    assert p.returncode == 0, p.stderr
    rows = _json_rows(out)
    _all_correct(rows, 1)
    assert {r["algo"] for r in rows} == set(C.ALGOS)
    assert {r["dtype"] for r in rows} == set(C.DTYPES)
    assert len(rows) == len(C.ALGOS) * 5 * 6 * 2  # algos x dtypes x sizes (8 .. 256K, x8) x modes
    factor = 2 * (nranks - 1) / nranks
    for r in rows:
        assert math.isclose(r["busbw_gbs"], r["algbw_gbs"] * factor)


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_every_op_exact(tmp_path, nranks):
    out = tmp_path / "a.json"
    p = run_cli("allreduce", "--size", "4,1000,65540", "-o", "all", "-d", "all", "--algo", "all", "-c", "2",
                "-n", "1", "-w", "0", "--json", str(out), nranks=nranks)
    assert p.returncode == 0, p.stderr
    rows = _json_rows(out)
    _all_correct(rows, 1)
    assert {r["op"] for r in rows} == set(C.OPS)
    # one row per op, dtype, algorithm, size (whole elements, at least one) and mode, none more
    want = sorted((op, d, algo, max(1, s // C.DTYPE_SIZE[d]), inplace) for op in C.OPS for d in C.DTYPES
                  for algo in C.ALGOS for s in (4, 1000, 65540) for inplace in (False, True))
    assert sorted((r["op"], r["dtype"], r["algo"], r["count"], r["inplace"]) for r in rows) == want
    assert all(r["size_bytes"] == r["count"] * C.DTYPE_SIZE[r["dtype"]] and r["nranks"] == nranks for r in rows)


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("command", ["reduce_scatter", "allgather", "broadcast"])
def test_library_collectives_exact(tmp_path, nranks, command):
    out = tmp_path / "c.json"
    extra = ["-r", str(nranks - 1)] if command == "broadcast" else []
    p = run_cli(command, "-b", "8", "-e", "1M", "-f", "16", "-d", "all", "-n", "2", "-w", "0", "--rotate", "2M",
                "--json", str(out),
                *extra, nranks=nranks)
    assert p.returncode == 0, p.stderr
    rows = _json_rows(out)
    _all_correct(rows, 2)
    # -b 8 -e 1M -f 16: 5 sizes per dtype and mode; RS/AG in whole blocks of N elements (at least
    # one element per rank), broadcast one buffer, in place only
    modes = (True,) if command == "broadcast" else (False, True)
    per_rank = {d: [max(1, s // (C.DTYPE_SIZE[d] * (1 if command == "broadcast" else nranks)))
                    for s in (8, 128, 2048, 32768, 524288)] for d in C.DTYPES}
    want = sorted((d, c, m) for d in C.DTYPES for c in per_rank[d] for m in modes)
    assert sorted((r["dtype"], r["count"], r["inplace"]) for r in rows) == want
    assert {(r["collective"], r["nranks"]) for r in rows} == {(command, nranks)}
    factor = 1.0 if command == "broadcast" else (nranks - 1) / nranks
    for r in rows:
        assert math.isclose(r["busbw_gbs"], r["algbw_gbs"] * factor)
        if command != "broadcast":  # size is the total buffer: N blocks of count elements
            assert r["size_bytes"] == r["count"] * nranks * C.DTYPE_SIZE[r["dtype"]]


def test_single_rank_says_why_busbw_is_zero(tmp_path):
    out = tmp_path / "a.json"
    p = run_cli("allreduce", "-b", "8", "-e", "64K", "-f", "8", "--algo", "all", "-n", "2", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "busbw is 0" in p.stdout
    rows = _json_rows(out)
    _all_correct(rows, 2)
    assert all(r["busbw_gbs"] == 0 for r in rows)


def test_fit_cli_two_ranks(tmp_path):
    out = tmp_path / "f.json"
    p = run_cli("allreduce", "-b", "64K", "-e", "4M", "-f", "4", "--algo", "library,ring", "--fit", "-n", "5",
                "-w", "1", "--mode", "in", "--json", str(out), nranks=2)
    assert p.returncode == 0, p.stderr
    assert "alpha-beta fit" in p.stdout and "predicted vs measured" in p.stdout
    doc = json.loads(out.read_text())
    fits = doc["summary"]["fit"]
    assert {f["algo"] for f in fits} == {"library", "ring"}
    for f in fits:
        assert f["gamma_us_per_byte"] > 0 and f["nranks"] == 2
        assert [pt["size_bytes"] for pt in f["points"]] == [65536, 262144, 1048576, 4194304]
        # the points it fitted are the run's own in-place rows of that algorithm
        times = {r["size_bytes"]: r["time_us"] for r in doc["rows"] if r["algo"] == f["algo"] and r["inplace"]}
        assert {pt["size_bytes"]: pt["measured_us"] for pt in f["points"]} == pytest.approx(times, rel=1e-9)
        # the fit is the library's of those points, and holds together; timed on a loaded machine,
        # a regime may be flat (beta 0); two regimes of two sizes each keep every error under 1
        check_fit(f, loaded=True)


@pytest.mark.parametrize("algo", ["library", "ring", "rd", "tree", "ps"])
@pytest.mark.parametrize("nranks", [2, 3, 4, 5, 8])
def test_fit_recovers_the_model(algo, nranks):
    rng = np.random.default_rng(nranks)
    alpha, beta, gamma, servers = 3.0, 4e-4, 1e-4, max(1, nranks // 2)
    sizes = [2**k for k in range(3, 27)]
    a, b, g = costmodel.coefficients(algo, nranks, servers)
    truth = [a * alpha + m * (b * beta + g * gamma) for m in sizes]
    noisy = [t * (1 + 0.03 * rng.standard_normal()) for t in truth]
    # gamma held at its separately measured value: alpha and beta come back
    fit = C.fit_alpha_beta(sizes, noisy, algo, nranks, servers=servers, gamma_us_per_byte=gamma)
    assert fit.median_rel_error(65536) <= 0.10
    assert fit.alpha_us == pytest.approx(alpha, rel=0.15)
    assert fit.beta_us_per_byte == pytest.approx(beta, rel=0.05)
    assert fit.predict_us(2**20) == pytest.approx(a * alpha + 2**20 * (b * beta + g * gamma), rel=0.05)
    # gamma not separated: beta absorbs it, the prediction stays as good
    fit2 = C.fit_alpha_beta(sizes, noisy, algo, nranks, servers=servers)
    assert fit2.gamma_us_per_byte is None and fit2.median_rel_error(65536) <= 0.10
    d = fit2.to_dict()
    assert {"alpha_us", "beta_us_per_byte", "gamma_us_per_byte", "points", "formula"} <= set(d)


def test_fit_rejects_bad_input():
    with pytest.raises(UsageError):
        C.fit_alpha_beta([8], [1.0], "ring", 2)
    with pytest.raises(UsageError):
        C.fit_alpha_beta([8, 16], [1.0, 2.0], "ring", 1)
    with pytest.raises(UsageError):
        C.fit_alpha_beta([8, 16], [1.0, 2.0], "bogus", 2)
    with pytest.raises(UsageError):
        C.fit_alpha_beta([8, 16], [1.0, -2.0], "ring", 2)


API_CODE = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    import gdlbench.primitives.collectives as C
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(comm.rank)
    for algo in C.ALGOS:
        for count in (1, 3, 1001, 70000):
            x = rng.standard_normal(count)  # arbitrary values: every rank must end with MPI's sum
            ref = np.empty_like(x)
            comm.Allreduce(x, ref)
            y = C.allreduce_array(x.copy(), "sum", algo, servers=comm.size)
            assert np.allclose(y, ref, rtol=1e-12, atol=1e-12), (algo, count)
            same = comm.gather(y, root=0)  # and every rank must hold the same bits
            if comm.rank == 0:
                assert all(np.array_equal(same[0], s) for s in same), algo
    res = C.allreduce([8, "64K"], "float32", "max", "rd", "mpi", iters=3, warmup=1, check=1)
    assert len(res) == 4 and all(r.wrong == 0 for r in res)
    d = res[-1].to_dict()
    assert d["size_bytes"] == 65536 and len(d["samples_us"]) == 3 and d["op"] == "max"
    assert C.broadcast(100, "int32", root=comm.size - 1)[0].wrong == 0
    if comm.rank == 0:
        print("api ok")
""")


@pytest.mark.parametrize("nranks", [3])
def test_python_api(nranks):
    p = run_mpi(nranks, sys.executable, "-c", API_CODE)
    assert p.returncode == 0, p.stderr
    assert "api ok" in p.stdout


# run_started_together: ranks 0 and 1 time an all-reduce on their own sub-communicator, every call
# started by a barrier on the whole one; rank 2, in no sub-communicator, joins the barriers only,
# late by 0.5 s, which must hold the others' first call back (a barrier on the sub-communicator
# alone would not wait for it).
TOGETHER_CODE = textwrap.dedent("""
    import time
    from gdlbench.primitives import collectives as C
    from gdlbench._native import MPI
    world = MPI.COMM_WORLD
    sub = world.Split(0 if world.rank < 2 else MPI.UNDEFINED, world.rank)
    if world.rank == 2:
        time.sleep(0.5)
    t0 = time.monotonic()
    r = C.run_started_together("allreduce", 1 << 20, algo="ring", inplace=True, iters=4, warmup=2,
                               comm=sub, start_on=world)
    waited = time.monotonic() - t0
    if world.rank == 2:
        assert r is None
    else:
        assert r.nranks == 2 and r.wrong == 0 and len(r.measurement.samples_us) == 4, r
        assert waited >= 0.4, waited
    print("together ok", world.rank)
""")


@pytest.mark.parametrize("collective, extra", [("allreduce", {"algo": "ring", "op": "max", "inplace": True}),
                                               ("broadcast", {"root": 0}), ("allgather", {}),
                                               ("reduce_scatter", {"inplace": True, "on": "comm-thread"})])
def test_request_is_checked_once_carried_and_reproduced(tmp_path, collective, extra):
    """A CollectiveRequest is checked when made, rides on its result, and to_argv() is the
    command that times the same row again."""
    with pytest.raises(UsageError, match="dtype"):
        C.CollectiveRequest(collective, 4096, "float13")
    with pytest.raises(UsageError, match="iters"):
        C.CollectiveRequest(collective, 4096, iters=0)
    req = C.CollectiveRequest(collective, 4096, "float64", iters=3, warmup=1, **extra)
    assert req.op == (extra.get("op", "sum") if C.kind(collective).reduces else None)
    assert req.inplace or collective == "allgather"
    r = C.run(req)
    assert r.request == req and r.wrong == 0
    out = tmp_path / "again.json"
    p = run_cli(*req.to_argv(), "--json", str(out))
    assert p.returncode == 0, (req.to_argv(), p.stderr)
    (row,) = json.loads(out.read_text())["rows"]
    for key in ("collective", "size_bytes", "dtype", "op", "algo", "backend", "inplace", "on"):
        assert row[key] == r.to_dict()[key], key
    assert len(row["samples_us"]) == req.iters and r.on == req.on == extra.get("on", "main")


def test_run_started_together_waits_for_the_whole_communicator():
    p = run_mpi(3, sys.executable, "-c", TOGETHER_CODE)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("together ok") == 3


# A rank that dies or hangs mid-sweep: the test's own code makes rank 1 kill or stop itself while
# the real CLI sweeps; the others must exit non-zero within --timeout (never hang).
DIE_CODE = textwrap.dedent("""
    import os, signal, sys, threading
    from mpi4py import MPI
    from gdlbench import cli
    how = sys.argv[1]
    if MPI.COMM_WORLD.rank == 1:
        sig = signal.SIGKILL if how == "kill" else signal.SIGSTOP
        threading.Timer(1.5, lambda: os.kill(os.getpid(), sig)).start()
    sys.exit(cli.main(["allreduce", "-b", "8", "-e", "16M", "-f", "2", "-n", "200", "-w", "1",
                       "--timeout", "4"]))
""")


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_dead_or_hung_rank_ends_the_job(how):
    start = time.monotonic()
    p = run_mpi(2, sys.executable, "-c", DIE_CODE, how, timeout=60)
    elapsed = time.monotonic() - start
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert elapsed < 1.5 + 4 + 10, elapsed  # the timer, --timeout, and start-up/teardown slack
    if how == "stop":  # only the watchdog can end this one: the stopped rank never exits by itself
        assert "made no progress for 4 s" in p.stderr, p.stderr


def test_launcher_mismatch_warns():
    env = mpi_env()
    env["PMI_SIZE"] = "4"  # a launcher said 4 processes, but this is a 1-rank world
    p = subprocess.run([*GDLBENCH_CMD, "allreduce", "--size", "8", "-n", "2"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=NEUTRAL_CWD)
    assert p.returncode == 0, p.stderr
    assert "WARNING" in p.stderr and "PMI_SIZE=4" in p.stderr and "1 rank" in p.stderr


BAD = [
    (["allreduce", "--algo", "foo"], "--algo"),
    (["allreduce", "-d", "int7"], "--dtype"),
    (["allreduce", "-o", "avg"], "--op"),
    (["allreduce", "--algo", "ps", "--servers", "5"], "--servers"),
    (["allreduce", "-b", "64M", "-e", "8"], "smaller"),
    (["allreduce", "--size", "0"], "positive"),
    (["allreduce", "--size", "12XB"], "unit"),
    (["allreduce", "--size", "8", "-b", "8"], "not both"),
    (["allreduce", "-f", "0.5"], "--step-factor"),
    (["allreduce", "--backend", "nccl"], "nccl"),
    (["allreduce", "--backend", "mpich"], "--backend"),
    (["allreduce", "--timeout", "-1"], "--timeout"),
    (["allreduce", "-c", "-1"], "--check"),
    (["allreduce", "--fit", "--size", "8"], "two sizes"),
    (["allreduce", "-n", "0"], "iters"),
    (["broadcast", "--root", "7"], "--root"),
    (["reduce_scatter", "--algo", "ring"], "unrecognized"),
    (["allreduce", "--size", "2T"], "1 TiB"),
    (["allreduce", "--json", "/nonexistent-dir/x.json"], "does not exist"),
]


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_one_line_exit_2(argv, message):
    p = run_cli(*argv)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("argv, message", [
    (["allreduce", "--algo", "ps", "--servers", "3"], "--servers"),  # 3 servers of 2 ranks
    (["broadcast", "--root", "2"], "--root"),
    (["allreduce", "-d", "int7"], "--dtype"),
    (["allreduce", "--size", "900G"], "host memory"),
])
def test_bad_input_under_mpiexec_is_the_same_on_every_rank(argv, message):
    p = run_cli(*argv, nranks=2, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr  # rank 0 alone says it, once


def test_huge_size_is_refused_before_allocating():
    p = run_cli("allreduce", "--size", "900G", "-n", "1")
    assert p.returncode == 2 and "host memory" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def _ns(**kw) -> argparse.Namespace:
    base = {"size": None, "min_bytes": None, "max_bytes": None, "step_factor": 1.0, "step_bytes": "1M"}
    return argparse.Namespace(**(base | kw))


def test_sweep_sizes_like_nccl_tests():
    assert sweep_sizes(_ns()) == [32 * 2**20]
    x4 = sweep_sizes(_ns(min_bytes="8", max_bytes="64M", step_factor=4.0))
    assert x4[0] == 8 and x4[-1] == 32 * 2**20 and len(x4) == 12  # 8 * 4^12 > 64M, as in nccl-tests
    assert sweep_sizes(_ns(min_bytes="1M", max_bytes="3M")) == [2**20, 2 * 2**20, 3 * 2**20]
    assert sweep_sizes(_ns(size="8,4K,100MB")) == [8, 4096, 100_000_000]


@pytest.mark.parametrize("largest", [0, 1, 151 << 20, 256 << 20, (256 << 20) + 1, 553_430_176])
def test_fit_sweep_for_messages_reaches_the_largest_message(largest):
    argv = C.fit_sweep_for_messages(largest)
    opts = dict(zip(argv[::2], argv[1::2], strict=True))
    assert opts["--mode"] == "in" and opts["--rotate"] == opts["-e"]  # in place, each size from memory
    sizes = sweep_sizes(_ns(min_bytes=opts["-b"], max_bytes=opts["-e"], step_factor=float(opts["-f"])))
    assert sizes[-1] >= max(largest, 256 << 20) > sizes[-2]  # no message beyond the sweep, no size more
    assert sizes[-1] == int(opts["-e"])


@settings(max_examples=200, deadline=None)
@given(lo=st.text(max_size=8), hi=st.text(max_size=8), f=st.floats(allow_nan=True))
@example(lo="20", hi="20", f=8.98846567431158e306)  # 20 x f overflows to inf: once an OverflowError
def test_sweep_sizes_fuzz(lo, hi, f):
    try:
        sizes = sweep_sizes(_ns(min_bytes=lo, max_bytes=hi, step_factor=f))
    except UsageError:
        return
    assert sizes and all(s > 0 for s in sizes) and sizes == sorted(sizes)


def test_mpiexec_is_the_venvs():
    """The tests launch the mpiexec of the venv that runs them (the mpich wheel's), not whichever
    one PATH finds first: the same MPI as the mpi4py and the gdlbench they import."""
    venv_bin = Path(sys.executable).parent
    assert MPIEXEC == venv_bin / "mpiexec" and MPIEXEC.is_file(), (MPIEXEC, venv_bin)
    assert Path(sys.prefix) != Path(sys.base_prefix), "the tests are not running in a venv"
    p = subprocess.run([str(MPIEXEC), "--version"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "HYDRA" in p.stdout, p.stdout + p.stderr  # the mpich wheel's launcher


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("command", ["allreduce", "reduce_scatter", "allgather", "broadcast"])
def test_nccl_one_rank_exact(tmp_path, command):
    out = tmp_path / "n.json"
    ops = ["-o", "all"] if command in ("allreduce", "reduce_scatter") else []
    p = run_cli(command, "--backend", "nccl", "-b", "8", "-e", "64M", "-f", "8", "-d", "all", *ops, "-c", "1",
                "-n", "5", "--json", str(out))
    assert p.returncode == 0, p.stderr
    rows = _json_rows(out)
    _all_correct(rows, 5)
    assert {r["backend"] for r in rows} == {"nccl"}


def test_fit_min_bytes_leaves_out_small_sizes():
    sizes = [8, 64, 512, 65536, 2**20, 2**24]
    a, b, _ = costmodel.coefficients("ring", 2)
    times = [50.0, 50.0, 50.0] + [a * 2.0 + m * b * 1e-3 for m in sizes[3:]]  # a latency floor below 64K
    fit = C.fit_alpha_beta(sizes, times, "ring", 2, min_bytes=65536)
    assert fit.median_rel_error(65536) < 1e-6 and fit.fit_min_bytes == 65536
    assert len(fit.rel_errors()) == len(sizes)  # errors reported for every size
    with pytest.raises(UsageError):
        C.fit_alpha_beta(sizes, times, "ring", 2, min_bytes=2**25)


def test_wrong_elements_fail_the_run(monkeypatch, capsys, tmp_path):
    """A row with wrong elements: the table says FAILED, the JSON is still written, exit 1."""
    from gdlbench import cli
    from gdlbench.cli.commands import allreduce as cmd

    real = C.run_one

    def corrupt(*args, **kwargs):
        r = real(*args, **kwargs)
        r.wrong = 5
        return r

    monkeypatch.setattr(cmd.C, "run_one", corrupt)
    out = tmp_path / "w.json"
    code = cli.main(["allreduce", "--size", "64", "-n", "2", "--json", str(out)])
    assert code == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "wrong elements" in captured.err
    assert all(r["wrong"] == 5 for r in json.loads(out.read_text())["rows"])


def test_piecewise_fit_recovers_each_regime_and_the_model_reads_it():
    from gdlbench.model.phases import CommModel
    from gdlbench.primitives.collectives import fit_alpha_beta

    sizes = [2**i for i in range(3, 27)]
    # latency-bound, in-cache (fast link) and memory-bound (slow link) regimes, ring formula at N=2
    truth = [(0, 3.0, 1e-4), (16384, 10.0, 1.2e-4), (8 * 2**20, 50.0, 3e-4)]

    def t(m):
        a, b = [(a, b) for start, a, b in truth if m >= start][-1]
        return 2 * a + m * b  # ring, N = 2: 2(N-1) alpha + 2(N-1)/N m beta

    fit = fit_alpha_beta(sizes, [t(m) for m in sizes], "ring", 2, regimes=3)
    assert [r[0] for r in fit.regimes] == [0, 16384, 8 * 2**20]
    for (_, a, b), (_, a2, b2) in zip(truth, fit.regimes, strict=True):
        assert a2 == pytest.approx(a, rel=1e-6) and b2 == pytest.approx(b, rel=1e-6)
    assert fit.median_rel_error(65536) < 1e-9
    one_line = fit_alpha_beta(sizes, [t(m) for m in sizes], "ring", 2)
    assert one_line.median_rel_error(65536) > 0.05  # one line cannot follow the knee
    model = CommModel.from_dict(fit.to_dict())
    for m in (64, 65536, 2**25):
        assert model.predict_us(m, 2) == pytest.approx(fit.predict_us(m), rel=1e-9)


def test_algorithms_a_backend_lacks_are_waived(monkeypatch, capsys, tmp_path):
    """--algo all on NCCL: the library rows run, the other algorithms are listed as waived rows with
    the reason and no time. (No GPU here: the NCCL rows are run on MPI; the plan is what is tested.)"""
    from gdlbench import cli
    from gdlbench.cli.commands import allreduce as cmd

    real = C.run_one
    monkeypatch.setattr(cmd.C, "resolve_backend", lambda backend, device: ("nccl", "test"))
    monkeypatch.setattr(cmd.C, "run_one", lambda coll, size, dtype, op, algo, backend, *a, **kw:
                        real(coll, size, dtype, op, algo, "mpi", *a, **kw))
    out = tmp_path / "w.json"
    assert cli.main(["allreduce", "--size", "64", "--algo", "all", "-n", "2", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(out.read_text())
    timed = [r for r in doc["rows"] if "waived" not in r]
    waived = [r for r in doc["rows"] if "waived" in r]
    assert {r["algo"] for r in timed} == {"library"} and len(timed) == 2  # out of place and in place
    assert {r["algo"] for r in waived} == {"ring", "rd", "tree", "ps", "hier"}
    assert all("nccl has no algorithm" in r["waived"] and "time_us" not in r for r in waived)
    assert doc["summary"]["rows_waived"] == 5
    assert "ring (waived)" in captured.out and "waived (not run): nccl has no algorithm ring" in captured.out
    # asking only for what the backend lacks runs nothing: a usage error
    assert cli.main(["allreduce", "--size", "64", "--algo", "ring", "-n", "2"]) == 2
    assert "nothing to run" in capsys.readouterr().err


def test_collective_descriptions_drive_the_cli():
    """The descriptions: sizes, bus factors and cost entries come from COLLECTIVES, which is the
    native harness's own table (csrc/comm/collective.h) read through _core, not a twin of it."""
    from gdlbench._native import _core

    assert [d["name"] for d in _core.collectives()] == list(C.COLLECTIVES)
    assert C.ALGOS == tuple(a["name"] for a in _core.algorithms()) == C.kind("allreduce").algos
    assert C.SERVER_ALGOS == ("ps",) and C.kind("broadcast").algos == ("library",)
    assert [k.size_is_total for k in C.COLLECTIVES.values()] == [False, True, True, False]
    assert [k.host_buffers for k in C.COLLECTIVES.values()] == [3, 2, 2, 1]
    assert [k.fits for k in C.COLLECTIVES.values()] == [True, True, True, False]  # rs, ag: their fits price the sharded strategies
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        _core.bus_factor("allreduce", 0)
    assert C.element_count("allgather", 1000, "float32", 4) == (62, 992)  # whole blocks of N
    assert C.element_count("allreduce", 1000, "float32", 4) == (250, 1000)
    assert [C.bus_factor(c, 4) for c in C.COLLECTIVES] == [1.5, 0.75, 0.75, 1.0]
    assert C.bus_factor("allreduce", 1) == 0.0
    for k in C.COLLECTIVES.values():
        for algo in k.algos:
            assert costmodel.known(k.cost_name(algo)), (k.name, algo)
    with pytest.raises(UsageError, match="unknown collective"):
        C.kind("alltoall")


def test_per_communicator_state_is_not_keyed_by_the_handle():
    """Per-communicator native state (the NCCL communicators; here the serial that shares their
    mechanism) lives in an MPI attribute, freed with the communicator: MPICH hands a freed handle
    out again, and the new communicator must not find the old one's state."""
    from gdlbench._native import MPI, _core

    a = MPI.COMM_WORLD.Dup()
    first = _core.comm_serial(a)
    assert _core.comm_serial(a) == first  # cached while it lives
    handle = MPI._handleof(a)
    a.Free()
    b = MPI.COMM_WORLD.Dup()
    try:
        assert _core.comm_serial(b) != first
        if MPI._handleof(b) == handle:  # the reuse that a handle-keyed cache would get wrong
            assert _core.comm_serial(b) != first
    finally:
        b.Free()


def test_on_is_checked():
    """--on names a thread, and the comm thread is MPI's (gloo and NCCL run on the calling thread)."""
    with pytest.raises(UsageError, match="--on: expected main or comm-thread"):
        C.CollectiveRequest("reduce_scatter", 4096, on="thread")
    with pytest.raises(UsageError, match="--on comm-thread: MPI only"):
        C.CollectiveRequest("allreduce", 4096, backend="gloo", on="comm-thread")
    p = run_cli("allreduce", "--size", "4K", "--backend", "gloo", "--on", "comm-thread")
    assert p.returncode == 2 and "--on comm-thread: MPI only" in p.stderr, p.stderr


# MPICH's in-place reduce-scatter of 192 MiB on 2 ranks takes a 96 MiB temporary, over the 64 MiB a
# thread arena's heap holds: on a comm thread glibc maps it afresh on every call (as inside the
# composed iteration), on the main thread its heap keeps it (keep_freed_memory) after the first.
ARENA_CODE = textwrap.dedent("""
    import resource
    from gdlbench._native import _core
    from gdlbench.common import env
    from gdlbench.primitives import collectives as C
    _core.keep_freed_memory(1 << 30)
    for on in ("main", "comm-thread", "main"):  # each row: 1 warm-up, 2 timed calls, 1 check
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        r = C.run_one("reduce_scatter", 192 << 20, inplace=True, iters=2, warmup=1, check=1, on=on)
        faults = env.world().gather(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0, root=0)
        if env.rank() == 0:
            for rank, n in enumerate(faults):
                print(rank, on, n, r.wrong, r.on, flush=True)
""")


def test_comm_thread_pays_the_thread_arenas_page_faults():
    """The option is not ignored: on a comm thread every call faults MPICH's temporary in (each
    of 4 calls at least 90 % of its 96 MiB in 4 KiB pages); back on the main thread, after the
    first row kept it, almost none. The exact check passes on both."""
    p = run_mpi(2, sys.executable, "-c", ARENA_CODE, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [line.split() for line in p.stdout.splitlines()]
    temp_pages = (96 << 20) // 4096
    for rank in ("0", "1"):  # each rank prints its three rows in order
        mine = [row[1:] for row in rows if row[0] == rank]
        faults = {(on, i): int(n) for i, (on, n, wrong, got) in enumerate(mine) if wrong == "0" and got == on}
        assert len(faults) == 3, p.stdout
        assert faults["comm-thread", 1] >= 4 * 0.9 * temp_pages, p.stdout
        assert faults["main", 2] < 0.05 * temp_pages, p.stdout


def test_fit_records_where_it_was_timed_and_predict_says_so(tmp_path):
    """`reduce_scatter --fit --on comm-thread` records the thread in each row, in its fit and in
    the notes; predict's statement of the price names it; the default stays the main thread."""
    from gdlbench.model.phases import CommModel, sharded_pricing

    docs = {}
    for on in ("main", "comm-thread"):
        out = tmp_path / f"rs-{on}.json"
        p = run_cli("reduce_scatter", "-b", "64K", "-e", "1M", "-f", "4", "--mode", "in", "--fit", "-n", "3",
                    "-w", "1", "--on", on, "--json", str(out), nranks=2)
        assert p.returncode == 0, p.stderr
        docs[on] = json.loads(out.read_text())
        assert {r["on"] for r in docs[on]["rows"]} == {on} and docs[on]["summary"]["fit"][0]["on"] == on
        model = CommModel("library", 10.0, 1e-4).with_fits(CommModel.from_dict(docs[on], source=str(out)))
        assert model.fit_for("reduce_scatter").timed_on == on
        how = sharded_pricing(model, "reduce_scatter")
        assert ("timed on a communication thread" in how) == (on == "comm-thread"), how
    assert any("--on comm-thread" in n for n in docs["comm-thread"]["notes"])
    assert not any("--on comm-thread" in n for n in docs["main"]["notes"])
