"""The DDP example of ddp_train.py, instrumented for ecolaunch: exact iteration times, hints, profiling-aware.

    ecolaunch --nproc-per-node 2 examples/instrumented_ddp.py --steps 200
    torchrun  --nproc-per-node 2 examples/instrumented_ddp.py --steps 200   # the same; the hooks do nothing

Three lines differ from an uninstrumented script:

- ``@ecolaunch.job(name=..., profile_safe=True)`` tells the launcher the job's name and that running its
  first iterations twice (a pre-launch profiling run, then the real run) is harmless;
- ``for x, y in ecolaunch.track(batches)`` marks every iteration, so profiling measures exact iteration times;
- ``if not ecolaunch.is_profiling()`` skips the side effect (here: writing a checkpoint) in a profiling run.

Runs on CPU with gloo (CUDA with NCCL when available). Each worker takes the GPU of its LOCAL_RANK among
those ecolaunch made visible.
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

import ecolaunch


def batches(steps: int, batch_size: int, rank: int, device: torch.device):
    """A synthetic data loader: ``steps`` batches of a linear regression problem."""
    gen = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        x = torch.randn(batch_size, 32, generator=gen).to(device)
        yield x, x[:, :1] * 0.5 - x[:, 1:2]


@ecolaunch.job(name="instrumented-ddp", profile_safe=True)
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--checkpoint", default=None, help="write the model here at the end (skipped when profiling)")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss = torch.zeros(())
    for step, (x, y) in enumerate(ecolaunch.track(batches(args.steps, args.batch_size, rank, device))):
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 50 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}  device {device}  profiling {ecolaunch.is_profiling()}",
                  flush=True)
    if rank == 0:
        print(f"done: {args.steps} steps, final loss {loss.item():.4f}", flush=True)
        if args.checkpoint and not ecolaunch.is_profiling():
            torch.save(model.state_dict(), args.checkpoint)
    dist.barrier()
    # drop DDP (its reducer holds the process group) so that destroy_process_group frees the group and joins gloo's
    # threads while the interpreter is alive; one left to the interpreter's exit can abort the worker
    del ddp, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
