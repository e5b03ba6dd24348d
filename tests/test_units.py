"""Units as users type them: sizes, bandwidths, lists."""

from __future__ import annotations

import pytest

from gdlbench.common.errors import UsageError
from gdlbench.common.units import parse_bandwidth, parse_size, split_list


@pytest.mark.parametrize("text, gbs", [
    ("12.5", 12.5), ("12.5GB/s", 12.5), ("12.5 GB/s", 12.5), ("100Gb/s", 12.5), ("100Gbit/s", 12.5),
    ("100Gbps", 12.5), ("800MB/s", 0.8), ("1TB/s", 1000.0), ("10GiB/s", 10 * 2**30 / 1e9), (3, 3.0),
])
def test_bandwidth_with_and_without_units(text, gbs):
    assert parse_bandwidth(text) == pytest.approx(gbs)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "12.5G", "GB/s", "12.5 furlongs", "1e400", "2e6"])
def test_bandwidth_refused(text):
    with pytest.raises(UsageError, match="--bandwidth"):
        parse_bandwidth(text)


def test_predict_takes_the_same_model_from_either_unit():
    from gdlbench.cli import build_parser
    from gdlbench.cli.commands.predict import comm_source_from_args

    def beta(bw: str) -> float:
        args = build_parser().parse_args(["predict", "--alpha", "5", "--bandwidth", bw])
        return comm_source_from_args(args).comm_model().beta_us_per_byte

    assert beta("100Gb/s") == pytest.approx(beta("12.5")) == pytest.approx(beta("12.5GB/s")) == pytest.approx(8e-5)


def test_lists_refuse_empty_items():
    assert split_list(" a, b ,c", "--x") == ["a", "b", "c"]
    for bad in ("", ",", "a,", "a,,b"):
        with pytest.raises(UsageError, match="--x"):
            split_list(bad, "--x")
    assert parse_size("4K") == 4096


def test_output_files_appear_whole_with_ordinary_permissions(tmp_path):
    """The one atomic writer (--json/--csv, the study's files): the content whole, no temporary
    file left, and the mode an ordinary file gets (0666 less the umask), not mkstemp's 0600."""
    import os

    from gdlbench.common.output import OutputFile
    from gdlbench.common.paths import write_atomic

    old = os.umask(0o022)
    try:
        OutputFile(str(tmp_path / "r.json"), "--json").write('{"a": 1}')
        write_atomic(tmp_path / "sub" / "b.bin", b"\x00\x01")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").read_text() == '{"a": 1}'
    assert (tmp_path / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    for f in (tmp_path / "r.json", tmp_path / "sub" / "b.bin"):
        assert f.stat().st_mode & 0o777 == 0o644, oct(f.stat().st_mode)
    assert not list(tmp_path.rglob(".*"))
