"""predict(): the model's scaling table from measured phases, as `gdlbench predict` prints it.

>>> from gdlbench import CommModel, Phases, predict
>>> phases = Phases.synthetic("alexnet", batch=64)          # phases from a GPU's nominal speed
>>> ring = CommModel.from_bandwidth("ring", alpha_us=5.0, gbs=12.5)
>>> result = predict("alexnet", phases, ring, strategy="wfbp", workers=[1, 8])
>>> [(row["workers"], round(row["efficiency"], 2) <= 1.0) for row in result.rows()]
[(1, True), (8, True)]
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..common.errors import UsageError
from ..common.output import Column, fmt_float
from ..common.paths import read_json
from ..common.units import parse_bandwidth, parse_int_list, parse_size, split_list
from ..model.phases import CommModel, Phases, comm_model_of, normalise_algo, predict_scaling
from ..model.strategies import Strategy, get_strategies
from ..nets.network import Network, load_network

DEFAULT_WORKERS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _ms(v: float) -> str:
    return f"{v / 1e3:.2f}"


@dataclass
class PredictResult:
    """The model's rows per (strategy, N): t_iter_us, images_per_s, speedup, efficiency and the
    exposed phases; nothing is timed."""

    command: ClassVar[str] = "predict"
    timing: ClassVar[dict[str, str]] = {"clock": "none", "region": "model prediction: nothing timed",
                                        "rank_reduction": "none"}
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [
        Column("strategy", "strategy"), Column("N", "workers"), Column("t_iter (ms)", "t_iter_us", _ms),
        Column("comm (ms)", "comm_us", _ms), Column("comm exposed (ms)", "comm_exposed_us", _ms),
        Column("io exposed (ms)", "io_exposed_us", _ms), Column("msgs", "messages"),
        Column("images/s", "images_per_s", fmt_float(1)), Column("speedup", "speedup", fmt_float(2)),
        Column("efficiency", "efficiency", fmt_float(3)),
    ]
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


def _is_ps(algo: str) -> bool:
    try:
        return normalise_algo(algo) == "ps"
    except UsageError:
        return False


def fit_files(from_file: str) -> list[str]:
    """--from's files: one path, or a comma list (the all-reduce's fit and the reduce_scatter and
    allgather fits beside it); a file whose name holds a comma is one path."""
    return [from_file] if os.path.isfile(from_file) else split_list(from_file, "--from")


def comm_model_from(*, algo: str | None = None, alpha_us: float | None = None, beta_us_per_byte: float | None = None,
                    bandwidth: str | float | None = None, gamma_us_per_byte: float | None = None,
                    from_file: str | None = None, fit_in_phases: dict[str, Any] | list[Any] | None = None,
                    load: Callable[[str, str], Any] = read_json) -> CommModel:
    """The communication model of `gdlbench predict`'s options: a saved `allreduce --fit` report
    (from_file; algo names its fit; a comma list: with the `reduce_scatter --fit` and `allgather
    --fit` reports that price the sharded strategies' messages), or alpha_us with beta_us_per_byte or a bandwidth (GB/s, or
    with a unit) for the formula `algo` (ring), or else the fit the phases file holds.
    Errors name the CLI's options (--from, --alpha, ...), whose values these are."""
    # With from_file, algo names a fit in the file (a library's own, say "mpi"); otherwise a formula.
    formula = normalise_algo(algo) if algo and not from_file else algo
    if formula and _is_ps(formula) and not from_file:
        # (with --from, `--algo ps` names the parameter-server fit, whose alpha and beta then price
        # the ps strategies' push/pull formula)
        raise UsageError("--algo: ps is a strategy (--strategy ps/mxnet/tensorflow), not an all-reduce algorithm")
    direct = {"alpha": alpha_us, "beta": beta_us_per_byte, "bandwidth": bandwidth, "gamma": gamma_us_per_byte}
    given = [v for v in direct.values() if v is not None]
    if from_file and given:
        raise UsageError("give --from FILE or --alpha/--beta (--bandwidth), not both")
    if from_file:  # a file, or a comma list: the all-reduce's fit and the reduce_scatter/allgather fits
        return comm_model_of([(f, load(f, "--from")) for f in fit_files(from_file)], algo)
    if given:
        if alpha_us is None:
            raise UsageError("--alpha (microseconds per step) is needed with --beta/--bandwidth")
        if (beta_us_per_byte is None) == (bandwidth is None):
            raise UsageError("give one of --beta (us per byte) or --bandwidth (GB/s)")
        for name in ("alpha", "beta", "gamma"):
            v = direct[name]
            if v is not None and (not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0):
                raise UsageError(f"--{name} must be a finite number >= 0, got {v}")
        beta = beta_us_per_byte if beta_us_per_byte is not None else 1e6 / (parse_bandwidth(bandwidth or 0) * 1e9)
        return CommModel(formula or "ring", alpha_us, beta, gamma_us_per_byte or 0.0, source="command line")
    if fit_in_phases is not None:
        return CommModel.from_dict({"summary": {"fit": fit_in_phases}}, algo, source="the phases file's fit")
    raise UsageError("no communication model: give --alpha US with --beta US_PER_BYTE or --bandwidth GBS, "
                     "or --from a saved `gdlbench allreduce --json` file")


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
    if isinstance(phases, (str, Path)):
        phases = Phases.load(phases)
    elif phases is None:
        if net is None:
            raise UsageError("predict: give phases, or a net to measure them on the spot")
        from ..composed.iteration import Iteration

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
        comm = comm_model_from(algo=algo, alpha_us=alpha_us, beta_us_per_byte=beta_us_per_byte,
                               bandwidth=bandwidth_gbs, gamma_us_per_byte=gamma_us_per_byte,
                               from_file=str(comm_model) if comm_model is not None else None)
    counts = parse_int_list(workers, "predict: workers") if isinstance(workers, str) else [int(n) for n in workers]
    if not counts or min(counts) < 1:
        raise UsageError(f"predict: workers must be positive, got {workers!r}")
    bucket_bytes = parse_size(bucket, "predict: bucket") if bucket is not None else None
    chosen = (get_strategies(strategy, bucket_bytes=bucket_bytes, servers=servers) if isinstance(strategy, str)
              else list(strategy))
    rows = predict_scaling(network, phases, comm, chosen, counts, dtype_bytes=gradient_bytes)
    return PredictResult(network, phases, comm, chosen, counts, rows)
