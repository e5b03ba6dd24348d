"""A plain PyTorch DistributedDataParallel training job (gloo, CPU), the peer that
benchmarks/ddp_validation.py holds gdlbench's predictions against. Nothing of gdlbench runs in
it: the model is torchvision's (or a GPT-2-style decoder built from torch.nn layers), the loop is
PyTorch's documented DDP loop (DataLoader, zero_grad, forward, loss, backward, SGD step).

    python benchmarks/ddp_job.py --net resnet50 --batch 4 --steps 12 --warmup 3 --json out.json
    python benchmarks/ddp_job.py --net gpt --profile 3 --trace trace.json   # a Kineto trace too
    python benchmarks/ddp_job.py --net gpt --strategy fsdp ...   # FSDP FULL_SHARD, one unit per block

Launch: one process per rank; rank and world size from RANK/WORLD_SIZE (torchrun) or from
PMI_RANK/PMI_SIZE (mpiexec, scripts/emulated-cluster.sh); MASTER_ADDR (default 127.0.0.1) and
MASTER_PORT (default 29512) for the rendezvous; GLOO_SOCKET_IFNAME names the interface where the
launcher sets it. Step times: time.perf_counter around each whole step (data included), on every
rank; a step's time is the slowest rank's. Writes (rank 0) the samples, median and spread, and
DDP's own bucket sizes (its logging data) to --json. --strategy fsdp / zero2 wraps the decoder in
FSDP instead (wrap() below), the loop unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn


class Decoder(nn.Module):
    """A GPT-2-style decoder: token and position embeddings, pre-norm transformer blocks with
    causal self-attention and a GELU MLP, a final layer norm, an LM head tied to the embedding."""

    def __init__(self, layers: int, hidden: int, heads: int, seq: int, vocab: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        block = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.tok.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)
        # GPT-2's initialisation (weights N(0, 0.02), biases 0, layer norms 1). torch's defaults (an
        # N(0, 1) embedding, here also the LM head) make the logits so large that the softmax's
        # gradients underflow to subnormal floats, and a CPU without flush-to-zero then takes 7x as
        # long for the step (measured on an Intel Xeon: 5.8 s against 0.8 s), a cost no real job pays.
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)
            elif "norm" not in name:
                nn.init.zeros_(p)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        x = self.blocks(x, mask=self.mask, is_causal=True)
        return self.head(self.norm(x))


def build(args: argparse.Namespace) -> tuple[nn.Module, torch.utils.data.Dataset]:
    n = args.batch * (args.warmup + args.steps + args.profile + 2)
    g = torch.Generator().manual_seed(0)
    if args.net == "gpt":
        model: nn.Module = Decoder(args.layers, args.hidden, args.heads, args.seq, args.vocab)
        tokens = torch.randint(0, args.vocab, (n, args.seq + 1), generator=g)
        return model, torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:])
    import torchvision

    model = torchvision.models.get_model(args.net, weights=None, num_classes=1000)
    images = torch.randn(n, 3, args.image_size, args.image_size, generator=g)
    return model, torch.utils.data.TensorDataset(images, torch.randint(0, 1000, (n,), generator=g))


def wrap(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    """DDP, or FSDP as benchmarks/memory_validation.py wraps it: one FSDP unit per transformer
    block (ModuleWrapPolicy on the block class, what transformer_auto_wrap_policy does) and the root
    unit for the rest (embeddings, final norm, tied head), forward_prefetch, BACKWARD_PRE;
    FULL_SHARD (fsdp) or SHARD_GRAD_OP (zero2). The nets but gpt have no block class: DDP only."""
    if args.strategy == "ddp":
        kwargs = {} if args.bucket_cap_mb is None else {"bucket_cap_mb": args.bucket_cap_mb}
        return nn.parallel.DistributedDataParallel(model, **kwargs)
    if args.net != "gpt":
        raise SystemExit(f"--strategy {args.strategy}: the gpt net only (its blocks are the FSDP units)")
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    sharding = ShardingStrategy.FULL_SHARD if args.strategy == "fsdp" else ShardingStrategy.SHARD_GRAD_OP
    return FSDP(model, sharding_strategy=sharding, auto_wrap_policy=ModuleWrapPolicy({nn.TransformerEncoderLayer}),
                device_id=torch.device("cpu"), forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--net", default="resnet50", help="a torchvision model name, or gpt (the decoder above)")
    p.add_argument("--batch", type=int, default=4, help="per rank")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--steps", type=int, default=12, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (DDP rebuilds its buckets after one)")
    p.add_argument("--strategy", choices=("ddp", "fsdp", "zero2"), default="ddp",
                   help="DDP, or FSDP FULL_SHARD (fsdp) / SHARD_GRAD_OP (zero2) with one unit per block (gpt only)")
    p.add_argument("--bucket-cap-mb", type=float, help="DDP's bucket_cap_mb (default: DDP's own, 25)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--profile", type=int, default=0, help="after the timed steps, profile this many steps")
    p.add_argument("--trace", help="where rank 0 writes the profiled steps' Chrome trace ({rank} for every rank)")
    p.add_argument("--json", help="rank 0 writes the step times and DDP's buckets here")
    args = p.parse_args()

    rank = int(os.environ.get("RANK", os.environ.get("PMI_RANK", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:"
                            f"{os.environ.get('MASTER_PORT', '29512')}", rank=rank, world_size=world)
    model, data = build(args)
    ddp = wrap(model, args)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loader = iter(torch.utils.data.DataLoader(data, batch_size=args.batch))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        x, y = next(loader)
        opt.zero_grad(set_to_none=True)
        out = ddp(x)
        loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e6)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    if args.profile:
        from torch.profiler import ProfilerActivity, profile, schedule

        path = (args.trace or "trace-{rank}.json").replace("{rank}", str(rank))
        keep = rank == 0 or "{rank}" in (args.trace or "")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     schedule=schedule(wait=0, warmup=1, active=args.profile),
                     on_trace_ready=(lambda prof: prof.export_chrome_trace(path)) if keep else None) as prof:
            for _ in range(args.profile + 1):
                step()
                prof.step()
    logging = ddp._get_ddp_logging_data() if args.strategy == "ddp" else {}
    if rank == 0 and args.json and args.steps > 0:
        samples = slowest.tolist()
        med = statistics.median(samples)
        doc = {"args": vars(args), "world_size": world, "torch": torch.__version__,
               "step_us": {"median": med, "min": min(samples), "max": max(samples),
                           "spread": (max(samples) - min(samples)) / med, "samples": samples,
                           "clock": "time.perf_counter, whole step, slowest rank"},
               "params": sum(p.numel() for p in model.parameters()),
               "ddp": {k: logging.get(k) for k in ("bucket_sizes", "rebuilt_bucket_sizes", "bucket_cap_bytes",
                                                   "rebuilt_per_bucket_param_indices", "gradient_as_bucket_view")}
               if args.strategy == "ddp" else None, "strategy": args.strategy}
        with open(args.json + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    dist.barrier()  # no rank still in a collective
    dist.destroy_process_group()
    # Every file is written: leave without the interpreter's teardown. gloo's worker threads free the
    # collectives launched in backward (each holds a Python object) under the GIL, and one still
    # waiting for it when the interpreter finalises aborts the process ("terminate called without
    # an active exception", about 1 run in 10 on 2 ranks with torch 2.14).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
