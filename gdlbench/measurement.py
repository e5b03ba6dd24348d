"""Measurement: the samples of one timed row and the statistics every report uses."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import UsageError

CLOCKS = ("steady-clock", "cuda-events", "mpi-wtime")
# Timed iterations and warm-ups per row: the native loops count in C ints and keep every sample.
MAX_ITERS = 10_000_000


def check_timing(iters: int, warmup: int, what: str = "") -> None:
    """UsageError unless 1 <= iters <= MAX_ITERS and 0 <= warmup <= MAX_ITERS."""
    prefix = f"{what}: " if what else ""
    if not (isinstance(iters, (int, np.integer)) and 1 <= iters <= MAX_ITERS):
        raise UsageError(f"{prefix}--iters must be an integer from 1 to {MAX_ITERS}, got {iters!r}")
    if not (isinstance(warmup, (int, np.integer)) and 0 <= warmup <= MAX_ITERS):
        raise UsageError(f"{prefix}--warmup must be an integer from 0 to {MAX_ITERS}, got {warmup!r}")


@dataclass(frozen=True)
class Measurement:
    """Per-iteration samples in microseconds, the clock that took them and what they timed."""

    samples_us: tuple[float, ...]
    clock: str
    region: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.samples_us:
            raise ValueError("a Measurement needs at least one sample")
        if self.clock not in CLOCKS:
            raise ValueError(f"unknown clock {self.clock!r}")
        object.__setattr__(self, "samples_us", tuple(float(s) for s in self.samples_us))

    @property
    def median(self) -> float:
        return float(np.median(self.samples_us))

    @property
    def min(self) -> float:
        return float(np.min(self.samples_us))

    @property
    def max(self) -> float:
        return float(np.max(self.samples_us))

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples_us))

    @property
    def p95(self) -> float:
        return float(np.percentile(self.samples_us, 95))

    @property
    def cv(self) -> float:
        """Coefficient of variation: standard deviation / mean (0 for a single sample)."""
        if len(self.samples_us) < 2:
            return 0.0
        return float(np.std(self.samples_us, ddof=1) / np.mean(self.samples_us))

    def stats(self, prefix: str = "time") -> dict:
        """The statistics under DESIGN.md's JSON names (time_us is the median, the headline)."""
        return {
            f"{prefix}_us": self.median,
            f"{prefix}_us_min": self.min,
            f"{prefix}_us_p95": self.p95,
            f"{prefix}_us_max": self.max,
            f"{prefix}_cv": self.cv,
        }

    def to_dict(self) -> dict:
        return {**self.stats(), "samples_us": list(self.samples_us), "clock": self.clock, "region": self.region}

    def __repr__(self) -> str:
        return (
            f"Measurement(median={self.median:.3f} us, min={self.min:.3f}, p95={self.p95:.3f}, "
            f"max={self.max:.3f}, cv={self.cv:.3f}, n={len(self.samples_us)}, clock={self.clock})"
        )
