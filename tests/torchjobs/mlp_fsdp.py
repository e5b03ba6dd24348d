"""A small MLP of blocks trained with FSDP (FULL_SHARD, one unit per Block, forward_prefetch,
BACKWARD_PRE; gloo, CPU tensors) under torch.profiler, as a user would profile their job: writes the
Chrome trace and each FSDP unit's parameter count (the root's first).

    python mlp_fsdp.py OUT_DIR   (RANK/WORLD_SIZE/MASTER_PORT)
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.profiler import ProfilerActivity, profile, schedule


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(torch.relu(self.a(x)))


out = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                        world_size=world)
model = nn.Sequential(nn.Linear(64, 256), Block(256), Block(256), Block(256), nn.Linear(256, 10))
units = [sum(p.numel() for m in (model[0], model[4]) for p in m.parameters())]  # the root: what no Block holds
units += [sum(p.numel() for p in model[i].parameters()) for i in (1, 2, 3)]
fsdp = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, auto_wrap_policy=ModuleWrapPolicy({Block}),
            device_id=torch.device("cpu"), forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)
opt = torch.optim.SGD(fsdp.parameters(), lr=0.01, momentum=0.9)
data = torch.utils.data.TensorDataset(torch.randn(8 * 16, 64), torch.randint(0, 10, (8 * 16,)))
loader = torch.utils.data.DataLoader(data, batch_size=16)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=lambda prof: prof.export_chrome_trace(os.path.join(out, f"trace-{rank}.json"))) as prof:
    for x, y in loader:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(fsdp(x), y).backward()
        opt.step()
        prof.step()
if rank == 0:
    with open(os.path.join(out, "units.json"), "w") as f:
        json.dump({"units": units}, f)
dist.barrier()  # no rank still in a collective
dist.destroy_process_group()
# The trace and units.json are written: leave without the interpreter's teardown. gloo's worker
# threads free the collectives launched in backward (each holds a Python object) under the GIL,
# and one still waiting for it when the interpreter finalises aborts the process ("terminate
# called without an active exception", about 1 run in 10 on 2 ranks with torch 2.14).
sys.stdout.flush()
os._exit(0)
