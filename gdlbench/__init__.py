"""gdlbench: every phase of a synchronous data-parallel SGD iteration, timed with real kernels
(OpenBLAS, im2col, MPI on CPUs; cuBLAS, cuDNN, NCCL on GPUs) and held against analytic models."""

from __future__ import annotations

__version__ = "0.1.0"

from ._native import cuda_status  # noqa: E402  (loads mpi4py.MPI, then the native modules)
from .conv import ConvResult, ConvShape, conv  # noqa: E402
from .errors import CheckFailed, UsageError  # noqa: E402
from .gemm import GemmResult, gemm  # noqa: E402
from .measurement import Measurement  # noqa: E402

__all__ = ["CheckFailed", "ConvResult", "ConvShape", "GemmResult", "Measurement", "UsageError", "__version__", "conv", "cuda_status", "gemm"]
