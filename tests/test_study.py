"""gdlbench study: a real study on 2 ranks (small nets, so the suite stays quick), its report in a
real headless browser, every report number against the JSON it names, a study killed midway and
resumed without measuring a finished cell again, and predict's what-if options."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import GDLBENCH_CMD, MPIEXEC, NEUTRAL_CWD, mpi_env, run_cli

DATA = Path(__file__).parent / "data"
MLP, CONVNET = str(DATA / "mlp.json"), str(DATA / "convnet.json")
STUDY_ARGS = ["--nets", f"{MLP},{CONVNET}", "--strategies", "cntk,wfbp-fusion,mxnet,serial", "--batch", "4",
              "--workers", "1,2,4,16,64", "--iters", "2", "--warmup", "0"]


def _study(out: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_cli("study", "--out", str(out), *STUDY_ARGS, *extra, nranks=2, timeout=timeout)


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("study") / "s"
    p = _study(out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "left" in p.stderr or "estimate" in p.stderr  # progress with an estimate of the time left
    return out


def _pointer(doc, ptr: str):
    for part in ptr.lstrip("/").split("/"):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


class _Numbers(HTMLParser):
    """(data-src, data-scale, shown text) of every number in the report."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, float, str]] = []
        self._open: tuple[str, float] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "span" and "data-src" in a:
            self._open = (a["data-src"], float(a["data-scale"]))
            self.found.append((*self._open, ""))

    def handle_data(self, data):
        if self._open is not None:
            src, scale, text = self.found[-1]
            self.found[-1] = (src, scale, text + data)

    def handle_endtag(self, tag):
        if tag == "span":
            self._open = None


def test_study_directory_holds_the_report_and_every_measurement(study_dir):
    index = json.loads((study_dir / "study.json").read_text())
    assert {c["state"] for c in index["cells"]} == {"done"}
    for cell in index["cells"]:  # each measurement in the project's JSON shape
        doc = json.loads((study_dir / cell["json"]).read_text())
        assert doc["tool"] == "gdlbench" and doc["rows"] and "env" in doc and "timing" in doc
    assert set(index["analysis"]["nets"]) == {"mlp", "convnet"}
    for name in ("report.html", "report.md", *index["report"]["images"]):
        assert (study_dir / name).stat().st_size > 0
    md = (study_dir / "report.md").read_text()
    html = (study_dir / "report.html").read_text()
    for heading in ("## Verdicts", "## Machine, versions and how to reproduce", "### Scaling",
                    "### What would make it faster", "### Measured timeline of one iteration per strategy"):
        assert heading in md and heading[heading.index(" ") + 1:] in html
    assert "http://" not in html and "https://" not in html  # nothing to fetch
    assert html.count("data:image/png;base64,") == len(index["report"]["images"])
    assert not list(study_dir.rglob(".*.tmp*"))


def test_every_report_number_traces_to_its_json_field(study_dir):
    index = json.loads((study_dir / "study.json").read_text())
    parser = _Numbers()
    parser.feed((study_dir / "report.html").read_text())
    assert len(parser.found) > 100
    for src, scale, text in parser.found:
        value = _pointer(index, src)
        if text == "-":
            assert value is None, src
            continue
        shown = float(re.sub(r"[^0-9eE.+-]", "", text.replace(",", "")))
        m = re.search(r"\.(\d+)", text)
        digits = len(m.group(1)) if m else 0
        assert abs(shown - value * scale) <= 0.5 * 10 ** -digits + 1e-9 * abs(value * scale), (src, text, value)
    # and the JSON fields trace to the measurements: measured times are the cells' medians
    for net, na in index["analysis"]["nets"].items():
        cell = json.loads((study_dir / na["phases_file"]).read_text())
        for c in na["compare"]:
            row = next(r for r in cell["rows"] if r["phase"] == "iteration" and r["strategy"] == c["strategy"])
            assert c["measured_us"] == row["time_us"] == cell["summary"]["measured_us"][c["strategy"]], net


def test_a_what_if_number_reproduces_with_its_predict_command(study_dir, tmp_path):
    index = json.loads((study_dir / "study.json").read_text())
    w = index["analysis"]["nets"]["mlp"]["what_ifs"][-1]
    base = {"what": "base", "command": w["base_command"], "t_iter_us": w["base_t_iter_us"]}
    assert not (study_dir / "strategies").exists()  # the bucket sweep is --fuse, not strategy files
    for entry in [base, *w["ranked"]]:  # the fusion what-if among them on an all-reduce winner
        argv = entry["command"].split()[1:]
        out = tmp_path / "p.json"
        p = subprocess.run([*GDLBENCH_CMD, *argv, "--json", str(out)], capture_output=True, text=True,
                           cwd=study_dir, env=mpi_env(), timeout=120)
        assert p.returncode == 0, (entry["command"], p.stderr)
        row = json.loads(out.read_text())["rows"][0]
        assert row["t_iter_us"] == pytest.approx(entry["t_iter_us"], rel=1e-12), entry["what"]


def test_study_predicts_on_a_two_level_cluster(study_dir, tmp_path):
    """The same measurements priced on a cluster (--cluster FILE): every prediction command names
    it, the report says so, and the link what-if scales the inter-node link."""
    out = tmp_path / "s"
    shutil.copytree(study_dir, out)
    cluster_file = tmp_path / "cluster.json"
    cluster_file.write_text(json.dumps({"nodes": 16, "per_node": 4, "intra": "nvlink4", "inter": "10gbe"}))
    index = json.loads((out / "study.json").read_text())
    index["config"]["cluster"] = str(cluster_file)
    (out / "study.json").write_text(json.dumps(index))
    (out / "report.html").unlink()
    p = run_cli("study", "--resume", str(out), nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    index = json.loads((out / "study.json").read_text())
    assert {c["state"] for c in index["cells"]} == {"done"}
    for na in index["analysis"]["nets"].values():
        assert all(f"--cluster {cluster_file}" in cmd for cmd in na["predict_commands"].values()), na["predict_commands"]
        for w in na["what_ifs"]:
            gains = {r["what"]: r["gain_pct"] for r in w["ranked"]}
            if w["workers"] > 4:
                # Across nodes a faster inter-node link helps, unless the prefetched read outlasts
                # compute and communication (a small net on a busy machine): then the link gains
                # exactly 0 and more I/O threads is the best what-if.
                link = gains["twice the link bandwidth"]
                io = next((g for what, g in gains.items() if what.startswith("twice the I/O threads")), 0.0)
                assert link > 0 or (link == 0 and io > 0 and w["ranked"][0]["gain_pct"] == io), w
    assert f"the two-level cluster of {cluster_file}" in (out / "report.md").read_text()
    p = run_cli("study", "--out", str(tmp_path / "both"), "--cluster", str(cluster_file), "--link", "5:10",
                nranks=2)
    assert p.returncode == 2 and "not both" in p.stderr, p.stderr


def test_a_new_study_keeps_its_own_copy_of_the_cluster_file(tmp_path):
    """--cluster FILE is copied into the study (cells/cluster.json) and the config names the copy,
    so the study's predict commands still run where the folder is moved; a resume keeps it."""
    from gdlbench import cli
    from gdlbench.cli.commands.study import _prepare

    cluster_file = tmp_path / "elsewhere" / "cluster.json"
    cluster_file.parent.mkdir()
    text = json.dumps({"nodes": 4, "per_node": 8, "intra": "nvlink4", "inter": "ib-ndr"})
    cluster_file.write_text(text)
    out = tmp_path / "s"
    args = cli.build_parser().parse_args(["study", "--out", str(out), "--cluster", str(cluster_file), "--quick"])
    root, cfg, resume = _prepare(args, 2, 1)
    assert (root, resume, cfg.cluster) == (out, False, "cells/cluster.json")
    assert (out / "cells" / "cluster.json").read_text() == text
    assert str(tmp_path) not in json.dumps(cfg.to_dict()["cluster"])


def test_several_nodes_price_the_scales_with_the_two_level_fit():
    from gdlbench.model.strategies import get_strategies
    from gdlbench.study.run import Config, _comm_source
    from gdlbench.whatif.prediction import CommSource

    wfbp = get_strategies("wfbp")[0]
    cfg = Config(["alexnet"], ["wfbp"], {"alexnet": 1}, [1, 4], [4], 4, "cpu", 1, 0, None, True, nodes=2)
    assert _comm_source(cfg, wfbp) == CommSource(cluster="cells/allreduce-fit.json")
    one_node = Config(["alexnet"], ["wfbp"], {"alexnet": 1}, [1, 4], [4], 4, "cpu", 1, 0, None, True)
    assert _comm_source(one_node, wfbp).from_file == "cells/allreduce-fit.json"


def test_a_sharded_strategy_fits_the_reduce_scatter_and_allgather_and_its_predictions_use_them():
    from gdlbench.model.strategies import get_strategies
    from gdlbench.study.run import Config, _comm_source, plan_cells

    def cfg(strategies: list[str], ranks: int = 2) -> Config:
        return Config(["gpt2"], strategies, {"gpt2": 1}, [1, 2], [2], ranks, "cpu", 1, 0, None, False)

    cells = {c.name: c for c in plan_cells(cfg(["wfbp", "zero3"]))}
    ar = cells["allreduce-fit"].argv
    for c in ("reduce_scatter", "allgather"):
        argv = cells[f"{c}-fit"].argv
        assert argv[0] == c and "--fit" in argv and argv[argv.index("--json") + 1] == f"cells/{c}-fit.json"
        assert argv[argv.index("--on") + 1] == "comm-thread"  # as the composed iteration sends its messages
        for opt in ("-b", "-e", "-f", "--mode", "--rotate"):  # the all-reduce fit's sweep: the whole gradient
            assert argv[argv.index(opt) + 1] == ar[ar.index(opt) + 1]
    assert not any(c.name.endswith("scatter-fit") for c in plan_cells(cfg(["wfbp", "serial"])))
    assert not any(c.name.endswith("scatter-fit") for c in plan_cells(cfg(["zero3"], ranks=1)))
    zero3, wfbp = get_strategies("zero3,wfbp")
    assert _comm_source(cfg(["wfbp", "zero3"]), zero3).from_file == (
        "cells/allreduce-fit.json,cells/reduce_scatter-fit.json,cells/allgather-fit.json")
    assert _comm_source(cfg(["wfbp", "zero3"]), wfbp).from_file == "cells/allreduce-fit.json"
    # not measured (no sharded strategy among the study's): the memory answer's ZeRO rows by formula
    assert _comm_source(cfg(["wfbp"]), zero3).from_file == "cells/allreduce-fit.json"


def test_iteration_cells_run_on_the_study_device_and_data():
    """Each iteration cell names the study's --device and --io-dir (7333489 had commented them out)."""
    from gdlbench.study.run import Config, plan_cells

    cfg = Config(["alexnet"], ["wfbp"], {"alexnet": 1}, [1, 2], [2], 2, "cpu", 1, 0, None, True, io_dir="/data/jpeg")
    argv = next(c for c in plan_cells(cfg) if c.kind == "iteration").argv
    assert argv[argv.index("--device") + 1] == "cpu" and argv[argv.index("--io-dir") + 1] == "/data/jpeg"
    assert "--target-se" in argv


def test_the_fit_covers_every_message_in_place_from_memory():
    from gdlbench.study.run import Config, plan_cells

    def fit_args(nets: list[str], quick: bool) -> dict[str, str]:
        cfg = Config(nets, ["wfbp"], {n: 1 for n in nets}, [1, 2], [2], 2, "cpu", 1, 0, None, quick)
        argv = next(c for c in plan_cells(cfg) if c.name == "allreduce-fit").argv
        return {opt: argv[argv.index(opt) + 1] for opt in ("-e", "--rotate", "--mode")}

    full = fit_args(["alexnet", "vgg16"], quick=False)  # VGG-16's whole gradient: 553 MB
    assert (full["-e"], full["--rotate"], full["--mode"]) == (str(1 << 30), str(1 << 30), "in")
    assert fit_args(["resnet50"], quick=False)["-e"] == str(256 << 20)
    assert fit_args(["vgg16"], quick=True)["-e"] == str(16 << 20)  # quick: small and fast, as before


def test_report_renders_in_headless_chromium(study_dir, tmp_path):
    _check_in_chromium(study_dir, tmp_path)


def _check_in_chromium(study_dir: Path, tmp_path: Path) -> None:
    """The report at 1280 and 412 px in headless chromium: every image loaded, no error, tables
    scroll inside their box (not the page), every link lands, the scroll cues on a phone only."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        why = "Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CI") == "true":  # CI cannot pass this test by skipping it
            pytest.fail(f"CI=true but {why}", pytrace=False)
        pytest.skip(why)
    # A copy of the report with a checker first in <head>: it records failed images, script
    # errors and console errors, and once everything has loaded writes them on <body>.
    check = """<script>
    window.__errors = [];
    const ce = console.error;
    console.error = (...a) => { window.__errors.push(a.join(' ')); ce(...a); };
    window.addEventListener('error', e => window.__errors.push(String(e.message || (e.target && e.target.tagName))), true);
    window.addEventListener('load', () => {
      const imgs = [...document.images];
      document.body.setAttribute('data-check', JSON.stringify({
        images: imgs.length, loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
        errors: window.__errors, page_width: document.documentElement.scrollWidth,
        window_width: window.innerWidth, details: document.querySelectorAll('details').length,
        cues: document.querySelectorAll('.cue').length,
        cues_shown: [...document.querySelectorAll('.cue')].filter(c => c.offsetParent !== null).length}));
    });
    </script>"""
    page = tmp_path / "checked.html"
    page.write_text((study_dir / "report.html").read_text().replace("<head>", "<head>" + check, 1))
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    index = json.loads((study_dir / "study.json").read_text())
    for width in (1280, 412):  # a laptop and a phone
        dom = subprocess.run([*flags, f"--window-size={width},900", "--virtual-time-budget=20000", "--dump-dom",
                              page.as_uri()], capture_output=True, text=True, timeout=180)
        assert dom.returncode == 0, dom.stderr[-2000:]
        m = re.search(r"data-check=\"([^\"]*)\"", dom.stdout)
        assert m, "the page never finished loading"
        result = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
        assert result["images"] == len(index["report"]["images"]) and result["loaded"] == result["images"], result
        assert result["errors"] == [], result
        assert result["page_width"] <= result["window_width"], (width, result)  # tables scroll, not the page
        # the table of contents links to every section, and the scroll cue shows on a phone only
        anchors = set(re.findall(r' id="([^"]+)"', dom.stdout))
        links = set(re.findall(r'<a href="#([^"]+)"', dom.stdout))
        assert links and links <= anchors, links - anchors
        assert result["cues_shown"] == (result["cues"] if width == 412 else 0) and result["cues"] > 0, (width, result)
        # the what-ifs' commands folded per net, and the validation's predictions
        folded = sum(len(na["what_ifs"]) for na in index["analysis"]["nets"].values())
        assert result["details"] == folded + bool(index["analysis"].get("validation")), result
        console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
        assert console == []
        shot = tmp_path / f"report-{width}.png"  # the report itself, unmodified
        p = subprocess.run([*flags, f"--window-size={width},2400", f"--screenshot={shot}",
                            (study_dir / "report.html").as_uri()], capture_output=True, text=True, timeout=180)
        assert p.returncode == 0 and shot.stat().st_size > 10_000, p.stderr[-2000:]
        keep = os.environ.get("GDLBENCH_SCREENSHOT_DIR")
        if keep:
            shutil.copy(shot, Path(keep) / f"study-report-{width}.png")


def _measured(name: str, samples: list[float]) -> dict:
    from gdlbench.study.run import measured_spread

    t = sorted(samples)[len(samples) // 2]
    parts = {"io": 0.0, "h2d": 0.0, "forward": 100.0, "backward": 200.0, "comm": t - 350.0, "update": 50.0}
    return {"strategy": name, "measured_us": t, **measured_spread(samples), "measured_images_per_s": 2e6 / t,
            "measured_breakdown_us": parts, "predicted_breakdown_us": parts}


def test_tie_rule_on_measured_margins():
    """A margin under 2 x the combined standard error of the two medians is a tie that names the
    tied strategies; over twice that threshold it is robust."""
    from gdlbench.study.run import decide, measured_spread

    spread = measured_spread([1000.0, 1010.0, 1020.0, 1030.0, 1040.0])
    # IQR 20 us over 5 rounds: se = 1.2533 x (20 / 1.349) / sqrt(5)
    assert spread["measured_se_us"] == pytest.approx(1.2533 * 20 / 1.349 / 5 ** 0.5, rel=1e-12)
    assert spread["measured_min_us"] == 1000.0 and spread["measured_max_us"] == 1040.0
    a = _measured("a", [1000.0, 1010.0, 1020.0, 1030.0, 1040.0])  # median 1020, se 8.31 us
    b = _measured("b", [1005.0, 1015.0, 1025.0, 1035.0, 1045.0])  # median 1025: 5 us behind
    c = _measured("c", [1100.0, 1110.0, 1120.0, 1130.0, 1140.0])  # 100 us behind
    v = decide(2, 2, [c, b, a], [], {"a": 1.0, "b": 1.0, "c": 1.0})
    threshold = 100 * 2 * math.hypot(a["measured_se_us"], b["measured_se_us"]) / 1020.0  # 2.30 %
    assert (v["state"], v["winner"], v["runner_up"], v["tied"]) == ("tie", "a", "b", ["a", "b"])
    assert v["margin_pct"] == pytest.approx(100 * 5 / 1020) and v["margin_band_pct"] == pytest.approx(threshold)
    v = decide(2, 2, [c, a], [], {})  # 9.8 % against a threshold of 2.30 %: robust
    assert (v["state"], v["winner"], v["tied"]) == ("robust", "a", [])
    assert v["why"] == {"group": "communication", "winner_us": 670.0, "runner_up_us": 770.0, "difference_us": 100.0}
    one = _measured("one", [1000.0])  # one round: no spread, so no verdict can be called robust or a tie
    v = decide(2, 2, [one, _measured("two", [1001.0])], [], {})
    assert (v["state"], v["tied"]) == ("untested", [])


def test_tie_rule_on_predicted_margins():
    """At a scale not measured the band is the model's |error| at the measured scale, added."""
    from gdlbench.study.run import decide

    def row(name: str, t: float) -> dict:
        return {"strategy": name, "workers": 64, "t_iter_us": t, "images_per_s": 64e6 / t, "io_exposed_us": 0.0,
                "h2d_us": 0.0, "forward_us": 100.0, "backward_us": 200.0, "comm_exposed_us": t - 350.0,
                "backward_beside_us": 200.0, "comm_wait_us": t - 350.0, "update_us": 50.0}

    err = {"a": 1.5, "b": 2.0, "c": 0.5}
    v = decide(64, 2, [], [row("b", 1030.0), row("a", 1000.0), row("c", 1100.0)], err)
    assert (v["source"], v["state"], v["winner"], v["tied"]) == ("predicted", "tie", "a", ["a", "b"])
    assert v["margin_band_pct"] == 3.5 and v["margin_pct"] == pytest.approx(3.0)
    v = decide(64, 2, [], [row("a", 1000.0), row("c", 1100.0)], err)  # 10 % over a band of 2 %
    assert (v["state"], v["margin_band_pct"]) == ("robust", 2.0)
    v = decide(64, 2, [], [row("a", 1000.0), row("c", 1030.0)], err)  # 3 % over 2 %: a winner, not robust
    assert (v["state"], v["tied"]) == ("winner", [])


def test_parameter_server_rows_state_their_server_count(study_dir):
    index = json.loads((study_dir / "study.json").read_text())
    for na in index["analysis"]["nets"].values():
        for r in na["predictions"]:
            if r["strategy"] == "mxnet":  # P unset: servers = workers, said so
                assert r["servers"] == r["workers"] and r["servers_assumption"].startswith("servers = workers"), r
            else:
                assert "servers" not in r, r
        c = next(c for c in na["compare"] if c["strategy"] == "mxnet")
        assert c["servers"] == 2 and "assumed" in c["servers_assumption"]
        for v in na["verdicts"]:
            for who in ("winner", "runner_up"):
                assert (v.get(f"{who}_servers") == v["workers"]) == (v[who] == "mxnet"), v
    st = {s["name"]: s for s in index["analysis"]["strategies"]}
    assert st["mxnet"]["servers"] == "N" and "servers" not in st["cntk"]
    assert all(s["describe"] and s["source"] for s in st.values())
    md = (study_dir / "report.md").read_text()
    assert "servers = workers (P = N): assumed" in md and "2 servers, assumed = workers" in md


def test_the_same_iteration_shows_the_same_figure_everywhere(study_dir):
    """One number per fact: a strategy's measured iteration is the same value in the comparison,
    the verdict, the scaling table, the charts' data and the Markdown; the traced round is named
    the same everywhere."""
    index = json.loads((study_dir / "study.json").read_text())
    md = (study_dir / "report.md").read_text()
    for net, na in index["analysis"]["nets"].items():
        fig = index["report"]["figures"][net]
        for c in na["compare"]:
            assert c["measured_samples_us"] and c["measured_rounds"] == index["config"]["iters"]
            assert c["measured_min_us"] <= c["measured_us"] <= c["measured_max_us"]
            tl = next(t for t in fig["timeline"] if t["strategy"] == c["strategy"])
            assert tl["measured_us"] == c["measured_us"] and tl["round"] == c["traced_round"]["round"]
            assert c["traced_round"]["name"].startswith("the median round")
            star = next(m for m in fig["scaling_measured"] if m["strategy"] == c["strategy"])
            assert star["images_per_s"] == c["measured_images_per_s"]
            shown = f"{c['measured_us'] / 1e3:.1f} ms"
            assert shown in md, (net, c["strategy"], shown)
        v = next(v for v in na["verdicts"] if v["source"] == "measured")
        c = next(c for c in na["compare"] if c["strategy"] == v["winner"])
        assert v["winner_images_per_s"] == c["measured_images_per_s"] and v["winner_t_iter_us"] == c["measured_us"]
        # the scaling table's measured column shows that very figure, marked measured
        section = md.split(f'<a id="{net}"></a>')[1]
        row = next(line for line in section.splitlines() if line.startswith(f"| {v['winner']}") and " * |" in line)
        assert f"{c['measured_images_per_s']:,.1f} *" in row, row
    assert "last timed" not in md and "the median round" in md


def test_component_table_per_net_and_strategy(study_dir):
    """Per net and measured strategy: the five components, measured and predicted as study.json's
    breakdowns give them, each number in the report naming its field; the predicted exposed
    communication is never more than all the messages' time, at any scale."""
    from gdlbench.study.run import COMPONENTS, components_of

    index = json.loads((study_dir / "study.json").read_text())
    parser = _Numbers()
    parser.feed((study_dir / "report.html").read_text())
    shown = {src for src, _, _ in parser.found}
    for net, na in index["analysis"]["nets"].items():
        comp = na["components"]
        assert comp["threshold_pct"] == 5.0 and f"/analysis/nets/{net}/components/threshold_pct" in shown
        assert [r["strategy"] for r in comp["rows"]] == [c["strategy"] for c in na["compare"]]
        for i, (r, c) in enumerate(zip(comp["rows"], na["compare"], strict=True)):
            assert set(r["components"]) == set(COMPONENTS) == {"compute", "comm_exposed", "overlap", "io", "update"}
            # the measured side: each phase the median over the ranks of the traced round
            ranks = json.loads((study_dir / na["phases_file"]).read_text())["summary"][
                "measured_breakdowns_by_rank"][c["strategy"]]
            assert len(ranks) == c["measured_breakdown_ranks"] == 2 and ranks[0] == c["measured_breakdown_us"]
            mb, pb = c["measured_breakdown_ranks_us"], c["predicted_breakdown_us"]
            assert mb == {k: (ranks[0][k] + ranks[1][k]) / 2 for k in ranks[0]}  # the median of two
            assert r["measured_from"] == "the traced median round, each phase the median over 2 ranks"
            measured = components_of(mb, mb["comm_hidden"])
            predicted = components_of(pb, c["predicted_comm_hidden_us"])
            for k, part in r["components"].items():
                assert (part["measured_us"], part["predicted_us"]) == (measured[k], predicted[k]), (net, k)
                for field in ("measured_us", "predicted_us", "diff_us", "diff_pct"):
                    assert f"/analysis/nets/{net}/components/rows/{i}/components/{k}/{field}" in shown
            assert r["components"]["comm_exposed"]["predicted_us"] <= r["predicted_comm_us"] * (1 + 1e-9)
        for p in na["predictions"]:
            assert 0 <= p["comm_wait_us"] <= p["comm_us"] * (1 + 1e-9), (net, p["strategy"], p["workers"])


def test_a_component_over_the_threshold_is_flagged_though_the_total_agrees(study_dir, tmp_path):
    """A study.json edited so that a strategy's predicted components all agree with the measured
    ones but its exposed communication, 6 % of the iteration over (its total and error left as
    they are), its components re-validated and the report re-rendered without measuring: the row
    is flagged and the predictions beyond the measured scale say they lean on it."""
    from gdlbench.study.report import write_report
    from gdlbench.study.run import leans_on_failed, validate_components

    out = tmp_path / "s"
    shutil.copytree(study_dir, out)
    index = json.loads((out / "study.json").read_text())
    net, na = next(iter(index["analysis"]["nets"].items()))
    c = na["compare"][0]
    shift = 0.06 * c["measured_us"]
    mb, pb = c["measured_breakdown_ranks_us"], c["predicted_breakdown_us"]
    pb.update({k: mb[k] for k in pb})  # every component agrees ...
    pb["comm"] = mb["comm"] + shift  # ... but exposed communication, by 6 %
    c["predicted_comm_hidden_us"] = mb["comm_hidden"]
    na["components"] = validate_components(na["compare"], index["config"]["workers"], na["measured_workers"])
    for v in na["verdicts"]:
        v["leans_on_failed"] = leans_on_failed(v, na["components"])
    index["report"] = write_report(out, index)
    (out / "study.json").write_text(json.dumps(index))
    row = na["components"]["rows"][0]
    assert row["failed"] == ["comm_exposed"] and abs(c["error_pct"]) == abs(row["error_pct"])
    assert row["components"]["comm_exposed"]["diff_pct"] == pytest.approx(6.0)
    beyond = [n for n in index["config"]["workers"] if n > na["measured_workers"]]
    assert [f["workers"] for f in na["components"]["flagged_predictions"] if f["strategy"] == c["strategy"]] == beyond
    md = (out / "report.md").read_text()
    assert f"| {c['strategy']} | exposed communication |" in md
    line = next(x for x in md.splitlines() if x.startswith(f"| {c['strategy']} | exposed communication |"))
    assert line.endswith("| FLAGGED |") and "+6.0 %" in line, line
    assert f"- {c['strategy']} at N = {', '.join(map(str, beyond))}: leans on exposed communication" in md
    for v in na["verdicts"]:  # the Verdicts table marks the predicted verdicts that name the strategy
        named = c["strategy"] in {v["winner"], v["runner_up"], *v.get("tied", [])}
        want = ["comm_exposed"] if named and v["workers"] in beyond else None
        assert v["leans_on_failed"].get(c["strategy"]) == want
        assert all(k in {v["winner"], v["runner_up"], *v.get("tied", [])} and v["workers"] in beyond
                   for k in v["leans_on_failed"])
    verdict_rows = [x for x in md.splitlines() if x.startswith(f"| {net} |")]
    assert sum("[leans on " in x for x in verdict_rows) == sum(1 for v in na["verdicts"] if v["leans_on_failed"])
    assert any(f"{c['strategy']}: comm_exposed" in x for x in verdict_rows) == any(
        c["strategy"] in v["leans_on_failed"] for v in na["verdicts"])


def _section(html: str, anchor: str) -> str:
    """The HTML from the heading with id `anchor` to the next heading."""
    start = html.index(f' id="{anchor}"')
    return html[start:re.search(r"<h[1-6][ >]", html[start + 1:]).start() + start + 1]


def test_bandwidth_and_slowest_tables_show_the_cells_rows(study_dir):
    """The all-reduce rows as nccl-tests prints them, and per net its slowest layers and the
    winner's slowest messages: listed in the contents, each figure the cell's JSON field."""
    index = json.loads((study_dir / "study.json").read_text())
    html = (study_dir / "report.html").read_text()
    toc = _section(html, "contents")
    fit_cell = json.loads((study_dir / "cells/allreduce-fit.json").read_text())
    parser = _Numbers()
    parser.feed(_section(html, "bandwidth"))
    shown = {src: text for src, _, text in parser.found}
    assert 'href="#bandwidth"' in toc
    quoted = index["report"]["quoted"]["bandwidth"]
    assert {q["algo"] for q in quoted} == {"library", "ps"}  # every algorithm the fit measured
    big = max((r for r in fit_cell["rows"] if r["algo"] == "library"), key=lambda r: r["size_bytes"])
    k = next(k for k, q in enumerate(quoted) if q["algo"] == "library" and q["size_bytes"] == big["size_bytes"])
    assert shown[f"/report/quoted/bandwidth/{k}/size_bytes"] == f"{big['size_bytes']:,}"
    assert shown[f"/report/quoted/bandwidth/{k}/busbw_gbs"] == f"{big['busbw_gbs']:.3f}"
    for q in quoted:
        row = fit_cell["rows"][q["row"]]
        assert all(q[f] == row[f] for f in ("size_bytes", "count", "time_us", "algbw_gbs", "busbw_gbs")), q
    fit = next(f for f in index["analysis"]["fit"] if f["algo"] == "library")
    assert f"alpha = {fit['alpha_us']:.2f} us" in re.sub(r"<[^>]+>", "", _section(html, "bandwidth"))
    for net, na in index["analysis"]["nets"].items():
        cell = json.loads((study_dir / na["phases_file"]).read_text())
        total: dict[str, float] = {}
        for r in cell["rows"]:
            if "layer" in r:
                total[r["layer"]] = total.get(r["layer"], 0.0) + r["time_us"]
        section = _section(html, f"{net}-slowest")
        assert f'href="#{net}-slowest"' in toc
        layers = re.findall(r'<tr><td class="l">([^<]+)</td><td class="l">([^<]*)</td>', section)
        assert layers[0][0] == max(total, key=total.__getitem__), (net, layers, total)
        more = int(layers[-1][0].split()[0]) if layers[-1][0].endswith(" more") else 0
        assert len(layers) - (1 if more else 0) + more == len(total), (net, layers)
        winner = next(v for v in na["verdicts"] if v["source"] == "measured")["winner"]
        messages = [r for r in cell["rows"] if r.get("phase") == "message" and r["strategy"] == winner]
        slowest = max(messages, key=lambda r: r["time_us"])
        parser = _Numbers()
        parser.feed(section)
        first = next(text for src, _, text in parser.found if src.endswith("/messages/0/message"))
        assert int(first) == slowest["message"], (net, first, slowest)


def test_killed_study_resumes_without_measuring_a_finished_cell_again(tmp_path):
    out = tmp_path / "s"
    cmd = [str(MPIEXEC), "-n", "2", *GDLBENCH_CMD, "study", "--out", str(out), *STUDY_ARGS]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=mpi_env(), cwd=NEUTRAL_CWD,
                            start_new_session=True)
    first = out / "cells" / "trace-mlp.json"  # the last file of the first net's cell
    deadline = time.monotonic() + 300
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert first.exists(), proc.communicate()[1][-2000:] if proc.poll() is not None else "timed out"
    os.killpg(proc.pid, signal.SIGKILL)  # midway: the next net's cell is running
    proc.communicate()
    assert not (out / "report.html").exists()
    for f in out.rglob("*"):  # nothing half-written: every finished file parses
        if f.suffix == ".json" and not f.name.startswith("."):
            json.loads(f.read_text())
    finished = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in (out / "cells").glob("*.json")}
    assert {"iteration-mlp.json", "trace-mlp.json"} <= set(finished) and "trace-convnet.json" not in finished
    cells_done = {"allreduce-fit", "compress", "iteration-mlp"}
    if "iteration-convnet.json" in finished:  # its JSON, but not yet its trace: a cell half done, run again
        del finished["iteration-convnet.json"]

    again = run_cli("study", "--resume", str(out), nranks=2, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{len(cells_done)} already measured (kept, not measured again)" in again.stderr
    for name, (mtime, data) in finished.items():
        f = out / "cells" / name
        assert f.stat().st_mtime_ns == mtime and f.read_bytes() == data, name
    index = json.loads((out / "study.json").read_text())
    kept = {c["name"] for c in index["cells"] if c["kept_from_earlier_run"]}
    assert kept == cells_done
    assert {c["state"] for c in index["cells"]} == {"done"} and index["resumes"]
    assert (out / "report.html").exists() and not list(out.rglob(".*.tmp*"))


def test_memory_answer_beside_the_time_answer(study_dir):
    """Per net: every strategy (the study's and the sharded ones) at every N with its memory per worker
    from gdlbench.model.memory and whether it fits; per N the fastest that fits is the fastest fitting row."""
    from gdlbench.model.memory import memory_per_worker
    from gdlbench.model.strategies import get_strategies

    index = json.loads((study_dir / "study.json").read_text())
    for name, na in index["analysis"]["nets"].items():
        mem = na["memory"]
        assert mem["limit_bytes"] == 80e9 and set(mem["sharded_predicted_only"]) == {"zero1", "zero2", "zero3", "fsdp"}
        spec = index["config"]["net_specs"][name]
        for r in mem["rows"][:: max(1, len(mem["rows"]) // 7)]:
            want = memory_per_worker(spec, get_strategies(r["strategy"])[0], r["workers"], na["batch"], "adam", "fp32")
            assert r["memory_total_bytes"] == pytest.approx(want.total) and r["fits"] == (want.total <= 80e9)
        for n in index["config"]["scales"]:
            at_n = [r for r in mem["rows"] if r["workers"] == n and r["fits"]]
            assert mem["fastest_that_fits"][str(n)] == min(at_n, key=lambda r: r["t_iter_us"])["strategy"]
            assert mem["lowest_stage_that_fits"][str(n)]["stage"] == 0  # small nets: replicated fits
    report = (study_dir / "report.md").read_text()
    assert "Memory per worker: does it fit in 80 GB?" in report
    assert "memory: fastest that fits (lowest ZeRO stage)" in report


def test_study_bad_input_is_one_line_and_exit_2(tmp_path):
    p = run_cli("study", "--out", str(tmp_path / "x"), "--nets", "nosuchnet", nranks=2)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "nosuchnet" in p.stderr, p.stderr
    p = run_cli("study", "--out", str(tmp_path / "one"), "--quick")  # one rank, no --link: nothing to predict with
    assert p.returncode == 2 and "--link" in p.stderr and not (tmp_path / "one").exists(), p.stderr
    p = run_cli("study", "--out", str(tmp_path / "m"), "--nets", MLP, "--memory-limit", "80XB", nranks=2)
    assert p.returncode == 2 and "80XB" in p.stderr and not (tmp_path / "m").exists(), p.stderr
    p = run_cli("study", "--resume", str(tmp_path / "none"), nranks=2)
    assert p.returncode == 2 and "study.json" in p.stderr, p.stderr
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "study.json").write_text('{"command": "study", "config": {}}')
    p = run_cli("study", "--out", str(tmp_path / "y"), nranks=2)
    assert p.returncode == 2 and "--resume" in p.stderr, p.stderr


def _predict(*args: str) -> dict:
    from gdlbench import cli
    from gdlbench.cli.commands.predict import request_from_args
    from gdlbench.whatif.prediction import evaluate

    return evaluate(request_from_args(cli.build_parser().parse_args(
        ["predict", "--net", "resnet50", "--strategy", "wfbp", "--alpha", "5", "--bandwidth", "10", "--workers", "16",
         *args]))).rows[0]


@pytest.fixture()
def phases_file(tmp_path) -> str:
    from gdlbench.model.phases import Phases

    p = Phases.synthetic("resnet50", 32, gflops=8000)
    p.io_threads = 4
    p.io_us = 80_000.0
    path = tmp_path / "phases.json"
    path.write_text(json.dumps(p.to_report()))
    return str(path)


def test_predict_what_ifs_move_the_numbers_the_right_way(phases_file):
    base = _predict("--phases", phases_file)
    fast = _predict("--phases", phases_file, "--link-scale", "2")
    assert fast["comm_us"] < base["comm_us"] and fast["t_iter_us"] <= base["t_iter_us"]
    low_lat = _predict("--phases", phases_file, "--link-scale", "1:0.5")
    assert low_lat["comm_us"] < base["comm_us"]
    half = _predict("--phases", phases_file, "--grad-dtype", "bfloat16")
    # half the bytes: the bandwidth part of every message halves, the latency part stays
    assert half["comm_us"] < base["comm_us"] and half["comm_us"] > base["comm_us"] / 2
    free = _predict("--phases", phases_file, "--compress", "100")
    costly = _predict("--phases", phases_file, "--compress", "100:1e-3")
    assert free["comm_us"] < half["comm_us"] and costly["comm_us"] > free["comm_us"]
    one = _predict("--phases", phases_file, "--compress", "100:1e-3", "--workers", "1")
    assert one["comm_us"] == 0  # one worker sends nothing, so it encodes nothing
    big = _predict("--phases", phases_file, "--batch", "64")
    assert big["forward_us"] == pytest.approx(2 * base["forward_us"]) and big["update_us"] == base["update_us"]
    serial = _predict("--phases", phases_file, "--strategy", "serial")  # I/O not hidden by prefetch
    io = _predict("--phases", phases_file, "--strategy", "serial", "--io-threads", "8")
    assert serial["io_exposed_us"] > 0 and io["io_exposed_us"] == pytest.approx(serial["io_exposed_us"] / 2)


def test_compress_command_checks_top_k_against_numpy(tmp_path):
    out = tmp_path / "c.json"
    p = run_cli("compress", "--ratio", "10,100", "--values", "1M", "--iters", "2", "--json", str(out))
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["wrong"] for r in rows] == [0, 0] and all(r["encode_us_per_byte"] > 0 for r in rows)
    assert rows[0]["kept"] == 50_000 and rows[1]["kept"] == 5_000
    # the COST predict --compress takes: the median encode time per dense byte of 1M fp32 values
    for r in rows:
        assert r["size_bytes"] == 4_000_000 and r["time_us"] > 0
        assert r["encode_us_per_byte"] == pytest.approx(r["time_us"] / 4_000_000, rel=1e-9)
        assert r["gbs"] == pytest.approx(4_000_000 / r["time_us"] / 1e3, rel=1e-9)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def _two_node_run(tmp_path: Path) -> tuple[Path, Path]:
    """A real run on 2 ranks seen as 2 nodes x 1 (--ranks-per-node 1): the mlp's composed
    iteration at the study's batch, and the all-reduce fit of the same nodes (the study's
    validation inputs; scripts/study-validate.sh makes them on the emulated cluster)."""
    it, fit = tmp_path / "it.json", tmp_path / "fit.json"
    p = run_cli("iteration", "--net", MLP, "--batch", "4", "--strategy", "cntk,mxnet", "--iters", "2", "--warmup", "0",
                "--ranks-per-node", "1", "--json", str(it), nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    p = run_cli("allreduce", "-b", "4K", "-e", "4M", "-f", "4", "--algo", "library,ps", "--servers", "2", "--fit",
                "-n", "5", "-w", "1", "--ranks-per-node", "1", "--json", str(fit), nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return it, fit


def test_validation_point_beyond_the_measured_scale(study_dir, tmp_path):
    """--validate: the run on 2 nodes beside the model's prediction for them from the study's
    one-node phases, per strategy and component, in study.json, the report's table and the chart."""
    it, fit = _two_node_run(tmp_path)
    out = tmp_path / "s"
    shutil.copytree(study_dir, out)
    p = run_cli("study", "--resume", str(out), "--validate", str(it), "--validate-fit", str(fit), nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    index = json.loads((out / "study.json").read_text())
    assert index["config"]["validation"] == {"iteration": "validation/iteration-mlp.json",
                                             "fit": "validation/allreduce-fit.json"}
    v = index["analysis"]["validation"]
    assert (v["net"], v["nodes"], v["ranks_per_node"], v["workers"]) == ("mlp", 2, 1, 2)
    measured = json.loads(it.read_text())["summary"]["measured_us"]
    assert [c["strategy"] for c in v["compare"]] == ["cntk", "mxnet"]  # the study's strategies the run measured
    for c in v["compare"]:
        assert c["measured_us"] == measured[c["strategy"]]
        assert math.isclose(c["error_pct"], 100 * (c["predicted_us"] / c["measured_us"] - 1), rel_tol=1e-9)
        # the prediction is the study's phases on the fitted link: its command gives the same number
        cmd = v["predict_commands"][c["strategy"]]
        assert "--phases cells/iteration-mlp.json" in cmd and "--cluster validation/allreduce-fit.json" in cmd, cmd
        q = subprocess.run([*GDLBENCH_CMD, *cmd.split()[1:], "--json", str(tmp_path / "q.json")], cwd=out,
                           capture_output=True, text=True, env=mpi_env(), timeout=120)
        assert q.returncode == 0, q.stderr
        assert math.isclose(json.loads((tmp_path / "q.json").read_text())["rows"][0]["t_iter_us"], c["predicted_us"],
                            rel_tol=1e-9)
        # the one-node contention is not carried to the inter-node link: the unmeasured link's default
        assert c["predicted_contention"].startswith("assumed"), c["predicted_contention"]
        assert "inter-node link of" in c["predicted_contention"] or "none measured" in c["predicted_contention"]
    # at the study's own scale its messages cross the link its contention was measured on
    assert {c["predicted_contention"].split(" (")[0] for c in index["analysis"]["nets"]["mlp"]["compare"]} <= {
        "measured on this link", "assumed: none measured, 2 - overlap_efficiency = 2 for backward and messages"}
    rows = v["components"]["rows"]
    assert [r["strategy"] for r in rows] == ["cntk", "mxnet"]
    for r in rows:
        assert set(r["components"]) == {"compute", "comm_exposed", "overlap", "io", "update"}
        assert r["failed"] == [k for k, x in r["components"].items() if not x["validated"]]
    # the chart draws each strategy's measured point and the prediction for those nodes
    points = index["report"]["figures"]["mlp"]["scaling_validation"]
    assert [(pt["strategy"], pt["workers"], pt["images_per_s"]) for pt in points] == [
        (c["strategy"], 2, c["measured_images_per_s"]) for c in v["compare"]]
    html = (out / "report.html").read_text()
    section = _section(html, "mlp-validation")
    assert "2 nodes x 1 rank per node" in section and "filled cross" in section
    assert "Backward and the messages beside it, in the prediction: assumed" in section
    found = _Numbers()
    found.feed(section)
    srcs = {src for src, _, _ in found.found}
    for i, c in enumerate(v["compare"]):
        assert {f"/analysis/validation/compare/{i}/measured_us", f"/analysis/validation/compare/{i}/error_pct"} <= srcs
        assert c["strategy"] in section
    assert all(f"/analysis/validation/components/rows/{i}/components/{k}/diff_pct" in srcs
               for i in range(len(rows)) for k in rows[0]["components"])
    assert 'href="#mlp-validation"' in html  # the contents and the scope box link to it
    _check_in_chromium(out, tmp_path)
    # a resume without --validate keeps it
    p = run_cli("study", "--resume", str(out), nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((out / "study.json").read_text())["analysis"]["validation"]["compare"] == v["compare"]


def test_validation_bad_files_are_one_line_and_exit_2(study_dir, tmp_path):
    out = tmp_path / "s"
    shutil.copytree(study_dir, out)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    one_node = out / "cells/iteration-mlp.json"  # the study's own run: not beyond its scale
    fit = out / "cells/allreduce-fit.json"
    cases = [(("--validate", str(bad), "--validate-fit", str(fit)), str(bad)),
             (("--validate", str(out / "study.json"), "--validate-fit", str(fit)), "not a `gdlbench iteration"),
             (("--validate", str(one_node), "--validate-fit", str(fit)), "more nodes"),
             (("--validate", str(one_node)), "go together")]
    for args, said in cases:
        p = run_cli("study", "--resume", str(out), *args, nranks=2)
        assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and said in p.stderr, (args, p.stderr)
    assert not (out / "validation").exists()


def test_study_memory_at_bad_values_are_one_line_and_exit_2(tmp_path):
    # --memory-at is read before anything is measured: a bad value is one line, exit 2, no directory
    for bad, says in (("seq=0", "seq must be an integer"), ("batch=x", "batch must be an integer"),
                      ("foo=1", "keys seq, batch"), ("seq=8,seq=9", "each once"), ("precision=fp8", "precision"),
                      ("checkpointing=maybe", "yes or no")):
        out = tmp_path / bad.replace("=", "_").replace(",", "_")
        p = run_cli("study", "--out", str(out), "--nets", "gpt2-medium:seq=16", "--link", "5:12.5",
                    "--memory-at", bad)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not out.exists()
    p = run_cli("study", "--out", str(tmp_path / "mlp"), "--nets", MLP, "--link", "5:12.5", "--memory-at", "seq=64")
    assert p.returncode == 2 and "takes no sequence length" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_memory_answer_at_the_target_shape(tmp_path):
    """--memory-at: the memory rows modelled at the target shape (sequence, batch, precision), the
    times those of the measured shape; the memory table and the Verdicts column say so per N."""
    import gdlbench as g
    from gdlbench.model.memory import memory_per_worker
    from gdlbench.model.strategies import get_strategies
    from gdlbench.nets.network import load_network
    from gdlbench.study import report as study_report
    from gdlbench.study import run as study
    from gdlbench.whatif.prediction import CommSource, PredictRequest

    small, target = ("transformer:layers=2:hidden=256:heads=4:vocab=5000:positions=512:seq=16",
                     "transformer:layers=2:hidden=256:heads=4:vocab=5000:positions=512:seq=512")
    (tmp_path / "cells").mkdir()
    phases = "cells/iteration-transformer.json"
    (tmp_path / phases).write_text(json.dumps(g.Phases.synthetic(small, 1).to_report()))
    at = study.parse_memory_at("seq=512,batch=32,precision=mixed", [small])
    assert at == {"seq": 512, "batch": 32, "precision": "mixed"} and study.at_shape(small, 512) == target
    strategies = get_strategies("ddp,wfbp-fusion")
    # a limit between DDP's total and ZeRO-1's at N = 8: the replicated strategies do not fit there
    ddp8, z1 = (memory_per_worker(target, get_strategies(s)[0], 8, 32, "adam", "mixed").total for s in ("ddp", "zero1"))
    assert z1 < ddp8
    cfg = study.Config(["transformer"], [s.name for s in strategies], {"transformer": 1}, [1, 8], [1, 8], 2, "cpu", 2,
                       0, None, False, link="5:12.5", net_specs={"transformer": small},
                       memory_limit=f"{int((ddp8 + z1) / 2)}B", memory_at=at)
    rows = [row for s in strategies for row in study._rows(tmp_path, PredictRequest(
        phases=phases, net=small, comm=CommSource(alpha=5, bandwidth="12.5"), strategy=s.name, workers=(1, 8)))]
    mem = study.memory_answer(tmp_path, cfg, "transformer", phases, strategies, rows, 1)
    assert mem["at"] == {"net": target, "batch": 32, "measured_net": small, "measured_batch": 1}
    assert mem["precision"] == "mixed" and load_network(target).params == load_network(small).params
    times = {(r["strategy"], r["workers"]): r["t_iter_us"] for r in rows}
    for r in mem["rows"]:
        want = memory_per_worker(target, get_strategies(r["strategy"])[0], r["workers"], 32, "adam", "mixed").total
        assert r["memory_total_bytes"] == pytest.approx(want) and r["fits"] == (want <= int((ddp8 + z1) / 2))
        if (r["strategy"], r["workers"]) in times:  # the time is the measured shape's prediction
            assert r["t_iter_us"] == times[(r["strategy"], r["workers"])]
    assert not any(r["fits"] for r in mem["rows"] if r["strategy"] in ("ddp", "wfbp-fusion") and r["workers"] == 8)
    low = mem["lowest_stage_that_fits"]["8"]
    assert low["stage"] == 1 and low["strategy"] == "zero1"
    fit8 = [r["strategy"] for r in mem["rows"] if r["workers"] == 8 and r["fits"]]
    assert set(fit8) == {"zero1", "zero2", "zero3", "fsdp"}
    verdict_cell = study_report._fits_text(mem, 8)  # the Verdicts column's text
    assert verdict_cell.startswith(f"at {target}, batch 32, mixed: ") and "(stage 1: zero1)" in verdict_cell
    assert "fit: " + ", ".join(fit8) in verdict_cell
    doc = study_report.Doc("t")
    study_report._memory(doc, "transformer", {"batch": 1, "memory": mem}, [1, 8])
    md = study_report.render_markdown(doc)
    assert f"Memory per worker at {target}, batch 32, mixed: does it fit in" in md
    assert f"Time is measured at the study's shape, {small} at batch 1" in md and "modelled at the job's" in md
    assert "the cheapest that fits (lowest ZeRO stage) is stage 1 (zero1)" in md and " (no)" in md


def test_the_fit_sweep_stays_in_host_memory():
    # GPT-2 medium's 1.4 GB gradient asks a sweep to 4 GiB: 3 rotated buffers per rank; the study
    # lowers the last size until they take at most half the node's memory, the same on every rank
    from gdlbench.primitives import collectives
    from gdlbench.study import run as study

    phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    sweep = collectives.fit_sweep_for_messages(1_419_292_672)
    for ranks in (2, 8, 64):
        cfg = study.Config(["x"], ["ddp"], {"x": 1}, [1, ranks], [ranks], ranks, "cpu", 1, 0, None, False)
        out = study._in_host_memory(sweep, cfg)
        end = int(out[out.index("-e") + 1])
        assert out[out.index("--rotate") + 1] == str(end) and out[:2] == sweep[:2] and end >= 4096 * 4
        assert 3 * end * ranks <= phys // 2 or end == 4096 * 4
        assert end == int(sweep[3]) or 3 * end * 4 * ranks > phys // 2  # the largest size that fits
    small = collectives.fit_sweep_for_messages(1 << 20)
    assert study._in_host_memory(small, study.Config(["x"], ["ddp"], {"x": 1}, [1], [2], 2, "cpu", 1, 0, None,
                                                     False)) == small
