"""Launch a training function from Python with ecolaunch, and measure its evaluation with a measurement window.

    python examples/python_launch.py --nproc 2 --steps 200
    ECOLAUNCH_SIMULATE=4xA100-SXM4-80GB python examples/python_launch.py   # on simulated GPUs

``ecolaunch.launch(train, steps, nproc=2)`` is ``ecolaunch --nproc-per-node 2`` for a function: the job is placed,
queued, profiled, capped and accounted as on the command line, and each rank's return value comes back, with the
job's energy and time. ``ecolaunch.measure("eval")`` times the evaluation and reads the energy the job's GPUs used
meanwhile. Runs on CPU with gloo (CUDA with NCCL when available).
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


def train(steps: int) -> dict:
    """One worker: ``steps`` DDP steps on a synthetic regression problem, then an evaluation in a measurement window.
    Returns what this rank saw."""
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
    for _ in range(steps):
        x = torch.randn(64, 32, generator=gen).to(device)
        loss = nn.functional.mse_loss(ddp(x), x[:, :1] * 0.5 - x[:, 1:2])
        opt.zero_grad()
        loss.backward()
        opt.step()
        ecolaunch.step()  # one iteration: what profiling measures
    with ecolaunch.measure("eval") as m, torch.no_grad():
        x = torch.randn(4096, 32, generator=gen).to(device)
        eval_loss = nn.functional.mse_loss(model(x), x[:, :1] * 0.5 - x[:, 1:2]).item()
    dist.barrier()
    del ddp, opt  # the DDP reducer holds the process group: drop it first (docs/python-api.md)
    dist.destroy_process_group()
    return {"eval_loss": eval_loss, "eval_s": m.time_s, "eval_energy_j": m.energy_j}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    try:
        result = ecolaunch.launch(train, args.steps, nproc=args.nproc)
    except ecolaunch.WorkerFailed as e:
        raise SystemExit(f"rank {e.rank} failed (exit code {e.exit_code}): {e.failure}") from None
    for rank, seen in sorted(result.items()):
        energy = "n/a" if seen["eval_energy_j"] is None else f"{seen['eval_energy_j']:.1f} J"
        print(f"rank {rank}: eval loss {seen['eval_loss']:.4f}, eval {seen['eval_s'] * 1e3:.0f} ms, {energy}")
    energy = "n/a (no GPUs)" if result.energy_j is None else f"{result.energy_j / 1e3:.2f} kJ"
    print(f"job {result.job_id}: {result.time_s:.1f} s, {energy}")


if __name__ == "__main__":  # the workers are spawned processes that import this module: launch only from the main
    main()
