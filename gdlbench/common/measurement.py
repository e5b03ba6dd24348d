"""Measurement: the samples of one timed row and the statistics every report uses."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import UsageError

CLOCKS = ("steady-clock", "cuda-events", "mpi-wtime")
# A row is noisy when its interquartile range exceeds this fraction of the median: the threshold
# torch.utils.benchmark warns at. The IQR, unlike the CV, ignores the odd preempted sample.
NOISE_THRESHOLD = 0.10
NOISE_NOTE = "!: noisy, the interquartile range of the samples exceeds 10 % of the median"
# Timed iterations and warm-ups per row: the native loops count in C ints and keep every sample.
MAX_ITERS = 10_000_000


def check_timing(iters: int, warmup: int, what: str = "") -> None:
    """UsageError unless 1 <= iters <= MAX_ITERS and 0 <= warmup <= MAX_ITERS."""
    prefix = f"{what}: " if what else ""
    if not (isinstance(iters, (int, np.integer)) and 1 <= iters <= MAX_ITERS):
        raise UsageError(f"{prefix}--iters must be an integer from 1 to {MAX_ITERS}, got {iters!r}")
    if not (isinstance(warmup, (int, np.integer)) and 0 <= warmup <= MAX_ITERS):
        raise UsageError(f"{prefix}--warmup must be an integer from 0 to {MAX_ITERS}, got {warmup!r}")


DEVICES = ("auto", "cpu", "cuda")  # what a request's device may name (auto: cuda when a GPU is visible)
MAX_THREADS = 1024


def check_threads(threads: int | None, what: str = "") -> None:
    """UsageError unless threads is None (the default) or from 1 to MAX_THREADS."""
    if threads is not None and not (isinstance(threads, (int, np.integer)) and 1 <= threads <= MAX_THREADS):
        raise UsageError(f"{what + ': ' if what else ''}--threads must be from 1 to {MAX_THREADS}, got {threads!r}")


def check_device(device: str, what: str) -> None:
    """UsageError unless device is auto, cpu or cuda."""
    if device not in DEVICES:
        raise UsageError(f"{what}: --device must be one of {', '.join(DEVICES)}, got {device!r}")


def median_se(samples: Sequence[float]) -> float:
    """Standard error of the median of samples: 1.2533 sigma / sqrt(n), sigma estimated from the
    IQR (IQR / 1.349, so that one stalled sample does not swell it); 0 for one sample."""
    n = len(samples)
    if n < 2:
        return 0.0
    q75, q25 = np.percentile(samples, [75, 25])
    return 1.2533 * (float(q75 - q25) / 1.349) / math.sqrt(n)


@dataclass(frozen=True)
class Measurement:
    """Per-iteration samples in microseconds, the clock that took them and what they timed.

    >>> m = Measurement([10.0, 11.0, 10.5, 30.0], "steady-clock", "one call")
    >>> m.median, m.min, m.max
    (10.75, 10.0, 30.0)
    >>> m.noisy            # IQR 5.4 us is half the median
    True
    >>> Measurement([10.0, 10.1, 10.2], "steady-clock").noisy
    False
    """

    samples_us: Sequence[float]
    clock: str
    region: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

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

    @property
    def iqr(self) -> float:
        """Interquartile range: p75 - p25."""
        q75, q25 = np.percentile(self.samples_us, [75, 25])
        return float(q75 - q25)

    @property
    def median_se(self) -> float:
        """Standard error of the median (the module's median_se); 0 for one sample."""
        return median_se(self.samples_us)

    @property
    def noisy(self) -> bool:
        """IQR / median above NOISE_THRESHOLD (torch.utils.benchmark's warning): the median of
        this row may move between runs by more than its digits suggest."""
        return bool(self.iqr > NOISE_THRESHOLD * self.median)

    def stats(self, prefix: str = "time") -> dict[str, Any]:
        """The statistics under their JSON names (docs/report.md): time_us is the median, the
        headline; `noisy` (`<prefix>_noisy` for another prefix) sits beside the CV."""
        return {
            f"{prefix}_us": self.median,
            f"{prefix}_us_min": self.min,
            f"{prefix}_us_p95": self.p95,
            f"{prefix}_us_max": self.max,
            f"{prefix}_cv": self.cv,
            "noisy" if prefix == "time" else f"{prefix}_noisy": self.noisy,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.stats(), "samples_us": list(self.samples_us), "clock": self.clock, "region": self.region}

    def __repr__(self) -> str:
        return (
            f"Measurement(median={self.median:.3f} us, min={self.min:.3f}, p95={self.p95:.3f}, "
            f"max={self.max:.3f}, cv={self.cv:.3f}, n={len(self.samples_us)}, clock={self.clock})"
        )
