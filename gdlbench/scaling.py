"""predict(): the model's scaling table from measured phases, as `gdlbench predict` prints it.

>>> from gdlbench import CommModel, Phases, predict
>>> phases = Phases.synthetic("alexnet", batch=64)          # phases from a GPU's nominal speed
>>> ring = CommModel.from_bandwidth("ring", alpha_us=5.0, gbs=12.5)
>>> result = predict("alexnet", phases, ring, strategy="wfbp", workers=[1, 8])
>>> [(row["workers"], round(row["efficiency"], 2) <= 1.0) for row in result.rows()]
[(1, True), (8, True)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from .errors import UsageError
from .model import CommModel, Phases, predict_scaling
from .network import Network, load_network
from .strategies import Strategy, get_strategies
from .units import parse_int_list, parse_size

DEFAULT_WORKERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class PredictResult:
    """The model's rows per (strategy, N): t_iter_us, images_per_s, speedup, efficiency and the
    exposed phases; nothing is timed."""

    command: ClassVar[str] = "predict"
    timing: ClassVar[dict[str, str]] = {"clock": "none", "region": "model prediction: nothing timed",
                                        "rank_reduction": "none"}
    net: Network
    phases: Phases
    comm: CommModel
    strategies: list[Strategy]
    workers: list[int]
    table_rows: list[dict[str, Any]] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        return list(self.table_rows)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary and rows as `gdlbench predict --json` holds them."""
        return {"net": self.net.name, "phases": self.phases.to_dict(), "comm_model": self.comm.to_dict(),
                "workers": self.workers, "strategies": [s.to_dict() for s in self.strategies],
                "rows": self.rows()}


def predict(net: str | Network | None = None, phases: Phases | Any = None, comm_model: CommModel | str | None = None,
            *, alpha_us: float | None = None, beta_us_per_byte: float | None = None,
            bandwidth_gbs: float | None = None, gamma_us_per_byte: float | None = None, algo: str | None = None,
            strategy: str | list[Strategy] = "all", workers: str | Sequence[int] = DEFAULT_WORKERS,
            bucket: int | str | None = None, servers: int | None = None, batch: int | None = None,
            device: str = "auto", gradient_bytes: int = 4) -> PredictResult:
    """`gdlbench predict` as a function. phases: a Phases, an IterationResult, the path of a saved
    `gdlbench iteration --json`, or None to measure a serial iteration of `net` here (`batch`,
    `device`). The communication model: `comm_model` (a CommModel, or the path of a saved
    `gdlbench allreduce --fit --json`, with `algo` naming its fit), or alpha_us with
    beta_us_per_byte or bandwidth_gbs (and gamma_us_per_byte) for the formula `algo` (ring).
    gradient_bytes: bytes per gradient element on the wire (4: fp32; 2: gradients sent in bf16)."""
    from .commands.predict import comm_model_from_args

    if isinstance(phases, (str, Path)):
        phases = Phases.load(phases)
    elif phases is None:
        if net is None:
            raise UsageError("predict: give phases, or a net to measure them on the spot")
        from .iteration import Iteration

        phases = Iteration(net, batch, device, "serial", iters=3, warmup=1).measure().phases_model()
    elif hasattr(phases, "phases_model"):
        phases = phases.phases_model()
    if not isinstance(phases, Phases):
        raise UsageError(f"predict: phases must be Phases, an IterationResult or a path, not {type(phases).__name__}")
    name = net if net is not None else phases.net
    if not name:
        raise UsageError("predict: give net (the phases do not name their network)")
    network = load_network(name)
    if isinstance(comm_model, CommModel):
        comm = comm_model
    else:
        comm = comm_model_from_args(SimpleNamespace(
            algo=algo, alpha=alpha_us, beta=beta_us_per_byte, bandwidth=bandwidth_gbs, gamma=gamma_us_per_byte,
            from_file=str(comm_model) if comm_model is not None else None))
    counts = parse_int_list(workers, "predict: workers") if isinstance(workers, str) else [int(n) for n in workers]
    if not counts or min(counts) < 1:
        raise UsageError(f"predict: workers must be positive, got {workers!r}")
    bucket_bytes = parse_size(bucket, "predict: bucket") if bucket is not None else None
    chosen = (get_strategies(strategy, bucket_bytes=bucket_bytes, servers=servers) if isinstance(strategy, str)
              else list(strategy))
    rows = predict_scaling(network, phases, comm, chosen, counts, dtype_bytes=gradient_bytes)
    return PredictResult(network, phases, comm, chosen, counts, rows)
