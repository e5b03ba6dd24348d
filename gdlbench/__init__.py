"""gdlbench: every phase of a synchronous data-parallel SGD iteration, timed with real kernels
(OpenBLAS, im2col, MPI on CPUs; cuBLAS, cuDNN, NCCL on GPUs) and held against analytic models."""

from __future__ import annotations

__version__ = "0.1.0"

from ._checkout import use_installed_if_unbuilt  # noqa: E402

use_installed_if_unbuilt(__path__)  # run from a source checkout's root: the installed modules

from ._native import MpiInit, cuda_status, init_mpi  # noqa: E402  (loads mpi4py.MPI, then the native modules)
from .conv import ConvResult, ConvShape, conv  # noqa: E402
from .errors import CheckFailed, UsageError  # noqa: E402
from .gemm import GemmResult, gemm  # noqa: E402
from .iteration import Iteration, IterationResult  # noqa: E402
from .measurement import Measurement  # noqa: E402
from .model import CommModel, Phases, Prediction, predict_iteration, predict_scaling  # noqa: E402
from .network import Network, builtin_nets, load_network  # noqa: E402
from .strategies import PRESETS, Strategy, get_strategies  # noqa: E402

__all__ = ["PRESETS", "CheckFailed", "CommModel", "ConvResult", "ConvShape", "GemmResult", "Iteration", "IterationResult", "Measurement", "MpiInit", "Network",
           "Phases", "Prediction", "Strategy", "UsageError", "__version__", "builtin_nets", "conv", "cuda_status",
           "gemm", "get_strategies", "init_mpi", "load_network", "predict_iteration", "predict_scaling"]
