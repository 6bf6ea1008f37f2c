"""Latency of one full placement decision by the GNN policy and the default ``curve`` policy, excluding interpreter
start.

    python benchmarks/decision_latency.py [--repeat 20] [--json]

A full decision is what a launcher does to get GPUs: one transaction of the state store that locks, reconciles
(live GPU readings through the simulated backend, liveness of every job's launcher), builds the GNN's graph of the
host, scores every candidate (GPU set x power cap) in batched forward passes, and writes the job back. Cases: one
host with 8 GPUs and 32 running jobs, and one host with 64 GPUs and 256 running jobs (jobs packed up to 4 per GPU
by first-fit beforehand, each with a measured profile). The new job asks for one GPU and has a profile, so every
GPU set it would have to itself gets the cap its measured curve chooses (on the 5 W grid, with its margin). The case
``gnn (first launch)``: the new job has no profile, so the gnn policy first predicts its curve
(:class:`~ecolaunch.policy.gnn.GnnFirstCurve`), afresh for every decision, as a new launcher process would.
``--json`` prints ``{"cases": [{"gpus": 8, "jobs": 32, "candidates": …, "p50_ms": …, "p99_ms": …}, …]}``.
Goals: p50 <= 20 ms (8/32) and <= 200 ms (64/256) on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from _common import REPO, emit, percentile

sys.path.insert(0, str(REPO))

from ecolaunch.jobmodel.profile import CapPoint, Profile  # noqa: E402 - after the checkout is on the path

PROFILE = Profile(iter_time_s=0.15, sm_util_pct=20.0, mem_bw_util_pct=10.0, memory_mib=8000, power_w=150.0,
                  cap_points=(CapPoint(175.0, 0.17, 130.0), CapPoint(250.0, 0.152, 140.0), CapPoint(400.0, 0.15, 150.0)))


def run_case(gpus: int, jobs: int, repeat: int, policy: str = "gnn", first: bool = False) -> dict:
    from ecolaunch.admin.rules import Rules
    from ecolaunch.devices.simulated import SimulatedBackend
    from ecolaunch.devices.spec import parse_spec
    from ecolaunch.launch.session import Launcher, Placement, Session
    from ecolaunch.policy.base import JobRequest
    from ecolaunch.policy.registry import get_policy
    from ecolaunch.policy.energy import enumerate_candidates
    from ecolaunch.state.reconcile import process_start_time
    from ecolaunch.state.store import StateStore

    rules = replace(Rules(), max_jobs_per_gpu=max(2, -(-jobs // gpus) + 1))
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="bench")
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        spec = parse_spec(f"{gpus}xA100-SXM4-80GB", hostname="bench").hosts[0]
        backend = SimulatedBackend(spec, state_dir / "gpus.json")
        filler = Session(StateStore(state_dir), backend, get_policy("first-fit"), rules)
        for i in range(jobs):
            req = JobRequest(id=f"run{i}", user="bench", host="bench", nproc=1, memory_mib=8000,
                             profile=PROFILE)
            filler.submit(req, me, name="filler", info={"allowed_slowdown_pct": 25.0, "memory_mib": 8000})
            placed = filler.try_place(req.id)
            assert isinstance(placed, Placement), "could not place the filler jobs"
        session = Session(StateStore(state_dir), backend, get_policy(policy), rules)
        times, candidates = [], 0
        for r in range(repeat + 2):
            if first:  # a launcher is a new process: its first launch's predicted curve is computed afresh
                session = Session(StateStore(state_dir), backend, get_policy(policy), rules)
            req = JobRequest(id=f"new{r}", user="bench", host="bench", nproc=1, memory_mib=8000,
                             allowed_slowdown_pct=10.0, profile=None if first else PROFILE)
            session.submit(req, me, name="new", info={"allowed_slowdown_pct": 10.0, "memory_mib": 8000})
            start = time.perf_counter()
            placed = session.try_place(req.id)
            elapsed = time.perf_counter() - start
            assert isinstance(placed, Placement), "the new job was not placed"
            if r >= 2:  # the first two warm caches (weights, imports)
                times.append(elapsed)
            session.release(req.id)
        candidates = len(enumerate_candidates(session.snapshot(), req, rules))
    return {"policy": policy + (" (first launch)" if first else ""), "gpus": gpus, "jobs": jobs,
            "candidates": candidates,
            "p50_ms": round(percentile(times, 50) * 1000, 2), "p99_ms": round(percentile(times, 99) * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = [run_case(g, j, args.repeat, policy, first) for policy, first in (("gnn", False), ("curve", False),
                                                                             ("gnn", True))
             for g, j in ((8, 32), (64, 256))]
    table = "decision latency (lock, reconcile, graph, scoring every candidate, write)\n" + "\n".join(
        f"  {c['policy']:>20}: {c['gpus']:>3} GPUs / {c['jobs']:>3} jobs: {c['candidates']:>4} candidates, "
        f"p50 {c['p50_ms']:.1f} ms, p99 {c['p99_ms']:.1f} ms" for c in cases) + \
        "\n  goals: p50 <= 20 ms (8/32), <= 200 ms (64/256)"
    emit({"cases": cases}, args.json, table)


if __name__ == "__main__":
    main()
