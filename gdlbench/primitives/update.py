"""The update phase (t_u): SGD with momentum and weight decay over one flat fp32 parameter buffer,
timed against a plain copy of the same memory traffic measured in the same run.

Convention (PyTorch's torch.optim.SGD, dampening 0): v = momentum*v + (g + wd*w); w -= lr*v.
Bytes moved per parameter: read w, g, v and write w, v = 20 (fp32). The reference copy moves the
same 20 bytes per parameter: a copy of 10n bytes reads 10n and writes 10n; both GB/s count reads plus
writes (STREAM's convention), so their ratio is the fraction of copy bandwidth the update reaches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._native import _core, require_cuda
from ..common import env, hostmem
from ..common.errors import UsageError
from ..common.measurement import Measurement, check_device, check_threads, check_timing
from ..common.output import Column, fmt_float
from ..common.units import option_argv, parse_count

BYTES_PER_PARAM = 20
CHECK_PARAMS = 1 << 16
TOLERANCE = 1e-6  # max |w - ref| / max(1, |ref|): a few float32 roundings


@dataclass(frozen=True)
class UpdateRequest:
    """One SGD step over `params` fp32 parameters (and a copy of the same traffic) to time,
    checked once when made; to_argv() is the `gdlbench update` command that times it again."""

    params: int = 25_600_000
    device: str = "auto"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    iters: int = 20
    warmup: int = 5
    threads: int | None = None
    check: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.params, (int, np.integer)) or self.params < 1:
            raise UsageError(f"update: params must be a positive integer, got {self.params!r}")
        check_timing(self.iters, self.warmup, "update")
        lr, momentum, wd = self.lr, self.momentum, self.weight_decay
        if not (0 <= lr < float("inf") and 0 <= momentum < 1 and 0 <= wd < float("inf")):
            raise UsageError(f"update: need finite --lr >= 0, 0 <= --momentum < 1 and finite --weight-decay >= 0, "
                             f"got {lr}, {momentum}, {wd}")
        check_device(self.device, "update")
        check_threads(self.threads, "update")

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time this step again."""
        return ["update", *option_argv([
            ("--params", self.params), ("--device", self.device), ("--lr", float(self.lr)),
            ("--momentum", float(self.momentum)), ("--weight-decay", float(self.weight_decay)),
            ("--iters", self.iters), ("--warmup", self.warmup), ("--threads", self.threads),
            ("--no-check", not self.check)])]


@dataclass
class UpdateResult:
    """The SGD update and a copy of the same traffic, timed in one run; GB/s of both."""

    command: ClassVar[str] = "update"
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [
        Column("op", "op"), Column("params", "params"), Column("bytes moved", "bytes_moved"),
        Column("time (us)", "time_us", fmt_float(1)), Column("min", "time_us_min", fmt_float(1)),
        Column("p95", "time_us_p95", fmt_float(1)), Column("cv", "time_cv", fmt_float(3)),
        Column("GB/s", "gbs", fmt_float(2)), Column("vs copy", "vs_copy", fmt_float(3)), Column("#wrong", "wrong"),
    ]
    params: int
    device: str
    threads: int | None
    lr: float
    momentum: float
    weight_decay: float
    update: Measurement
    copy: Measurement
    copy_bytes: int
    check: dict[str, Any] | None = field(default=None)
    request: UpdateRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def measurement(self) -> Measurement:
        """The update's Measurement (the reference copy's is `copy`)."""
        return self.update

    @property
    def bytes_moved(self) -> int:
        return BYTES_PER_PARAM * self.params

    @property
    def update_gbs(self) -> float:
        return self.bytes_moved / (self.update.median * 1e-6) / 1e9

    @property
    def copy_gbs(self) -> float:
        return 2 * self.copy_bytes / (self.copy.median * 1e-6) / 1e9

    @property
    def ratio(self) -> float:
        return self.update_gbs / self.copy_gbs

    @property
    def passed(self) -> bool:
        return self.check is None or self.check["passed"]

    def rows(self) -> list[dict[str, Any]]:
        base = {"params": self.params, "dtype": "float32", "device": self.device, "threads": self.threads}
        upd = {"op": "sgd-update", **base, "bytes_moved": self.bytes_moved, **self.update.to_dict(),
               "gbs": self.update_gbs, "vs_copy": self.ratio}
        cpy = {"op": "copy (reference)", **base, "size_bytes": self.copy_bytes, "bytes_moved": 2 * self.copy_bytes,
               **self.copy.to_dict(), "gbs": self.copy_gbs}
        if self.check is not None:
            upd.update(max_rel_error=self.check["max_rel_error"], wrong=self.check["wrong"])
        for r in (upd, cpy):
            r.pop("clock"), r.pop("region")
        return [upd, cpy]

    def to_dict(self) -> dict[str, Any]:
        """The update's JSON row (rows() adds the reference copy's)."""
        return self.rows()[0]


def reference(w: np.ndarray, g: np.ndarray, v: np.ndarray, lr: float, momentum: float,
              wd: float) -> tuple[np.ndarray, np.ndarray]:
    """float64 (w, v) after one step."""
    w64, g64, v64 = (a.astype(np.float64) for a in (w, g, v))
    v_new = momentum * v64 + (g64 + wd * w64)
    return w64 - lr * v_new, v_new


def check_kernel(step: Callable[[np.ndarray, np.ndarray, np.ndarray], object], lr: float, momentum: float, wd: float, n: int = CHECK_PARAMS, seed: int = 0) -> dict[str, Any]:
    """Run `step(w, g, v)` (in place, float32 numpy arrays) and compare with `reference`."""
    rng = np.random.default_rng(seed)
    w, g, v = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    ref_w, ref_v = reference(w, g, v, lr, momentum, wd)
    step(w, g, v)
    err = max(float(np.max(np.abs(w - ref_w) / np.maximum(1.0, np.abs(ref_w)))),
              float(np.max(np.abs(v - ref_v) / np.maximum(1.0, np.abs(ref_v)))))
    wrong = int(np.sum(np.abs(w - ref_w) > TOLERANCE * np.maximum(1.0, np.abs(ref_w))))
    return {"max_rel_error": err, "tolerance": TOLERANCE, "wrong": wrong, "checked": n, "passed": err <= TOLERANCE}


def update(params: int | str | UpdateRequest = 25_600_000, device: str = "auto", *, lr: float = 0.01,
           momentum: float = 0.9, weight_decay: float = 5e-4, iters: int = 20, warmup: int = 5,
           threads: int | None = None, check: bool = True) -> UpdateResult:
    """Time one SGD step over `params` fp32 parameters (an int, or '25.6M' as the CLI's --params)
    and a copy of the same traffic, interleaved (`gdlbench update`); or an UpdateRequest. The
    result carries its request."""
    if isinstance(params, UpdateRequest):
        req = params
    else:
        n = parse_count(params, "update: params") if isinstance(params, str) else params
        req = UpdateRequest(n, device, lr, momentum, weight_decay, iters, warmup, threads, check)
    result = _update(req.params, req.device, req.lr, req.momentum, req.weight_decay, req.iters, req.warmup,
                     req.threads, req.check)
    result.request = req
    return result


def _update(params: int, device: str, lr: float, momentum: float, weight_decay: float, iters: int, warmup: int,
            threads: int | None, check: bool) -> UpdateResult:
    dev, _ = env.resolve_device(device)
    total = 32 * params  # w, g, v (12 B/param) + copy source and destination (2 x 10 B/param)
    if dev == "cpu":
        hostmem.require_host(total, "update")
        threads = threads or env.default_threads()
        d = _core.update_bench(n=int(params), lr=lr, momentum=momentum, wd=weight_decay, warmup=warmup, iters=iters,
                               threads=threads)
        clock = "steady-clock"
        region_u = f"one sgd_update over {params} fp32 parameters (OpenMP, {threads} threads)"
        region_c = f"one memcpy of {d.copy_bytes} bytes split over {threads} threads"
        step = lambda w, g, v: _core.sgd_update(w, g, v, lr=lr, momentum=momentum, wd=weight_decay)  # noqa: E731
    else:
        cuda = require_cuda()
        hostmem.require_device(cuda, total, "update")
        threads = None
        d = cuda.update_bench(n=int(params), lr=lr, momentum=momentum, wd=weight_decay, warmup=warmup, iters=iters)
        clock = "cuda-events"
        region_u = f"one SGD kernel over {params} fp32 parameters (float4 loads)"
        region_c = f"one cudaMemcpyAsync device-to-device of {d.copy_bytes} bytes"
        step = lambda w, g, v: cuda.sgd_update_host(w, g, v, lr=lr, momentum=momentum, wd=weight_decay)  # noqa: E731
    result = UpdateResult(int(params), dev, threads, lr, momentum, weight_decay,
                          Measurement(d.update_us, clock, region_u), Measurement(d.copy_us, clock, region_c),
                          int(d.copy_bytes))
    if check:
        result.check = check_kernel(step, lr, momentum, weight_decay)
    return result
