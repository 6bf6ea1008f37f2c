"""One rank of ``ecolaunch calibrate --links``' probe: two processes, one per GPU of a pair, time a data-parallel step.

What lives here: :func:`probe` (what a rank measures) and :func:`main` (its command line: ``python -I -m
ecolaunch.calibrate.linkprobe --rank R --port P --device cpu|cuda [--seconds S] [--mib M] [--parent PID]``; rank 0
prints one JSON line). What does not: choosing and booking the pairs, starting the ranks
(:mod:`ecolaunch.calibrate.links`).

The step is what a data-parallel job does at every iteration: its compute on each GPU, then an all-reduce of one
gradient bucket (DDP's default bucket is 25 MiB). The compute per bucket is a training job's: one bf16 4096 x 4096
matrix product (137 GFLOP) per 25 MiB of fp32 gradient is ResNet-50's ratio at about 24 images per GPU (25.6 M
parameters, 102 MB of gradient; 3.8 G multiply-adds an image forward, He et al. 2016, and twice that backward). A
rank measures the compute alone, the all-reduce alone and the step, the same number of times on both ranks (rank 0
chooses the count from a first timing and sends it), since a collective that one rank skips would wait forever. NCCL
on GPUs, gloo on CPU (simulated GPUs: the figures are then the host's memory, not a link).
docs/admin.md#measuring-the-links-between-gpus.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ecolaunch.jobmodel.capchoice import iteration_stats

__all__ = ["DEFAULT_MIB", "main", "probe"]

#: the gradient bucket all-reduced at each step: DDP's default ``bucket_cap_mb``
DEFAULT_MIB = 25
#: the ranks of a probe: one pair
WORLD = 2
#: how long the ranks wait for each other (the other rank's start, a collective)
RENDEZVOUS_TIMEOUT_S = 120.0


def _timed(run: Callable[[], None], count: int, sync: Callable[[], None]) -> tuple[float, float]:
    """Seconds per run of ``count`` runs and its standard error in % (each run timed to the device's end), summarised
    as every window is (:func:`~ecolaunch.jobmodel.capchoice.iteration_stats`: trimmed mean, robust spread)."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - start)
    stats = iteration_stats(times)
    if stats is None:  # no time above 0: a clock that did not advance
        raise RuntimeError(f"no iteration time measured in {count} runs")
    return stats.mean_s, stats.se_pct


def _compute(torch: Any, device: str, gpu: bool, mib: int) -> tuple[str, Callable[[], None]]:
    """The step's compute: on a GPU one bf16 4096 x 4096 product per 25 MiB of bucket (at least one); on CPU
    (simulated GPUs) two small fp32 products, which only keep the step's shape."""
    from ecolaunch.calibrate.canned import products  # lazy: the canned workloads load with torch, in the rank

    n, count, dtype = (4096, max(1, round(mib / DEFAULT_MIB)), torch.bfloat16) if gpu else (256, 2, torch.float32)
    what, body = products(torch, device, n, count, dtype)
    return f"{what}, then the all-reduce", body


def probe(rank: int, port: int, device: str, seconds: float, mib: int, addr: str = "127.0.0.1") -> dict[str, Any]:
    """Join the pair's process group and measure; returns the figures (the same on both ranks but for the times)."""
    import torch
    import torch.distributed as dist

    gpu = device == "cuda"
    if gpu:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # two ranks on one host's cores: each its own, as torchrun's OMP_NUM_THREADS=1
    dev = f"cuda:{rank}" if gpu else "cpu"
    backend = "nccl" if gpu else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT_S))
    try:
        sync = torch.cuda.synchronize if gpu else (lambda: None)
        what, compute = _compute(torch, dev, gpu, mib)
        bucket = torch.ones(mib * 1024 * 1024 // 4, device=dev, dtype=torch.float32)

        def all_reduce() -> None:
            dist.all_reduce(bucket)

        def step() -> None:
            compute()
            dist.all_reduce(bucket)

        for _ in range(3):  # warm-up: the communicator's setup, the kernels' first launch
            step()
        sync()
        first, _ = _timed(step, 3, sync)
        # rank 0's count for each of the three measurements (a third of the time each), sent to rank 1
        count = torch.tensor([max(5, int(seconds / 3 / max(first, 1e-6)))], device=dev, dtype=torch.int64)
        dist.broadcast(count, src=0)
        n = int(count.item())
        compute_s, compute_se = _timed(compute, n, sync)
        reduce_s, reduce_se = _timed(all_reduce, n, sync)
        step_s, step_se = _timed(step, n, sync)
        nbytes = bucket.numel() * bucket.element_size()
        # bus bandwidth as nccl-tests defines it: the algorithm's bytes per second times 2 (n - 1) / n (1 for a pair)
        busbw = nbytes / reduce_s * 2 * (WORLD - 1) / WORLD
        return {"backend": backend, "device": dev, "bucket_mib": mib, "iterations": n, "what": what,
                "compute_ms": 1e3 * compute_s, "compute_se_pct": compute_se,
                "allreduce_ms": 1e3 * reduce_s, "allreduce_se_pct": reduce_se, "busbw_gb_s": busbw / 1e9,
                "step_ms": 1e3 * step_s, "step_se_pct": step_se}
    finally:
        dist.destroy_process_group()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ecolaunch.calibrate.linkprobe",
                                description="one rank of `ecolaunch calibrate --links`' probe")
    p.add_argument("--rank", type=int, choices=range(WORLD), required=True)
    p.add_argument("--port", type=int, required=True, help="rank 0's TCP port on --addr, where the ranks meet")
    p.add_argument("--addr", default="127.0.0.1")
    p.add_argument("--device", choices=("cpu", "cuda"), required=True,
                   help="cuda: rank R uses the R-th visible GPU (NCCL); cpu: gloo")
    p.add_argument("--seconds", type=float, default=6.0, help="about how long the three measurements take")
    p.add_argument("--mib", type=int, default=DEFAULT_MIB, help="the gradient bucket all-reduced at each step")
    p.add_argument("--parent", type=int, default=None, help="the calibrator's pid: the rank ends when it is gone")
    return p


def _exit_with_parent(parent: int | None, interval_s: float = 0.5) -> None:
    """End this rank when the calibrator that started it (``parent``; None: this process's parent now) is gone,
    killed even before this rank ran a line: nobody would read the figures, and the GPUs' booking is freed with it."""
    parent = os.getppid() if parent is None else parent

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(1)

    threading.Thread(target=watch, name="linkprobe-parent", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _exit_with_parent(args.parent)
    figures = probe(args.rank, args.port, args.device, args.seconds, args.mib, args.addr)
    if args.rank == 0:
        sys.stdout.write(json.dumps(figures) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
