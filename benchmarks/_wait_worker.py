"""The worker of gpu_check.py's ``waits`` section: a small DDP model (gloo) with ``ecolaunch.allreduce_wait_hook`` on
``<device>`` (``cuda``: the hook's CUDA-event path; ``cpu``: its clock path); the highest rank sleeps ``<slow s>`` in
each step, so the others wait that long at the all-reduce. Prints one JSON line on rank 0: the mean step time.

    _wait_worker.py <steps> <slow s> <device>
"""

import json
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ecolaunch

steps, slow_s, device = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 8)).to(device)
ddp = DistributedDataParallel(model)
ddp.register_comm_hook(None, ecolaunch.allreduce_wait_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x = torch.randn(256, 1024, device=device)
stamps = []
for _ in range(steps):
    if rank == world - 1:
        time.sleep(slow_s)
    loss = ddp(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    stamps.append(time.monotonic())
dist.barrier()
if rank == 0:
    print(json.dumps({"step_s": (stamps[-1] - stamps[4]) / (len(stamps) - 5)}), flush=True)
del ddp
dist.destroy_process_group()
