"""The memory model: what one data-parallel worker holds, per strategy (docs/model.md, memory).

Per worker, in bytes, for Psi parameters on N workers at ZeRO stage z (strategies.Strategy.shard):
  parameters   P Psi / (N if z >= 3)              P: 4 (fp32) or 2 (mixed: fp16/bf16 copies)
  gradients    G Psi / (N if z >= 2)              G: as P
  optimizer    K Psi / (N if z >= 1)              K: SGD with momentum 4, Adam 8; mixed precision
                                                  adds the fp32 master weights (4): 8 and 12
  activations  what backward needs of every layer at batch b (activation_bytes), or, with
               activation checkpointing, the input of every block plus one block recomputed
  buffers      the communication buffers: DDP-style buckets hold a copy of every gradient
               (PyTorch DDP, gradient_as_bucket_view off; its Reducer allocates them on one
               worker too); ZeRO-1/2 a reduce bucket and an all-gather bucket (DeepSpeed's
               constant buffers), or with impl='pytorch' torch's programs: ZeRO-1 as
               ZeroRedundancyOptimizer under DDP (DDP's buckets), ZeRO-2 as FSDP SHARD_GRAD_OP
               (parameters sharded at rest, one unit's full gradients; each unit's unsharded
               parameters from its forward to the end of its backward, in the backward peak);
               ZeRO-3/FSDP the gathered parameters of the unit
               computing and the one prefetched (and FSDP's root, kept from forward to
               backward) and one unit's full gradients before its reduce-scatter. Sharded
               strategies on one worker gather nothing (FSDP runs NO_SHARD there).
  backward peak  gradients grow while activations are freed, so the peak is neither their sum
               nor either alone: backward_peak() walks backward from the last layer and takes
               the worst layer's activations still held + gradients made so far + that layer's
               moving gradients (of its output and its input; the loss's two fp32 gradients of
               the logits) + a tied LM head's two parts of the table gradient before autograd
               sums them. At a small batch it is every gradient plus the two table parts (end of
               backward); at a large one every activation plus the logits' gradients (start).
  framework    the process's own memory, outside the framework's tensor allocator: the
               libraries' code pages, the runtime's heaps (glibc's small blocks, the autograd
               graph's nodes, the communication library), on a GPU the CUDA context. A constant
               per process whatever the net and strategy: given (predict --framework-memory),
               not derived; torch on the CPU here: 0.17 GB, measured with a job whose tensors
               are 10 MB (benchmarks/memory_validation.py measures it in every run).
The ZeRO paper's example (Rajbhandari et al., SC20, figure 1: 7.5B parameters, N = 64, mixed
precision Adam, 2 + 2 + 12 bytes per parameter) gives model states of 120, 31.4, 16.6 and 1.9 GB
for stages 0-3. The total is parameters + optimizer + buffers + the backward peak + framework.
Not in it: the optimizer's own temporaries (CPU Adam, one parameter at a time: the size of the largest
parameter, no more than the table parts at backward's end; CUDA's foreach Adam: a temporary of
every parameter at once) and allocator fragmentation. Checked against real PyTorch jobs on the CPU
(benchmarks/memory_validation.py, docs/model.md).

Activations saved for backward, per layer, elements of A bytes (4 fp32, 2 mixed precision):
its input for conv, fc, linear, lm_head, layernorm, bn, lrn, gelu, tanh, relu (its output) and
maxpool; nothing for add, concat, flatten, pools by average, select_token, tokens; a dropout a
1-byte mask (CUDA's native_dropout keeps a bool mask; the CPU's at::dropout keeps it in the input's
dtype, 4 bytes in fp32: 1 % of a GPT-2 small step at fp32, not modelled); an embedding its int64 token ids; softmax_xent its input in fp32; attention its
input, Q, K, V and the output projection's input (5 D S), the softmax output (heads S^2), with
dropout also its mask (1 byte) and output. A GPT block then saves 34 s b h + 5 a s^2 b bytes at
A = 2 (Korthikanti et al., arXiv 2205.05198, section 4.1).
"""

from __future__ import annotations

import argparse
import itertools
import math
from dataclasses import dataclass
from typing import Any

from ..common.errors import UsageError
from ..common.units import parse_size
from ..nets.network import Layer, Network, load_network
from .strategies import Strategy

OPTIMIZERS = ("sgd", "adam")
PRECISIONS = ("fp32", "mixed")
IMPLS = ("deepspeed", "pytorch")  # the programs behind ZeRO stages 1 and 2 (memory_per_worker)
_OPT_BYTES = {"sgd": 4, "adam": 8}  # fp32 state per parameter: momentum; Adam's m and v
_NO_SAVE = ("add", "concat", "flatten", "avgpool", "global_avgpool", "select_token", "tokens")


def activation_bytes(layer: Layer, act_bytes: int) -> int:
    """Bytes `layer` keeps for backward per sample (module docstring)."""
    elems = sum(math.prod(s) for s in layer.in_shapes)
    t = layer.type
    if t in _NO_SAVE:
        return 0
    if t == "dropout":
        return elems  # a 1-byte mask
    if t == "embedding":
        return 8 * elems  # int64 ids
    if t == "softmax_xent":
        return 4 * elems
    if t == "attention":
        d, s, _ = layer.in_shapes[0]
        scores: int = layer.attrs["heads"] * s * s
        kept = 5 * d * s * act_bytes + scores * act_bytes
        if layer.attrs["dropout"] > 0:
            kept += scores * (1 + act_bytes)  # mask and dropped probabilities
        return kept
    return elems * act_bytes


@dataclass(frozen=True)
class Memory:
    """One worker's memory for one strategy, N, batch and settings, in bytes. params, optimizer
    and buffers are held through the iteration; grads (the gradients when backward has ended)
    and activations (what forward saved) are the two ends of backward, and backward_peak is the
    worst moment of backward between them (backward_peak()); framework is the process's own
    memory outside the tensor allocator (given); total = params + optimizer + buffers +
    backward_peak + framework."""

    strategy: str
    workers: int
    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    optimizer_name: str = "adam"
    precision: str = "mixed"
    checkpointing: bool = False
    backward_peak: float = 0.0
    framework: float = 0.0

    @property
    def model_states(self) -> float:
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> float:
        return self.params + self.optimizer + self.buffers + self.backward_peak + self.framework

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "workers": self.workers, "params_bytes": self.params,
                "grads_bytes": self.grads, "optimizer_bytes": self.optimizer, "activations_bytes": self.activations,
                "buffers_bytes": self.buffers, "backward_peak_bytes": self.backward_peak,
                "framework_bytes": self.framework,
                "model_states_bytes": self.model_states, "total_bytes": self.total,
                "optimizer": self.optimizer_name, "precision": self.precision, "checkpointing": self.checkpointing}


def bytes_per_param(optimizer: str, precision: str) -> tuple[int, int, int]:
    """(parameters, gradients, optimizer states) per parameter: fp32 SGD 4+4+4, Adam 4+4+8;
    mixed SGD 2+2+8, Adam 2+2+12 (the ZeRO paper's K = 12)."""
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"--optimizer: one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if precision not in PRECISIONS:
        raise UsageError(f"precision: one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return 4, 4, _OPT_BYTES[optimizer]
    return 2, 2, 4 + _OPT_BYTES[optimizer]


def model_states(params: int, workers: int, stage: int, optimizer: str = "adam",
                 precision: str = "mixed") -> tuple[float, float, float]:
    """(parameters, gradients, optimizer states) per worker in bytes at a ZeRO stage."""
    if workers < 1:
        raise UsageError(f"workers must be >= 1, got {workers}")
    p, g, k = bytes_per_param(optimizer, precision)
    n = workers
    return (p * params / (n if stage >= 3 else 1), g * params / (n if stage >= 2 else 1),
            k * params / (n if stage >= 1 else 1))


def _held(net: Network, per: list[int], a: int, checkpointing: bool) -> list[int]:
    """Per layer i, the activation bytes per sample still held when layer i's backward runs:
    what layers 0..i saved; with checkpointing, each earlier block's input only, and of layer
    i's own block all that its recomputed forward saved up to i."""
    blocked = checkpointing and any(lay.block for lay in net.layers)
    if not blocked:
        return list(itertools.accumulate(per))

    def size(j: int) -> int:
        return math.prod(net.input_shape if j < 0 else net.layers[j].out_shape) * a
    seen: set[tuple[str, int]] = set()
    stored = []  # a block keeps the tensors that enter it, each once
    for b, lay in zip(per, net.layers, strict=True):
        enter = {j for j in lay.inputs if (j < 0 or net.layers[j].block != lay.block) and (lay.block, j) not in seen}
        seen.update((lay.block, j) for j in enter)
        stored.append(b if not lay.block else sum(size(j) for j in enter))
    out = []
    for i, lay in enumerate(net.layers):
        own = sum(per[j] for j in range(i + 1) if lay.block and net.layers[j].block == lay.block)
        out.append(sum(stored[: i + 1]) + own)
    return out


def _tied_table(net: Network) -> int:
    """Elements of the token table a tied lm_head shares (0 when none is tied)."""
    emb = next((lay for lay in net.layers if lay.type == "embedding"), None)
    tied = any(lay.type == "lm_head" and lay.attrs.get("tied") for lay in net.layers)
    return emb.attrs["vocab"] * emb.attrs["hidden"] if emb is not None and tied else 0


def backward_peak(net: Network | str, batch: int, workers: int = 1, stage: int = 0, precision: str = "mixed",
                  checkpointing: bool = False, unsharded_to_backward: bool = False) -> float:
    """The most a worker holds during backward beyond its parameters, optimizer states and
    buffers, in bytes: at the worst layer i (last first), the activations still held (_held),
    the gradients already produced (G per parameter; 1/N of it at stage >= 2, each unit's part
    reduce-scattered) and layer i's transient gradients: of its output and its input (A bytes;
    softmax_xent: two of its input in fp32, nll_loss's and log_softmax's). A tied lm_head's
    gradient of the token table waits in autograd's input buffer until the embedding's
    backward adds its own: the two and their sum are alive then (2 tables beyond the gradients;
    torch/csrc/autograd/input_buffer.cpp, InputBuffer::add: old_var + var).
    unsharded_to_backward (FSDP SHARD_GRAD_OP on N > 1 workers): each unit's unsharded
    parameters, gathered in forward, are held until its backward ends (FSDP's post-backward
    reshard), so at layer i those of every unit with a layer at or before i are alive too."""
    net = load_network(net)
    a = 2 if precision == "mixed" else 4
    _, g, _ = bytes_per_param("sgd", precision)
    per = [activation_bytes(lay, a) for lay in net.layers]
    held = _held(net, per, a, checkpointing)
    table = _tied_table(net)
    share = workers if stage >= 2 else 1
    firsts = []
    if unsharded_to_backward and workers > 1:
        from .phases import shard_units

        firsts = [(u.layers[0], bytes_per_param("sgd", precision)[0] * u.params) for u in shard_units(net)]
    grads, peak = 0.0, 0.0
    for i in reversed(range(len(net.layers))):
        lay = net.layers[i]
        out_elems = math.prod(lay.out_shape)
        in_elems = sum(math.prod(sh) for sh in lay.in_shapes)
        moving = 2 * 4 * in_elems if lay.type == "softmax_xent" else a * (out_elems + in_elems)
        produced = g * lay.params / share
        if lay.type == "lm_head" and lay.attrs.get("tied"):
            produced = g * table  # held in full in the input buffer until the embedding's backward
        extra = 0.0
        if lay.type == "embedding" and table:
            grads -= g * table  # the head's part joins the sum: the table counted once, plus the two parts
            extra = 2 * g * table
        grads += produced
        gathered = sum(b for first, b in firsts if first <= i)
        peak = max(peak, batch * (held[i] + moving) + grads + extra + gathered)
    return peak


def activations(net: Network | str, batch: int, precision: str = "mixed", checkpointing: bool = False) -> float:
    """Bytes of activations a worker keeps for backward at `batch` (module docstring)."""
    net = load_network(net)
    a = 2 if precision == "mixed" else 4
    per = [activation_bytes(lay, a) for lay in net.layers]
    if not checkpointing or not any(lay.block for lay in net.layers):
        return float(batch * sum(per))
    outside = sum(b for b, lay in zip(per, net.layers, strict=True) if not lay.block)
    blocks: dict[str, int] = {}
    entering: dict[str, set[int]] = {}  # the tensors that enter a block from outside (-1: the data)
    for b, lay in zip(per, net.layers, strict=True):
        if lay.block:
            blocks[lay.block] = blocks.get(lay.block, 0) + b
            entering.setdefault(lay.block, set()).update(
                j for j in lay.inputs if j < 0 or net.layers[j].block != lay.block)

    def size(j: int) -> int:
        return math.prod(net.input_shape if j < 0 else net.layers[j].out_shape) * a
    inputs = {blk: sum(size(j) for j in js) for blk, js in entering.items()}
    return float(batch * (outside + sum(inputs.values()) + max(blocks.values())))


def buffers(net: Network, strategy: Strategy, workers: int, precision: str = "mixed", impl: str = "deepspeed") -> float:
    """Communication buffers and gathered parameters per worker (module docstring)."""
    from .phases import shard_units

    p, g, _ = bytes_per_param("sgd", precision)
    psi = net.params
    if strategy.shard == 0 and strategy.bucket_bytes is not None or strategy.shard == 1 and impl == "pytorch":
        return float(g * psi)  # DDP's buckets, allocated whatever the world size
    if workers == 1:  # nothing to send, nothing sharded to gather (FSDP runs NO_SHARD)
        return 0.0
    units = shard_units(net)
    if strategy.shard == 0:
        return float(g * max((lay.params for lay in net.layers), default=0))
    if strategy.shard == 2 and impl == "pytorch":  # SHARD_GRAD_OP: the unsharded copy is in backward_peak
        return float(g * max((u.params for u in units), default=0))
    if strategy.shard < 3:
        cap = strategy.bucket_bytes or g * max((lay.params for lay in net.layers), default=0)
        return float(min(cap, g * psi) + min(cap, p * psi))
    kept = [u for u in units if u.root and strategy.keep_root]
    others = [u.params for u in units if u not in kept]
    biggest = max(others, default=0)
    gathered = p * (sum(u.params for u in kept) + (2 if strategy.prefetch else 1) * biggest)
    return float(gathered + g * max((u.params for u in units), default=0))


def memory_per_worker(net: Network | str, strategy: Strategy, workers: int, batch: int, optimizer: str = "adam",
                      precision: str = "mixed", checkpointing: bool = False, impl: str = "deepspeed",
                      framework: float = 0.0) -> Memory:
    """One worker's memory for `strategy` on `workers` workers at per-worker `batch`. impl names
    the program behind ZeRO stages 1 and 2: 'deepspeed' (the zero1/zero2 presets' buckets) or
    'pytorch' (stage 1: ZeroRedundancyOptimizer under DDP; stage 2: FSDP SHARD_GRAD_OP).
    framework: the process's own bytes outside the tensor allocator (module docstring)."""
    if impl not in IMPLS:
        raise UsageError(f"impl: one of {', '.join(IMPLS)}, got {impl!r}")
    if not (math.isfinite(framework) and framework >= 0):
        raise UsageError(f"framework memory must be >= 0 bytes, got {framework}")
    net = load_network(net)
    params, grads, opt = model_states(net.params, workers, strategy.shard, optimizer, precision)
    fsdp_grad_op = strategy.shard == 2 and impl == "pytorch"
    if fsdp_grad_op:
        params /= workers  # FSDP keeps the shard at rest; backward_peak holds the unsharded units
    peak = backward_peak(net, batch, workers, strategy.shard, precision, checkpointing, fsdp_grad_op)
    return Memory(strategy.name, workers, params, grads, opt, activations(net, batch, precision, checkpointing),
                  buffers(net, strategy, workers, precision, impl), optimizer, precision, checkpointing, peak,
                  float(framework))


# ---------------------------------------------------------------------------------------------
# gdlbench predict --memory-limit (commands/predict.py calls these)


def _size_option(option: str) -> Any:
    """argparse type of a SIZE option (--memory-limit, --framework-memory): checked while the
    command line is parsed."""
    def check(text: str) -> str:
        try:
            parse_size(text, option)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None
        return text
    return check


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory (gdlbench.model.memory; docs/model.md, the memory model)")
    g.add_argument("--memory-limit", metavar="SIZE", type=_size_option("--memory-limit"),
                   help="memory per worker, e.g. 80GB: each row says whether it fits, and the fastest strategy "
                        "that fits is named per N (mixed precision when --grad-dtype is 16-bit)")
    g.add_argument("--optimizer", default="adam", choices=OPTIMIZERS,
                   help="optimizer states for the memory model: adam (default) or sgd with momentum")
    g.add_argument("--checkpointing", action="store_true",
                   help="activation checkpointing per block in the memory model")
    g.add_argument("--framework-memory", metavar="SIZE", type=_size_option("--framework-memory"),
                   help="the framework's own memory per worker, outside its tensor allocator (libraries, runtime "
                        "heaps, a GPU's CUDA context), added to every total (default 0; torch on a CPU: 0.17GB, "
                        "benchmarks/RESULTS.md section 8)")


def annotate(net: Network, strategies: list[Strategy], rows: list[dict[str, Any]], batch: int,
             args: argparse.Namespace) -> dict[str, Any] | None:
    """With --memory-limit: each row gets memory_*_bytes (the parts, memory_total_bytes) and fits; returns the summary's 'memory'
    (the limit, the settings, and per N the fastest strategy that fits, or None)."""
    if not getattr(args, "memory_limit", None):
        return None
    precision = "fp32" if args.grad_dtype == "float32" else "mixed"
    own = getattr(args, "framework_memory", None)
    return fits(net, strategies, rows, batch, parse_size(args.memory_limit, "--memory-limit"), args.optimizer,
                precision, args.checkpointing, parse_size(own, "--framework-memory") if own else 0.0)


def _fastest(rows: list[dict[str, Any]]) -> str | None:
    """The first of the fastest rows' strategy (a tie within rounding goes to the one listed first)."""
    low = min((r["t_iter_us"] for r in rows), default=0.0)
    return next((r["strategy"] for r in rows if r["t_iter_us"] <= low * (1 + 1e-9)), None)


def fits(net: Network, strategies: list[Strategy], rows: list[dict[str, Any]], batch: int, limit: float,
         optimizer: str = "adam", precision: str = "mixed", checkpointing: bool = False,
         framework: float = 0.0) -> dict[str, Any]:
    """Each predicted row (strategy, workers, t_iter_us) gets memory_*_bytes and fits (total <= limit,
    bytes per worker); returns per N the fastest strategy that fits and the lowest ZeRO stage that
    fits (0: replicated) with its fastest strategy, None where nothing fits."""
    by_name = {s.name: s for s in strategies}
    for row in rows:
        mem = memory_per_worker(net, by_name[row["strategy"]], row["workers"], batch, optimizer, precision,
                                checkpointing, framework=framework)
        row.update({f"memory_{k}": v for k, v in mem.to_dict().items() if k.endswith("_bytes")})
        row["fits"] = mem.total <= limit
    best: dict[str, str | None] = {}
    lowest: dict[str, dict[str, Any] | None] = {}
    for n in sorted({r["workers"] for r in rows}):
        fit = [r for r in rows if r["workers"] == n and r["fits"]]
        best[str(n)] = _fastest(fit)
        stage = min((by_name[r["strategy"]].shard for r in fit), default=None)
        lowest[str(n)] = None if stage is None else {
            "stage": stage, "strategy": _fastest([r for r in fit if by_name[r["strategy"]].shard == stage])}
    return {"limit_bytes": limit, "optimizer": optimizer, "precision": precision,
            "checkpointing": checkpointing, "framework_bytes": framework,
            "fastest_that_fits": best, "lowest_stage_that_fits": lowest,
            "model": "gdlbench.model.memory: model states (ZeRO paper), activations per layer, communication buffers"}


def print_memory(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The memory table of predict --memory-limit and the fastest strategy that fits per N."""
    from ..common.output import Column, print_table

    def gb(v: float) -> str:
        return f"{v / 1e9:.2f}"

    cols = [Column("strategy", "strategy"), Column("N", "workers"),
            Column("params", "params", gb), Column("grads", "grads", gb), Column("optimizer", "optimizer", gb),
            Column("activations", "activations", gb), Column("buffers", "buffers", gb),
            Column("backward peak", "backward_peak", gb), Column("framework", "framework", gb),
            Column("total (GB)", "total", gb), Column("fits", "fits")]
    parts = ("params", "grads", "optimizer", "activations", "buffers", "backward_peak", "framework", "total")
    table = [{"strategy": r["strategy"], "workers": r["workers"], "fits": "yes" if r["fits"] else "NO"}
             | {k: r[f"memory_{k}_bytes"] for k in parts} for r in rows]
    print_table(f"memory per worker (limit {summary['limit_bytes'] / 1e9:g} GB; {summary['optimizer']}, "
                f"{summary['precision']}{', activation checkpointing' if summary['checkpointing'] else ''})",
                cols, table, caption="GB = 1e9 bytes; total = params + optimizer + buffers + backward peak + framework (the "
                                     "activations still held, the gradients made so far and the moving ones at "
                                     "backward's worst layer; grads and activations are its two ends); "
                                     "docs/model.md, the memory model")
    for n, name in summary["fastest_that_fits"].items():
        low = summary["lowest_stage_that_fits"][n]
        print(f"N = {n}: " + (f"the fastest strategy that fits is {name}; the lowest ZeRO stage that fits is "
                              f"{low['stage']} ({low['strategy']})" if name and low else "no strategy fits"))
