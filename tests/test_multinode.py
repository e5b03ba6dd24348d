"""Several nodes: topology detection, the hierarchical all-reduce, the two-level fit and model,
the link presets and cluster files. Nodes are emulated with --ranks-per-node here; the tests in
test_emulated_cluster.py run the same on network namespaces with a rate-limited link."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from helpers import GDLBENCH_CMD, NEUTRAL_CWD, check_fit, mpi_env, requires_gpu, run_cli, run_mpi

from gdlbench.common.errors import UsageError
from gdlbench.model import cluster
from gdlbench.nets.network import load_network
from gdlbench.primitives import collectives as C
from gdlbench.primitives import costmodel


def _doc(path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("nranks, per_node, nodes, smallest, largest", [
    (3, None, 1, 3, 3),  # MPI's shared-memory split: one machine, one node
    (4, 2, 2, 2, 2),
    (3, 2, 2, 1, 2),  # nodes of different sizes
])
def test_topology_in_env_json_and_table_titles(tmp_path, nranks, per_node, nodes, smallest, largest):
    out = tmp_path / "env.json"
    extra = ["--ranks-per-node", str(per_node)] if per_node else []
    p = run_cli("env", *extra, "--json", str(out), nranks=nranks)
    assert p.returncode == 0, p.stderr
    topo = _doc(out)["env"]["topology"]
    assert (topo["nodes"], topo["min_ranks_per_node"], topo["max_ranks_per_node"]) == (nodes, smallest, largest)
    assert topo["ranks_per_node"] == (smallest if smallest == largest else None)
    assert ("--ranks-per-node" in topo["found_by"]) == bool(per_node)
    assert topo["shape"] in p.stdout
    # every other command's JSON and table titles carry it too
    out2 = tmp_path / "a.json"
    p = run_cli("allreduce", "--size", "8", "-n", "1", "-w", "0", *extra, "--json", str(out2), nranks=nranks)
    assert p.returncode == 0, p.stderr
    assert _doc(out2)["env"]["topology"]["nodes"] == nodes
    assert f"[{topo['shape']}]" in p.stdout


@pytest.mark.parametrize("nranks, per_node", [(4, 2), (3, 2), (4, 3), (2, 1), (3, None)])
def test_hier_exact_on_every_layout_dtype_and_op(tmp_path, nranks, per_node):
    """Both variants (on either side of the 64 KiB switch), counts that no node size divides
    (1,000,004 B = 250,001 float32), nodes of different sizes, one node, one rank per node."""
    out = tmp_path / "h.json"
    extra = ["--ranks-per-node", str(per_node)] if per_node else []
    p = run_cli("allreduce", "--algo", "hier", "--size", "12,65532,65536,1000004", "-d", "all", "-o", "all",
                "-n", "1", "-w", "0", "-c", "2", *extra, "--json", str(out), nranks=nranks, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = _doc(out)["rows"]
    assert len(rows) == 4 * len(C.DTYPES) * len(C.OPS) * 2
    assert all(r["wrong"] == 0 for r in rows)
    assert {r["variant"] for r in rows if r["size_bytes"] < 65536} == {"leader"}
    assert {r["variant"] for r in rows if r["size_bytes"] >= 65536} == {"rs-ag"}
    assert "hier(leader)" in p.stdout and "hier(rs-ag)" in p.stdout


def test_hier_variant_switch_is_the_native_one():
    assert C.hier_variant(costmodel.HIER_LEADER_BELOW_BYTES - 1) == "leader"
    assert C.hier_variant(costmodel.HIER_LEADER_BELOW_BYTES) == "rs-ag"
    assert C._core.HIER_LEADER_BELOW_BYTES == costmodel.HIER_LEADER_BELOW_BYTES
    # the cost model switches where the executor does: the threshold itself is priced as rs-ag
    # (its inter-node all-reduce of m/G shards, read at m/G), one byte less as the leader's
    shape = costmodel.TwoLevelShape(nranks=8, nodes=2, per_node=4)
    at = costmodel.HIER_LEADER_BELOW_BYTES
    assert costmodel.two_level_terms("hier", shape, at).at_bytes == {costmodel.INTER_SHARED: at / 4}
    assert costmodel.two_level_terms("hier", shape, at - 1).at_bytes == {}


def test_hier_in_an_iteration_strategy(tmp_path):
    """A strategy can name hier: the executor sends its messages with it (exactness is checked
    above; here the composed run works and reports it)."""
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"name": "hier-wfbp", "algo": "hier", "overlap": "wfbp"}))
    out = tmp_path / "i.json"
    p = run_cli("iteration", "--net", "alexnet", "--batch", "2", "--strategy", str(spec), "--iters", "1",
                "--warmup", "0", "--ranks-per-node", "1", "--json", str(out), nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "hier-wfbp" in p.stdout
    doc = _doc(out)
    it = [r for r in doc["rows"] if r["phase"] == "iteration"]
    assert [r["strategy"] for r in it] == ["hier-wfbp"] and it[0]["time_us"] > 0
    sent = [r for r in doc["rows"] if r["phase"] == "message" and r["strategy"] == "hier-wfbp"]
    assert len(sent) == it[0]["messages"] > 0 and all(r["time_us"] > 0 for r in sent)
    assert sum(r["size_bytes"] for r in sent) == 4 * load_network("alexnet").params  # every gradient, once
    assert set(doc["summary"]["predicted_us"]) == {"hier-wfbp"}


def test_two_level_fit_under_mpiexec(tmp_path):
    out = tmp_path / "f.json"
    p = run_cli("allreduce", "--algo", "library,ring,hier", "-b", "64K", "-e", "4M", "-f", "4", "--mode", "in",
                "-n", "3", "-w", "1", "--fit", "--fit-regimes", "1", "--ranks-per-node", "2", "--json", str(out),
                nranks=4, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = _doc(out)
    fit = doc["summary"]["fit"]
    assert {f["algo"] for f in fit["whole"]} == {"library", "ring", "hier"}
    levels = fit["levels"]
    for level, ranks, algo in (("intra", 2, "library"), ("inter", 2, "library"), ("intra_rsag", 2, "hier"),
                               ("inter_shared", 2, "library")):
        f = levels[level]
        assert f["ranks"] == ranks and f["wrong"] == 0 and f["algo"] == algo, level
        # 4 ranks on 2 cores: the numbers hold together; a level's sweep can come out flat (beta 0:
        # 64 KiB-1 MiB at 59-234 us and 4 MiB at 2564 once, the measured gamma pricing the bytes)
        check_fit(f, max_median_error=10.0, loaded=True)
    check = levels["model_check"]
    assert {p["algo"] for p in check["points"]} == {"library", "ring", "hier"}
    for pt in check["points"]:
        assert pt["two_level_us"] >= 0 and pt["flat_us"] >= 0
        assert math.isclose(pt["two_level_error"], (pt["two_level_us"] - pt["measured_us"]) / pt["measured_us"])
    for algo, e in check["median_abs_error_64k"].items():  # the worst |error| beside the median
        errs = [abs(pt["two_level_error"]) for pt in check["points"] if pt["algo"] == algo]
        assert e["two_level_worst"] == max(errs) and e["two_level"] <= e["two_level_worst"]
    assert "two-level fit" in p.stdout and "flat error %" in p.stdout
    # the saved report is a cluster for predict
    c = cluster.load_cluster(out)
    assert c.per_node == 2 and c.nodes == 2 and c.intra_rsag is not None and c.inter_shared is not None
    beta = levels["inter"]["beta_us_per_byte"]
    assert math.isclose(c.inter.beta_us_per_byte, beta, abs_tol=1e-12)  # a flat fit: 1e12 GB/s, "free"


@pytest.mark.parametrize("on", ["main", "comm-thread"])
def test_two_level_fit_leaves_out_a_level_with_too_few_sizes(tmp_path, on):
    """hier's steps are fitted from 64 KiB (below it hier runs its leader variant): a sweep that
    reaches 64 KiB alone leaves intra_rsag without a fit (null), and the model falls back to the
    intra fit for it. Every level is timed where --on says, as the flat sweep."""
    out = tmp_path / "f.json"
    p = run_cli("allreduce", "-b", "1K", "-e", "64K", "-f", "4", "--mode", "in", "-n", "2", "-w", "0", "--fit",
                "--ranks-per-node", "2", "--on", on, "--json", str(out), nranks=4, timeout=300)
    assert p.returncode == 0, p.stderr
    levels = _doc(out)["summary"]["fit"]["levels"]
    assert levels["intra_rsag"] is None
    assert all(levels[k] is not None for k in ("intra", "inter", "inter_shared"))
    assert {levels[k]["on"] for k in ("intra", "inter", "inter_shared")} == {on}
    assert "intra_rsag" not in levels["model_check"]["cluster"] and "inter_shared" in levels["model_check"]["cluster"]


def test_two_level_fit_recovers_both_levels():
    """Each level is fitted on its own sweep: times made from known (alpha, beta) per level come
    back, and the cluster built from them prices hier from both."""
    sizes = [65536 * 4**k for k in range(6)]
    levels = {}
    for level, (alpha, beta) in {"intra": (3.0, 1e-4), "inter": (40.0, 8e-3)}.items():
        a, b, _ = costmodel.coefficients("library", 2)
        times = [a * alpha + b * m * beta for m in sizes]
        f = C.fit_alpha_beta(sizes, times, "library", 2)
        assert math.isclose(f.alpha_us, alpha, rel_tol=1e-6) and math.isclose(f.beta_us_per_byte, beta, rel_tol=1e-6)
        levels[level] = f.to_dict()
    c = cluster.from_fit_levels(levels, nodes=2, per_node=2, source="test")
    m, n = 2**22, 4
    shard = m / 2
    want = (2 * 1 * 3.0 + 2 * 0.5 * m * 1e-4) + (2 * 1 * 40.0 + 2 * 0.5 * 2 * shard * 8e-3)  # s = 2 per link
    assert math.isclose(c.time_us("hier", m, n), want, rel_tol=1e-9)
    library = c.time_us("library", m, n)
    # measured as hier runs them, those levels price hier's steps, with the sharing in the measurement
    levels["intra_rsag"] = C.fit_alpha_beta(sizes, [2 * 5.0 + m * 5e-5 for m in sizes], "hier", 2).to_dict()
    levels["inter_shared"] = C.fit_alpha_beta(sizes, [2 * 60.0 + m * 1e-2 for m in sizes], "library", 2).to_dict()
    c = cluster.from_fit_levels(levels, nodes=2, per_node=2, source="test")
    want = (2 * 5.0 + m * 5e-5) + (2 * 60.0 + shard * 1e-2)  # hier on each node + the shards' all-reduce, at once
    assert math.isclose(c.time_us("hier", m, n), want, rel_tol=1e-6)
    assert c.time_us("library", m, n) == library  # MPICH crosses from one rank per node: the link alone
    assert math.isclose(c.time_us("rd", m, n), (3.0 + m * 1e-4) + (60.0 + m * 1e-2), rel_tol=1e-6)
    # one rank per node: there is nothing to measure as hier runs it
    one = cluster.from_fit_levels(levels, nodes=2, per_node=1, source="test")
    assert one.intra_rsag is None and one.inter_shared is None


def test_cluster_model_reduces_to_one_level():
    c = cluster.Cluster(4, cluster.link("nvlink4", "intra"), cluster.link("ib-hdr", "inter"))
    a, b = c.intra.alpha_us, c.intra.beta_us_per_byte
    for algo in ("library", "ring", "rd", "tree", "hier"):
        # within one node: the one-level formula on the intra-node link
        assert math.isclose(c.time_us(algo, 1e6, 4), cluster.one_level_us(algo, 1e6, 4, a, b))
    assert c.time_us("ring", 1e6, 1) == 0.0
    # one worker per node: every algorithm is its one-level formula on the inter-node link
    c1 = cluster.Cluster(1, cluster.link("pcie4", "intra"), cluster.link("10gbe", "inter"))
    a2, b2 = c1.inter.alpha_us, c1.inter.beta_us_per_byte
    for algo in ("library", "ring", "rd", "tree"):
        for n in (2, 8, 64):
            assert math.isclose(c1.time_us(algo, 4e6, n), cluster.one_level_us(algo, 4e6, n, a2, b2)), (algo, n)


def test_flat_ring_is_paced_by_its_slowest_hop_and_hier_wins_across_nodes():
    c = cluster.Cluster(8, cluster.link("nvlink4", "intra"), cluster.link("100gbe", "inter"), links_per_node=8)
    m, n = 100e6, 64
    a2, b2 = c.inter.alpha_us, c.inter.beta_us_per_byte
    assert math.isclose(c.time_us("ring", m, n), 2 * (n - 1) * (a2 + m / n * b2))
    assert c.time_us("hier", m, n) < c.time_us("ring", m, n)
    assert c.time_us("hier", 1024, n) < c.time_us("ring", 1024, n)  # the leader variant at small sizes


def test_presets_each_state_their_source():
    assert {"pcie3", "pcie4", "pcie5", "nvlink3", "nvlink4", "10gbe", "25gbe", "100gbe", "ib-edr", "ib-hdr",
            "ib-ndr"} <= set(cluster.LINKS)
    for name, link in cluster.LINKS.items():
        assert link.gbs > 0 and link.alpha_us > 0, name
        assert len(link.source) > 20 and "assumption" in link.source, name
    assert math.isclose(cluster.LINKS["100gbe"].gbs, 12.5) and math.isclose(cluster.LINKS["ib-ndr"].gbs, 50)
    assert cluster.link("PCIe4.0", "intra") is cluster.LINKS["pcie4"]


def test_cluster_file_and_its_errors(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"nodes": 4, "per_node": 8, "intra": "nvlink3",
                             "inter": {"alpha_us": 5, "gbs": 25, "source": "my fabric"}, "links_per_node": 2}))
    c = cluster.load_cluster(f)
    assert (c.nodes, c.per_node, c.links_per_node) == (4, 8, 2)
    assert c.inter.source == "my fabric" and c.intra.name == "nvlink3"
    for bad, message in [({"per_node": 8, "intra": "pcie9", "inter": "ib-hdr"}, "unknown preset"),
                         ({"per_node": 0, "intra": "pcie4", "inter": "ib-hdr"}, "positive integer"),
                         ({"per_node": 2, "intra": "pcie4"}, "missing 'inter'"),
                         ({"per_node": 2, "intra": "pcie4", "inter": {"alpha_us": 1, "gbs": -1}}, ">= 0"),
                         ({"per_node": 2, "intra": "pcie4", "inter": "ib-hdr", "links_per_node": 0}, "positive"),
                         ({"per_node": 2, "intra": "pcie4", "inter": "ib-hdr", "links_per_node": 4}, "one link at most"),
                         ([1, 2], "JSON object")]:
        f.write_text(json.dumps(bad))
        with pytest.raises(UsageError, match=message):
            cluster.load_cluster(f)
    with pytest.raises(UsageError, match="no such file"):
        cluster.load_cluster(tmp_path / "nope.json")


def test_ranks_per_node_bad_input():
    p = run_cli("allreduce", "--size", "8", "--ranks-per-node", "0")
    assert p.returncode == 2 and "--ranks-per-node" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def _phases_file(tmp_path):
    from gdlbench.model.phases import Phases

    f = tmp_path / "ph.json"
    f.write_text(json.dumps(Phases.synthetic("alexnet", batch=32).to_report()))
    return f


def test_predict_on_presets_and_on_a_cluster_file(tmp_path):
    ph = _phases_file(tmp_path)
    out = tmp_path / "p.json"
    p = run_cli("predict", "--phases", str(ph), "--nodes", "128", "--per-node", "8", "--intra", "nvlink4",
                "--inter", "ib-hdr", "--strategy", "wfbp-fusion,cntk", "--json", str(out))
    assert p.returncode == 0, p.stderr
    # headed by the shape it prices, not by the one-rank process that priced it
    assert "gdlbench predict: alexnet [priced for 128 nodes x 8 workers per node]" in p.stdout, p.stdout[:500]
    doc = _doc(out)
    assert max(r["workers"] for r in doc["rows"]) == 1024
    assert {r["workers"] for r in doc["rows"]} == {1, 8, 16, 32, 64, 128, 256, 512, 1024}
    for r in doc["rows"]:
        assert r["t_iter_us"] > 0 and 0 < r["efficiency"] <= 1.0 + 1e-9
    cm = doc["summary"]["comm_model"]
    assert cm["intra"]["name"] == "nvlink4" and "NVIDIA" in cm["intra"]["source"]
    assert any("InfiniBand Trade Association" in n for n in doc["notes"])
    assert "Source: PCI" not in p.stdout and "Source: NVIDIA" in p.stdout
    # the same cluster from a file gives the same numbers
    cf = tmp_path / "c.json"
    cf.write_text(json.dumps({"nodes": 128, "per_node": 8, "intra": "nvlink4", "inter": "ib-hdr"}))
    out2 = tmp_path / "p2.json"
    p = run_cli("predict", "--phases", str(ph), "--cluster", str(cf), "--strategy", "wfbp-fusion,cntk",
                "--json", str(out2))
    assert p.returncode == 0, p.stderr
    assert [r["t_iter_us"] for r in _doc(out2)["rows"]] == [r["t_iter_us"] for r in doc["rows"]]
    # --algo names the algorithm of the strategies that name none
    out3 = tmp_path / "p3.json"
    p = run_cli("predict", "--phases", str(ph), "--cluster", str(cf), "--strategy", "wfbp-fusion,cntk",
                "--json", str(out3), "--algo", "hier")
    assert p.returncode == 0, p.stderr
    assert "algorithm hier unless the strategy names one" in " ".join(p.stdout.split())
    hier = _doc(out3)
    assert hier["summary"]["comm_model"]["algo"] == "hier"
    assert hier["summary"]["comm_model"]["formula"].startswith("2(G-1) a1 + 2(G-1)/G m b1")
    out4 = tmp_path / "p4.json"
    assert run_cli("predict", "--phases", str(ph), "--cluster", str(cf), "--strategy", "wfbp-fusion,cntk",
                   "--json", str(out4), "--algo", "ring").returncode == 0
    ring = {(r["strategy"], r["workers"]): r for r in _doc(out4)["rows"]}
    for r in hier["rows"]:  # the two-level algorithm priced, not the flat ring: it wins across 128 nodes
        if r["workers"] == 1024:
            assert r["comm_us"] < 0.7 * ring[r["strategy"], 1024]["comm_us"], (r, ring[r["strategy"], 1024])
    p = run_cli("predict", "--list-links")
    assert p.returncode == 0 and "ib-ndr" in p.stdout and "IEEE 802.3ba" in p.stdout


def test_predict_cluster_link_scale_shows_the_link_it_priced(tmp_path):
    """--link-scale on a cluster scales its inter-node link: the link line, the notes and the JSON
    say so, and the intra-node link stays as given."""
    ph = _phases_file(tmp_path)
    base = ["predict", "--phases", str(ph), "--nodes", "4", "--per-node", "8", "--intra", "nvlink4",
            "--inter", "10:25", "--strategy", "wfbp"]
    out = tmp_path / "p.json"
    p = run_cli(*base, "--link-scale", "2:0.5", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "inter-node link 10:25: 50 GB/s, alpha 5 us." in p.stdout, p.stdout
    assert "inter-node link scaled: bandwidth x 2, latency x 0.5" in p.stdout
    doc = _doc(out)
    assert doc["summary"]["comm_model"]["inter"]["gbs"] == 50
    assert doc["summary"]["comm_model"]["intra"]["name"] == "nvlink4"
    assert any("inter-node link scaled" in n for n in doc["notes"])
    plain = tmp_path / "q.json"
    assert run_cli(*base, "--json", str(plain)).returncode == 0
    assert _doc(plain)["rows"][-1]["t_iter_us"] > doc["rows"][-1]["t_iter_us"]  # a faster link, a faster iteration


@pytest.mark.parametrize("argv, message", [
    (["--per-node", "8", "--intra", "nvlink4"], "--inter"),
    (["--per-node", "8", "--intra", "nvlink9", "--inter", "ib-hdr"], "unknown preset"),
    (["--per-node", "8", "--intra", "1:x", "--inter", "ib-hdr"], "ALPHA_US:GBS"),
    (["--per-node", "8", "--intra", "nvlink4", "--inter", "ib-hdr", "--alpha", "1", "--beta", "1"], "not both"),
])
def test_predict_cluster_bad_input(tmp_path, argv, message):
    p = run_cli("predict", "--phases", str(_phases_file(tmp_path)), *argv)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1


@requires_gpu
@pytest.mark.gpu
def test_nccl_hier_matches_the_mpi_hier(tmp_path):
    """The GPU's hierarchical all-reduce (NCCL inside and across nodes) against the MPI one on the
    same data, both variants, every dtype NCCL and the exact-check data share. One rank: NCCL
    refuses two ranks on one GPU, and the GPU machine has one."""
    script = tmp_path / "h.py"
    script.write_text(
        "import numpy as np, cupy as cp\n"
        "from mpi4py import MPI\n"
        "from gdlbench import collectives as C, env\n"
        "from gdlbench._native import _cuda\n"
        "env.set_ranks_per_node(1)\n"
        "comm = MPI.COMM_WORLD\n"
        "for dtype in ('float32', 'float64', 'int32', 'float16'):\n"
        "    for count in (3, 70001, 250001):\n"
        "        x = ((np.arange(count) % 7) * (comm.rank + 1)).astype(dtype)\n"
        "        want = x.copy()\n"
        "        C.allreduce_array(want, algo='hier')\n"
        "        d = cp.asarray(x)\n"
        "        _cuda.nccl_allreduce(comm, d.data.ptr, count, dtype, 'sum', 'hier')\n"
        "        assert np.array_equal(cp.asnumpy(d), want), (dtype, count)\n"
        "print('hier ok')\n")
    p = run_mpi(1, sys.executable, str(script))
    assert p.returncode == 0, p.stderr
    assert "hier ok" in p.stdout


def test_launcher_mismatch_under_slurm_advises_srun_pmi2():
    """srun --mpi=none starts N one-rank worlds: the warning names the launcher that fixes it."""
    env = mpi_env() | {"SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}
    env.pop("PMI_SIZE", None)
    p = subprocess.run([*GDLBENCH_CMD, "allreduce", "--size", "8", "-n", "1"], capture_output=True, text=True,
                       timeout=120, env=env, cwd=NEUTRAL_CWD)
    assert p.returncode == 0, p.stderr
    assert "SLURM_NTASKS=2" in p.stderr and "srun --mpi=pmi2" in p.stderr


@pytest.mark.parametrize("links", [1, 2])
def test_two_level_counts_price_every_algorithm_as_written_out_by_hand(links):
    """costmodel's two-level counts against the formulas written out term by term (docs/model.md),
    with a gamma per level, a partial last node and both hier variants."""
    intra = cluster.Link("i", 2.0, 50.0, gamma_us_per_byte=1e-5)
    inter = cluster.Link("x", 30.0, 2.0, gamma_us_per_byte=4e-5)
    c = cluster.Cluster(4, intra, inter, links_per_node=links)
    a1, b1, g1 = 2.0, intra.beta_us_per_byte, 1e-5
    a2, b2, g2 = 30.0, inter.beta_us_per_byte, 4e-5
    for n in (8, 14, 32):  # 14: four nodes, the last of 2 workers
        M, G = math.ceil(n / 4), 4
        lg, lm, s, f = 2, math.ceil(math.log2(M)), max(1.0, G / links), (n - 1) / n
        for m in (4096.0, 1e7):
            want = {
                "ring": 2 * (n - 1) * (a2 + m / n * b2) + f * m * g2,
                "rd": lg * (a1 + m * b1 + m * g1) + lm * (a2 + s * m * b2 + m * g2),
                "tree": 2 * lg * (a1 + m * b1) + lg * m * g1 + 2 * lm * (a2 + m * b2) + lm * m * g2,
                "library": (2 * lg * a1 + 2 * (G - 1) / G * m * b1 + 2 * lm * a2
                            + 2 * (M - 1) / M * s * (m / G) * b2 + f * m * g2),
                # incast: a server hears from the G-1 others of its node and the n-G of the others
                "ps": 2 * (G - 1) * a1 + 2 * ((n - G) * a2 + G * (M - 1) / M / links * m * b2) + m * g2,
                "hier": (2 * lg * (a1 + m * b1) + lg * m * g1
                         + 2 * lm * a2 + 2 * (M - 1) / M * m * b2 + (M - 1) / M * m * g2) if m < 65536 else
                        (2 * (G - 1) * a1 + 2 * (G - 1) / G * m * b1 + (G - 1) / G * m * g1
                         + 2 * lm * a2 + 2 * (M - 1) / M * s * (m / G) * b2 + (M - 1) / M * (m / G) * g2),
            }
            # ZeRO's reduce-scatter and all-gather: a flat ring across nodes, half of ring's all-reduce
            want["reduce_scatter"] = (n - 1) * (a2 + m / n * b2) + f * m * g2
            want["allgather"] = (n - 1) * (a2 + m / n * b2)
            for algo, t in want.items():
                assert math.isclose(c.time_us(algo, m, n), t, rel_tol=1e-12), (algo, n, m)
    with pytest.raises(UsageError, match="two-level"):
        c.time_us("broadcast", 1e6, 8)


def test_each_level_is_priced_in_the_regime_of_what_it_moves():
    """A piecewise fit's regime is read at the size of the level's own all-reduce that moves what
    the algorithm moves there: hier's and library's inter-node all-reduce of m/G shards, the flat
    ring's steps of m/N (the halving step of an all-reduce of 2m/N); rd's steps carry all of m."""
    small, big = (5.0, 1e-3), (700.0, 5e-4)  # (alpha us, beta us/B): a big-message regime from 512 KiB
    inter = cluster.Link("x", small[0], 1.0, regimes=((0, *small), (512 * 1024, *big)))  # 1 GB/s: small's beta
    intra = cluster.Link("i", 1.0, 50.0)
    c = cluster.Cluster(4, intra, inter)
    n, m, G, M = 8, float(1 << 20), 4, 2
    b1 = intra.beta_us_per_byte
    hier = 2 * (G - 1) * 1.0 + 2 * (G - 1) / G * m * b1 + 2 * small[0] + 2 * (M - 1) / M * G * (m / G) * small[1]
    ring = 2 * (n - 1) * (small[0] + m / n * small[1])  # steps of 128 KiB: the 256 KiB all-reduce's regime
    rd = 2 * (1.0 + m * b1) + (big[0] + G * m * big[1])
    for algo, want in (("hier", hier), ("ring", ring), ("rd", rd)):
        assert math.isclose(c.time_us(algo, m, n), want, rel_tol=1e-12), algo
    # the same message on one level (all of m through one all-reduce) reads the big regime
    assert inter.params(m) == big
