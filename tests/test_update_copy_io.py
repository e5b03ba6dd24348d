"""SGD update, copies and data I/O: results against numpy, verification, dataset reuse, and the CLI
contract of `gdlbench update`, `gdlbench copy` and `gdlbench io` (bad input: one line, exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import requires_gpu, run_cli

from gdlbench._native import _core
from gdlbench.cli import main

# The modules (gdlbench.copy, .io, .update are the top-level functions of the same names).
from gdlbench.primitives import copy as gcopy  # noqa: E402
from gdlbench.primitives import io as gio  # noqa: E402
from gdlbench.primitives import update as gupdate  # noqa: E402

# ---- SGD --------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 1003, 100_000])
def test_cpu_sgd_matches_numpy(n):
    rng = np.random.default_rng(n)
    w, g, v = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    ref_w, ref_v = gupdate.reference(w, g, v, 0.1, 0.9, 1e-3)
    _core.sgd_update(w, g, v, 0.1, 0.9, 1e-3)
    np.testing.assert_allclose(w, ref_w, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(v, ref_v, rtol=1e-6, atol=1e-6)


def test_sgd_is_pytorch_convention():
    w, g, v = (np.array([x], np.float32) for x in (2.0, 0.5, 1.0))
    _core.sgd_update(w, g, v, 0.1, 0.9, 0.01)
    # v = 0.9*1 + (0.5 + 0.01*2) = 1.42; w = 2 - 0.1*1.42 = 1.858
    assert v[0] == pytest.approx(1.42) and w[0] == pytest.approx(1.858)


def test_check_detects_a_wrong_kernel():
    assert not gupdate.check_kernel(lambda w, g, v: None, 0.1, 0.9, 0.0)["passed"]


def test_update_result():
    r = gupdate.update(10_000, "cpu", iters=3, warmup=1)
    assert r.passed and r.bytes_moved == 200_000 and r.copy_bytes == 100_000
    up, cp = r.rows()
    assert up["op"] == "sgd-update" and len(up["samples_us"]) == 3 and up["gbs"] > 0
    assert cp["bytes_moved"] == up["bytes_moved"] and r.ratio == pytest.approx(up["gbs"] / cp["gbs"])
    json.dumps(r.to_dict())


@requires_gpu
def test_cuda_update_matches_numpy():
    r = gupdate.update(1_000_003, "cuda", iters=3, warmup=1)
    assert r.passed and r.device == "cuda" and r.update_gbs > 0 and r.copy_gbs > 0


# ---- copies -------------------------------------------------------------------------------------

def test_cpu_copy_verifies_and_reports():
    r = gcopy.copy(3 * 2**20 + 5, "h2d", "pinned", "cpu", copies=2, iters=3, warmup=1)
    assert r.wrong == 0 and r.memory == "host" and r.gbs > 0 and "stands in" in r.note
    assert r.to_dict()["copies_per_sample"] == 2


def test_copy_plan():
    assert gcopy.plan("all", "both") == [("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"),
                                         ("d2h", "pageable"), ("d2d", "device")]
    with pytest.raises(ValueError, match="direction"):
        gcopy.plan("up", "pinned")


@requires_gpu
@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d"])
@pytest.mark.parametrize("memory", ["pinned", "pageable"])
def test_cuda_copy_verifies(direction, memory):
    r = gcopy.copy(64 * 2**20 + 3, direction, memory, "cuda", copies=2, iters=3, warmup=1)
    assert r.wrong == 0 and r.gbs > 0


# ---- data I/O -----------------------------------------------------------------------------------

def test_dataset_generated_once_then_reused(tmp_path):
    ds = gio.Dataset.ensure(tmp_path / "d", 6, (64, 48))
    assert ds.generated and len(ds.files) == 6 and ds.total_bytes > 0
    again = gio.Dataset.ensure(tmp_path / "d", 4, (64, 48))
    assert not again.generated and again.files == ds.files[:4]
    (tmp_path / "d" / ds.files[2]).unlink()  # a damaged dataset is regenerated
    assert gio.Dataset.ensure(tmp_path / "d", 6, (64, 48)).generated
    assert gio.Dataset.ensure(tmp_path / "d", 6, (80, 48)).generated  # another size


def test_generated_files_are_real_jpegs(tmp_path):
    from PIL import Image

    ds = gio.Dataset.ensure(tmp_path, 2, (120, 90))
    with Image.open(ds.paths()[0]) as im:
        assert im.format == "JPEG" and im.size == (120, 90) and im.mode == "RGB"


@pytest.mark.parametrize("decode", [True, False])
def test_time_read(tmp_path, decode):
    ds = gio.Dataset.ensure(tmp_path, 5, (64, 48))
    r = gio.time_read(ds, batch=3, threads=2, decode=decode, iters=4, warmup=1)
    d = r.to_dict()
    assert len(d["samples_us"]) == 4 and d["images_per_s"] > 0 and d["mb_per_s"] > 0
    assert d["op"] == ("read+decode" if decode else "read") and "Python threads" in r.measurement.region


# ---- the CLI ------------------------------------------------------------------------------------

def test_cli_update_json(tmp_path):
    out = tmp_path / "u.json"
    p = run_cli("update", "--params", "20K", "--device", "cpu", "-n", "3", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["command"] == "update" and doc["rows"][0]["params"] == 20_000 and "ratio" in doc["summary"]
    assert "x the copy bandwidth" in " ".join(p.stdout.split())  # the caption wraps with the table
    # the update exact, both rows moving the same 20 B per parameter, GB/s = bytes / median time,
    # and the ratio the one of the two
    upd, copy = doc["rows"]
    assert (upd["op"], copy["op"], upd["wrong"]) == ("sgd-update", "copy (reference)", 0)
    assert upd["bytes_moved"] == copy["bytes_moved"] == 20 * 20_000
    for r in (upd, copy):
        assert r["time_us"] > 0 and r["gbs"] == pytest.approx(r["bytes_moved"] / r["time_us"] / 1e3, rel=1e-9)
    assert doc["summary"]["ratio"] == pytest.approx(upd["gbs"] / copy["gbs"], rel=1e-9) == upd["vs_copy"]


def test_cli_copy_json(tmp_path):
    out = tmp_path / "c.json"
    p = run_cli("copy", "--size", "2MB", "--direction", "all", "--memory", "both", "--device", "cpu", "-n", "2",
                "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert [r["direction"] for r in doc["rows"]] == ["h2d", "d2h", "d2d"]
    assert all(r["wrong"] == 0 and r["size_bytes"] == 2_000_000 for r in doc["rows"])
    for r in doc["rows"]:  # GB/s of one copy: a sample holds copies_per_sample copies
        assert r["time_per_copy_us"] == pytest.approx(r["time_us"] / r["copies_per_sample"], rel=1e-9)
        assert r["time_us"] > 0 and r["gbs"] == pytest.approx(2_000_000 / r["time_per_copy_us"] / 1e3, rel=1e-9)
    assert "stands in" in p.stdout and doc["notes"]


def test_cli_io_json(tmp_path):
    out = tmp_path / "io.json"
    p = run_cli("io", "--dir", str(tmp_path / "ds"), "--images", "4", "--batch", "2", "--size", "64x48",
                "--threads", "2", "-n", "2", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert [r["op"] for r in doc["rows"]] == ["read+decode", "read"] and doc["summary"]["generated"]
    # 4 real 64x48 JPEGs; a batch of 2 per sample: images/s = 2 / median time, MB/s from the files' size
    assert doc["summary"]["images"] == 4 and doc["summary"]["total_bytes"] > 4 * 100
    for r in doc["rows"]:
        assert (r["batch"], r["images"], r["width"], r["height"]) == (2, 4, 64, 48)
        assert r["mean_file_bytes"] == pytest.approx(doc["summary"]["total_bytes"] / 4)
        assert r["time_us"] > 0 and r["images_per_s"] == pytest.approx(2 / (r["time_us"] * 1e-6), rel=1e-9)
        assert r["mb_per_s"] == pytest.approx(r["images_per_s"] * r["mean_file_bytes"] / 1e6, rel=1e-9)
    p = run_cli("io", "--dir", str(tmp_path / "ds"), "--images", "4", "--batch", "2", "--size", "64x48",
                "--no-decode", "-n", "2", "--json", str(out))
    assert p.returncode == 0 and "reused" in p.stdout, p.stderr
    doc = json.loads(out.read_text())
    assert [r["op"] for r in doc["rows"]] == ["read"] and doc["summary"]["generated"] is False


@pytest.mark.parametrize("argv, message", [
    (["update", "--params", "-5"], "--params"),
    (["update", "--params", "abc"], "cannot read"),
    (["update", "--params", "0"], "at least 1"),
    (["update", "--params", "100G"], "host memory"),
    (["update", "--momentum", "1.5", "--params", "10"], "momentum"),
    (["update", "--iters", "0"], "iters"),
    (["update", "--json", "/nonexistent-dir/u.json"], "does not exist"),
    (["copy", "--size", "-1"], "--size"),
    (["copy", "--size", "0"], "positive"),
    (["copy", "--size", "1XB"], "unknown unit"),
    (["copy", "--direction", "sideways"], "direction"),
    (["copy", "--memory", "magic"], "memory"),
    (["copy", "--size", "900GB"], "host memory"),
    (["copy", "--copies", "0"], "copies"),
    (["copy", "--device", "tpu"], "device"),
    (["io", "--size", "5x5"], "between 8"),
    (["io", "--size", "big"], "WIDTHxHEIGHT"),
    (["io", "--images", "0"], ">= 1"),
    (["io", "--batch", "-3"], ">= 1"),
    (["io", "--threads", "0"], "threads"),
    (["io", "--decode", "--no-decode"], "not allowed"),
])
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    # In-process (gdlbench.cli.main is the whole CLI): the subprocess path is covered below.
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


@pytest.mark.parametrize("argv", [["update", "--params", "-5"], ["copy", "--direction", "sideways"],
                                  ["io", "--size", "5x5"]])
def test_cli_bad_input_as_a_process(argv):
    p = run_cli(*argv)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr


def test_cli_io_unwritable_dir_is_exit_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = main(["io", "--dir", str(blocker / "sub"), "--images", "2"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--dir" in err, err
