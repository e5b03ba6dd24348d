"""Gradient compression's encode cost: top-k sparsification of one fp32 gradient (the k = n / (2r)
largest magnitudes kept as int32 index + fp32 value pairs, so the message shrinks r times), in
microseconds per dense byte: the COST of `gdlbench predict --compress RATIO:COST`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ._native import _core
from .errors import UsageError
from .measurement import Measurement, check_timing
from .report import Column, fmt_float
from .units import parse_count

CHECK_VALUES = 10_000


def check_topk(ratio: float) -> int:
    """Values wrongly kept or dropped by the encode of a small gradient, against numpy's sort."""
    g = np.random.default_rng(0).standard_normal(CHECK_VALUES).astype(np.float32)
    idx, val = _core.topk_encode(g, ratio)
    want = np.sort(np.argsort(-np.abs(g), kind="stable")[: len(idx)])
    return int(np.count_nonzero(idx != want) + np.count_nonzero(val != g[want]))


@dataclass
class CompressResult:
    """One top-k encode of `values` fp32 gradient values at compression ratio `ratio`."""

    command: ClassVar[str] = "compress"
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [Column("ratio", "ratio", "{:g}"), Column("values", "values"), Column("kept", "kept"),
               Column("time (ms)", "time_ms", fmt_float(3)), Column("p95 (ms)", "p95_ms", fmt_float(3)),
               Column("cv", "time_cv", fmt_float(3)), Column("us per dense byte", "encode_us_per_byte", "{:.3e}"),
               Column("GB/s", "gbs", fmt_float(2)), Column("#wrong", "wrong")]
    ratio: float
    values: int
    measurement: Measurement
    wrong: int

    @property
    def kept(self) -> int:
        return max(1, min(self.values, int(self.values / (2 * self.ratio))))

    @property
    def encode_us_per_byte(self) -> float:
        return self.measurement.median / (4 * self.values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON row `gdlbench compress` writes."""
        m = self.measurement
        return {"ratio": self.ratio, "values": self.values, "kept": self.kept, "size_bytes": 4 * self.values,
                **m.stats(), "samples_us": list(m.samples_us), "time_ms": m.median / 1e3, "p95_ms": m.p95 / 1e3,
                "encode_us_per_byte": self.encode_us_per_byte, "gbs": 4 * self.values / (m.median * 1e3),
                "wrong": self.wrong}


def compress(ratio: float = 100.0, values: int | str = 16_000_000, *, iters: int = 5, warmup: int = 1,
             check: bool = True) -> CompressResult:
    """Time the top-k encode of one gradient of `values` fp32 values (an int, or '16M' as the CLI's
    --values) at compression ratio `ratio` >= 1, on one thread (`gdlbench compress`)."""
    if isinstance(values, str):
        values = parse_count(values, "compress: values")
    if not isinstance(values, (int, np.integer)) or values < 1:
        raise UsageError(f"compress: values must be a positive integer, got {values!r}")
    if not ratio >= 1 or ratio == float("inf"):
        raise UsageError(f"compress: ratio must be a finite number >= 1, got {ratio!r}")
    check_timing(iters, warmup, "compress")
    m = Measurement(_core.topk_encode_time(int(values), float(ratio), warmup, iters), "steady-clock",
                    "top-k encode of one gradient (one thread)")
    return CompressResult(float(ratio), int(values), m, check_topk(ratio) if check else 0)
