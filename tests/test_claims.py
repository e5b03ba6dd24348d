"""README's results and RESULTS.md's headlines against the sections they cite
(scripts/check_claims.py), and the check itself catching a figure its section does not hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_claims.py"


def run(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=60)


def test_every_quoted_figure_is_in_the_section_it_cites():
    p = run(ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every figure found" in p.stdout


def _copy(tmp_path: Path) -> Path:
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "benchmarks" / "RESULTS.md", tmp_path / "benchmarks" / "RESULTS.md")
    return tmp_path


def test_a_figure_that_is_not_in_its_section_fails(tmp_path):
    root = _copy(tmp_path)
    readme = (root / "README.md").read_text()
    assert "| 208.0 GFLOP/s |" in readme
    (root / "README.md").write_text(readme.replace("| 208.0 GFLOP/s |", "| 218.5 GFLOP/s |"))
    p = run(root)
    assert p.returncode == 1 and "218.5 not in #1-gemm" in p.stdout, p.stdout


def test_a_headline_without_a_source_or_with_a_missing_section_fails(tmp_path):
    root = _copy(tmp_path)
    results = (root / "benchmarks" / "RESULTS.md").read_text()
    link = "[1](#1-gemm-gdlbench-openblas-through-scipy-openblas32-vs-numpymatmul)"
    assert link in results
    (root / "benchmarks" / "RESULTS.md").write_text(results.replace(link, "[1](#no-such-section)"))
    p = run(root)
    assert p.returncode == 1 and "no section #no-such-section" in p.stdout, p.stdout
    (root / "benchmarks" / "RESULTS.md").write_text(results.replace(link, "section 1"))
    p = run(root)
    assert p.returncode == 1 and "cites no RESULTS.md section" in p.stdout, p.stdout


def test_the_output_options_are_as_the_readme_says():
    """README, "Commands": every command but env and study takes --json and --csv; env --json only;
    study neither (it writes its directory)."""
    from gdlbench.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in COMMANDS:
        opts = {o for a in sub.choices[name]._actions for o in a.option_strings}
        want = {"env": {"--json"}, "study": set()}.get(name, {"--json", "--csv"})
        assert opts & {"--json", "--csv"} == want, name
    readme = (ROOT / "README.md").read_text()
    assert "Every command but `env` and `study`\nwrites `--json FILE`" in readme


def test_readme_prose_figures_need_a_dated_section_that_holds_them(tmp_path):
    """A figure in README prose without a link, one whose anchor is dead, one its section does not
    hold, and a cited section with no date: each is reported."""
    root = _copy(tmp_path)
    readme = (root / "README.md").read_text()
    (root / "README.md").write_text(readme + (
        "\nThe made-up all-reduce took 12.5 ms on 2 ranks.\n"
        "\nAnother took 0.40 us ([RESULTS](benchmarks/RESULTS.md#no-such-section)).\n"
        "\nA third took 777.7 us ([RESULTS](benchmarks/RESULTS.md#1-gemm-gdlbench-openblas-through-"
        "scipy-openblas32-vs-numpymatmul)).\n"))
    p = run(root)
    assert p.returncode == 1, p.stdout
    assert "README figure '12.5 ms' in 'The made-up all-reduce took 12.5 ms" in p.stdout
    assert "cites no RESULTS.md section" in p.stdout
    assert "no section #no-such-section in RESULTS.md" in p.stdout
    assert "777.7 not in #1-gemm" in p.stdout
    assert "check_claims: 3 figures without their source" in p.stdout, p.stdout
    results = (root / "benchmarks" / "RESULTS.md").read_text()
    dated = "# 2026-12-02 18:45 UTC, quiet machine"
    assert dated in results
    (root / "README.md").write_text(readme)
    (root / "benchmarks" / "RESULTS.md").write_text(results.replace(dated, "# 18:45 UTC, quiet machine"))
    p = run(root)
    assert p.returncode == 1 and ("RESULTS section #1-gemm-gdlbench-openblas-through-scipy-openblas32-"
                                  "vs-numpymatmul: states no date") in p.stdout, p.stdout


def test_settings_and_layouts_are_not_figures():
    """What the checker reads as a figure: a measured unit after a number; a layout `2 x 2`, a
    link rate and code are not."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import check_claims
    finally:
        sys.path.remove(str(SCRIPT.parent))
    found = [m.group(0) for m in check_claims.FIGURE.finditer(
        "2 x 2 at 1 Gbit/s took 0.40 us, 1.01 x a copy, 13-17 % off, 8 min 48 s, 4184 GB/s, 2 ranks")]
    assert found == ["0.40 us", "1.01 x", "13-17 %", "8 min", "48 s", "4184 GB/s"]
    units = check_claims.prose_units("Run `--size 100MB` for 3 ms.\n\n```\n5 ms\n```\n")
    assert [m.group(0) for u in units for m in check_claims.FIGURE.finditer(u)] == ["3 ms"]
