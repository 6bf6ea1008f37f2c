"""Simulator speed: 10,000 jobs on a 64-GPU cluster (8 hosts x 8 A100) with a heuristic policy.

    python benchmarks/sim_speed.py [--jobs 10000] [--hosts 8] [--policy first-fit] [--json]

Goal: under a minute on 2 cores. ``--json`` prints ``{"jobs": …, "gpus": …, "wall_s": …, "policy": …}``.
Building the trace is timed separately (``trace_s``) and not included in ``wall_s``.
"""

from __future__ import annotations

import argparse
import time

from _common import emit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--gpus", default="8xA100-SXM4-80GB")
    parser.add_argument("--trace", default="cluster-heavy")
    parser.add_argument("--policy", default="first-fit")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from ecolaunch.devices.spec import parse_spec
    from ecolaunch.sim.engine import Simulation
    from ecolaunch.sim.metrics import summarize
    from ecolaunch.sim.policies import get_sim_policy
    from ecolaunch.sim.traces import build_trace

    machine = parse_spec(args.gpus, hostname="node0").replicate(args.hosts)
    t0 = time.perf_counter()
    trace = build_trace(args.trace, machine, seed=0, jobs=args.jobs)
    trace_s = time.perf_counter() - t0
    sim = Simulation(machine, get_sim_policy(args.policy))
    start = time.perf_counter()
    result = sim.run(trace)
    wall = time.perf_counter() - start
    summary = summarize(result)
    gpus = sum(len(h.gpus) for h in machine.hosts)
    out = {"jobs": len(trace.jobs), "gpus": gpus, "policy": args.policy, "trace": args.trace,
           "wall_s": round(wall, 2), "trace_s": round(trace_s, 2), "decisions": result.decisions,
           "finished": summary.finished}
    table = (f"simulator speed: {out['jobs']} jobs ({args.trace}) on {gpus} GPUs, policy {args.policy}\n"
             f"  simulation {out['wall_s']} s ({result.decisions} decisions, {summary.finished} jobs finished); "
             f"trace built in {out['trace_s']} s; goal < 60 s")
    emit(out, args.json, table)


if __name__ == "__main__":
    main()
