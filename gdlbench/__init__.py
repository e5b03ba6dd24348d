"""gdlbench: every phase of a synchronous data-parallel SGD iteration, timed with real kernels
(OpenBLAS, im2col, MPI on CPUs; cuBLAS, cuDNN, NCCL on GPUs) and held against analytic models.

One function per CLI command, with the command's options as arguments or as one typed request
(GemmRequest, ConvRequest, ...: frozen, checked once, `to_argv()` the command that asks it
again); each returns result objects that carry their request and hold their `Measurement` (every
sample, the clock, the timed region), the derived metrics and `to_dict()`, the JSON row the CLI
writes. `Compare` puts results side by side and
writes the CLI's table, JSON and CSV.

| command | function | returns |
|---|---|---|
| gemm | `gemm` | `GemmResult` |
| conv | `conv` | list of `ConvResult` (one per pass) |
| layer | `layer` | list of `LayerResult` |
| allreduce, reduce_scatter, allgather, broadcast | `allreduce`, `reduce_scatter`, `allgather`, `broadcast` | list of `CollectiveResult` (one per size and buffer mode) |
| copy | `copy` | `CopyResult` |
| update | `update` | `UpdateResult` |
| io | `io` | `IoResult` |
| compress | `compress` | `CompressResult` |
| iteration | `Iteration(...).measure()` | `IterationResult` |
| predict | `predict` | `PredictResult` |
| nets | `load_network`, `builtin_nets` | `Network` |
| env | `environment` | dict |
| study | none: it composes `Iteration`, `allreduce` (with `fit_results`), `compress` and `predict` | |

Inside an mpi4py program the collectives and `Iteration` take `comm=` (any intra-communicator,
sub-communicators included) and keep the program's MPI: importing gdlbench initialises MPI
through mpi4py only when the program has not, at mpi4py's configured thread level
(`mpi4py.rc.thread_level`), and gdlbench never finalises it.

>>> import gdlbench
>>> sorted(set(gdlbench.__all__) & {"gemm", "allreduce", "Compare"})
['Compare', 'allreduce', 'gemm']
"""

__version__ = "0.1.0"

from ._checkout import use_installed_if_unbuilt  # noqa: E402

use_installed_if_unbuilt(__path__)  # run from a source checkout's root: the installed modules

from ._native import MpiInit, cuda_status, init_mpi  # noqa: E402  (loads mpi4py.MPI, then the native modules)
from .common.compare import Compare  # noqa: E402
from .common.env import collect as environment  # noqa: E402
from .common.errors import CheckFailed, UsageError  # noqa: E402
from .common.measurement import Measurement  # noqa: E402
from .composed.iteration import Iteration, IterationRequest, IterationResult  # noqa: E402
from .model.memory import Memory, memory_per_worker  # noqa: E402
from .model.phases import (  # noqa: E402
    CommModel,
    Phases,
    Prediction,
    load_comm_model,
    predict_iteration,
    predict_scaling,
)
from .model.strategies import PRESETS, Strategy, get_strategies  # noqa: E402
from .model.torch_trace import ImportedTrace, import_trace  # noqa: E402
from .nets.network import Network, builtin_nets, load_network  # noqa: E402
from .primitives.collectives import (  # noqa: E402
    AlphaBetaFit,
    CollectiveRequest,
    CollectiveResult,
    allgather,
    allreduce,
    broadcast,
    fit_alpha_beta,
    fit_results,
    reduce_scatter,
)
from .primitives.compress import CompressRequest, CompressResult, compress  # noqa: E402
from .primitives.conv import ConvRequest, ConvResult, ConvShape, conv  # noqa: E402
from .primitives.copy import CopyRequest, CopyResult, copy  # noqa: E402
from .primitives.gemm import GemmRequest, GemmResult, gemm  # noqa: E402
from .primitives.io import IoRequest, IoResult, io  # noqa: E402
from .primitives.layers import LayerRequest, LayerResult, layer  # noqa: E402
from .primitives.update import UpdateRequest, UpdateResult, update  # noqa: E402
from .whatif.prediction import CommSource, Evaluation, PredictRequest, evaluate  # noqa: E402
from .whatif.scaling import PredictResult, predict  # noqa: E402

__all__ = [
    # measurements: one function per CLI command
    "gemm", "conv", "layer", "allreduce", "reduce_scatter", "allgather", "broadcast", "copy", "update", "io",
    "compress", "Iteration", "predict",
    # what each is asked: a frozen request, checked once, that prints its command (to_argv())
    "GemmRequest", "ConvRequest", "LayerRequest", "CollectiveRequest", "CopyRequest", "UpdateRequest", "IoRequest",
    "CompressRequest", "IterationRequest",
    # their results (each carries its request)
    "Measurement", "GemmResult", "ConvResult", "ConvShape", "LayerResult", "CollectiveResult", "CopyResult",
    "UpdateResult", "IoResult", "CompressResult", "IterationResult", "PredictResult",
    # side by side, as the CLI writes them
    "Compare",
    # the model
    "CommModel", "Phases", "Prediction", "predict_iteration", "predict_scaling", "load_comm_model",
    "AlphaBetaFit", "fit_alpha_beta", "fit_results",
    # what `gdlbench predict` prices, as a typed request, and what it returns
    "PredictRequest", "CommSource", "evaluate", "Evaluation",
    # memory per worker (parameters, gradients, optimizer states, activations, buffers)
    "memory_per_worker", "Memory",
    # networks and strategies
    "Network", "builtin_nets", "load_network", "PRESETS", "Strategy", "get_strategies",
    # a PyTorch job's own profiler trace as phases and gradients
    "import_trace", "ImportedTrace",
    # the machine, errors
    "environment", "cuda_status", "init_mpi", "MpiInit", "CheckFailed", "UsageError",
]
