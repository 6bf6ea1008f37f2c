"""``ecolaunch simulate``: run policies on a trace over simulated GPUs and compare energy and job times."""

from __future__ import annotations

import json
import sys

import click

from ecolaunch.cli.command import Command
from ecolaunch.config import Environment


def _fmt_h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


@click.command(cls=Command)
@click.option("--gpus", "gpus", default="8xA100-SXM4-80GB", show_default=True,
              help="GPUs of one host: a spec like 8xA100-SXM4-80GB or 2xRTX4090+2xA6000, or a TOML machine file")
@click.option("--hosts", default=1, show_default=True, type=click.IntRange(1, 1024), help="identical hosts")
@click.option("--trace", "trace_name", default="workstation-light", show_default=True,
              help="a standard trace name, a measured-world trace (workstation-mixed, power-budget, "
                   "workstation-measured, workstation-topology, workstation-mixed-models: they bring their own "
                   "machine) or a trace file (see docs/simulator.md)")
@click.option("--policy", "policies", multiple=True, default=("exclusive",), show_default=True,
              help="a placement policy (curve, exclusive, first-fit, lucid, eaco, zeus, gnn, oracle, or the "
                   "ablation no-gnn); repeat to compare several in one run")
@click.option("--seed", default=0, show_default=True, help="seed of the trace's random draws")
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=None, help="number of jobs (default: the trace's)")
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON")
def simulate(gpus: str, hosts: int, trace_name: str, policies: tuple[str, ...], seed: int, jobs: int | None,
             as_json: bool) -> None:
    """Run each policy on the same trace and machine, and print energy (node, GPU-only, job-attributed),
    mean and p95 job completion time, mean slowdown against running alone, QoS violations, makespan and GPU
    utilization. Deterministic: the same arguments give the same numbers."""
    from ecolaunch.devices.spec import parse_spec
    from ecolaunch.sim.engine import Simulation
    from ecolaunch.sim.metrics import summarize
    from ecolaunch.sim.policies import get_sim_policy
    from ecolaunch.sim.traces import resolve_trace

    from ecolaunch.sim.measured_traces import MEASURED_TRACES, measured_simulation

    measured = trace_name in MEASURED_TRACES
    if measured:  # the measured world brings its own machine (V100s: the board the measurements are of)
        from ecolaunch.sim.measured_traces import measured_machine, measured_trace

        machine = measured_machine(trace_name)
        counts: dict[str, int] = {}
        for g in machine.hosts[0].gpus:
            counts[g.name] = counts.get(g.name, 0) + 1
        gpus = "+".join(f"{n}x{name}" for name, n in counts.items())
        trace = measured_trace(trace_name, machine, seed=seed, jobs=jobs)
    else:
        machine = parse_spec(gpus, hostname="node0")
        if hosts > 1:
            machine = machine.replicate(hosts)
        trace = resolve_trace(trace_name, machine, seed=seed, jobs=jobs)
    weights = Environment.from_env().gnn_weights
    if weights is not None and any(p in ("gnn", "no-gnn") for p in policies):
        from ecolaunch.policy.infer import chosen_weights

        weights = chosen_weights(Environment.from_env())
    chosen = [get_sim_policy(p, gnn_weights=weights) for p in policies]
    rows = []
    for name, policy in zip(policies, chosen):
        sim = measured_simulation(trace_name, machine, trace, name, policy, seed=seed) if measured \
            else Simulation(machine, policy)
        show_bar = not as_json and len(trace.jobs) >= 2000 and sys.stderr.isatty()
        if show_bar:
            with click.progressbar(length=len(trace.jobs), label=f"{policy.name:>10}", file=sys.stderr) as bar:
                last = [0]

                def progress(done: int, total: int) -> None:
                    bar.update(done - last[0])  # noqa: B023 (called within this iteration)
                    last[0] = done  # noqa: B023 (called within this iteration)

                result = sim.run(trace, progress)
        else:
            result = sim.run(trace)
        rows.append(summarize(result))
    if as_json:
        doc = {"trace": trace.name, "machine": gpus, "hosts": hosts, "seed": seed, "jobs": len(trace.jobs),
               "policies": {r.policy: r.to_dict() for r in rows}}
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    click.echo(f"trace {trace.name}: {len(trace.jobs)} jobs on {hosts} x {gpus} (seed {seed})")
    header = (f"{'policy':<11}{'node kWh':>10}{'GPU kWh':>10}{'job kWh':>10}{'mean JCT':>11}{'p95 JCT':>11}"
              f"{'slowdown':>10}{'QoS viol':>10}{'makespan':>11}{'GPU util':>10}{'shared':>8}")
    click.echo(header)
    for r in rows:
        click.echo(f"{r.policy:<11}{r.node_energy_kwh:>10.2f}{r.gpu_energy_kwh:>10.2f}{r.job_energy_kwh:>10.2f}"
                   f"{_fmt_h(r.mean_jct_s):>11}{_fmt_h(r.p95_jct_s):>11}{r.mean_slowdown_pct:>9.1f}%"
                   f"{r.qos_violations_pct:>9.1f}%{_fmt_h(r.makespan_s):>11}{r.gpu_utilization_pct:>9.1f}%"
                   f"{r.shared_jobs_pct:>7.0f}%")

