"""Hostile input to every command: each numeric, size, list and path argument driven with values
no run can use (huge, negative, NaN, inf, empty, unicode, directories, devices, unwritable
paths). Every one must end in exit 2, one line on stderr, no traceback, and no output file,
whole or partial. In-process (gdlbench.cli.main is the whole CLI), one rank, so it stays fast."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import tempfile
from pathlib import Path

import pytest
from helpers import run_cli

from gdlbench.cli import main
from gdlbench.model.phases import Phases

HUGE = ["1000000000000", "9223372036854775808", "1" + "0" * 60]
NOT_A_NUMBER = ["nan", "inf", "-inf", "", " ", "1e400", "①", "x", "٣٣٣٣٣٣٣٣٣٣٣٣٣٣"]
HOSTILE = {
    "count": ["0", "-1", "-1000000000", *HUGE, *NOT_A_NUMBER],         # integers >= 1
    "nonneg": ["-1", "-1000000000", *HUGE, *NOT_A_NUMBER],             # integers >= 0
    "float": ["nan", "inf", "-inf", "-1", "1e400", "", "x", "1,5"],   # finite numbers >= 0
    "size": ["0", "-1", "1e30", "nan", "inf", "", "12XB", "2T", "9" * 40, "١٢MB", "4K,", ",", "8,-8"],
    "list": ["", ",", ",,", "x,y", "-1,2", "0", "9" * 30, "ü", "all,"],
    "path_in": ["/dev/null", "/dev/zero", "/proc", "/", "/nonexistent/ü.json", "", "{dir}", "{file}"],
    "path_out": ["/proc/x.json", "/", "/dev/null", "/nonexistent/d/x.json", "", "{out}", "/sys/x.json",
                 "/proc/self/ünï.json"],
    "seed": ["-1", "1" + "0" * 60, str(2**64), *NOT_A_NUMBER[:-1]],  # 0 <= seed < 2**63
    "dir": ["/proc", "/sys/kernel", "/dev/null", "/dev/zero", "{file}", "/proc/self/x"],
}
RANDOM_KINDS = ("count", "nonneg", "float", "size", "size0", "list", "list0", "seed")

QUICK = ["--iters", "1", "--warmup", "0"]
OUT = ["--json", "{out}/r.json", "--csv", "{out}/r.csv"]
# command -> (a valid, quick argv that the hostile option is appended to; {option: kind})
COMMANDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "allreduce": (["allreduce", "--size", "8", "--check", "0", *QUICK, *OUT],
                  {"--size": "size", "--iters": "count", "--warmup": "nonneg", "--check": "nonneg",
                   "--dtype": "list", "--op": "list", "--algo": "list", "--servers": "count",
                   "--fit-regimes": "count", "--fit-min": "size0", "--rotate": "size0", "--timeout": "float",
                   "--threads": "count", "--step-factor": "float", "--json": "path_out", "--csv": "path_out"}),
    "reduce_scatter": (["reduce_scatter", "--size", "8", *QUICK, *OUT], {"--size": "size", "--dtype": "list"}),
    "allgather": (["allgather", "--size", "8", *QUICK, *OUT], {"--size": "size", "--iters": "count"}),
    "broadcast": (["broadcast", "--size", "8", *QUICK, *OUT], {"--size": "size", "--root": "nonneg"}),
    "gemm": (["gemm", "-m", "4", "-n", "4", "-k", "4", "--device", "cpu", *QUICK, *OUT],
             {"-m": "count", "-k": "count", "--shapes": "list", "--sweep": "list", "--dtype": "list",
              "--seed": "seed", "--threads": "count", "--iters": "count", "--json": "path_out"}),
    "conv": (["conv", "--batch", "1", "-c", "1", "-h", "4", "-w", "4", "-k", "1", "-r", "1", "-s", "1",
              "--pass", "fwd", "--device", "cpu", "--iters", "1", "--warmup", "0", *OUT],
             {"--batch": "count", "-c": "count", "-k": "count", "-r": "count", "--stride": "list", "--pad": "list0",
              "--dilation": "list", "--groups": "count", "--workspace-limit": "size0", "--layer": "list",
              "--json": "path_out"}),
    "copy": (["copy", "--size", "4K", "--copies", "1", "--device", "cpu", *QUICK, *OUT],
             {"--size": "size", "--copies": "count", "--direction": "list", "--memory": "list"}),
    "io": (["io", "--dir", "{dir}/ds", "--images", "2", "--batch", "1", "--size", "8x8", *QUICK, *OUT],
           {"--dir": "dir", "--images": "count", "--batch": "count", "--size": "list", "--threads": "count"}),
    "update": (["update", "--params", "1K", "--device", "cpu", *QUICK, *OUT],
               {"--params": "size", "--lr": "float", "--momentum": "float", "--weight-decay": "float"}),
    "layer": (["layer", "--layer", "alexnet-pool1", "--batch", "1", "--device", "cpu", *QUICK, *OUT],
              {"--layer": "list", "--batch": "count", "--pass": "list", "--spec": "path_in"}),
    "nets": (["nets", "--json", "{out}/r.json"], {"--net": "path_in", "--json": "path_out", "--csv": "path_out"}),
    "predict": (["predict", "--phases", "{phases}", "--alpha", "5", "--bandwidth", "10", "--workers", "1,2", *OUT],
                {"--phases": "path_in", "--workers": "list", "--alpha": "float", "--gamma": "float",
                 "--bandwidth": "size", "--bucket": "size", "--servers": "count", "--plot": "path_out",
                 "--plot-workers": "count", "--strategy": "list", "--json": "path_out"}),
    "predict (cluster)": (["predict", "--phases", "{phases}", "--nodes", "2", "--per-node", "2", "--intra", "pcie4",
                           "--inter", "10gbe", *OUT],
                          {"--nodes": "count", "--per-node": "count", "--links-per-node": "count", "--intra": "list",
                           "--inter": "list", "--link-scale": "float", "--workers": "list"}),
    "predict (cluster file)": (["predict", "--phases", "{phases}", "--strategy", "wfbp", *OUT],
                               {"--cluster": "path_in"}),
    "iteration": (["iteration", "--net", "alexnet", "--batch", "1", "--no-io", "--strategy", "serial",
                   "--device", "cpu", *QUICK, *OUT],
                  {"--batch": "count", "--net": "path_in", "--strategy": "list", "--iters": "count",
                   "--threads": "count", "--json": "path_out", "--plot": "path_out"}),
    "env": (["env", "--json", "{out}/r.json"], {"--json": "path_out", "--mpi-thread-level": "list"}),
}
HOSTILE["size0"] = [v for v in HOSTILE["size"] if v != "0"]  # 0 means "off" for these
HOSTILE["list0"] = [v for v in HOSTILE["list"] if v != "0"]
CASES = [(cmd, opt, kind) for cmd, (_, opts) in COMMANDS.items() for opt, kind in opts.items()]


@contextlib.contextmanager
def _time_limit(seconds: int):
    """A hostile value that slips through would start a real run: fail it, do not hang."""
    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s: the value was accepted")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_hostile(cmd: str, opt: str, value: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        out, work = base / "out", base / "work"
        out.mkdir()
        work.mkdir()
        (work / "file").write_text("a regular file, not what the option wants\n")
        phases = work / "phases.json"
        phases.write_text(json.dumps(Phases.synthetic("alexnet", 8, gflops=2000).to_report()))
        subst = {"{out}": str(out), "{dir}": str(work), "{file}": str(work / "file"), "{phases}": str(phases)}

        def fill(s: str) -> str:
            for k, v in subst.items():
                s = s.replace(k, v)
            return s

        argv = [fill(a) for a in COMMANDS[cmd][0]] + ([f"{opt}={fill(value)}"] if opt.startswith("--")
                                                      else [opt, fill(value)])
        stdout, stderr = io.StringIO(), io.StringIO()
        with _time_limit(60), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(argv)
        err = stderr.getvalue()
        assert code == 2, (argv, code, err, stdout.getvalue()[-2000:])
        assert len(err.strip().splitlines()) == 1, (argv, err)
        assert "Traceback" not in err, (argv, err)
        assert sorted(p.name for p in out.iterdir()) == [], (argv, "an output file was written")


# Every hostile value of every option's kind, each case its own test, every run (in process, one
# rank: about 1,600 cases in under a minute on 2 cores). Junk: fixed text with no letters or digits.
JUNK = ["%", "+-", " \t", "∞", "—", "💥", "::", "@/"]
ALL_CASES = [(cmd, opt, value) for cmd, opt, kind in CASES
             for value in HOSTILE[kind] + (JUNK if kind in RANDOM_KINDS else [])]


@pytest.mark.parametrize("cmd, opt, value", ALL_CASES)
def test_hostile_values_exit_2_with_one_line(cmd, opt, value):
    run_hostile(cmd, opt, value)


def test_every_option_case_is_covered():
    assert {(c, o) for c, o, _ in ALL_CASES} == {(c, o) for c, o, _ in CASES}
    assert len(ALL_CASES) == sum(len(HOSTILE[k]) + (len(JUNK) if k in RANDOM_KINDS else 0) for _, _, k in CASES)


# The cases found by hand: each once, as a user types them, as a process.
@pytest.mark.parametrize("argv, message", [
    (["allreduce", "--size", "1MB", "-n", "1000000000000"], "--iters"),
    (["gemm", "-m", "4", "-n", "4", "-k", "4", "--json", "/proc/nope.json"], "cannot create files in /proc"),
    (["io", "--dir", "/proc"], "cannot create files in /proc"),
    (["iteration", "--batch", "100000"], "GiB of host memory"),
    (["nets", "--net", "/dev/null"], "not a regular file"),
    (["predict", "--phases", "/dev/zero", "--alpha", "5", "--bandwidth", "10"], "/dev/zero"),
])
def test_the_reported_cases(argv, message):
    p = run_cli(*argv, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_a_bad_net_on_two_ranks_is_one_line():
    # --net is checked while the command line is parsed, before MPI starts: rank 0 alone says it
    p = run_cli("iteration", "--net", "nosuchnet", nranks=2)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert "nosuchnet" in lines[0] and "built in" in lines[0] and "Traceback" not in p.stderr
