"""Does FSDP's all-gather cost more than the fit's because FSDP gathers into storage it has just
allocated? gloo's all_gather (FSDP's form on CPU tensors: N views of one whole buffer) of one
GPT-decoder block's flat parameter (12,609,536 B), alternately into one reused buffer and into a
buffer allocated for the call (what FSDP's unshard does); the median over the iterations after 4,
rank 0's clock, each call after a barrier.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/fsdp_allgather_fresh.py [--bytes B] [--iters N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=12_609_536, help="the whole buffer")
    ap.add_argument("--iters", type=int, default=24)
    args = ap.parse_args()
    rank, world = int(os.environ.get("PMI_RANK", "0")), int(os.environ.get("PMI_SIZE", "1"))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ.get('MASTER_PORT', '29811')}",
                            rank=rank, world_size=world)
    torch.set_num_threads(1)
    n = args.bytes // 4 // world
    shard, reused = torch.ones(n), torch.empty(world * n)
    times: dict[str, list[float]] = {"reused": [], "fresh": []}
    for _ in range(args.iters):
        for kind in ("reused", "fresh"):
            full = reused if kind == "reused" else torch.empty(world * n)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_gather(list(torch.chunk(full, world)), shard)
            times[kind].append((time.perf_counter() - t0) * 1e3)
            del full
    if rank == 0:
        med = {k: statistics.median(v[4:]) for k, v in times.items()}
        print(f"all_gather of {world * n * 4} B on {world} ranks: into a reused buffer {med['reused']:.2f} ms, "
              f"into a fresh one {med['fresh']:.2f} ms ({100 * (med['fresh'] / med['reused'] - 1):+.0f} %)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
