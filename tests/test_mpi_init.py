"""MPI initialisation: the thread level each command asks for, the user's choice, a program's own MPI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import GDLBENCH_CMD, MPIEXEC, NEUTRAL_CWD, mpi_env, run_cli, run_mpi

CHECKOUT = Path(__file__).resolve().parents[1]


def _env_json(tmp_path, *extra: str, env: dict | None = None) -> dict:
    out = tmp_path / "env.json"
    p = subprocess.run([*GDLBENCH_CMD, "env", "--json", str(out), *extra], capture_output=True, text=True,
                       timeout=120, env=env or mpi_env(), cwd=NEUTRAL_CWD)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())["env"]


def test_default_is_the_least_the_command_needs(tmp_path):
    env = _env_json(tmp_path)
    assert env["mpi_thread_level"] == "funneled", env
    assert "least" in env["mpi_thread_level_how"]


@pytest.mark.parametrize("level", ["single", "serialized", "multiple"])
def test_option_sets_the_level(tmp_path, level):
    env = _env_json(tmp_path, "--mpi-thread-level", level)
    assert env["mpi_thread_level"] == level and "--mpi-thread-level" in env["mpi_thread_level_how"]


def test_environment_variable_sets_the_level(tmp_path):
    env = _env_json(tmp_path, env={**mpi_env(), "GDLBENCH_MPI_THREAD_LEVEL": "multiple"})
    assert env["mpi_thread_level"] == "multiple" and "GDLBENCH_MPI_THREAD_LEVEL" in env["mpi_thread_level_how"]


def test_bad_environment_variable_is_one_line_exit_2():
    p = subprocess.run([*GDLBENCH_CMD, "env"], capture_output=True, text=True, timeout=120,
                       env={**mpi_env(), "GDLBENCH_MPI_THREAD_LEVEL": "lots"}, cwd=NEUTRAL_CWD)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "GDLBENCH_MPI_THREAD_LEVEL" in p.stderr and "Traceback" not in p.stderr


def test_iteration_refuses_a_level_its_communication_thread_cannot_use():
    p = run_cli("iteration", "--net", "alexnet", "--batch", "1", "--no-io", "--mpi-thread-level", "funneled")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "serialized" in lines[0] and "communication thread" in lines[0], p.stderr


def test_allreduce_json_carries_the_level_on_two_ranks(tmp_path):
    out = tmp_path / "a.json"
    p = run_cli("allreduce", "--size", "8", "-n", "5", "--json", str(out), nranks=2)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["env"]["mpi_thread_level"] == "funneled" and doc["env"]["world_size"] == 2


# A program that initialised MPI itself: gdlbench keeps its level and says so.
EMBED = textwrap.dedent("""
    import sys
    import mpi4py
    if sys.argv[1] != "default":
        mpi4py.rc.thread_level = sys.argv[1]
    from mpi4py import MPI
    import gdlbench
    from gdlbench.primitives import collectives
    from gdlbench.common import env
    from gdlbench._native import init_mpi
    rows = collectives.allreduce([8, 4096], iters=3, warmup=1, inplace=True)
    assert all(r.wrong == 0 for r in rows)
    state = init_mpi("single")  # too late to choose: MPI runs already
    info = env.collect()
    if MPI.COMM_WORLD.rank == 0:
        print(state.level, info["mpi_thread_level"], state.requested, "|", state.how)
""")


@pytest.mark.parametrize("level, expected", [("default", "multiple"), ("funneled", "funneled")])
def test_a_program_that_initialised_mpi_keeps_its_level(level, expected):
    p = run_mpi(2, sys.executable, "-c", EMBED, level)
    assert p.returncode == 0, p.stderr
    got, reported, requested, how = p.stdout.replace("|", " ").split(maxsplit=3)
    assert (got, reported, requested) == (expected, expected, "None"), p.stdout
    assert "already initialised" in how


def test_library_default_is_serialized():
    """Imported by a program, gdlbench initialises MPI at once (the program may call mpi4py next)."""
    code = "import gdlbench; from mpi4py import MPI; print(MPI.COMM_WORLD.Get_size(), gdlbench.init_mpi().level)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=mpi_env(), cwd=NEUTRAL_CWD)
    assert p.returncode == 0 and p.stdout.split() == ["1", "serialized"], p.stderr


# The watchdog under each thread level: with MULTIPLE it calls MPI_Abort; below, it may not call
# MPI from its own thread, so it exits its process and the launcher ends the others.
STOP = textwrap.dedent("""
    import os, signal, sys, threading
    from gdlbench._native import MPI
    from gdlbench import cli
    if MPI.COMM_WORLD.rank == 1:
        threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
    sys.exit(cli.main(["allreduce", "-b", "8", "-e", "16M", "-f", "2", "-n", "200", "-w", "1", "--timeout", "4"]))
""")


@pytest.mark.parametrize("level", ["funneled", "multiple"])
def test_watchdog_ends_a_hung_job_at_any_level(level, tmp_path):
    start = time.monotonic()
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        job = subprocess.Popen([str(MPIEXEC), "-n", "2", sys.executable, "-c", STOP], stdout=subprocess.DEVNULL,
                               stderr=f, text=True, env={**mpi_env(), "GDLBENCH_MPI_THREAD_LEVEL": level},
                               cwd=NEUTRAL_CWD, start_new_session=True)
        try:
            rc = job.wait(timeout=60)
        except subprocess.TimeoutExpired:  # say which process still stands (failed once in CI, not here)
            tree = subprocess.run(["ps", "-o", "pid,ppid,stat,etime,args", "--sid", str(job.pid)],
                                  capture_output=True, text=True).stdout
            os.killpg(job.pid, 9)
            job.wait()
            pytest.fail(f"the job still ran after 60 s; stderr: {err.read_text()!r}; processes:\n{tree}")
    assert rc != 0, err.read_text()
    assert "made no progress for 4 s" in err.read_text(), err.read_text()
    assert time.monotonic() - start < 1.5 + 4 + 10


def test_python_m_gdlbench_from_the_checkout_root():
    """Python puts the current directory first: from the checkout's root it finds the source
    folder, which has no built native module. The command must still work."""
    p = subprocess.run([sys.executable, "-m", "gdlbench", "env"], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in mpi_env().items() if k != "PYTHONPATH"}, cwd=CHECKOUT)
    assert p.returncode == 0, p.stderr
    assert "mpi_thread_level" in p.stdout and "Traceback" not in p.stderr


def test_checkout_without_an_installed_copy_says_what_to_do(tmp_path):
    """A checkout whose package is found by nothing else: one line naming `pip install .`."""
    fake = tmp_path / "checkout"
    (fake / "gdlbench").mkdir(parents=True)
    src = CHECKOUT / "gdlbench"
    for name in ("__init__.py", "_checkout.py", "__main__.py"):
        (fake / "gdlbench" / name).write_text((src / name).read_text())
    env = {**mpi_env(), "PYTHONNOUSERSITE": "1"}
    p = subprocess.run([sys.executable, "-S", "-m", "gdlbench", "env"], capture_output=True, text=True,
                       timeout=60, env=env, cwd=fake)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install ." in lines[0], p.stderr
    assert os.path.exists(fake / "gdlbench" / "__init__.py")


# How MPI waits: MPICH yields where the node's ranks' threads outnumber its cores (gdlbench.common.env).
def _iteration_env(tmp_path, threads: int, extra_env: dict | None = None) -> tuple[dict, str]:
    out = tmp_path / "it.json"
    cmd = [str(MPIEXEC), "-n", "2", *GDLBENCH_CMD, "iteration", "--net", str(CHECKOUT / "tests/data/convnet.json"),
           "--strategy", "wfbp", "--iters", "2", "--warmup", "1", "--no-io", "--threads", str(threads),
           "--json", str(out), "--full"]  # --full: the MPI line is among every table's notes
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**mpi_env(), **(extra_env or {})},
                       cwd=NEUTRAL_CWD)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())["env"], p.stdout


def test_mpich_yields_where_the_threads_outnumber_the_cores(tmp_path):
    cores = len(os.sched_getaffinity(0))
    env, stdout = _iteration_env(tmp_path, cores)  # 2 ranks x (cores compute + 1 communication thread)
    if "MPICH" not in env["mpi"]:
        pytest.skip(f"MPICH's progress throttle only: the MPI library is {env['mpi']}")
    assert env["mpi_wait"].startswith("MPICH yields") and f"on {cores} cores" in env["mpi_wait"], env["mpi_wait"]
    assert "MPI: MPICH yields while it waits" in stdout, stdout
    # a throttle the user set is left as it is, and said so
    env, _ = _iteration_env(tmp_path, cores, {"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "0"})
    assert "as the environment sets it" in env["mpi_wait"] and "THROTTLE=0" in env["mpi_wait"], env["mpi_wait"]


def test_one_rank_spins(tmp_path):
    out = tmp_path / "a.json"
    p = run_cli("allreduce", "--size", "8", "-n", "3", "--json", str(out))
    assert p.returncode == 0, p.stderr
    env = json.loads(out.read_text())["env"]
    assert env["mpi_wait"] == ("MPICH spins while it waits (its default)" if "MPICH" in env["mpi"]
                               else "the MPI library's default"), env
