"""The custom studies in examples/, run as a user runs them, at small sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import NEUTRAL_CWD, check_fit, mpi_env, run_mpi

from gdlbench.primitives import costmodel

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                       timeout=timeout, env=mpi_env(), cwd=NEUTRAL_CWD)
    assert r.returncode == 0, r.stderr
    return r


def test_custom_network_measured_and_scaled(tmp_path):
    run_example("custom_network.py", "--batch", "2", "--iters", "6", "--no-io", "--device", "cpu",
                "--workers", "1,4,64", "--out", str(tmp_path))
    spec = json.loads((EXAMPLES / "my_net.json").read_text())
    iteration = json.loads((tmp_path / "iteration.json").read_text())
    # every layer of the user's spec was timed alone, forward and backward
    timed = {(r["layer"], r["phase"]) for r in iteration["rows"] if "layer" in r}
    assert timed == {(la["name"], p) for la in spec["layers"] for p in ("forward", "backward")}
    composed = [r for r in iteration["rows"] if r.get("phase") == "iteration"]
    assert [r["strategy"] for r in composed] == ["serial", "wfbp"]
    # the model against this run, within 50 % + 3 standard errors of a 6-round run (with 2 rounds, one
    # hiccup in an isolated sample of this tiny net put the model 218 % off once in CI, on 1 rank)
    for r in composed:
        assert r["error_pct"] == pytest.approx(100 * (r["predicted_us"] - r["time_us"]) / r["time_us"])
        assert abs(r["error_pct"]) < 50 + 3 * r["error_se_pct"], (r["error_pct"], r["error_se_pct"])
    # parameters by hand: conv1 16*3*9+16, bn1 2*16, conv2 32*16*9+32, fc 10*32+10
    predict = json.loads((tmp_path / "predict.json").read_text())
    assert predict["command"] == "predict"
    rows = predict["rows"]
    assert [(r["strategy"], r["workers"]) for r in rows] == [(s, n) for s in ("serial", "wfbp") for n in (1, 4, 64)]
    for s in ("serial", "wfbp"):
        eff = [r["efficiency"] for r in rows if r["strategy"] == s]
        assert eff[0] == 1.0 and eff == sorted(eff, reverse=True)  # one worker is perfect; more lose time
    from gdlbench import load_network

    assert load_network(str(EXAMPLES / "my_net.json")).params == 448 + 32 + 4640 + 330


def test_custom_strategy_against_the_presets(tmp_path):
    run_example("custom_strategy.py", "--workers", "1,8,512", "--measure-batch", "2", "--iters", "2",
                "--out", str(tmp_path))
    rows = json.loads((tmp_path / "predict.json").read_text())["rows"]
    at = {(r["strategy"], r["workers"]): r for r in rows}
    # 50 MB buckets send fewer, larger messages than DDP's 25 MiB and than one per layer
    assert at["ddp-50mb", 8]["messages"] < at["wfbp-fusion", 8]["messages"] < at["wfbp", 8]["messages"]
    # bf16 gradients: half the bytes; at 8 workers the bandwidth term dominates (< 0.6 of the fp32
    # comm time), at 512 the ring's 2(N-1) latency steps stay the same
    assert at["ddp-50mb-bf16", 8]["comm_us"] < 0.6 * at["ddp-50mb", 8]["comm_us"]
    for n in (8, 512):
        assert at["ddp-50mb-bf16", n]["comm_us"] < at["ddp-50mb", n]["comm_us"]
        assert at["ddp-50mb-bf16", n]["t_iter_us"] <= at["ddp-50mb", n]["t_iter_us"]
    # ... and the executor ran the user's strategy for real
    iteration = json.loads((tmp_path / "iteration.json").read_text())
    composed = {r["strategy"]: r for r in iteration["rows"] if r.get("phase") == "iteration"}
    assert set(composed) == {"ddp-50mb", "wfbp"} and composed["ddp-50mb"]["messages"] == 1
    assert composed["ddp-50mb"]["time_us"] > 0


def test_comm_study_fits_and_what_if(tmp_path):
    pytest.importorskip("matplotlib")  # in the [test] extra; the GPU image's venv may lack it
    r = run_mpi(2, sys.executable, str(EXAMPLES / "comm_study.py"), "--algos", "library,ring", "--min", "1K", "--max", "64K",
                "--factor", "4", "--iters", "3", "--faster", "10", "--out", str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "allreduce.json").read_text())
    assert len(doc["rows"]) == 2 * 4 and all(row["wrong"] == 0 and row["nranks"] == 2 for row in doc["rows"])
    fits = {f["algo"]: f for f in doc["summary"]["fit"]}
    assert set(fits) == {"library", "ring"}
    whatif = doc["summary"]["what_if"]["predicted_us"]
    assert doc["summary"]["what_if"]["link_speedup"] == 10
    for algo, f in fits.items():
        assert len(f["points"]) == 4
        # 1-64 KiB on a loaded 2-core VM: the numbers hold together, the fit may be flat (beta 0)
        check_fit(f, max_median_error=10.0, loaded=True)
        # the same alpha on a 10x faster link: exactly the alpha term plus a tenth of the beta term
        a, b, g = costmodel.coefficients(algo, 2)
        assert set(whatif[algo]) == {str(p["size_bytes"]) for p in f["points"]}
        for size, t in whatif[algo].items():
            m = int(size)
            want = a * f["alpha_us"] + m * (b * f["beta_us_per_byte"] / 10 + g * (f["gamma_us_per_byte"] or 0))
            assert t == pytest.approx(want, rel=1e-9)
            now = a * f["alpha_us"] + m * (b * f["beta_us_per_byte"] + g * (f["gamma_us_per_byte"] or 0))
            assert t < now if f["beta_us_per_byte"] > 0 else t == pytest.approx(now, rel=1e-12)
    png = (tmp_path / "comm_study.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "faster link" in r.stdout
