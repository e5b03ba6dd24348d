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

from ..common.errors import UsageError
from ..common.units import size_text, split_list

OVERLAPS = ("none", "wfbp")
SHARD_STAGES = (0, 1, 2, 3)
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
    io_prefetch: the next batch is read on another thread during this iteration.
    shard: the ZeRO stage (Rajbhandari et al., SC20): 0 replicates everything (the all-reduce
    strategies); 1 shards the optimizer states (gradients reduce-scattered in buckets, the
    updated parameters all-gathered after the update); 2 also the gradients (the same messages);
    3 also the parameters (each unit's parameters all-gathered before its forward and again
    before its backward, its gradients reduce-scattered after its backward; no all-gather after
    the update). prefetch (stage 3): the next unit's all-gather is issued when the current unit
    starts computing, in forward and backward (FSDP's forward_prefetch and BACKWARD_PRE).
    keep_root (stage 3): the root unit (the layers in no block) keeps its parameters from forward
    to backward, as FSDP does not reshard its root after forward.
    blocking (sharded): the job's thread waits for each message where it issues it, so nothing
    overlaps (PyTorch FSDP on CPU tensors with gloo: its collectives are synchronous calls; the
    prefetch only moves where the wait falls). The model only: the composed run ignores it."""

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
    shard: int = 0
    prefetch: bool = False
    keep_root: bool = False
    blocking: bool = False

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
        if self.shard not in SHARD_STAGES or isinstance(self.shard, bool):
            raise UsageError(f"strategy {self.name}: shard must be a ZeRO stage, one of {SHARD_STAGES}")
        if self.shard and self.collective != "allreduce":
            raise UsageError(f"strategy {self.name}: shard > 0 goes with collective 'allreduce' (the "
                             "reduce-scatter and all-gather replace it)")

    def describe(self) -> str:
        """One line: what the model does for this strategy."""
        if self.shard:
            return describe_sharded(self)
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

    from ..common.paths import read_json

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

    types |= {"shard": int, "prefetch": bool, "keep_root": bool, "blocking": bool}  # sharded strategies
    for k, v in doc.items():
        if not isinstance(v, types[k]) or (isinstance(v, bool) and types[k] is not bool):
            raise UsageError(f"--strategy {path}: {k} has the wrong type ({v!r})")
    doc.setdefault("source", str(path))
    return Strategy(**doc)


def fused(s: Strategy, bucket_bytes: int) -> Strategy:
    """`s` with its gradients fused into buckets of at least bucket_bytes (the first bucket as
    s has it), renamed NAME-bucket-SIZE: a strategy of its own, so it takes the run's contention,
    not that measured with s's own messages."""
    size = size_text(bucket_bytes)
    return replace(s, name=f"{s.name}-bucket-{size}", bucket_bytes=bucket_bytes,
                   source=f"{s.name} with buckets of {size} (the fusion what-if)")


def get_strategies(text: str, bucket_bytes: int | None = None, servers: int | None = None) -> list[Strategy]:
    """'all', one preset name, or a comma-separated list (an item ending in .json is a user's
    strategy file, see load_strategy; 'all' and 'sharded' stand for their groups, each name once). bucket_bytes / servers override the presets that fuse /
    use servers."""
    groups = {"all": list(PRESETS), "sharded": list(SHARDED)}  # each may stand in a list: all,sharded
    names = list(dict.fromkeys(n for name in split_list(text, "--strategy") for n in groups.get(name, [name])))
    if not names:
        raise UsageError("--strategy: give a preset name, a comma-separated list or 'all'")
    out = []
    for name in names:
        if name.endswith(".json"):
            out.append(load_strategy(name))
            continue
        if name not in PRESETS and name not in SHARDED:
            raise UsageError(f"--strategy: unknown strategy {name!r} (known: {', '.join([*PRESETS, *SHARDED])}, "
                             "all, sharded)")
        s = PRESETS[name] if name in PRESETS else SHARDED[name]
        if bucket_bytes is not None and s.bucket_bytes is not None:
            # DDP: an explicit bucket_cap_mb applies to the first bucket too
            s = replace(s, bucket_bytes=bucket_bytes, first_bucket_bytes=None)
        if servers is not None and s.collective == "ps":
            s = replace(s, servers=servers)
        out.append(s)
    return out


# ---------------------------------------------------------------------------------------------
# Sharded data parallelism: ZeRO stages 1-3 and PyTorch FSDP (gdlbench.model.phases.predict_sharded prices
# them, gdlbench.model.memory sizes them, the CPU executor runs them: gdlbench.composed.iteration). Not in 'all'
# (the presets the study compares): name them, or 'sharded'.

DEEPSPEED_BUCKET_BYTES = 500_000_000 * 2  # DeepSpeed's reduce/allgather_bucket_size 5e8 elements, fp16


def describe_sharded(s: Strategy) -> str:
    """Strategy.describe for shard > 0."""
    if s.shard < 3:
        unit = "one message per layer" if s.bucket_bytes is None else f"buckets of >= {s.bucket_bytes:,} B"
        over = "overlapped with backward" if s.overlap == "wfbp" else "after backward"
        what = "optimizer states" if s.shard == 1 else "optimizer states and gradients"
        return (f"ZeRO-{s.shard} ({what} sharded): reduce-scatter of the gradients ({unit}, {over}), update "
                f"of 1/N of the parameters, all-gather of the updated parameters after it")
    pre = "prefetching the next unit's" if s.prefetch else "on demand, no prefetch of the"
    root = "; the root unit keeps its parameters from forward to backward" if s.keep_root else ""
    root += "; the job waits for each message where it issues it (nothing overlaps)" if s.blocking else ""
    return (f"ZeRO-3 (parameters, gradients, optimizer states sharded): per unit (a block, or a layer), "
            f"all-gather of its parameters before forward and before backward ({pre} parameters), "
            f"reduce-scatter of its gradients after its backward, update of 1/N{root}")


SHARDED: dict[str, Strategy] = {s.name: s for s in (
    Strategy(
        "zero1", overlap="none", bucket_bytes=DEEPSPEED_BUCKET_BYTES, shard=1,
        assumptions="ZeRO stage 1 (P_os): after backward the gradient buckets are reduce-scattered (each rank "
                    "keeps the reduced part of the parameters it owns), the rank updates its 1/N of the "
                    "parameters and optimizer states, and the updated parameters are all-gathered. Volume "
                    "(N-1)/N x 2 x params: an all-reduce's. Buckets of 5e8 fp16 elements (DeepSpeed's default).",
        source="Rajbhandari et al., ZeRO, SC20, sections 5.1 and 7.2.1; DeepSpeed ZeRO stage 1 "
               "(reduce_bucket_size, allgather_bucket_size 5e8)"),
    Strategy(
        "zero2", overlap="wfbp", bucket_bytes=DEEPSPEED_BUCKET_BYTES, shard=2,
        assumptions="ZeRO stage 2 (P_os+g): as stage 1, but each gradient bucket is reduce-scattered as soon as "
                    "backward fills it (overlap_comm) and only the rank's shard of the gradients is kept. Same "
                    "volume as an all-reduce.",
        source="Rajbhandari et al., ZeRO, SC20, sections 5.2 and 7.2.1; DeepSpeed ZeRO stage 2 (overlap_comm)"),
    Strategy(
        "zero3", overlap="wfbp", shard=3, prefetch=True,
        assumptions="ZeRO stage 3 (P_os+g+p): every unit's parameters are all-gathered before its forward and "
                    "again before its backward (the next unit's prefetched), its gradients reduce-scattered "
                    "after its backward; no all-gather after the update. Volume (N-1)/N x 3 x params: 1.5 x an "
                    "all-reduce's. Units: the net's blocks (each layer where it has none).",
        source="Rajbhandari et al., ZeRO, SC20, sections 5.3 and 7.2.2; DeepSpeed ZeRO stage 3 (prefetch)"),
    Strategy(
        "fsdp", overlap="wfbp", shard=3, prefetch=True, keep_root=True,
        assumptions="PyTorch FSDP, FULL_SHARD, one FSDP unit per block (transformer_auto_wrap_policy) and the "
                    "root unit for the rest: all-gather before each unit's forward (forward_prefetch=True: the "
                    "next unit's issued before the current one computes) and backward (BACKWARD_PRE: the next "
                    "unit's all-gather before the current reduce-scatter), reduce-scatter of each unit's "
                    "gradients after its backward; the root is not resharded after forward.",
        source="PyTorch FSDP documentation (torch.distributed.fsdp.FullyShardedDataParallel: ShardingStrategy."
               "FULL_SHARD, BackwardPrefetch.BACKWARD_PRE, forward_prefetch); Zhao et al., PyTorch FSDP, VLDB 2023"),
)}
