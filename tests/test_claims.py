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
