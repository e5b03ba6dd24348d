"""The Python API: a function per CLI command, Compare writing what the CLI writes, noisy rows,
docstring examples."""

from __future__ import annotations

import csv
import doctest
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import NEUTRAL_CWD, mpi_env, run_cli
from rich.console import Console

import gdlbench
from gdlbench.cli import COMMANDS
from gdlbench.common.output import Column, print_table

# CLI command -> the public function (or class) that measures what it measures
API_OF_COMMAND = {
    "gemm": "gemm", "conv": "conv", "layer": "layer", "allreduce": "allreduce", "reduce_scatter": "reduce_scatter",
    "allgather": "allgather", "broadcast": "broadcast", "copy": "copy", "update": "update", "io": "io",
    "iteration": "Iteration", "predict": "predict", "nets": "load_network", "env": "environment",
    "compress": "compress", "import-trace": "import_trace",
}
# commands that measure nothing of their own: they compose the functions above
COMPOSITIONS = {"study"}


def test_all_names_a_function_for_every_command_and_nothing_private():
    assert set(API_OF_COMMAND) | COMPOSITIONS == set(COMMANDS), "a CLI command without its function (or a stale entry)"
    for command, name in API_OF_COMMAND.items():
        assert name in gdlbench.__all__, command
        assert callable(getattr(gdlbench, name)), command
    assert len(set(gdlbench.__all__)) == len(gdlbench.__all__)
    for name in gdlbench.__all__:
        assert not name.startswith("_") and hasattr(gdlbench, name), name
    assert "annotations" not in dir(gdlbench)  # no leaked `from __future__ import annotations`


@pytest.mark.parametrize("module", ["gdlbench", "gdlbench.common.measurement", "gdlbench.common.compare", "gdlbench.whatif.scaling"])
def test_docstring_examples_run(module):
    mod = sys.modules[module] if module in sys.modules else __import__(module, fromlist=["_"])
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_noisy_flag_beside_cv_and_marked_in_tables():
    quiet = gdlbench.Measurement([100.0, 101.0, 100.5, 99.5], "steady-clock")
    noisy = gdlbench.Measurement([100.0, 160.0, 100.5, 180.0], "steady-clock")
    assert not quiet.noisy and noisy.noisy
    keys = list(noisy.stats())
    assert keys.index("noisy") == keys.index("time_cv") + 1
    assert noisy.stats("t")["t_noisy"] is True
    rows = [{"name": "a", **quiet.stats()}, {"name": "b", **noisy.stats()}]
    out = io.StringIO()
    print_table("t", [Column("name", "name"), Column("time (us)", "time_us", "{:.1f}")], rows,
                console=Console(file=out, width=200))
    text = out.getvalue()
    assert "130.2 !" in text and "100.2 !" not in text and "100.2" in text
    assert "interquartile range" in text


def test_every_result_row_carries_noisy():
    g = gdlbench.gemm(32, 32, 32, device="cpu", iters=3, warmup=1)
    u = gdlbench.update(1000, device="cpu", iters=3, warmup=1)
    c = gdlbench.copy("64K", device="cpu", iters=3, warmup=1, copies=1)
    la = gdlbench.layer("resnet50-relu2a", batch=1, device="cpu", passes="fwd", iters=3, warmup=1)
    for row in [g.to_dict(), *u.rows(), c.to_dict(), *(r.to_dict() for r in la)]:
        assert isinstance(row["noisy"], bool) and "time_cv" in row


def test_functions_take_the_clis_units():
    c = gdlbench.copy("64K", device="cpu", iters=2, warmup=0, copies=1)
    assert c.size_bytes == 65536 and c.wrong == 0
    u = gdlbench.update("2K", device="cpu", iters=2, warmup=0)
    assert u.params == 2000 and u.passed and u.to_dict()["op"] == "sgd-update"
    r = gdlbench.io(batch=2, threads=1, images=4, size="32x24", iters=2, warmup=0)
    assert r.to_dict()["op"] == "read+decode" and r.images_per_s > 0
    layers = gdlbench.layer("alexnet-pool1,resnet50-relu2a", batch=1, device="cpu", passes="fwd,bwd",
                            iters=2, warmup=0)
    assert [(x.name, x.pass_) for x in layers] == [("alexnet-pool1", "fwd"), ("alexnet-pool1", "bwd"),
                                                  ("resnet50-relu2a", "fwd"), ("resnet50-relu2a", "bwd")]
    with pytest.raises(gdlbench.UsageError, match="unknown nope"):
        gdlbench.layer("nope")


def test_predict_mirrors_the_cli(tmp_path):
    phases = gdlbench.Phases.synthetic("alexnet", 64)
    p = tmp_path / "phases.json"
    p.write_text(json.dumps({"args": {"net": "alexnet", "batch": 64}, "rows": [
        {"phase": k, "time_us": v} for k, v in
        (("forward", phases.forward_us), ("backward", phases.backward_us), ("update", phases.update_us))]}))
    r = gdlbench.predict(phases=str(p), alpha_us=5, bandwidth_gbs=10, strategy="wfbp,cntk", workers="1,4")
    assert [(row["strategy"], row["workers"]) for row in r.rows()] == [("wfbp", 1), ("wfbp", 4), ("cntk", 1),
                                                                       ("cntk", 4)]
    assert r.rows()[0]["speedup"] == pytest.approx(1.0)
    half = gdlbench.predict("alexnet", phases, gdlbench.CommModel.from_bandwidth("ring", 5, 10), strategy="cntk",
                            workers=[8], gradient_bytes=2)
    full = gdlbench.predict("alexnet", phases, gdlbench.CommModel.from_bandwidth("ring", 5, 10), strategy="cntk",
                            workers=[8])
    assert half.rows()[0]["comm_us"] < 0.6 * full.rows()[0]["comm_us"]
    cli = tmp_path / "cli.json"
    assert run_cli("predict", "--phases", str(p), "--alpha", "5", "--bandwidth", "10", "--strategy", "wfbp,cntk",
                   "--workers", "1,4", "--json", str(cli)).returncode == 0
    assert json.loads(cli.read_text())["rows"] == r.rows()


STUDY = """
import sys
import gdlbench
out = sys.argv[1]
results = gdlbench.allreduce([1024, 4096], iters=3, warmup=1, device="cpu")
results.append(gdlbench.gemm(64, 48, 32, device="cpu", iters=3, warmup=1))
study = gdlbench.Compare(results)
study.print()
print(study.write_dir(out))
"""


def _csv_header(path) -> list[str]:
    with open(path) as f:
        return next(csv.reader(f))


def test_a_study_script_writes_the_rows_the_cli_writes(tmp_path):
    """Two all-reduce sizes and a GEMM measured in a script and written through Compare: the same
    JSON rows (keys, units in the key names, inputs) and CSV columns as the CLI's for the same
    measurements."""
    cli_ar, cli_ar_csv, cli_g, cli_g_csv = (tmp_path / n for n in ("ar.json", "ar.csv", "g.json", "g.csv"))
    r = run_cli("allreduce", "--size", "1024,4096", "-n", "3", "-w", "1", "--device", "cpu",
                "--json", str(cli_ar), "--csv", str(cli_ar_csv))
    assert r.returncode == 0, r.stderr
    r = run_cli("gemm", "-m", "64", "-n", "48", "-k", "32", "--iters", "3", "--warmup", "1", "--device", "cpu",
                "--json", str(cli_g), "--csv", str(cli_g_csv))
    assert r.returncode == 0, r.stderr
    study = tmp_path / "study"
    r = subprocess.run([sys.executable, "-c", STUDY, str(study)], capture_output=True, text=True, timeout=120,
                       env=mpi_env(), cwd=NEUTRAL_CWD)
    assert r.returncode == 0, r.stderr
    assert "gdlbench allreduce" in r.stdout and "gdlbench gemm" in r.stdout  # one table per command
    for command, cli_json, cli_csv in (("allreduce", cli_ar, cli_ar_csv), ("gemm", cli_g, cli_g_csv)):
        ours, theirs = json.loads((study / f"{command}.json").read_text()), json.loads(cli_json.read_text())
        assert ours["command"] == theirs["command"] == command
        assert set(ours) == set(theirs) and set(ours["env"]) == set(theirs["env"])
        assert ours["timing"]["clock"] == theirs["timing"]["clock"]
        assert ours["timing"]["rank_reduction"] == theirs["timing"]["rank_reduction"]
        assert len(ours["rows"]) == len(theirs["rows"]) > 0
        for a, b in zip(ours["rows"], theirs["rows"], strict=True):
            assert list(a) == list(b)  # the same keys in the same order: the same units
            timed = {k for k in a if k.startswith(("time_", "samples", "algbw", "busbw", "tflops", "max_rel", "noisy"))}
            assert {k: v for k, v in a.items() if k not in timed} == {k: v for k, v in b.items() if k not in timed}
            assert len(a["samples_us"]) == len(b["samples_us"]) == 3
        assert _csv_header(study / f"{command}.csv") == _csv_header(cli_csv)


def test_compare_names_the_command_when_results_are_mixed(tmp_path):
    results = [*gdlbench.allreduce(64, iters=2, warmup=0, inplace=True, device="cpu"),
               gdlbench.gemm(16, 16, 16, device="cpu", iters=2, warmup=0)]
    cmp = gdlbench.Compare(results)
    assert cmp.commands == ["allreduce", "gemm"]
    with pytest.raises(gdlbench.UsageError, match="several commands"):
        cmp.write_json(tmp_path / "x.json")
    cmp.write_json(tmp_path / "g.json", command="gemm")
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["tool"] == "gdlbench" and doc["rows"] == cmp.rows("gemm") and doc["env"]["world_size"] == 1
    with pytest.raises(gdlbench.UsageError, match="not a gdlbench result"):
        gdlbench.Compare([object()])
    with pytest.raises(gdlbench.UsageError, match="no results"):
        gdlbench.Compare([])


def test_median_se_matches_the_spread_of_medians():
    """median_se is the standard error of the median: over many draws of n samples, the medians
    spread by about what one draw's median_se says, and one stalled sample hardly moves it."""
    rng = np.random.default_rng(7)
    draws = rng.normal(1000.0, 50.0, size=(2000, 25))
    spread_of_medians = float(np.std(np.median(draws, axis=1)))
    estimates = [gdlbench.Measurement(list(d), "steady-clock").median_se for d in draws]
    assert abs(float(np.median(estimates)) / spread_of_medians - 1) < 0.15
    base = gdlbench.Measurement(list(draws[0]), "steady-clock")
    stalled = gdlbench.Measurement(list(draws[0][:-1]) + [1e6], "steady-clock")
    assert stalled.median_se < 1.5 * base.median_se
    assert gdlbench.Measurement([5.0], "steady-clock").median_se == 0.0
