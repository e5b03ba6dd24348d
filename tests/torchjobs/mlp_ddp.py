"""A small MLP (three linear layers) trained with DDP (gloo) under torch.profiler, as a user would profile their job:
writes the Chrome trace and DDP's own logging data (its buckets before and after the rebuild).

    python mlp_ddp.py OUT_DIR [--bucket-cap-mb MB] [--find-unused]   (RANK/WORLD_SIZE/MASTER_PORT)
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--bucket-cap-mb", type=float)
p.add_argument("--find-unused", action="store_true")
p.add_argument("--hidden", type=int, default=1024)
args = p.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                        world_size=world)
model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                      nn.Linear(args.hidden, 10))
kwargs = {"bucket_cap_mb": args.bucket_cap_mb} if args.bucket_cap_mb is not None else {}
ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=args.find_unused, **kwargs)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
data = torch.utils.data.TensorDataset(torch.randn(8 * 16, 256), torch.randint(0, 10, (8 * 16,)))
loader = torch.utils.data.DataLoader(data, batch_size=16)
initial = ddp._get_ddp_logging_data().get("bucket_sizes")
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
             on_trace_ready=lambda prof: prof.export_chrome_trace(os.path.join(args.out, f"trace-{rank}.json"))) as prof:
    for x, y in loader:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        prof.step()
logging = ddp._get_ddp_logging_data()
if rank == 0:
    with open(os.path.join(args.out, "ddp.json"), "w") as f:
        json.dump({"initial": initial, "rebuilt": logging.get("rebuilt_bucket_sizes"),
                   "param_bytes": [q.numel() * q.element_size() for q in model.parameters()]}, f)
dist.barrier()  # no rank still in a collective
dist.destroy_process_group()
# The trace and ddp.json are written: leave without the interpreter's teardown. gloo's worker
# threads free the collectives launched in backward (each holds a Python object) under the GIL,
# and one still waiting for it when the interpreter finalises aborts the process ("terminate
# called without an active exception", about 1 run in 10 on 2 ranks with torch 2.14).
sys.stdout.flush()
os._exit(0)
