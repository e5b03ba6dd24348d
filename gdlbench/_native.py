"""Loads the native modules: _core (CPU + MPI, always there) and _cuda (optional)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

# OpenMP (element-wise kernels) and OpenBLAS (GEMM) keep separate thread pools on the same cores.
# Spinning idle OpenMP threads steal whole scheduler slices from OpenBLAS's (layers then take
# multiples of ~4-8 ms), so they sleep at once. libgomp reads this when it loads, hence here.
# (OPENBLAS_THREAD_TIMEOUT stays at its default: a short one made skinny GEMMs 3x slower.)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from mpi4py import MPI  # noqa: E402  -- loads libmpi first, so _core binds to the same library

from . import _core  # noqa: E402
from .errors import UsageError

CUDA_IMPORT_ERROR: str | None = None
if importlib.util.find_spec(f"{__package__}._cuda") is None:
    _cuda = None
    CUDA_IMPORT_ERROR = "not built: reinstall with GDL_ENABLE_CUDA=ON pip install '.[cuda]'"
else:
    try:
        from . import _cuda
    except ImportError as exc:  # built, but the [cuda] runtime wheels are missing
        _cuda = None
        CUDA_IMPORT_ERROR = f"{exc} (pip install 'gdlbench[cuda]')"

__all__ = ["MPI", "_core", "_cuda", "cuda_status", "require_cuda"]


def cuda_status() -> tuple[int, str]:
    """(number of usable GPUs, why there are none)."""
    if _cuda is None:
        return 0, f"the CUDA backend is not available ({CUDA_IMPORT_ERROR})"
    count, why = _cuda.device_status()
    return count, why


def require_cuda() -> Any:
    """The _cuda module, or a UsageError saying why CUDA cannot be used."""
    count, why = cuda_status()
    if count == 0:
        raise UsageError(f"--device cuda: no usable GPU: {why}")
    return _cuda
