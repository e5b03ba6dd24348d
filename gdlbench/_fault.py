"""Test-only fault injection: GDLBENCH_FAULT="target=K[,target=K...]" makes an untimed correctness
check corrupt K elements of the result it is about to compare, so that a test can prove the check
fires with the right count (tests/test_faults.py). Targets read here: gemm, conv (each checked
array), topk (each checked encode drops K kept values); csrc/common/fault.h reads collective and
grads from the same variable. Unset, as everywhere outside those tests: no effect."""

from __future__ import annotations

import os

import numpy as np


def fault_count(target: str) -> int:
    """K for `target` in GDLBENCH_FAULT, 0 when it is not named."""
    for item in os.environ.get("GDLBENCH_FAULT", "").split(","):
        name, _, k = item.partition("=")
        if name.strip() == target:
            return int(k)
    return 0


def corrupt(got: np.ndarray, ref: np.ndarray, mag: np.ndarray, k: int) -> np.ndarray:
    """A float64 copy of `got` with its first k elements wrong: the first NaN (a check must count
    NaN as wrong), the rest off by their magnitude + 1 (a relative error of at least 1)."""
    out = np.array(got, dtype=np.float64, copy=True)
    flat, r, m = out.reshape(-1), np.broadcast_to(ref, out.shape).reshape(-1), np.broadcast_to(mag, out.shape).reshape(-1)
    k = min(k, flat.size)
    if k:
        flat[0] = np.nan
        flat[1:k] = r[1:k] + m[1:k] + 1.0
    return out
