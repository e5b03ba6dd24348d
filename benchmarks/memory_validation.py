"""gdlbench's memory model (gdlbench.model.memory) held against real PyTorch training jobs on the CPU
(issue 35, item 4): each rank's peak resident memory of a few training steps, per strategy,
ranks and optimizer, beside the model's per-worker prediction for the same net and batch.

The torch side is torch's own code: the net is rebuilt as a plain nn.Module from the gdlbench
spec's layers and shapes (its parameter count must equal gdlbench's Network.params exactly;
attention is the unfused GEMM form of gdlbench's layer: QK^T, scale, causal mask, softmax,
dropout, AV), trained fp32 under torch.distributed (gloo, env://) with
  ddp     DistributedDataParallel (buckets of 25 MiB, gradient_as_bucket_view off)
  zero1   torch.distributed.optim.ZeroRedundancyOptimizer under DDP
  zero2   FSDP ShardingStrategy.SHARD_GRAD_OP, one unit per block
  fsdp    FSDP ShardingStrategy.FULL_SHARD, one unit per block (ModuleWrapPolicy on the block
          class, what transformer_auto_wrap_policy does), forward_prefetch, BACKWARD_PRE
and SGD with momentum or Adam. The net's own dropout (0.1 for GPT-2 and BERT) is used on both
sides. Measured: VmHWM (/proc/self/status) over the training steps minus VmRSS just before the
model is built (the HWM is reset there with /proc/self/clear_refs "5"); the larger of the ranks.

    .venv/bin/python benchmarks/memory_validation.py [--nets gpt2-small:seq=128,bert-base:seq=128]
        [--batch 2] [--steps 3] [--ranks 1,2] [--strategies ddp,zero1,zero2,fsdp]
        [--optimizers sgd,adam] [--json out.json]

Prints one row per configuration: strategy, ranks, optimizer, measured MB, predicted MB, error.
Goal (issue 35): |error| <= 10 % on every row.

The framework's own memory (gdlbench.model.memory, `framework`: torch's libraries and heaps outside its
tensor allocator) is measured first in the same run, with a job whose tensors are 10 MB
(FRAMEWORK_JOB: DDP, one rank, SGD): its VmHWM less the model's total for it (and its anon peak
less the same, for the anon column); every prediction adds it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MB = 1e6
FRAMEWORK_JOB = ("transformer:layers=2:hidden=64:heads=2:seq=32:vocab=5000", "ddp", 1, "sgd")
STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")
# the gdlbench strategy (and memory_per_worker's impl) each torch program is held against
GDL_STRATEGY = {"ddp": ("ddp", "deepspeed"), "zero1": ("zero1", "pytorch"), "zero2": ("zero2", "pytorch"),
                "fsdp": ("fsdp", "deepspeed")}


# ---------------------------------------------------------------------------------------------
# the torch side (imported only in the ranks)


def torch_classes(net: Any) -> dict[str, Any]:
    """The torch modules the net's layers become: Fn (a function), Embedding, Attention, Block."""
    import torch
    from torch import nn

    class Fn(nn.Module):
        def __init__(self, fn: Any) -> None:
            super().__init__()
            self.fn = fn

        def forward(self, *xs: Any) -> Any:
            return self.fn(*xs)

    class Embedding(nn.Module):
        def __init__(self, vocab: int, hidden: int, positions: int, types: int) -> None:
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(positions, hidden)
            self.types = nn.Embedding(types, hidden) if types else None

        def forward(self, ids: Any) -> Any:
            x = self.word(ids) + self.pos(torch.arange(ids.shape[1]))
            return x if self.types is None else x + self.types(torch.zeros_like(ids))

    class Attention(nn.Module):
        def __init__(self, d: int, heads: int, causal: bool, dropout: float, bias: bool, seq: int) -> None:
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=bias), nn.Linear(d, d, bias=bias)
            self.heads, self.drop, self.causal = heads, nn.Dropout(dropout), causal
            self.register_buffer("keep", torch.ones(seq, seq, dtype=torch.bool).tril(), persistent=False)

        def forward(self, x: Any) -> Any:
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
            if self.causal:
                att = att.masked_fill(~self.keep[:s, :s], float("-inf"))
            att = self.drop(att.softmax(-1))
            return self.proj((att @ v).transpose(1, 2).reshape(b, s, d))

    class Block(nn.Module):
        """One gdlbench block (the unit of FSDP wrapping): its layers in order; one tensor enters."""

        def __init__(self, idx: list[int], mods: list[Any]) -> None:
            super().__init__()
            self.idx, self.ops = idx, nn.ModuleList(mods)

        def forward(self, x: Any) -> Any:
            env = {}
            for i, m in zip(self.idx, self.ops, strict=True):
                lay = net.layers[i]
                env[i] = m(*[env[j] if j in env else x for j in lay.inputs])
            return env[self.idx[-1]]

    return {"Fn": Fn, "Embedding": Embedding, "Attention": Attention, "Block": Block}


def layer_module(lay: Any, emb: Any, cls: dict[str, Any]) -> Any:
    """The torch module of one gdlbench layer (emb: the net's first Embedding, for a tied head)."""
    from torch import nn

    a, c = lay.attrs, lay.in_shapes[0][0]
    t = lay.type
    if t == "embedding":
        return cls["Embedding"](a["vocab"], a["hidden"], a["positions"], a["token_types"])
    if t == "layernorm":
        return nn.LayerNorm(c, eps=a["eps"])
    if t == "attention":
        return cls["Attention"](c, a["heads"], a["causal"], a["dropout"], a["bias"], lay.in_shapes[0][1])
    if t == "linear":
        return nn.Linear(c, a["out_features"], bias=a["bias"])
    if t == "fc":
        return nn.Linear(math.prod(lay.in_shapes[0]), a["out_features"], bias=a["bias"])
    if t == "lm_head":
        head = nn.Linear(c, a["vocab"], bias=a["bias"])
        if a["tied"]:
            head.weight = emb.word.weight  # one Parameter: torch counts it once, as gdlbench does
        return head
    simple = {"gelu": nn.GELU(), "tanh": nn.Tanh(), "dropout": nn.Dropout(a.get("ratio", 0.0)),
              "add": cls["Fn"](lambda *xs: sum(xs[1:], xs[0])), "softmax_xent": cls["Fn"](lambda x: x),
              "select_token": cls["Fn"](lambda x: x[:, a.get("index", 0)])}
    if t not in simple:
        raise SystemExit(f"memory_validation: no torch twin for layer type {t!r} ({lay.name})")
    return simple[t]


def build_model(net: Any) -> Any:
    """A torch nn.Module with the layers of the gdlbench net (module docstring)."""
    import torch
    from torch import nn

    cls = torch_classes(net)
    return _assemble(net, lambda lay, emb: layer_module(lay, emb, cls), cls["Block"], nn, torch)


def _assemble(net: Any, op: Any, block_cls: Any, nn: Any, torch: Any) -> Any:
    """The whole net: blocks as Block modules, the other layers as modules of the root; forward
    returns the sum of the losses (cross-entropy, mean over positions, for every softmax_xent)."""
    emb_holder: list[Any] = []
    segments: list[tuple[str, list[int]]] = []
    for i, lay in enumerate(net.layers):
        if lay.block and segments and segments[-1][0] == lay.block:
            segments[-1][1].append(i)
        else:
            segments.append((lay.block, [i]))
    mods: list[Any] = []
    for blk, idx in segments:
        made = []
        for i in idx:
            m = op(net.layers[i], emb_holder[0] if emb_holder else None)
            if net.layers[i].type == "embedding" and not emb_holder:
                emb_holder.append(m)
            made.append(m)
        mods.append(block_cls(idx, made) if blk else made[0])

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.segs = nn.ModuleList(mods)
            self.seg_idx = [idx for _, idx in segments]
            self.is_block = [bool(blk) for blk, _ in segments]  # (FSDP wraps the Block modules)

        def forward(self, ids: Any, labels: dict[int, Any]) -> Any:
            env: dict[int, Any] = {-1: ids}
            loss = None
            for m, idx, is_block in zip(self.segs, self.seg_idx, self.is_block, strict=True):
                lay = net.layers[idx[0]]
                if is_block:
                    entering = {j for i in idx for j in net.layers[i].inputs if j not in idx}
                    env[idx[-1]] = m(env[entering.pop()])
                    continue
                env[idx[0]] = m(*[env[j] for j in lay.inputs])
                if lay.type == "softmax_xent":
                    x = env[idx[0]]
                    part = torch.nn.functional.cross_entropy(x.reshape(-1, x.shape[-1]), labels[idx[0]])
                    loss = part if loss is None else loss + part
                    env[idx[0]] = None  # the logits are not kept past the loss
            return loss

    model = Net()
    for m in model.modules():  # GPT-2's initialisation (benchmarks/ddp_job.py says why)
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    return model


def make_labels(net: Any, batch: int, torch: Any, g: Any) -> dict[int, Any]:
    """One label per position of each loss layer's input, classes C (common/fill.h's label_shape)."""
    out = {}
    for i, lay in enumerate(net.layers):
        if lay.type == "softmax_xent":
            c, h, w = lay.in_shapes[0]
            out[i] = torch.randint(0, c, (batch * h * w,), generator=g)
    return out


def status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def wrap(model: Any, strategy: str, optimizer: str, world: int) -> tuple[Any, Any]:
    """The strategy's wrapper and optimizer (module docstring)."""
    import torch
    from torch import nn

    opt_cls = torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam
    kw = {"lr": 0.01, "momentum": 0.9} if optimizer == "sgd" else {"lr": 1e-4}
    if strategy in ("ddp", "zero1"):
        ddp = nn.parallel.DistributedDataParallel(model)
        if strategy == "ddp":
            return ddp, opt_cls(ddp.parameters(), **kw)
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=opt_cls, **kw)
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    block_cls = next(type(m) for m in model.segs if type(m).__name__ == "Block")
    sharding = ShardingStrategy.FULL_SHARD if strategy == "fsdp" else ShardingStrategy.SHARD_GRAD_OP
    f = FSDP(model, sharding_strategy=sharding, auto_wrap_policy=ModuleWrapPolicy({block_cls}),
             device_id=torch.device("cpu"), forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)
    return f, opt_cls(f.parameters(), **kw)


class Sampler:
    """VmRSS and RssAnon (/proc/self/statm: resident minus file-backed and shared pages) every
    millisecond on a thread: the peak of the anonymous memory, which VmHWM cannot give (VmHWM also
    counts the pages of torch's libraries that the first steps read in)."""

    def __init__(self) -> None:
        import threading

        self.base = self.read()
        self.peak = (0, 0)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @staticmethod
    def read() -> tuple[int, int]:
        with open("/proc/self/statm") as f:
            _, resident, shared = (int(v) for v in f.read().split()[:3])
        page = os.sysconf("SC_PAGE_SIZE") // 1024
        return resident * page, (resident - shared) * page

    def run(self) -> None:
        while not self.stop:
            now = self.read()
            self.peak = (max(self.peak[0], now[0]), max(self.peak[1], now[1]))
            time.sleep(0.001)

    def finish(self) -> dict[str, int]:
        self.stop = True
        self.thread.join()
        return {"sampled_rss_kb": self.peak[0] - self.base[0], "sampled_anon_kb": self.peak[1] - self.base[1]}


def rank_main(args: argparse.Namespace) -> None:
    """One rank: the training steps and the memory it took; rank 0 writes every rank's figures."""
    import torch
    import torch.distributed as dist

    from gdlbench.nets.network import load_network

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    net = load_network(args.net)
    g = torch.Generator().manual_seed(rank)
    seq = net.input_shape[1]
    vocab = next(lay.attrs["vocab"] for lay in net.layers if lay.type == "embedding")
    data = [(torch.randint(0, vocab, (args.batch, seq), generator=g), make_labels(net, args.batch, torch, g))
            for _ in range(args.steps)]
    dist.barrier()
    base, file_base = status_kb("VmRSS"), status_kb("RssFile")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    sampler = Sampler()
    model = build_model(net)
    count = sum(p.numel() for p in model.parameters())
    wrapped, opt = wrap(model, args.strategy, args.optimizer, world)
    trace = [("wrapped", status_kb("VmRSS") - base)]
    t0 = time.perf_counter()
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = wrapped(*data[step])
        trace.append((f"fwd{step}", status_kb("VmRSS") - base))
        loss.backward()
        trace.append((f"bwd{step}", status_kb("VmRSS") - base))
        opt.step()
        trace.append((f"step{step}", status_kb("VmRSS") - base))
    doc = {"rank": rank, "peak_kb": status_kb("VmHWM") - base, "base_kb": base, "params": count,
           "file_kb": status_kb("RssFile") - file_base, "trace_kb": trace, "seconds": time.perf_counter() - t0,
           "loss": float(loss.detach()), "malloc": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default")}
    doc |= sampler.finish()
    every: list[Any] = [None] * world
    dist.all_gather_object(every, doc)
    if rank == 0:
        Path(args.out).write_text(json.dumps({"ranks": every, "torch": torch.__version__}))
    dist.barrier()  # no rank still in a collective
    dist.destroy_process_group()
    # The rows are written: leave without the interpreter's teardown. gloo's worker threads free the
    # collectives launched in backward (each holds a Python object) under the GIL, and one still
    # waiting for it when the interpreter finalises aborts the process ("terminate called without
    # an active exception", about 1 run in 10 on 2 ranks with torch 2.14).
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# the driver: one launch per configuration, the prediction beside it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_config(net: str, strategy: str, ranks: int, optimizer: str, args: argparse.Namespace) -> dict[str, Any]:
    """Launches `ranks` processes (env:// rendezvous) and returns rank 0's document."""
    out = Path(tempfile.mkdtemp(prefix="memval-")) / "out.json"
    env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(ranks),
                        "OMP_NUM_THREADS": "1"}
    if args.malloc == "static":  # glibc's 128 KiB mmap threshold, made static (module docstring)
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    cmd = [sys.executable, __file__, "--rank-job", "--net", net, "--strategy", strategy, "--optimizer", optimizer,
           "--batch", str(args.batch), "--steps", str(args.steps), "--out", str(out)]
    procs = [subprocess.Popen(cmd, env=env | {"RANK": str(r), "LOCAL_RANK": str(r)}, stderr=subprocess.PIPE,
                              text=True) for r in range(ranks)]
    errs = [p.communicate(timeout=args.timeout)[1] for p in procs]
    if any(p.returncode for p in procs) or not out.exists():
        tail = "\n".join(e.strip().splitlines()[-1] for e in errs if e.strip())
        return {"error": tail or f"exit {[p.returncode for p in procs]}"}
    return dict(json.loads(out.read_text()))


def predict_mb(net: str, strategy: str, ranks: int, optimizer: str, batch: int, framework_mb: float = 0.0
               ) -> tuple[float, Any]:
    from gdlbench.model.memory import memory_per_worker
    from gdlbench.model.strategies import get_strategies

    name, impl = GDL_STRATEGY[strategy]
    mem = memory_per_worker(net, get_strategies(name)[0], ranks, batch, optimizer, "fp32", impl=impl,
                            framework=framework_mb * MB)
    return mem.total / MB, mem


def framework_mb(args: argparse.Namespace) -> dict[str, Any]:
    """The framework's own memory (module docstring): FRAMEWORK_JOB measured (or taken from
    --from-json), less the model's total for its tensors."""
    net, strategy, ranks, opt = FRAMEWORK_JOB
    doc = args.measured.get(FRAMEWORK_JOB) if args.measured else None
    doc = doc or run_config(net, strategy, ranks, opt, args)
    if "error" in doc:
        sys.exit(f"memory_validation: the framework's job failed: {doc['error']}")
    tensors, _ = predict_mb(net, strategy, ranks, opt, args.batch)
    kb = 1024 / MB
    hwm, anon = doc["ranks"][0]["peak_kb"] * kb, doc["ranks"][0]["sampled_anon_kb"] * kb
    return {"net": net, "strategy": strategy, "world": ranks, "optimizer": opt, "framework": True, "hwm_mb": hwm,
            "anon_mb": anon, "tensors_mb": tensors, "framework_mb": hwm - tensors,
            "framework_anon_mb": anon - tensors} | doc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nets", default="gpt2-small:seq=128,bert-base:seq=128")
    p.add_argument("--batch", type=int, default=2, help="per rank")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--optimizers", default="sgd,adam")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--malloc", choices=("static", "default"), default="static",
                   help="static: MALLOC_MMAP_THRESHOLD_=131072 in the ranks (module docstring); default: glibc's own")
    p.add_argument("--json", help="write every row (with the ranks' traces) here")
    p.add_argument("--from-json", help="take the measurements from this file (an earlier --json), predict again")
    p.add_argument("--rank-job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--net", help=argparse.SUPPRESS)
    p.add_argument("--strategy", help=argparse.SUPPRESS)
    p.add_argument("--optimizer", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_job:
        rank_main(args)
        return
    table(args)


def table(args: argparse.Namespace) -> None:
    """Every configuration in turn: the measured row beside the prediction (module docstring)."""
    from gdlbench.nets.network import load_network

    rows = []
    args.measured = {}
    if args.from_json:
        keep = ("ranks", "torch", "error")
        args.measured = {(r["net"], r["strategy"], r.get("world") or len(r["ranks"]), r["optimizer"]):
                         {k: r[k] for k in keep if k in r} for r in json.loads(Path(args.from_json).read_text())}
        args.malloc = json.loads(Path(args.from_json).read_text())[0].get("malloc", args.malloc)
    print(f"malloc: {args.malloc}; batch {args.batch} per rank, {args.steps} steps, fp32; MB = 1e6 bytes")
    args.framework = framework_mb(args)
    rows.append(args.framework)
    print(f"framework: {FRAMEWORK_JOB[0]} ({FRAMEWORK_JOB[1]}, {FRAMEWORK_JOB[2]} rank, {FRAMEWORK_JOB[3]}): "
          f"VmHWM {args.framework['hwm_mb']:.1f} MB, anon {args.framework['anon_mb']:.1f} MB, its tensors (model) "
          f"{args.framework['tensors_mb']:.1f} MB: framework {args.framework['framework_mb']:.1f} MB "
          f"(anon {args.framework['framework_anon_mb']:.1f} MB), added to every prediction", flush=True)
    print(f"{'net':22} {'strategy':8} {'ranks':>5} {'opt':5} {'VmHWM MB':>9} {'anon MB':>8} {'code MB':>8} "
          f"{'predicted MB':>13} {'err HWM':>8} {'err anon':>9}")
    for net in args.nets.split(","):
        params = load_network(net).params
        for strategy in args.strategies.split(","):
            for ranks in (int(r) for r in args.ranks.split(",")):
                for opt in args.optimizers.split(","):
                    rows.append(one_row(net, params, strategy, ranks, opt, args))
                    if args.json:
                        Path(args.json).write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows[1:] if "err_hwm" not in r or abs(r["err_hwm"]) > 0.10]
    print(f"goal |error| <= 10 % against VmHWM: {'met' if not bad else f'missed on {len(bad)} of {len(rows) - 1} rows'}")


def one_row(net: str, params: int, strategy: str, ranks: int, opt: str, args: argparse.Namespace) -> dict[str, Any]:
    """Measures one configuration (or takes it from --from-json) and prints its row."""
    doc = args.measured.get((net, strategy, ranks, opt)) if args.measured else None
    doc = doc or run_config(net, strategy, ranks, opt, args)
    own = args.framework
    pred, mem = predict_mb(net, strategy, ranks, opt, args.batch, own["framework_mb"])
    pred_anon = pred - own["framework_mb"] + own["framework_anon_mb"]
    row = {"net": net, "strategy": strategy, "world": ranks, "optimizer": opt, "predicted_mb": pred,
           "predicted": mem.to_dict(), "malloc": args.malloc} | doc
    head = f"{net:22} {strategy:8} {ranks:>5} {opt:5}"
    if "error" in doc:
        print(f"{head} FAILED: {doc['error']}", flush=True)
        return row
    if doc["ranks"][0]["params"] != params:
        sys.exit(f"{net}: torch has {doc['ranks'][0]['params']:,} parameters, gdlbench {params:,}")
    kb = 1024 / MB
    row["hwm_mb"] = max(r["peak_kb"] for r in doc["ranks"]) * kb
    row["anon_mb"] = max(r["sampled_anon_kb"] for r in doc["ranks"]) * kb
    row["code_mb"] = max(r["file_kb"] for r in doc["ranks"]) * kb
    row["err_hwm"], row["err_anon"] = pred / row["hwm_mb"] - 1, pred_anon / row["anon_mb"] - 1
    print(f"{head} {row['hwm_mb']:9.1f} {row['anon_mb']:8.1f} {row['code_mb']:8.1f} {pred:13.1f} "
          f"{100 * row['err_hwm']:+7.1f}% {100 * row['err_anon']:+8.1f}%", flush=True)
    return row


if __name__ == "__main__":
    main()
