"""Gradient compression's encode cost: top-k sparsification of one fp32 gradient (the k = n / (2r)
largest magnitudes kept as int32 index + fp32 value pairs, so the message shrinks r times), in
microseconds per dense byte: the COST of `gdlbench predict --compress RATIO:COST`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._fault import fault_count
from .._native import _core
from ..common.errors import UsageError
from ..common.measurement import Measurement, check_timing
from ..common.output import Column, fmt_float
from ..common.units import option_argv, parse_count

CHECK_VALUES = 10_000


def kept_count(values: int, ratio: float) -> int:
    """k = n / (2r), at least one value, at most all: computed here, not read from the kernel."""
    return max(1, min(values, int(values / (2 * ratio))))


def topk_wrong(g: np.ndarray, idx: np.ndarray, val: np.ndarray, ratio: float) -> int:
    """Values an encode of g wrongly dropped or kept, plus kept values that are not g's, against
    numpy's stable sort (ties to the lower index) with k from kept_count (not from the output)."""
    want = np.sort(np.argsort(-np.abs(g), kind="stable")[: kept_count(g.size, ratio)])
    idx = np.asarray(idx, dtype=np.int64)
    valid = (idx >= 0) & (idx < g.size)
    got = set(idx[valid].tolist())
    dropped = len(set(want.tolist()) - got)
    extra = int(np.count_nonzero(~valid)) + (int(valid.sum()) - len(got)) + len(got - set(want.tolist()))
    bad_values = int(np.count_nonzero(np.asarray(val)[valid] != g[idx[valid]]))
    return dropped + extra + bad_values


def check_topk(ratio: float) -> int:
    """The wrong values of two encodes of CHECK_VALUES values at `ratio`: a random gradient through
    the encode binding, and the timed loop's own gradient, code and buffers."""
    g = np.random.default_rng(0).standard_normal(CHECK_VALUES).astype(np.float32)
    idx, val = _core.topk_encode(g, ratio)
    timed_g, timed_idx, timed_val = _core.topk_encode_timed_output(CHECK_VALUES, ratio)
    k = fault_count("topk")  # test-only: each encode drops k of the values it kept
    if k:
        idx, val, timed_idx, timed_val = idx[k:], val[k:], timed_idx[k:], timed_val[k:]
    return topk_wrong(g, idx, val, ratio) + topk_wrong(timed_g, timed_idx, timed_val, ratio)


@dataclass(frozen=True)
class CompressRequest:
    """One top-k encode to time, checked once when made; to_argv() is the `gdlbench compress`
    command that times it again."""

    ratio: float = 100.0
    values: int = 16_000_000
    iters: int = 5
    warmup: int = 1
    check: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.values, (int, np.integer)) or self.values < 1:
            raise UsageError(f"compress: values must be a positive integer, got {self.values!r}")
        if not self.ratio >= 1 or self.ratio == float("inf"):
            raise UsageError(f"compress: ratio must be a finite number >= 1, got {self.ratio!r}")
        object.__setattr__(self, "ratio", float(self.ratio))
        check_timing(self.iters, self.warmup, "compress")

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time this encode again."""
        return ["compress", *option_argv([("--ratio", self.ratio), ("--values", self.values), ("--iters", self.iters),
                                          ("--warmup", self.warmup), ("--no-check", not self.check)])]


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
    request: CompressRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def kept(self) -> int:
        return kept_count(self.values, self.ratio)

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


def compress(ratio: float | CompressRequest = 100.0, values: int | str = 16_000_000, *, iters: int = 5,
             warmup: int = 1, check: bool = True) -> CompressResult:
    """Time the top-k encode of one gradient of `values` fp32 values (an int, or '16M' as the CLI's
    --values) at compression ratio `ratio` >= 1, on one thread (`gdlbench compress`); or a
    CompressRequest. The result carries its request."""
    if isinstance(ratio, CompressRequest):
        req = ratio
    else:
        n = parse_count(values, "compress: values") if isinstance(values, str) else values
        req = CompressRequest(ratio, n, iters, warmup, check)
    m = Measurement(_core.topk_encode_time(n=int(req.values), ratio=req.ratio, warmup=req.warmup, iters=req.iters),
                    "steady-clock", "top-k encode of one gradient (one thread)")
    return CompressResult(req.ratio, int(req.values), m, check_topk(req.ratio) if req.check else 0, req)
