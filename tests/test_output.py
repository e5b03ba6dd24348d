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


def test_memory_note_reads_the_balloons_free_page_reporting_bit(tmp_path):
    """env's memory_note: said where a virtio balloon reports free pages (feature bit 5), not
    where it does not, nor where there is no balloon."""
    from gdlbench.common.env import memory_note

    assert memory_note(str(tmp_path)) is None
    dev = tmp_path / "bus/virtio/drivers/virtio_balloon/virtio0"
    dev.mkdir(parents=True)
    (dev / "features").write_text("0101000000000000000000000000000010000000\n")  # stats, hinting: no reporting
    assert memory_note(str(tmp_path)) is None
    (dev / "features").write_text("0110010100000000000000000000000010000000\n")
    assert "free page reporting" in (memory_note(str(tmp_path)) or "")
    # the guest reports free blocks of page_reporting_order and above: above the largest order, none
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "buddyinfo").write_text("Node 0, zone      DMA      0      0      0      0      0      0      0"
                                    "      0      1      1      3\n")
    order = tmp_path / "module/page_reporting/parameters/page_reporting_order"
    order.parent.mkdir(parents=True)
    for value, off in (("9\n", False), ("10\n", False), ("11\n", True)):
        order.write_text(value)
        note = memory_note(str(tmp_path), str(proc)) or ""
        assert ("switched off" in note) is off, (value, note)
        assert ("echo 11 >" in note) is not off, (value, note)
