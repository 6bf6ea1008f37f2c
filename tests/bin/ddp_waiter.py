"""Worker for the all-reduce wait test: a tiny DDP model on CPU (gloo) with ``ecolaunch.allreduce_wait_hook``; the
highest rank sleeps ``<slow seconds>`` more in each step, so the other ranks wait that long at the all-reduce; every
rank sleeps ``<common seconds>`` (default 0) as its own work.

    ddp_waiter.py <steps> <slow seconds> [<common seconds>]
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ecolaunch

steps, slow_s = int(sys.argv[1]), float(sys.argv[2])
common_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = DistributedDataParallel(torch.nn.Linear(16, 4))
model.register_comm_hook(None, ecolaunch.allreduce_wait_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 16)
for _ in range(steps):
    time.sleep(common_s)
    if rank == world - 1:
        time.sleep(slow_s)  # the slow rank: its backward hands the last bucket over late
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    ecolaunch.step()
dist.barrier()
# drop DDP (its reducer holds the process group) before the group, as examples/instrumented_ddp.py does: with torch
# 2.13's gloo a group torn down while DDP still references it can abort the worker at exit (docs/known-issues.md)
del model, opt, loss
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
# what the tests read is written (step and wait records go straight to their files, unbuffered): skip the
# interpreter's teardown, where torch 2.13's gloo still aborts now and then ("terminate called without an active
# exception", SIGABRT; docs/known-issues.md): it failed tests/profile/test_pacing.py once in a full run.
sys.stderr.flush()
os._exit(0)
