"""A tiny DDP training job that runs anywhere: gloo on CPU, NCCL when CUDA is available.

    ecolaunch --nproc-per-node 2 examples/ddp_train.py --steps 20
    torchrun  --nproc-per-node 2 examples/ddp_train.py --steps 20   # the same, without placement

Each worker takes the GPU of its LOCAL_RANK among those ecolaunch made visible (CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
# imported before init_process_group, so that its functions' `group=group.WORLD` defaults hold None and not the
# group (DDP imports it later, through torch._dynamo): see docs/python-api.md, "Ending a gloo job"
import torch.distributed.nn  # noqa: F401
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 32, generator=gen).to(device)
        y = x[:, :1] * 0.5 - x[:, 1:2]
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {loss.item():.4f}  device {device}  "
                  f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
    dist.barrier()
    # drop DDP (its reducer holds the process group) so that destroy_process_group frees the group and joins gloo's
    # threads while the interpreter is alive; one left to the interpreter's exit can abort the worker
    del ddp, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
