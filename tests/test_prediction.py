"""gdlbench.whatif.prediction: a PredictRequest goes through to_argv() and the CLI's parser to an equal
request, its printed command gives the same number through the CLI, the what-ifs the study builds
with dataclasses.replace price as their commands do, and a bad field is a clear ValueError (one
line and exit 2 from the CLI)."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import run_cli

from gdlbench.whatif.prediction import CommSource, PredictRequest, evaluate

MLP = str(Path(__file__).parent / "data" / "mlp.json")


def _from_cli(argv: list[str]) -> PredictRequest:
    from gdlbench import cli
    from gdlbench.cli.commands.predict import request_from_args

    return request_from_args(cli.build_parser().parse_args(["predict", *argv]))


@pytest.fixture()
def phases_file(tmp_path) -> str:
    """MLP phases with contention measured per strategy (so a fused strategy's name matters)."""
    from gdlbench.model.phases import Phases

    p = Phases.synthetic(MLP, 8, gflops=50)
    p.io_threads, p.io_us = 2, 300.0
    p.strategy_slowdowns = {"cntk": (1.5, 1.25)}
    path = tmp_path / "phases.json"
    path.write_text(json.dumps(p.to_report()))
    return str(path)


REQUESTS = {
    "defaults": PredictRequest(net="alexnet"),
    "a fit file": PredictRequest(phases="cells/iteration-mlp.json", net=MLP, strategy="cntk",
                                 comm=CommSource(from_file="cells/allreduce-fit.json", algo="library"),
                                 workers=(1, 2, 16)),
    "every what-if": PredictRequest(net="resnet50", comm=CommSource(alpha=5.123456789, beta=1e-4, gamma=2.5e-7),
                                    strategy="wfbp-fusion,ddp,ps", bucket_bytes=3 * 2**20, servers=4,
                                    workers=(64,), device="cpu", fuse_bytes=4096, overlap="wfbp",
                                    link_scale="1:0.5", grad_dtype="bfloat16", compress="100:2e-4", batch=16,
                                    io_threads=8),
    "a bandwidth with a unit": PredictRequest(phases="p.json", comm=CommSource(alpha=5.0, bandwidth="100Gb/s")),
    "a cluster file": PredictRequest(phases="p.json", comm=CommSource(cluster="c.json", algo="ring")),
    "a cluster's shape": PredictRequest(phases="p.json", comm=CommSource(nodes=4, per_node=8, intra="nvlink4",
                                                                         inter="5:12.5", links_per_node=2)),
}


@pytest.mark.parametrize("name", REQUESTS)
def test_a_request_round_trips_through_its_command_line(name):
    request = REQUESTS[name]
    again = _from_cli(request.to_argv())
    assert again == request and again.strategies == request.strategies
    assert shlex.split(request.command()) == ["gdlbench", "predict", *request.to_argv()]


def test_fused_strategy_is_a_field_of_its_own():
    from gdlbench.model.strategies import PRESETS

    s = PredictRequest(net="alexnet", strategy="cntk", fuse_bytes=16 * 2**20).strategies[0]
    assert (s.name, s.bucket_bytes, s.overlap) == ("cntk-bucket-16MiB", 16 * 2**20, PRESETS["cntk"].overlap)
    assert replace(PRESETS["cntk"], name=s.name, bucket_bytes=s.bucket_bytes, source=s.source) == s


def test_the_study_what_ifs_price_as_their_commands(phases_file):
    """Each what-if as the study builds it (replace on the base request) gives the rows its own
    command gives once parsed; the fused one through the real CLI too."""
    base = PredictRequest(phases=phases_file, net=MLP, comm=CommSource(alpha=5.0, bandwidth="10"), strategy="cntk",
                          workers=(16,))
    what_ifs = [base, replace(base, overlap="wfbp"), replace(base, fuse_bytes=4 * 2**20),
                replace(base, link_scale="2"), replace(base, link_scale="1:0.5"),
                replace(base, grad_dtype="bfloat16"), replace(base, compress="100:0.0002"), replace(base, batch=16),
                replace(base, io_threads=4)]
    rows = {r: evaluate(r).rows for r in what_ifs}
    for request in what_ifs:
        assert evaluate(_from_cli(request.to_argv())).rows == rows[request], request.command()
    assert len({r[0]["t_iter_us"] for r in rows.values()}) > 5  # the what-ifs move the number
    fused = what_ifs[2]
    p = run_cli(*fused.command().split()[1:], "--json", str(Path(phases_file).with_name("p.json")))
    assert p.returncode == 0, p.stderr
    row = json.loads(Path(phases_file).with_name("p.json").read_text())["rows"][0]
    assert (row["strategy"], row["t_iter_us"]) == ("cntk-bucket-4MiB", rows[fused][0]["t_iter_us"])


BAD = [
    (dict(net="alexnet", workers=(0,)), "--workers"),
    (dict(net="alexnet", workers=(2_000_000,)), "at most 1,000,000"),
    (dict(), "--phases FILE"),
    (dict(net="alexnet", batch=0), "--batch must be >= 1"),
    (dict(net="alexnet", io_threads=0), "--io-threads must be >= 1"),
    (dict(net="alexnet", fuse_bytes=0), "--fuse must be >= 1"),
    (dict(net="alexnet", servers=0), "--servers"),
    (dict(net="alexnet", grad_dtype="float8"), "--grad-dtype"),
    (dict(net="alexnet", overlap="always"), "--overlap"),
    (dict(net="alexnet", link_scale="fast"), "--link-scale"),
    (dict(net="alexnet", compress="lots"), "--compress"),
    (dict(net="alexnet", strategy="nosuch"), "unknown strategy 'nosuch'"),
]


@pytest.mark.parametrize(("fields", "message"), BAD, ids=[m for _, m in BAD])
def test_a_bad_request_field_is_a_clear_value_error(fields, message):
    with pytest.raises(ValueError, match=message):
        PredictRequest(**fields)


@pytest.mark.parametrize(("fields", "message"), [
    (dict(from_file="fit.json", cluster="c.json"), "not both"),
    (dict(cluster="c.json", nodes=2), "drop --nodes"),
    (dict(per_node=8, intra="nvlink4"), "missing --inter"),
    (dict(per_node=8, intra="nvlink4", inter="ib-hdr", algo="ps"), "ps is a strategy"),
    (dict(alpha=5.0, bandwidth="fast"), "--bandwidth"),
])
def test_a_bad_comm_source_is_a_clear_value_error(fields, message):
    with pytest.raises(ValueError, match=message):
        CommSource(**fields)


def test_the_cli_says_a_bad_request_in_one_line_and_exits_2():
    p = run_cli("predict", "--net", "alexnet", "--alpha", "5", "--bandwidth", "10", "--io-threads", "0")
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "--io-threads must be >= 1" in p.stderr, p.stderr


def test_each_row_names_the_contention_that_priced_it(tmp_path):
    """The phases' contention, measured over one node's link, prices messages over that link (the
    phases' own fit, a fit of the same node); over another (a cluster's inter-node level, a
    --bandwidth formula, a fit measured elsewhere) the unmeasured default, or the contention that
    fit measured on its own link."""
    from gdlbench.model.phases import Phases

    env1 = {"cpu": "cpu X", "topology": {"nodes": 1, "ranks_per_node": 2}}
    fit = {"algo": "library", "alpha_us": 20.0, "beta_us_per_byte": 1e-3}
    p = Phases.synthetic(MLP, 8, gflops=50)
    p.overlap_efficiency, p.compute_slowdown, p.comm_slowdown = 0.0, 3.0, 5.0
    doc = p.to_report() | {"env": env1}
    doc["summary"]["fit"] = fit
    phases = tmp_path / "phases.json"
    phases.write_text(json.dumps(doc))

    def write(name: str, env: dict, extra: dict | None = None) -> str:
        path = tmp_path / name
        path.write_text(json.dumps({"env": env, "summary": {"fit": fit, **(extra or {})}}))
        return str(path)

    same = write("same.json", env1)
    other = write("other.json", {"cpu": "cpu Y", "topology": {"nodes": 1}})
    other_own = write("other-own.json", {"cpu": "cpu Y", "topology": {"nodes": 1}},
                      {"contention": {"compute_slowdown": 1.5, "comm_slowdown": 1.25}})
    levels = {"intra": fit, "inter": fit}
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"env": {"cpu": "cpu X", "topology": {"nodes": 2, "ranks_per_node": 1}},
                                   "summary": {"fit": {"levels": levels}}}))

    def row(comm: CommSource) -> dict:
        ev = evaluate(PredictRequest(phases=str(phases), net=MLP, comm=comm, strategy="wfbp", workers=(2,)))
        return ev.rows[0]

    measured = "measured on this link (intra-node link of cpu X)"
    own, same_node = row(CommSource()), row(CommSource(from_file=same))
    assert own["contention"] == same_node["contention"] == measured
    assert own["t_iter_us"] == pytest.approx(same_node["t_iter_us"], rel=1e-12)
    assumed = "assumed for an unmeasured link: 2 - overlap_efficiency = 2 for backward and messages (messages over "
    across = row(CommSource(cluster=str(cluster), algo="ring"))
    assert across["contention"] == assumed + ("inter-node link of cpu X; the contention measured over intra-node "
                                              "link of cpu X is not carried)")
    assert row(CommSource(alpha=20.0, beta=1e-3))["contention"].startswith(assumed + "a link not measured;")
    assert row(CommSource(from_file=other))["contention"].startswith(assumed + "intra-node link of cpu Y;")
    # slower than measured here (3x, 5x) is not the same as the default (2x): the numbers move with the rule
    assert row(CommSource(alpha=20.0, beta=1e-3))["t_iter_us"] < own["t_iter_us"]
    # a fit measured elsewhere with its own contention: that contention prices its messages
    theirs = evaluate(PredictRequest(phases=str(phases), net=MLP, comm=CommSource(from_file=other_own),
                                     strategy="wfbp", workers=(2,)))
    assert theirs.rows[0]["contention"] == "measured on this link (intra-node link of cpu Y)"
    assert theirs.summary["phases"]["contention"]["compute_slowdown"] == 1.5
    # the console says it under the table
    p = run_cli("predict", "--phases", str(phases), "--net", MLP, "--cluster", str(cluster), "--algo", "ring",
                "--strategy", "wfbp", "--workers", "1,2")
    assert p.returncode == 0, p.stderr
    assert "contention beside backward at N = 2: assumed for an unmeasured link" in " ".join(p.stdout.split())
