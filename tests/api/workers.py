"""Functions the launch API tests run on their workers (spawned processes import them from here)."""

from __future__ import annotations

import os
import time

import ecolaunch


def ranked(base: int, steps: int) -> dict:
    """Join a gloo process group, all-reduce the ranks, mark ``steps`` iterations, and measure a short block: what
    this rank saw."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        total = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(total)
        for _ in range(steps):
            time.sleep(0.01)
            ecolaunch.step()
        with ecolaunch.measure("block") as m:
            time.sleep(0.3)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return {"value": base + int(os.environ["RANK"]), "rank_sum": total.item(), "world": int(os.environ["WORLD_SIZE"]),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "time_s": m.time_s, "energy_j": m.energy_j,
            "gpu_energy_j": m.gpu_energy_j, "measured_gpus": list(m.gpus)}


def fail_on(rank: int) -> str:
    """Raise on ``rank``; the others wait a little (their peer fails first)."""
    if int(os.environ["RANK"]) == rank:
        raise ValueError(f"rank {rank} could not load its shard")
    time.sleep(2.0)
    return "done"


def sleep(seconds: float) -> None:
    time.sleep(seconds)
