"""Every policy on the standard traces, side by side: energy in three accountings, job times, QoS.

    python benchmarks/energy.py [--seed 0] [--json] [--out benchmarks/results]

Machines: the workstation traces run on one host with 4 A100-SXM4-80GB, the cluster traces on 4 hosts with 8
A100-SXM4-80GB each (A100 power curves are extrapolated from the Zeus A40 shape: see ecolaunch/sim/power.py).
Policies: the baselines of ``ecolaunch.sim.policies`` plus the oracle (the simulator's own model; on every trace
here, which are small enough), plus one ablation, ``zeus-5w``: the Zeus baseline choosing its cap on the 5 W grid
the energy-aware policies choose theirs on, instead of Zeus's own 25 W stride (it shows what the finer grid is worth
without a safety margin; it is not a baseline). Writes ``energy.md`` (markdown table with the saving against
exclusive FIFO at default power in each accounting), ``energy.json`` and, when matplotlib is installed,
``energy.png`` (node energy against mean JCT per policy) into ``--out``. ``--json`` prints
``{"traces": {TRACE: {POLICY: {"node_energy_kwh", "gpu_energy_kwh", "job_energy_kwh", "mean_jct_s", "p95_jct_s",
"mean_slowdown_pct", "qos_violations_pct", "makespan_s"}}}}``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import REPO, emit

TRACES = {
    "workstation-light": ("4xA100-SXM4-80GB", 1),
    "workstation-heavy": ("4xA100-SXM4-80GB", 1),
    "cluster-light": ("8xA100-SXM4-80GB", 4),
    "cluster-heavy": ("8xA100-SXM4-80GB", 4),
    "alibaba-share": ("8xA100-SXM4-80GB", 1),
}
KEYS = ("node_energy_kwh", "gpu_energy_kwh", "job_energy_kwh", "mean_jct_s", "p95_jct_s", "mean_slowdown_pct",
        "qos_violations_pct", "makespan_s")


def run_all(seed: int, policies: list[str]) -> dict:
    from ecolaunch.devices.spec import parse_spec
    from ecolaunch.sim.engine import Simulation
    from ecolaunch.sim.metrics import summarize
    from ecolaunch.sim.policies import get_sim_policy
    from ecolaunch.sim.traces import build_trace

    out: dict = {"traces": {}, "machines": {}, "wall_s": {}}
    for name, (gpus, hosts) in TRACES.items():
        machine = parse_spec(gpus, hostname="node0")
        if hosts > 1:
            machine = machine.replicate(hosts)
        trace = build_trace(name, machine, seed=seed)
        out["machines"][name] = f"{hosts} x {gpus}"
        out["traces"][name] = {}
        for policy in policies:
            start = time.perf_counter()
            summary = summarize(Simulation(machine, _policy(policy, get_sim_policy)).run(trace))
            out["wall_s"][f"{name}/{policy}"] = round(time.perf_counter() - start, 2)
            out["traces"][name][policy] = {k: round(getattr(summary, k), 4) for k in KEYS} | {
                "jobs": summary.jobs, "shared_jobs_pct": round(summary.shared_jobs_pct, 1)}
    return out


ABLATIONS = ("zeus-5w",)


def _policy(name: str, get_sim_policy):
    if name == "zeus-5w":
        from ecolaunch.policy.zeus import ZeusPolicy

        return ZeusPolicy(cap_step_w=5.0, name="zeus-5w")
    return get_sim_policy(name)


def markdown(result: dict) -> str:
    lines = []
    for trace, rows in result["traces"].items():
        base = rows.get("exclusive")
        lines += [f"### {trace} ({result['machines'][trace]}, {next(iter(rows.values()))['jobs']} jobs)", "",
                  "| policy | node kWh | GPU kWh | job kWh | node vs excl. | GPU vs excl. | job vs excl. | mean JCT h "
                  "| p95 JCT h | mean slowdown % | QoS violations % | shared % |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for policy, r in rows.items():
            def rel(key: str) -> str:
                return f"{100 * (r[key] / base[key] - 1):+.1f} %" if base and base[key] else "n/a"

            lines.append(
                f"| {policy} | {r['node_energy_kwh']:.1f} | {r['gpu_energy_kwh']:.1f} | {r['job_energy_kwh']:.1f} | "
                f"{rel('node_energy_kwh')} | {rel('gpu_energy_kwh')} | {rel('job_energy_kwh')} | "
                f"{r['mean_jct_s'] / 3600:.2f} | {r['p95_jct_s'] / 3600:.2f} | {r['mean_slowdown_pct']:.1f} | "
                f"{r['qos_violations_pct']:.1f} | {r['shared_jobs_pct']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    traces = list(result["traces"])
    fig, axes = plt.subplots(1, len(traces), figsize=(4 * len(traces), 3.6))
    for ax, trace in zip(axes, traces):
        for policy, r in result["traces"][trace].items():
            ax.scatter(r["mean_jct_s"] / 3600, r["node_energy_kwh"], label=policy)
            ax.annotate(policy, (r["mean_jct_s"] / 3600, r["node_energy_kwh"]), fontsize=7)
        ax.set_title(trace, fontsize=9)
        ax.set_xlabel("mean JCT (h)")
        ax.set_ylabel("node energy (kWh)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", action="append", help="restrict to these policies (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from ecolaunch.sim.policies import sim_policy_names

    policies = args.policy or [*sim_policy_names(), *ABLATIONS]
    result = run_all(args.seed, policies)
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    (args.out / "energy.md").write_text(
        "# Energy of every policy on the standard traces\n\nGenerated by `python benchmarks/energy.py` "
        f"(seed {args.seed}). Savings are against `exclusive` (FIFO, default power). `zeus-5w` is an ablation, "
        "not a baseline: Zeus's cap choice on the 5 W grid the energy-aware policies choose theirs on, without their margin.\n\n" + table)
    (args.out / "energy.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    plotted = plot(result, args.out / "energy.png")
    emit({"traces": result["traces"]}, args.json,
         table + ("" if plotted else "\n(matplotlib not installed: no energy.png)"))


if __name__ == "__main__":
    main()
