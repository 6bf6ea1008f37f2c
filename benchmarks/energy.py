"""Every policy on the standard traces, side by side: energy in three accountings, job times, QoS, ablations.

    python benchmarks/energy.py [--seed 0] [--json] [--out benchmarks/results] [--world measured|model|both]
                                [--trace NAME ...] [--policy NAME ...] [--no-folds]

**The measured world** (default; :mod:`ecolaunch.sim.measured`): the machine plays measured tables only (Gavel's V100
pair throughputs, Zeus's V100 cap curves), the policies read noisy profiles, first launches are profiled inline and
repeats come from history, ecolaunch's policies run the real closed-loop cap controller, and the GNN that scores a
job was trained without that job's type (k-fold by job type, :data:`ecolaunch.sim.measured.FOLDS` folds; weights
trained on first use into ``--cache``; ``--no-folds`` uses the shipped weights, which saw every Gavel pair, and says
so). Traces: the measured ones of :data:`ecolaunch.sim.trace_registry.TRACES`, on their own machines (4 V100 PCIe
16 GB for most; ``power-budget`` under ``[power] max_total_w``). The oracle predicts with the truth.

**The model world** (``--world model``): the five traces of earlier releases on A100s, whose truth is the same
fitted models the policies predict with (kept to compare with earlier results: circular, not evidence).

Rows: the baselines of ``ecolaunch.sim.policies``, the oracle, and the ablations: ``no-gnn`` (the gnn policy with
its learned part removed: no sharing, caps from the job's measured curve alone; that is ``--policy curve``, the
default), ``zeus-5w`` (Zeus's cap rule on the
5 W grid) and ``zeus-5w-margin`` (the same with 5 % of the bound kept back). ``learned_pct``: the share of a
policy's placements its learned part decided (``Decision.predicted["learned"]``). Writes ``energy.md``,
``energy.json`` and (with matplotlib) ``energy.png`` into ``--out``. ``--json`` prints
``{"traces": {TRACE: {POLICY: {"node_energy_kwh", "gpu_energy_kwh", "job_energy_kwh", "mean_jct_s", "p95_jct_s",
"mean_slowdown_pct", "qos_violations_pct", "makespan_s", "jobs", "shared_jobs_pct", "learned_pct",
"peak_gpu_power_w", "peak_limit_sum_w"}}}, "goals": {...}}`` (``peak_limit_sum_w``: the most the GPUs' limits added
up to at any instant, a GPU without a job at its minimum: what ``power-budget``'s budget bounds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from _common import REPO, emit

MODEL_TRACES = {
    "workstation-light": ("4xA100-SXM4-80GB", 1),
    "workstation-heavy": ("4xA100-SXM4-80GB", 1),
    "cluster-light": ("8xA100-SXM4-80GB", 4),
    "cluster-heavy": ("8xA100-SXM4-80GB", 4),
    "alibaba-share": ("8xA100-SXM4-80GB", 1),
}
KEYS = ("node_energy_kwh", "gpu_energy_kwh", "job_energy_kwh", "mean_jct_s", "p95_jct_s", "mean_slowdown_pct",
        "qos_violations_pct", "makespan_s")
ABLATIONS = ("no-gnn", "zeus-5w", "zeus-5w-margin")


def run_all(seed: int, policies: list[str], worlds: list[str], traces: list[str] | None, folds: bool,
            cache: Path) -> dict:
    from ecolaunch.sim.trace_registry import MEASURED, MODEL, TRACES, gpus_label, trace_names

    out: dict = {"traces": {}, "machines": {}, "wall_s": {}, "world": {}, "folds": None}
    todo = []
    if "measured" in worlds:
        todo += [(name, "measured", None, 1) for name in trace_names(MEASURED)]
    if "model" in worlds:
        todo += [(name, "model", *MODEL_TRACES[name]) for name in trace_names(MODEL)]
    if traces:
        todo = [t for t in todo if t[0] in traces]
    weights = None
    if folds and "measured" in worlds and "gnn" in policies:
        weights = fold_weights(seed, cache)
        out["folds"] = {str(k): {"types": list(types), "weights": str(path.relative_to(REPO)) if path.is_relative_to(REPO)
                                 else path.name} for k, (types, path) in weights.items()}
    for name, world, gpus, hosts in todo:
        entry = TRACES[name]
        machine = entry.machine(gpus, hosts)
        if entry.brings_machine:
            gpus = gpus_label(machine)
        out["machines"][name] = f"{hosts} x {gpus}"
        out["world"][name] = world
        out["traces"][name] = {}
        for policy in policies:
            start = time.perf_counter()
            row = run_one(name, world, machine, policy, seed, weights)
            out["wall_s"][f"{name}/{policy}"] = round(time.perf_counter() - start, 2)
            out["traces"][name][policy] = row
    out["goals"] = goals(out["traces"])
    return out


def run_one(name: str, world_name: str, machine, policy: str, seed: int, weights) -> dict:
    from ecolaunch.sim.metrics import summarize
    from ecolaunch.sim.trace_registry import TRACES

    entry = TRACES[name]
    trace = entry.build(machine, seed=seed)
    if world_name == "model":
        result = entry.simulation(machine, trace, policy, _policy(policy, None, None, None)).run(trace)
        extra = {}
    else:
        sim = entry.simulation(machine, trace, policy, _policy(policy, seed, trace, weights), seed=seed)
        world = sim.world
        result = sim.run(trace)
        extra = {"first_launches": world.first_launches, "repeat_launches": world.repeat_launches,
                 "oom_failures": world.oom_failures}
    summary = summarize(result)
    return {k: round(getattr(summary, k), 4) for k in KEYS} | {
        "jobs": summary.jobs, "shared_jobs_pct": round(summary.shared_jobs_pct, 1),
        "learned_pct": round(100.0 * result.learned_decisions / max(1, result.placements), 1),
        "peak_gpu_power_w": round(result.peak_gpu_power_w, 1),
        "peak_limit_sum_w": round(result.peak_limit_sum_w, 1)} | extra


def _policy(name: str, seed: int | None, trace, weights):
    """The policy ``name`` (the measured world's oracle is built by ``measured_simulation``); with ``weights`` the
    ``gnn`` policy of each job's fold."""
    from ecolaunch.sim.policies import WithMargin, get_sim_policy

    if name == "oracle" and trace is not None:
        return None
    if name in ("zeus-5w", "zeus-5w-margin"):
        from ecolaunch.policy.zeus import ZeusPolicy

        from ecolaunch.policy.budget import BudgetedPolicy

        zeus = ZeusPolicy(cap_step_w=5.0, name=name)
        return BudgetedPolicy(zeus if name == "zeus-5w" else WithMargin(zeus, name))
    if name == "gnn" and weights:
        from ecolaunch.sim.measured import MeasuredWorld
        from ecolaunch.sim.policies import FoldedPolicy

        world = MeasuredWorld(seed=seed)  # the folds are the world's (seeded) deal of the job types
        return FoldedPolicy({k: get_sim_policy("gnn", gnn_weights=path) for k, (_, path) in weights.items()},
                            {j.id: world.fold_of(j.kind) for j in trace.jobs}, name="gnn")
    return get_sim_policy(name)


def fold_weights(seed: int, cache: Path) -> dict:
    """One GNN per fold of job types, trained without them (cached in ``cache``): fold -> (types, weight file)."""
    from ecolaunch.learn.train import train
    from ecolaunch.sim.measured import FOLDS, MeasuredWorld, holdout_key

    world = MeasuredWorld(seed=seed)
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for k in range(FOLDS):
        types = world.fold_types(k)
        zeus = sorted(holdout_key(c) for c in world.fold_curves(k))
        tag = hashlib.sha256(json.dumps([types, zeus]).encode()).hexdigest()[:10]  # what it was trained without
        path = cache / f"gnn-fold{k}-seed{seed}-{tag}.pt"
        if not path.is_file():
            print(f"training the GNN without fold {k} ({len(types)} job types) into {path} ...", file=sys.stderr,
                  flush=True)
            train(seed, path, holdout_types=types, holdout_zeus=zeus)
        out[k] = (types, path)
    return out


def goals(traces: dict) -> dict:
    """The issue's goal on each measured trace: gnn >= 5 % less node energy or >= 15 % lower mean JCT than no-gnn,
    at most no-gnn's violations + 0.5 points, within 3 % of the oracle's node energy."""
    out = {}
    for name, rows in traces.items():
        g, n, o = rows.get("gnn"), rows.get("no-gnn"), rows.get("oracle")
        if not (g and n and o):
            continue
        energy = 100.0 * (1.0 - g["node_energy_kwh"] / n["node_energy_kwh"])
        jct = 100.0 * (1.0 - g["mean_jct_s"] / n["mean_jct_s"])
        out[name] = {
            "gnn_vs_no_gnn_energy_pct": round(energy, 2), "gnn_vs_no_gnn_jct_pct": round(jct, 2),
            "violations_over_no_gnn_pp": round(g["qos_violations_pct"] - n["qos_violations_pct"], 2),
            "gnn_over_oracle_energy_pct": round(100.0 * (g["node_energy_kwh"] / o["node_energy_kwh"] - 1.0), 2),
        }
        r = out[name]
        r["met"] = bool((energy >= 5.0 or jct >= 15.0) and r["violations_over_no_gnn_pp"] <= 0.5
                        and r["gnn_over_oracle_energy_pct"] <= 3.0)
    return out


def markdown(result: dict) -> str:
    lines = []
    for trace, rows in result["traces"].items():
        base = rows.get("exclusive")
        lines += [f"### {trace} ({result['world'][trace]} world, {result['machines'][trace]}, "
                  f"{next(iter(rows.values()))['jobs']} jobs)", "",
                  "| policy | node kWh | GPU kWh | job kWh | node vs excl. | GPU vs excl. | job vs excl. | mean JCT h "
                  "| p95 JCT h | mean slowdown % | QoS violations % | shared % | learned % |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for policy, r in rows.items():
            def rel(key: str) -> str:  # called within this iteration: r and base are this one's
                return f"{100 * (r[key] / base[key] - 1):+.1f} %" if base and base[key] else "n/a"  # noqa: B023

            lines.append(
                f"| {policy} | {r['node_energy_kwh']:.1f} | {r['gpu_energy_kwh']:.1f} | {r['job_energy_kwh']:.1f} | "
                f"{rel('node_energy_kwh')} | {rel('gpu_energy_kwh')} | {rel('job_energy_kwh')} | "
                f"{r['mean_jct_s'] / 3600:.2f} | {r['p95_jct_s'] / 3600:.2f} | {r['mean_slowdown_pct']:.1f} | "
                f"{r['qos_violations_pct']:.1f} | {r['shared_jobs_pct']:.0f} | {r.get('learned_pct', 0):.0f} |")
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
    parser.add_argument("--world", choices=("measured", "model", "both"), default="measured")
    parser.add_argument("--trace", action="append", help="restrict to these traces (repeatable)")
    parser.add_argument("--no-folds", dest="folds", action="store_false",
                        help="score with the shipped GNN weights (which saw every job type) instead of k-fold ones")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ecolaunch-bench",
                        help="where the k-fold GNN weights are trained to (reused when present)")
    args = parser.parse_args()

    from ecolaunch.sim.policies import sim_policy_names

    # ``curve`` (the default policy) is the ``no-gnn`` row: the gnn policy without its learned part
    policies = args.policy or [*(p for p in sim_policy_names() if p != "curve"), *ABLATIONS]
    worlds = ["measured", "model"] if args.world == "both" else [args.world]
    result = run_all(args.seed, policies, worlds, args.trace, args.folds, args.cache)
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    folds = ("the GNN scoring a job was trained without its job type (k-fold by type)" if result["folds"] else
             "the shipped GNN weights (trained on every job type: not a held-out result)")
    (args.out / "energy.md").write_text(
        "# Energy of every policy on the standard traces\n\nGenerated by `python benchmarks/energy.py` "
        f"(seed {args.seed}, world {args.world}; {folds}). Savings are against `exclusive` (FIFO, default power). "
        "`no-gnn`, `zeus-5w` and `zeus-5w-margin` are ablations, not baselines (see the script's docstring); "
        "`learned %` is the share of placements the policy's learned part decided.\n\n" + table
        + "\n## Goals (gnn against no-gnn and the oracle)\n\n```json\n" + json.dumps(result["goals"], indent=2) + "\n```\n"
        + ("\n## Folds (job types each fold's GNN was trained without)\n\n" + "".join(
            f"- fold {k}: {', '.join(f['types'])}\n" for k, f in result["folds"].items()) if result["folds"] else ""))
    (args.out / "energy.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    plotted = plot(result, args.out / "energy.png")
    emit({"traces": result["traces"], "goals": result["goals"], "folds": result["folds"]}, args.json,
         table + ("" if plotted else "\n(matplotlib not installed: no energy.png)"))


if __name__ == "__main__":
    main()
