"""Strategies: how an iteration sends its gradients. Each is a named combination of collective,
overlap, fusion, parameter servers and I/O prefetch, with its assumptions and their source.

The four framework presets follow the systems of Shi, Wang and Chu (arXiv 1711.05979) as that
study and the frameworks' own documentation describe them. They are assumptions, stated in every
output, not claims that gdlbench reproduces those frameworks exactly. Users define their own by
building a Strategy (or `dataclasses.replace` on a preset).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from .errors import UsageError
from .units import split_list

OVERLAPS = ("none", "wfbp")
COLLECTIVES = ("allreduce", "ps")
PS_PULLS = ("with_push", "after_push")
DDP_BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's bucket_cap_mb=25 (MiB)
DDP_FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (with the default cap only)


@dataclass(frozen=True)
class Strategy:
    """collective: 'allreduce' (algorithm `algo`, or the comm model's when None) or 'ps'.
    overlap: 'none' (every message after the whole backward) or 'wfbp' (a message starts as soon
    as its gradients are ready and the message before it has ended).
    bucket_bytes: None sends one message per layer with parameters; B merges consecutive
    gradients (backward order) into buckets of at least B bytes (the last may be smaller).
    first_bucket_bytes: the first bucket closes at this size instead (PyTorch DDP's 1 MiB first
    bucket); None: every bucket at bucket_bytes.
    servers: parameter servers P (None: one per worker, P = N). ps_pull: 'with_push' (each
    message is a push and its pull: the cost model's ps formula) or 'after_push' (pushes overlap backward,
    the pulls of the updated parameters come after all pushes and the update).
    io_prefetch: the next batch is read on another thread during this iteration."""

    name: str
    collective: str = "allreduce"
    algo: str | None = None
    overlap: str = "none"
    bucket_bytes: int | None = None
    first_bucket_bytes: int | None = None
    servers: int | None = None
    ps_pull: str = "with_push"
    io_prefetch: bool = True
    assumptions: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise UsageError(f"strategy {self.name}: collective must be one of {', '.join(COLLECTIVES)}")
        if self.overlap not in OVERLAPS:
            raise UsageError(f"strategy {self.name}: overlap must be one of {', '.join(OVERLAPS)}")
        if self.ps_pull not in PS_PULLS:
            raise UsageError(f"strategy {self.name}: ps_pull must be one of {', '.join(PS_PULLS)}")
        if self.bucket_bytes is not None and self.bucket_bytes < 1:
            raise UsageError(f"strategy {self.name}: bucket_bytes must be >= 1 or None")
        if self.first_bucket_bytes is not None and (self.first_bucket_bytes < 1 or self.bucket_bytes is None):
            raise UsageError(f"strategy {self.name}: first_bucket_bytes must be >= 1, and goes with bucket_bytes")
        if self.servers is not None and self.servers < 1:
            raise UsageError(f"strategy {self.name}: servers must be >= 1 or None")

    def describe(self) -> str:
        """One line: what the model does for this strategy."""
        if self.collective == "ps":
            send = f"parameter servers (P = {self.servers or 'N'}), push/pull"
            if self.ps_pull == "after_push":
                send += " (pulls after all pushes)"
        else:
            send = f"all-reduce ({self.algo or 'the comm model algorithm'})"
        unit = "one message per layer" if self.bucket_bytes is None else f"buckets of >= {self.bucket_bytes:,} B"
        if self.first_bucket_bytes is not None:
            unit += f" (the first >= {self.first_bucket_bytes:,} B)"
        over = "overlapped with backward (WFBP)" if self.overlap == "wfbp" else "after backward"
        return f"{send}, {unit}, {over}, I/O prefetch {'on' if self.io_prefetch else 'off'}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"describe": self.describe()}


PRESETS: dict[str, Strategy] = {s.name: s for s in (
    Strategy(
        "serial", overlap="none", io_prefetch=False,
        assumptions="Every phase in turn: read, copy, forward, backward, all-reduce of each layer's "
                    "gradient, update. The upper bound every other strategy improves on.",
        source="docs/model.md, the iteration model: serial"),
    Strategy(
        "prefetch", overlap="none", io_prefetch=True,
        assumptions="As serial, but the next batch is read on another thread, so only the part of "
                    "t_io longer than the rest of the iteration shows.",
        source="docs/model.md, the iteration model: prefetch"),
    Strategy(
        "wfbp", overlap="wfbp", io_prefetch=True,
        assumptions="Wait-free backpropagation: each layer's gradient is all-reduced as soon as "
                    "backward has produced it and the previous message has ended.",
        source="docs/model.md, the iteration model: WFBP; Zhang et al., Poseidon (USENIX ATC 2017)"),
    Strategy(
        "wfbp-fusion", overlap="wfbp", bucket_bytes=DDP_BUCKET_BYTES, io_prefetch=True,
        assumptions="WFBP over buckets: consecutive gradients merged into buckets of at least 25 MiB, "
                    "each all-reduced when its last gradient is ready (fewer latency terms, later "
                    "start). Bucket size as PyTorch DDP's default bucket_cap_mb=25.",
        source="docs/model.md, the iteration model: fusion; PyTorch DistributedDataParallel; Horovod tensor fusion"),
    Strategy(
        "ddp", overlap="wfbp", bucket_bytes=DDP_BUCKET_BYTES, first_bucket_bytes=DDP_FIRST_BUCKET_BYTES,
        io_prefetch=False,
        assumptions="PyTorch DistributedDataParallel as it is: gradients in buckets of bucket_cap_mb "
                    "(25 MiB; --bucket sets it), in the order the gradients became ready (DDP rebuilds its "
                    "buckets in that order after the first step); a bucket closes once it holds at least "
                    "its cap; the first bucket's cap is 1 MiB with the default cap only (an explicit "
                    "bucket_cap_mb applies to every bucket); each bucket's all-reduce starts when its last "
                    "gradient is ready and the bucket before it was launched, overlapped with the rest of "
                    "backward; the optimizer waits for every bucket. t_io is what the loop waits for its "
                    "DataLoader batch, not overlapped again (the DataLoader's workers already read ahead). "
                    "One dtype of gradients (DDP buckets each dtype apart). This is DDP after its rebuild "
                    "(find_unused_parameters=False, the default); with find_unused_parameters=True DDP keeps "
                    "its first buckets, assigned in parameter order, which this preset does not model.",
        source="PyTorch torch/nn/parallel/distributed.py (_BucketCapacityConfig: bucket_cap_mb default 25; "
               "dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB for the first bucket when the cap is the default; "
               "buckets rebuilt from the gradient-ready order after the first iteration) and "
               "torch/csrc/distributed/c10d/reducer.cpp (compute_bucket_assignment_by_size: a bucket closes "
               "at size >= its limit; buckets are reduced in order); read in torch 2.14.1; "
               "DDP design notes, docs.pytorch.org/docs/stable/notes/ddp.html"),
    Strategy(
        "ps", collective="ps", overlap="none", io_prefetch=True,
        assumptions="Parameter servers, P = N unless set: after backward every worker pushes each "
                    "layer's gradient and pulls the updated parameters; each message is balanced "
                    "over the P servers.",
        source="docs/model.md, the cost model: ps"),
    Strategy(
        "caffe-mpi", overlap="wfbp", bucket_bytes=64 * 2**20, io_prefetch=True,
        assumptions="Caffe-MPI: a separate communication thread all-reduces (NCCL within a node, MPI "
                    "across nodes) while backward runs; gradients are packed into a few buckets "
                    "(modelled as buckets of at least 64 MiB: 2-4 buckets for the nets here).",
        source="Shi, Wang and Chu, arXiv 1711.05979 (Caffe-MPI description); the 64 MiB bucket is "
               "gdlbench's assumption"),
    Strategy(
        "cntk", overlap="none", io_prefetch=True,
        assumptions="CNTK: the gradients of all layers are all-reduced with MPI after backward has "
                    "finished (no overlap with backward); one message per layer; data read ahead "
                    "by its minibatch source.",
        source="Shi, Wang and Chu, arXiv 1711.05979 (CNTK description); CNTK's SimpleDistGradAggregator"),
    Strategy(
        "mxnet", collective="ps", overlap="wfbp", io_prefetch=True,
        assumptions="MXNet (kvstore dist_sync): each layer's gradient is pushed to the parameter "
                    "servers as soon as backward produces it and its parameters pulled right after, "
                    "overlapped with the rest of backward; arrays balanced over the servers (P = N).",
        source="Shi, Wang and Chu, arXiv 1711.05979 (MXNet description); MXNet KVStore documentation"),
    Strategy(
        "tensorflow", collective="ps", overlap="wfbp", ps_pull="after_push", io_prefetch=True,
        assumptions="TensorFlow (parameter servers, synchronous replicas): gradients are sent to the "
                    "servers as they are produced; the updated variables are read back when the next "
                    "step starts, so the pulls are not overlapped with backward (P = N).",
        source="Shi, Wang and Chu, arXiv 1711.05979 (TensorFlow description); tf_cnn_benchmarks "
               "parameter_server mode; the pull placement is gdlbench's assumption"),
)}


def load_strategy(path: str) -> Strategy:
    """A user's strategy from a JSON file: the Strategy fields, e.g.
    {"name": "my-ddp", "overlap": "wfbp", "bucket_bytes": 52428800, "assumptions": "..."}."""
    from dataclasses import fields
    from pathlib import Path

    from .paths import read_json

    doc = read_json(path, "--strategy")
    if not isinstance(doc, dict):
        raise UsageError(f"--strategy {path}: expected an object with the Strategy fields")
    known = {f.name for f in fields(Strategy)}
    unknown = sorted(set(doc) - known - {"describe"})
    if unknown:
        raise UsageError(f"--strategy {path}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    doc = {k: v for k, v in doc.items() if k != "describe"}
    doc.setdefault("name", Path(path).stem)
    types: dict[str, type | tuple[type, ...]] = {"name": str, "collective": str, "algo": (str, type(None)), "overlap": str,
             "bucket_bytes": (int, type(None)),
             "first_bucket_bytes": (int, type(None)), "servers": (int, type(None)), "ps_pull": str, "io_prefetch": bool,
             "assumptions": str, "source": str}
    for k, v in doc.items():
        if not isinstance(v, types[k]) or (isinstance(v, bool) and types[k] is not bool):
            raise UsageError(f"--strategy {path}: {k} has the wrong type ({v!r})")
    doc.setdefault("source", str(path))
    return Strategy(**doc)


def get_strategies(text: str, bucket_bytes: int | None = None, servers: int | None = None) -> list[Strategy]:
    """'all', one preset name, or a comma-separated list (an item ending in .json is a user's
    strategy file, see load_strategy). bucket_bytes / servers override the presets that fuse /
    use servers."""
    names = list(PRESETS) if text.strip() == "all" else split_list(text, "--strategy")
    if not names:
        raise UsageError("--strategy: give a preset name, a comma-separated list or 'all'")
    out = []
    for name in names:
        if name.endswith(".json"):
            out.append(load_strategy(name))
            continue
        if name not in PRESETS:
            raise UsageError(f"--strategy: unknown strategy {name!r} (known: {', '.join(PRESETS)}, all)")
        s = PRESETS[name]
        if bucket_bytes is not None and s.bucket_bytes is not None:
            # DDP: an explicit bucket_cap_mb applies to the first bucket too
            s = replace(s, bucket_bytes=bucket_bytes, first_bucket_bytes=None)
        if servers is not None and s.collective == "ps":
            s = replace(s, servers=servers)
        out.append(s)
    return out
