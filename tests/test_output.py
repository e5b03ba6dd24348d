"""common/output.py: run_each, the commands' loop over their requests with a progress line each."""

from __future__ import annotations

from gdlbench.common.output import run_each


def test_run_each_runs_in_order_and_reports_each(capsys):
    seen = []

    def run(x: int) -> int:
        seen.append(x)
        return x * x

    out = run_each([3, 1, 2], "demo", run, lambda q, r: f"{q}->{r}", enabled=True)
    assert out == [9, 1, 4] and seen == [3, 1, 2]
    assert capsys.readouterr().err == ""  # quiet: the run took less than Progress's 2 s


def test_run_each_prints_progress_once_slow(capsys, monkeypatch):
    clock = iter([0.0, 5.0, 6.0])  # Progress's start, then one reading per step
    monkeypatch.setattr("gdlbench.common.output.time.monotonic", lambda: next(clock))
    run_each(["a", "b"], "demo", str.upper, lambda q, r: f"{q}={r}")
    err = capsys.readouterr().err.splitlines()
    assert err == ["gdlbench demo: [1/2] a=A (5 s)", "gdlbench demo: [2/2] b=B (6 s)"]
    clock = iter([0.0, 5.0])
    run_each(["a"], "demo", str.upper, lambda q, r: r, enabled=False)  # other ranks: silent
    assert capsys.readouterr().err == ""
