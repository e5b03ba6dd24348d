"""The host-to-device phase (t_h2d) and copy bandwidth, measured as nvbandwidth measures it:
cudaMemcpyAsync on one stream between CUDA events, several copies per sample, median of the
samples, GB/s = bytes / 1e9 / s. Buffers are allocated and touched before timing; the data are
verified after the timed copies (untimed).

On a machine without a GPU a memcpy into the compute buffer stands in for host-to-device (that is
the copy a CPU training step makes of its input batch), and every row says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from .._native import _core, require_cuda
from ..common import env, hostmem
from ..common.errors import UsageError
from ..common.measurement import MAX_ITERS, Measurement, check_device, check_threads, check_timing
from ..common.output import Column, fmt_float
from ..common.units import format_bytes, option_argv, parse_size

DIRECTIONS = ("h2d", "d2h", "d2d")
MEMORIES = ("pinned", "pageable")
CPU_NOTE = "no GPU: a host memcpy into the compute buffer stands in for the transfer"


@dataclass(frozen=True)
class CopyRequest:
    """Copies of size_bytes in one direction to time, checked once when made; to_argv() is the
    `gdlbench copy` command that times them again. d2d copies device memory (memory 'device')."""

    size_bytes: int
    direction: str = "h2d"
    memory: str = "pinned"
    device: str = "auto"
    copies: int = 4
    iters: int = 10
    warmup: int = 2
    threads: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.size_bytes, (int, np.integer)) or self.size_bytes < 1:
            raise UsageError(f"copy: size must be a positive number of bytes, got {self.size_bytes!r}")
        check_timing(self.iters, self.warmup, "copy")
        if not (isinstance(self.copies, (int, np.integer)) and 1 <= self.copies <= MAX_ITERS):
            raise UsageError(f"copy: --copies must be from 1 to {MAX_ITERS}, got {self.copies}")
        if self.direction not in DIRECTIONS:
            raise UsageError(f"copy: direction must be h2d, d2h or d2d, got {self.direction!r}")
        if self.memory not in (*MEMORIES, "device"):
            raise UsageError(f"copy: memory must be pinned or pageable, got {self.memory!r}")
        if self.direction == "d2d":
            object.__setattr__(self, "memory", "device")
        check_device(self.device, "copy")
        check_threads(self.threads, "copy")

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time these copies again."""
        return ["copy", *option_argv([
            ("--size", self.size_bytes), ("--direction", self.direction),
            ("--memory", None if self.memory == "device" else self.memory), ("--device", self.device),
            ("--copies", self.copies), ("--iters", self.iters), ("--warmup", self.warmup),
            ("--threads", self.threads)])]


@dataclass
class CopyResult:
    """Copies in one direction timed: the Measurement (one sample = `copies` copies) and GB/s."""

    command: ClassVar[str] = "copy"
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [
        Column("direction", "direction"), Column("memory", "memory"), Column("size", "size_bytes", format_bytes),
        Column("copies/sample", "copies_per_sample"), Column("time/copy (us)", "time_per_copy_us", fmt_float(1)),
        Column("cv", "time_cv", fmt_float(3)), Column("GB/s", "gbs", fmt_float(2)), Column("#wrong", "wrong"),
    ]
    direction: str
    memory: str  # pinned | pageable | device (d2d) | host (the CPU stand-in)
    size_bytes: int
    copies: int
    device: str
    threads: int | None
    measurement: Measurement  # one sample = `copies` back-to-back copies
    wrong: int
    note: str = ""
    request: CopyRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def gbs(self) -> float:
        return self.copies * self.size_bytes / (self.measurement.median * 1e-6) / 1e9

    @property
    def time_per_copy_us(self) -> float:
        return self.measurement.median / self.copies

    @property
    def passed(self) -> bool:
        return self.wrong == 0

    def to_dict(self) -> dict[str, Any]:
        row = {"direction": self.direction, "memory": self.memory, "size_bytes": self.size_bytes,
               "copies_per_sample": self.copies, "device": self.device, "threads": self.threads,
               **self.measurement.to_dict(), "time_per_copy_us": self.time_per_copy_us, "gbs": self.gbs,
               "wrong": self.wrong, "note": self.note}
        row.pop("clock"), row.pop("region")
        return row


def plan(direction: str, memory: str) -> list[tuple[str, str]]:
    """(direction, memory) pairs for the CLI's choices; d2d has no host memory kind."""
    if direction not in (*DIRECTIONS, "all"):
        raise UsageError(f"copy: direction must be h2d, d2h, d2d or all, got {direction!r}")
    if memory not in (*MEMORIES, "both"):
        raise UsageError(f"copy: memory must be pinned, pageable or both, got {memory!r}")
    dirs = DIRECTIONS if direction == "all" else (direction,)
    mems = MEMORIES if memory == "both" else (memory,)
    return [(d, "device" if d == "d2d" else m) for d in dirs for m in (mems if d != "d2d" else mems[:1])]


def copy(size: int | str | CopyRequest, direction: str = "h2d", memory: str = "pinned", device: str = "auto", *,
         copies: int = 4, iters: int = 10, warmup: int = 2, threads: int | None = None) -> CopyResult:
    """Time `copies` copies of `size` bytes (an int, or '1GB' as the CLI's --size) per sample in
    one direction, h2d, d2h or d2d, from pinned or pageable host memory (`gdlbench copy`); or a
    CopyRequest. The result carries its request."""
    if isinstance(size, CopyRequest):
        req = size
    else:
        nbytes = parse_size(size, "copy: size") if isinstance(size, str) else size
        req = CopyRequest(nbytes, direction, memory, device, copies, iters, warmup, threads)
    return replace(_copy(req.size_bytes, req.direction, req.memory, req.device, req.copies, req.iters, req.warmup,
                         req.threads), request=req)


def _copy(size: int, direction: str, memory: str, device: str, copies: int, iters: int, warmup: int,
          threads: int | None) -> CopyResult:
    dev, _ = env.resolve_device(device)
    if dev == "cpu":
        hostmem.require_host(2 * size, "copy")
        threads = threads or env.default_threads()
        run = _core.copy_bench(nbytes=int(size), copies=copies, warmup=warmup, iters=iters, threads=threads)
        meas = Measurement(run.samples_us, "steady-clock", f"{copies} memcpys of {size} bytes ({threads} threads)")
        return CopyResult(direction, "host", int(size), copies, "cpu", threads, meas, int(run.wrong_bytes), CPU_NOTE)
    cuda = require_cuda()
    hostmem.require_device(cuda, (2 if direction == "d2d" else 1) * size, "copy")
    # host: the reference pattern, the pinned/pageable buffer (not d2d), a read-back buffer (not d2h)
    hostmem.require_host((2 if direction != "h2d" else 3) * size, "copy")
    run = cuda.copy_bench(direction=direction, pinned=memory == "pinned", nbytes=int(size), copies=copies,
                          warmup=warmup, iters=iters)
    kind = {"h2d": "HostToDevice", "d2h": "DeviceToHost", "d2d": "DeviceToDevice"}[direction]
    meas = Measurement(run.samples_us, "cuda-events",
                       f"{copies} cudaMemcpyAsync {kind} of {size} bytes, queued behind a stream-blocking kernel")
    return CopyResult(direction, memory, int(size), copies, "cuda", None, meas, int(run.wrong_bytes))
