"""Canned workloads with known character, for checking an install and calibrating caps on the user's own GPUs.

What lives here: the workloads ``mm``, ``bw`` and ``mlp`` and their CPU stand-ins, the command line
(``python -m ecolaunch.calibrate.canned``), and the Python API other tools use: :func:`build` (a :class:`Workload`
whose ``step()`` runs one synchronized iteration), :func:`run_for`, :func:`measure`, :func:`open_meter`. This module
imports torch only inside :func:`build` and the command line, and sets no power cap. The workloads, the duty cycle,
the command line and its result fields: docs/admin.md#the-canned-workloads.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import EcolaunchError
from ecolaunch.profile import hooks
from ecolaunch.runtime import open_gpus, resolve
from ecolaunch.validate import number_or_none

__all__ = ["NAMES", "STAND_IN_LOADS", "GpuMeter", "Workload", "build", "main", "measure", "open_meter", "parse_spec",
           "run_for"]

NAMES = ("mm", "bw", "mlp")


@dataclass(frozen=True, slots=True)
class Workload:
    """A built workload: ``step()`` runs one iteration and returns when the device has finished it."""

    name: str
    device: str  # "cuda:N" or "cpu"
    what: str  # one iteration in words
    step: Callable[[], None]
    busy_pct: float = 100.0  # the share of each iteration the device works (docs/admin.md#the-canned-workloads: duty cycle)


def build(name: str, device: str = "auto", busy_pct: float = 100.0) -> Workload:
    """Allocate ``name``'s tensors on ``device`` (``auto``: ``cuda:LOCAL_RANK`` when CUDA is available, else cpu);
    ``busy_pct``: the duty cycle (docs/admin.md#the-canned-workloads), in (0, 100].

    Raises:
        ValueError: an unknown workload or device, or a duty cycle outside (0, 100].
    """
    import torch

    if name not in NAMES:
        raise ValueError(f"unknown workload {name!r}: choose one of {', '.join(NAMES)}")
    if number_or_none(busy_pct, hi=100.0, positive=True) is None:
        raise ValueError(f"busy percentage must be a number in (0, 100], got {busy_pct!r}")
    if device == "auto":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu"
    elif device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"unknown device {device!r}: choose auto, cuda or cpu")
    torch.manual_seed(0)
    gpu = device != "cpu"
    if gpu:
        torch.cuda.set_device(torch.device(device))
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    what, body = _BUILDERS[name](torch, device, gpu)
    idle_per_busy = 100.0 / float(busy_pct) - 1.0

    def step() -> None:
        start = time.perf_counter()
        body()
        sync()
        if idle_per_busy > 0:  # the device idles while the host "loads the next batch"
            time.sleep((time.perf_counter() - start) * idle_per_busy)

    if idle_per_busy > 0:
        what += f", then idle for {idle_per_busy:.3g}x as long (busy {float(busy_pct):g} %)"
    return Workload(name, device, what, step, float(busy_pct))


def _mm(torch: Any, device: str, gpu: bool) -> tuple[str, Callable[[], None]]:
    n, count, dtype = (8192, 100, torch.bfloat16) if gpu else (256, 8, torch.float32)
    return products(torch, device, n, count, dtype)


def products(torch: Any, device: str, n: int, count: int, dtype: Any) -> tuple[str, Callable[[], None]]:
    """``count`` products of two ``n`` x ``n`` matrices on ``device``: what they are in words, and the body."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=dtype)

    def body() -> None:
        for _ in range(count):
            torch.matmul(a, b, out=out)

    return f"{count} {str(dtype).removeprefix('torch.')} {n}x{n} matrix products", body


def _bw(torch: Any, device: str, gpu: bool) -> tuple[str, Callable[[], None]]:
    mib, count = (2048, 60) if gpu else (16, 8)
    src = torch.ones(mib * 1024 * 1024 // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)

    def body() -> None:
        for _ in range(count):
            dst.copy_(src)

    return f"{count} copies of a {mib} MiB fp32 tensor", body


def _mlp(torch: Any, device: str, gpu: bool) -> tuple[str, Callable[[], None]]:
    (d_in, hidden, batch, count) = (1024, 2048, 512, 40) if gpu else (64, 128, 64, 6)
    model = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, d_in, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def body() -> None:
        for _ in range(count):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()

    return f"{count} Adam steps of a 3-layer fp32 MLP ({d_in}-{hidden}-{hidden}-10, batch {batch})", body


_BUILDERS = {"mm": _mm, "bw": _bw, "mlp": _mlp}


def parse_spec(spec: str) -> tuple[str, float]:
    """A workload as ``ecolaunch calibrate --workloads`` names it: ``NAME`` (busy all the time) or ``NAME@P`` (a duty
    cycle of ``P`` %, e.g. ``mm@30``) -> ``(name, busy_pct)``. Raises ValueError naming what is wrong."""
    name, sep, pct = str(spec).strip().partition("@")
    if name not in NAMES:
        raise ValueError(f"unknown workload {spec!r}: choose one of {', '.join(NAMES)}, optionally with @P, a duty "
                         "cycle in % (e.g. mm@30)")
    if not sep:
        return name, 100.0
    try:
        busy = float(pct)
    except ValueError:
        busy = math.nan
    if number_or_none(busy, hi=100.0, positive=True) is None:
        raise ValueError(f"workload {spec!r}: the duty cycle after @ must be a number in (0, 100], e.g. {name}@30")
    return name, busy


def run_for(workload: Workload, seconds: float) -> tuple[int, float]:
    """Run whole iterations until ``seconds`` have passed; returns (iterations, wall seconds). At least one."""
    start = time.perf_counter()
    iters = 0
    while True:
        workload.step()
        iters += 1
        wall_s = time.perf_counter() - start
        if wall_s >= seconds:
            return iters, wall_s


#: what a CPU stand-in plays on a simulated GPU, per workload: (SM %, memory-bandwidth %, fraction of the board's
#: maximum power). Shaped on the H200 sweep (``ecolaunch/sim/data/h200_cap_sweep.csv``): mm draws the board's limit.
STAND_IN_LOADS = {"mm": (98.0, 40.0, 0.95), "bw": (60.0, 95.0, 0.6), "mlp": (55.0, 20.0, 0.4)}
_STAND_IN_MEMORY_MIB = 1024


@dataclass(slots=True)
class GpuMeter:
    """The GPU this process computes on, opened through ecolaunch's backend selection (NVML or simulated).

    ``backend`` and ``uuid`` are None, and ``error`` says why, when no backend or GPU could be opened.
    """

    backend: Any
    uuid: str | None
    error: str | None = None
    stand_in: bool = False

    @property
    def kind(self) -> str | None:
        return None if self.backend is None else self.backend.kind

    def energy_j(self) -> float | None:
        """The GPU's energy counter in joules (None without a GPU or a counter)."""
        if self.backend is None or self.uuid is None:
            return None
        return self.backend.energy_j(self.uuid)

    def snapshot(self) -> Any:
        """The GPU's snapshot (``ecolaunch.devices.backend.GpuSnapshot``), or None without a GPU."""
        if self.backend is None or self.uuid is None:
            return None
        return next((g for g in self.backend.gpus() if g.uuid == self.uuid), None)


def open_meter(device: str, workload: str | None = None, env: dict[str, str] | None = None, *,
               stand_in: bool | None = None, busy_pct: float = 100.0) -> GpuMeter:
    """Open the GPU that ``device`` computes on, as the launcher would (``ECOLAUNCH_SIMULATE``, state directory).

    On simulated GPUs a CPU ``device`` does nothing a GPU can see, so this process attaches itself with
    ``workload``'s stand-in load (:data:`STAND_IN_LOADS`): the simulated GPU then draws, and answers caps, as that
    kind of job would, and profiling has something to measure. Not when the GPU already reports a load: a launcher
    that knows the job (a repeat launch) attaches the job's profile itself. A process that attached before attaches
    again (a new workload replaces its load). ``stand_in=True`` attaches whatever the GPU reports (the second
    workload of a pair, ``ecolaunch calibrate``); ``False`` never. The iteration time of the CPU stand-in does not
    answer caps. A stand-in of a duty cycle ``busy_pct`` (:func:`build`) shows that share of its utilization and of
    its power above the board's idle power (the catalogue's, an assumption there).
    """
    env = dict(os.environ) if env is None else env
    try:
        environment, _ = resolve(env)
        backend = open_gpus(environment)
        gpus = backend.gpus()
        uuid = _device_uuid(device, env, gpus)
        if uuid is None:
            return GpuMeter(None, None, f"cannot tell which of the {len(gpus)} GPU(s) {device} is")
        meter = GpuMeter(backend, uuid)
        snap = meter.snapshot()
        own = os.getpid() in {proc.pid for proc in snap.processes}
        wanted = (own or not snap.util_gpu_pct) if stand_in is None else stand_in
        if device == "cpu" and workload in STAND_IN_LOADS and wanted:
            sm_pct, mem_pct, power_frac = STAND_IN_LOADS[workload]
            duty = busy_pct / 100.0
            busy_w = power_frac * (snap.power_limit_max_w or 0.0)
            idle_w = min(busy_w, _idle_power_w(snap.name))
            meter.stand_in = backend.attach(uuid, os.getpid(), _STAND_IN_MEMORY_MIB, util_gpu_pct=sm_pct * duty,
                                            util_mem_pct=mem_pct * duty, power_w=idle_w + (busy_w - idle_w) * duty)
        return meter
    except EcolaunchError as e:
        return GpuMeter(None, None, str(e) + (f" (HINT: {e.hint})" if e.hint else ""))


def _idle_power_w(name: str) -> float:
    """The catalogue's idle power of board ``name`` (an assumption there); 0 for a board it does not know."""
    try:
        return float(lookup(name).idle_power_w or 0.0)
    except EcolaunchError:
        return 0.0


def _device_uuid(device: str, env: dict[str, str], gpus: Sequence[Any]) -> str | None:
    """The NVML UUID of ``device``: CUDA's own UUID on a GPU; else the visible device of this local rank."""
    uuids = {g.uuid for g in gpus}
    if device.startswith("cuda"):
        import torch

        raw = str(getattr(torch.cuda.get_device_properties(torch.device(device)), "uuid", ""))
        for candidate in (raw, f"GPU-{raw}"):
            if candidate in uuids:
                return candidate
    # a CPU stand-in on simulated GPUs: the GPU the launcher gave this worker (ecolaunch sets NVML indices)
    position = int(env.get("LOCAL_RANK", "0")) if device == "cpu" else (torch_index(device) or 0)
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    entry = visible[position] if position < len(visible) else str(position) if not visible else None
    if entry is None:
        return None
    matches = [u for u in uuids if u.startswith(entry)] if not entry.isdigit() else []
    if len(matches) == 1:
        return matches[0]
    return {str(g.index): g.uuid for g in gpus}.get(entry)


def torch_index(device: str) -> int | None:
    """``cuda:3`` -> 3; None without an index."""
    _, _, index = device.partition(":")
    return int(index) if index.isdigit() else None


def measure(workload: Workload, steps: int, warmup: int, read_energy: Callable[[], float | None] | None,
            mark: Callable[[], None]) -> dict[str, Any]:
    """Run ``steps`` iterations, calling ``mark()`` after each.

    The figures cover the iterations after ``warmup`` (``timed_iters``, ``wall_s``, ``iter_time_s``,
    ``iter_time_median_s``, ``energy_j``, ``j_per_iter``, ``power_w``) and, with a ``run_`` prefix, the whole run
    (``run_wall_s``, ``run_iter_time_s``, ``run_energy_j``, ``run_j_per_iter``). Unknown figures are None.
    """
    read = read_energy or (lambda: None)
    times: list[float] = []
    run_j, run_s = read(), time.perf_counter()
    start_j, start_s = run_j, run_s
    for i in range(steps):
        if i == warmup and i:
            start_j, start_s = read(), time.perf_counter()
        t0 = time.perf_counter()
        workload.step()
        mark()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    end_s = time.perf_counter()
    end_j = read()
    n = len(times)
    wall_s, whole_s = end_s - start_s, end_s - run_s
    energy_j = None if start_j is None or end_j is None else end_j - start_j
    run_energy_j = None if run_j is None or end_j is None else end_j - run_j
    return {
        "timed_iters": n,
        "wall_s": wall_s if n else None,
        "iter_time_s": wall_s / n if n else None,
        "iter_time_median_s": statistics.median(times) if n else None,
        "energy_j": energy_j if n else None,
        "j_per_iter": None if energy_j is None or not n else energy_j / n,
        "power_w": None if energy_j is None or not n or wall_s <= 0 else energy_j / wall_s,
        "run_wall_s": whole_s,
        "run_iter_time_s": whole_s / steps if steps else None,
        "run_energy_j": run_energy_j,
        "run_j_per_iter": None if run_energy_j is None or not steps else run_energy_j / steps,
    }


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ecolaunch.calibrate.canned", description="Run one canned workload.")
    p.add_argument("workload", choices=NAMES)
    p.add_argument("--steps", type=int, default=100, help="iterations in all (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="iterations before the timed ones (default 10)")
    p.add_argument("--result", type=Path, help="write the figures here as JSON (rank 0 only)")
    p.add_argument("--device", default="auto", help="auto (default), cuda or cpu")
    p.add_argument("--busy-pct", type=float, default=100.0, metavar="P",
                   help="duty cycle: the device works P %% of each iteration and idles the rest, as a job waiting on "
                        "its data loader (default 100: no idle gap)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (2 for bad arguments, as argparse)."""
    args = _parser().parse_args(argv)
    if args.steps < 1 or not 0 <= args.warmup < args.steps:
        _parser().error(f"need --steps >= 1 and 0 <= --warmup < --steps (got {args.steps}, {args.warmup})")
    if number_or_none(args.busy_pct, hi=100.0, positive=True) is None:
        _parser().error(f"--busy-pct must be in (0, 100], got {args.busy_pct:g}: the share of each iteration the "
                        "device works")
    workload = build(args.workload, args.device, args.busy_pct)
    meter = open_meter(workload.device, workload.name, busy_pct=workload.busy_pct)
    figures = measure(workload, args.steps, args.warmup, meter.energy_j if meter.backend else None, hooks.step)
    if args.result is not None and os.environ.get("RANK", "0") == "0":
        _write_json(args.result, {
            "workload": workload.name, "what": workload.what, "device": workload.device, "gpu_uuid": meter.uuid,
            "energy_source": meter.kind, "energy_error": meter.error, "stand_in_load": meter.stand_in,
            "steps": args.steps, "warmup": args.warmup, "busy_pct": workload.busy_pct,
            "profiling": hooks.is_profiling(), **figures,
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
