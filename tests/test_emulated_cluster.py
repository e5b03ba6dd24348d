"""The emulated cluster (scripts/emulated-cluster.sh): network namespaces joined by rate-limited
veths, one per node, MPICH crossing them over TCP. Needs root and iproute2 (CI has both); the
tests check that every algorithm is exact across the emulated nodes and that the script leaves
nothing behind, also when its command fails or it is interrupted."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import GDLBENCH_CMD, MPIEXEC, NEUTRAL_CWD, mpi_env

from gdlbench.primitives import collectives as C

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "emulated-cluster.sh"


def _can_make_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    name = f"gdlprobe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return "cannot create a network namespace here"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


_WHY = _can_make_namespaces()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"emulated cluster: {_WHY}")


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--mpiexec", str(MPIEXEC), *args], capture_output=True, text=True,
                          timeout=timeout, env=mpi_env(), cwd=NEUTRAL_CWD)


@pytest.mark.parametrize("per_node, rate", [(1, "1gbit"), (2, "10gbit")])
def test_every_algorithm_exact_across_emulated_nodes(tmp_path, per_node, rate):
    before = _namespaces()
    out = tmp_path / "e.json"
    p = _run("--nodes", "2", "--per-node", str(per_node), "--rate", rate, "--", *GDLBENCH_CMD, "allreduce",
             "--algo", "all", "--servers", "2", "-b", "8", "-e", "1M", "-f", "32", "-n", "1", "-w", "0", "-c", "1",
             "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    topo = doc["env"]["topology"]
    assert (topo["nodes"], topo["ranks_per_node"]) == (2, per_node), topo  # MPI sees the emulated nodes
    assert {r["algo"] for r in doc["rows"]} == set(C.ALGOS)
    assert all(r["wrong"] == 0 for r in doc["rows"])
    assert f"2 nodes x {per_node}" in p.stdout
    assert not _namespaces() - before  # none of its namespaces left (another run's may come and go)


def test_cleans_up_after_a_failing_command():
    before = _namespaces()
    p = _run("--nodes", "2", "--", "sh", "-c", "exit 3", timeout=120)
    assert p.returncode != 0
    assert not _namespaces() - before


def test_bad_options_exit_2_and_make_nothing():
    before = _namespaces()
    for args in (["--nodes", "1", "--", "true"], ["--rate", "fast", "--", "true"], ["--nodes", "2"],
                 ["--tcp-cc", "no-such-control", "--", "true"], ["--tcp-cc", "reno cubic", "--", "true"], ["--rate"]):
        p = _run(*args, timeout=60)
        assert p.returncode == 2 and "emulated-cluster:" in p.stderr, (args, p.stderr)
    assert not _namespaces() - before


def test_cleans_up_when_interrupted():
    before = _namespaces()
    proc = subprocess.Popen(["bash", str(SCRIPT), "--mpiexec", str(MPIEXEC), "--nodes", "3", "--", "sleep", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=mpi_env(), cwd=NEUTRAL_CWD)
    try:
        deadline = time.monotonic() + 60
        while len(_namespaces() - before) < 4 and time.monotonic() < deadline:  # 3 nodes and the switch
            time.sleep(0.2)
        assert len(_namespaces() - before) == 4
        time.sleep(1)  # let mpiexec start the ranks
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert not _namespaces() - before


# each rank writes its node and its cores to a file of its own (mpiexec may interleave stdout)
AFFINITY = ("import os, sys; open(os.path.join(sys.argv[1], str(os.getpid())), 'w').write("
            "' '.join([os.environ['FI_TCP_IFACE'][-1], *map(str, sorted(os.sched_getaffinity(0)))]))")


@pytest.mark.parametrize("pin", ["--pin", "--no-pin"])
def test_pinned_nodes_get_cores_of_their_own(tmp_path, pin):
    """Pinned (the default when oversubscribed), every node's ranks run on cores no other node's
    ranks use; unpinned, every rank may use every core."""
    allowed = sorted(os.sched_getaffinity(0))
    p = _run("--nodes", "2", "--per-node", "2", pin, "--", "python3", "-c", AFFINITY, str(tmp_path), timeout=120)
    assert p.returncode == 0, p.stderr
    by_node: dict[str, set[int]] = {}
    for f in tmp_path.iterdir():
        node, *cpus = f.read_text().split()
        by_node.setdefault(node, set()).update(int(c) for c in cpus)
    assert sorted(by_node) == ["0", "1"] and len(list(tmp_path.iterdir())) == 4, by_node
    if pin == "--no-pin":
        assert all(sorted(c) == allowed for c in by_node.values())
    else:
        assert "node 0 on cores" in p.stderr
        assert all(c and c <= set(allowed) for c in by_node.values())
        if len(allowed) >= 2:
            assert not by_node["0"] & by_node["1"], by_node


# node 0 accepts one TCP connection from node 1 across the emulated link; both ends write the
# congestion control their socket runs
CONGESTION = """
import os, socket, sys, time
node = os.environ['FI_TCP_IFACE'][-1]
if node == '0':
    srv = socket.create_server(('10.213.0.1', 47391))
    s, _ = srv.accept()
else:
    for _ in range(100):
        try:
            s = socket.create_connection(('10.213.0.1', 47391))
            break
        except OSError:
            time.sleep(0.05)
cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b'\\0').decode()
open(os.path.join(sys.argv[1], node), 'w').write(cc)
"""


@pytest.mark.parametrize("tcp_cc", [None, "reno", "host"])
def test_connections_between_nodes_run_the_named_congestion_control(tmp_path, tcp_cc):
    """Cubic unless told otherwise, whatever this host's default (BBR's PROBE_RTT once slowed a
    sweep 10-20 x); `host` leaves the host's default."""
    host = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    args = [] if tcp_cc is None else ["--tcp-cc", tcp_cc]
    p = _run("--nodes", "2", *args, "--", "python3", "-c", CONGESTION, str(tmp_path), timeout=120)
    assert p.returncode == 0, p.stderr
    want = {None: "cubic", "reno": "reno", "host": host}[tcp_cc]
    assert {f.name: f.read_text() for f in tmp_path.iterdir()} == {"0": want, "1": want}
    assert f"TCP {want}" in p.stderr


VALIDATE = SCRIPT.parent / "study-validate.sh"


def _validate(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(VALIDATE), "--mpiexec", str(MPIEXEC), *args], capture_output=True, text=True,
                          timeout=timeout, env=mpi_env(), cwd=NEUTRAL_CWD)


def test_study_validate_measures_on_the_emulated_nodes_and_leaves_nothing(tmp_path):
    """scripts/study-validate.sh on a small study: the net's iteration and the fit run across 2
    emulated nodes, the study's report gains the validation, and no namespace is left."""
    mlp = str(Path(__file__).parent / "data" / "mlp.json")
    study = tmp_path / "s"
    p = subprocess.run([str(MPIEXEC), "-n", "2", *GDLBENCH_CMD, "study", "--out", str(study), "--quick", "--nets", mlp,
                        "--strategies", "cntk,mxnet", "--workers", "1,2,4"], capture_output=True, text=True,
                       timeout=600, env=mpi_env(), cwd=NEUTRAL_CWD)
    assert p.returncode == 0, p.stderr[-3000:]
    before = _namespaces()
    p = _validate("--study", str(study), "--net", "mlp", "--rate", "10gbit", "--iters", "2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert not _namespaces() - before
    index = json.loads((study / "study.json").read_text())
    v = index["analysis"]["validation"]
    assert (v["nodes"], v["ranks_per_node"]) == (2, 1) and [c["strategy"] for c in v["compare"]] == ["cntk", "mxnet"]
    run = json.loads((study / "validation/iteration-mlp.json").read_text())
    assert run["summary"]["rounds"] == 2 and run["args"]["batch"] == index["config"]["batch"]["mlp"]
    assert 'id="mlp-validation"' in (study / "report.html").read_text()


def test_study_validate_bad_options_exit_2(tmp_path):
    for args, said in ((["--net", "mlp"], "--study"), (["--study", str(tmp_path)], "--study"),
                       (["--study", str(tmp_path), "--net", "mlp", "--iters", "0"], "--iters"),
                       (["--bogus"], "unknown option")):
        p = _validate(*args, timeout=60)
        assert p.returncode == 2 and said in p.stderr and p.stderr.strip().count("\n") == 0, (args, p.stderr)
