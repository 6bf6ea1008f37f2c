"""Every policy on the standard traces over several seeds, side by side: energy in three accountings, job times,
QoS, ablations, each as a mean with its 95 % interval.

    python benchmarks/energy.py [--seeds 5] [--first-seed 0] [--json] [--out benchmarks/results]
                                [--world measured|model|both] [--trace NAME ...] [--policy NAME ...] [--no-folds]
                                [--margin-scale S] [--lift-caps-waiting N] [--share-if-sooner] [--wait-weight W]
                                [--no-reference-window] [--repeating-error PCT] [--no-colleague-profiles]
                                [--shared-history] [--exact-first-start]

**Seeds.** Every trace and policy runs on the seeds ``first_seed .. first_seed + seeds - 1``; a seed draws the
trace (its window of arrivals, its run times, its job types and users) and the world's noise, so one seed measures
the seed as much as the policy. Every policy meets the same seeds, so two policies compare paired by seed: the
per-seed difference, averaged, with the 95 % interval of that mean (Student's t on the seeds, ``n - 1`` degrees of
freedom; :func:`_common.mean_ci95`).

**The measured world** (default; :mod:`ecolaunch.sim.measured`): the machine plays measured tables only (Gavel's V100
pair throughputs, Zeus's V100 cap curves), the policies read noisy profiles, first launches are profiled inline and
repeats come from history, ecolaunch's policies run the real closed-loop cap controller, and the GNN that scores a
job was trained without that job's type (k-fold by job type, :data:`ecolaunch.sim.measured.FOLDS` folds, the world's
one deal of the types whatever the seed; trained on first use into ``--cache``, once for every seed; ``--no-folds``
uses the shipped weights, which saw every Gavel pair, and says so); every policy, the oracle's budget and the closed
loop read a job's cap curve with a prior fitted without the Zeus curves of its type's networks
(:func:`ecolaunch.sim.measured.held_out_prior`). The row ``curve`` is what the launcher does by default: the
``curve`` policy, a first launch starting from the profile another user of the machine measured of the same job where
there is one (:class:`~ecolaunch.sim.first_curves.HistoryFirstCurve`, ``Simulation(colleague_profiles=True)``;
``--no-colleague-profiles``: told it, but profiled inline, as before 2026-12-07); the bare rule, told nothing, is the
ablation ``curve-untold``. Traces: the measured ones of
:data:`ecolaunch.sim.trace_registry.TRACES`, on their own machines (4 V100 PCIe 16 GB for most; ``power-budget``
under ``[power] max_total_w``). The oracle predicts with the truth.

**The model world** (``--world model``): the five traces of earlier releases on A100s, whose truth is the same
fitted models the policies predict with (kept to compare with earlier results: circular, not evidence).

Rows: the policies of :func:`ecolaunch.sim.policies.sim_policy_names` (``curve``, the default, among them), the
oracle, the ablations ``zeus-5w`` (Zeus's cap rule on the 5 W grid) and ``zeus-5w-margin`` (the same with 5 % of
the bound kept back), and, in the measured world, rows for what a first launch can be told before it runs
(:mod:`ecolaunch.sim.first_curves`, and :mod:`_first_curves` beside this script): ``curve-untold`` (nothing), ``pessimistic-curve`` (the most pessimistic curve
of the other folds' job types: the rule to beat), ``history-pessimistic-curve`` (what the machine's history holds of
the same job from another user, as ``curve`` is told, else the pessimistic curve) and ``exact-first-curve`` (its true
curve: what a perfect predictor would add). In the measured world ``gnn`` is what the launcher does with ``--policy gnn``: a
first launch told another user's measured profile of the same job where there is one, else the GNN's predicted curve
(:class:`~ecolaunch.policy.gnn.GnnFirstCurve`, each fold's weights keeping back its own cross-fitted ``first_curve_z``,
:func:`fold_first_z`), and ``no-gnn``, its ablation, the same without the learned parts (the launcher's ``curve``: the
colleague's profile, else nothing; so it equals ``curve``); in the model world ``no-gnn`` is the
``curve`` policy under another name. Two more ablations of ``gnn``, asked for by name (``--policy``), not run by
default: ``analytic-share`` and ``util-share``, the same policy (first launches, budget, the sharing contract) with the
pairs a shared GPU would make predicted by the GNN's physics prior alone or by the utilization-sum rule
(:func:`ecolaunch.sim.policies.prior_share`). ``learned_pct``: the share of a policy's placements its learned part
decided (``Decision.predicted["learned"]``).

Writes ``energy.md`` (means ± 95 % intervals), ``energy.json`` and (with matplotlib) ``energy.png`` (means) into
``--out``. ``--json`` prints::

    {"seeds": [0, 1, ...],
     "traces": {TRACE: {POLICY: {KEY: mean over the seeds, ...,
                                 "ci95": {KEY: half-width of the 95 % interval (null for one seed)},
                                 "per_seed": {KEY: [value on each seed, in the order of "seeds"]}}}},
     "vs_exclusive": {TRACE: {POLICY: {"node_energy_pct" | "gpu_dynamic_energy_pct" | "mean_jct_pct":
                                       {"mean", "ci95", "per_seed"}}}},
     "oracle_share": {TRACE: {POLICY: {"node" | "gpu_dynamic": {"share_pct", "ci95": [low, high] | null}}}},
     "goals": {TRACE: {"gnn_vs_curve_energy_pct" | "gnn_vs_curve_jct_pct" | "violations_over_curve_pp"
                       | "gnn_over_oracle_energy_pct": {"mean", "ci95"}, "met": bool}},
     "first_launch": {TRACE: {"A vs B": {"energy_saved_pct" | "violations_pp": {"mean", "ci95", "per_seed"}}}},
     "learned_first_goal": {TRACE: {"gap_closed_pct" | "over_rule_pct" | "violations_over_curve_pp": {"mean", "ci95"},
                                    "learned_pct", "met": bool}},
     "folds": {FOLD: {"types", "weights", "sd_z", "first_curve_z"}} | null, "first_curve_z_pooled": z | null,
     "coverage": {TRACE: {POLICY: {"jobs", "covered_pct", "at_measured_cap_pct",
                                   "by_fold": {FOLD: {"jobs", "covered_pct"}},
                                   "by_run": {"1" | "2" | "3-4" | "5-9" | "10+": {"jobs", "covered_pct"}}}}},
     "contract_vs_curve": {TRACE: {POLICY: {"contract_jobs", "later_than_curve_pct"}}} (with --share-if-sooner),
     "busy_goal": {TRACE: {ROW: {FIGURE: {"mean", "ci95"}}, "met": bool}} (with --share-if-sooner: busy_goal),
     "margin_scale": S, "lift_caps_waiting": N | null, "share_if_sooner": bool, "wait_weight": W,
     "reference_window": bool, "repeating_error_pct": PCT | null, "colleague_profiles": bool,
     "shared_history": bool, "exact_first_start": bool, "link_slowdown_pct": PCT | null}

``KEY``: ``node_energy_kwh``, ``gpu_energy_kwh``, ``gpu_dynamic_energy_kwh`` (the GPUs' energy above their idle
power: what caps and placements move; node energy is about half fixed host power), ``job_energy_kwh``, ``mean_jct_s``, ``p95_jct_s``,
``mean_slowdown_pct``, ``qos_violations_pct``, ``makespan_s``, ``jobs``, ``shared_jobs_pct``, ``learned_pct``,
``contract_jobs_pct``, ``contract_violations_pct`` (jobs placed under the sharing contract, and those that finished
after its deadline: counted in ``qos_violations_pct`` instead of their run-time bound), ``peak_gpu_power_w``,
``peak_limit_sum_w`` (the most the GPUs' limits added up to at any instant, a GPU without a
job at its minimum: what ``power-budget``'s budget bounds) and, in the measured world, ``first_launches``,
``repeat_launches``, ``adopted_launches`` (first launches started from a colleague's profile),
``disowned_launches`` (of those, the runs whose own reference window contradicted it), ``oom_failures``. ``vs_exclusive``: each seed's ``100 * (policy / exclusive - 1)``. ``goals``:
each seed's saving of ``gnn`` against ``curve`` (``100 * (1 - gnn / curve)``), its violations minus ``curve``'s and
its node energy over the oracle's. ``learned_first_goal``: the first-launch issue's goal (:func:`learned_first_goal`).
``oracle_share``: each policy's share of the oracle's saving against ``exclusive``, in node and in dynamic GPU
energy (:func:`oracle_share`: the ratio of the paired means, a bootstrap 95 % interval over the seeds).
``first_launch`` (traces with ``curve``, the first-curve rows and the oracle):
each seed's node energy saved by ``curve``, each first-curve row and the oracle against ``curve-untold``, by the
history and exact against pessimistic and by exact against the history, with the violations' difference. ``coverage`` (measured world, rows
whose jobs the closed loop caps): of every job capped alone on its GPUs, over all seeds, the share whose true slowdown
at the cap it settled at stayed within its curve's prediction plus the cap margin, in all, per fold of job types and
by the job's run index (its launches of the same job on the same board; what the margin is for: its ``z`` of 2.33
aims at 99 %).

**Ablations of the whole run**: ``--no-reference-window`` and ``--repeating-error PCT`` (pooled windows of repeated
runs without their two parts, :func:`pooling_ablation`), ``--margin-scale S`` (every cap margin times S,
:func:`scale_margins`) and
``--lift-caps-waiting N`` (while at least N jobs wait, every running job runs uncapped and its caps come back when
fewer wait: ``Simulation(lift_caps_waiting=N)``; not under a power budget): what lifting caps could buy in completion
time, and what it would cost in energy. The launcher does neither. ``--wait-weight W`` is not an ablation: it runs
every trace under the admin's ``[energy] wait_weight = W`` (caps that weigh the queue, as the launcher does:
:func:`ecolaunch.jobmodel.capchoice.queue_eta`, at placement and in each running job's closed loop). ``--share-if-sooner``: every job asks
for the sharing contract (:mod:`ecolaunch.policy.contract`: start now on a shared GPU when that finishes it sooner
than waiting, every running job within its bound) and knows its length exactly, as a history of runs just like it
would tell (``Simulation(share_if_sooner=True)``): an upper bound on what the launcher's history knows. With it,
``contract_vs_curve`` counts each policy's contract jobs and the share of them that finished later than the same job
under ``curve`` on the same seed (:func:`contract_vs_curve`; ``curve`` never shares, so it runs as without).

**Fold weights** are cached under a tag of what they were trained without and a fingerprint of what training reads
(:func:`training_fingerprint`): weights trained by other code or on other data are never reused.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from _common import REPO, emit, mean_ci95

MODEL_TRACES = {
    "workstation-light": ("4xA100-SXM4-80GB", 1),
    "workstation-heavy": ("4xA100-SXM4-80GB", 1),
    "cluster-light": ("8xA100-SXM4-80GB", 4),
    "cluster-heavy": ("8xA100-SXM4-80GB", 4),
    "alibaba-share": ("8xA100-SXM4-80GB", 1),
}
KEYS = ("node_energy_kwh", "gpu_energy_kwh", "gpu_dynamic_energy_kwh", "job_energy_kwh", "mean_jct_s", "p95_jct_s",
        "mean_slowdown_pct", "qos_violations_pct", "makespan_s")
ABLATIONS = ("zeus-5w", "zeus-5w-margin")
#: the ``curve`` rule with a first launch told something else than the launcher tells it (measured world only;
#: :mod:`ecolaunch.sim.first_curves` and :mod:`_first_curves`): nothing (``curve-untold``, the bare rule), the most pessimistic curve of the
#: other folds' types (the rule to beat), its true curve (an upper bound), or the machine's history of the same job
#: from another user else the pessimistic curve. The launcher's own (the history, else nothing) is ``curve`` itself.
FIRST_CURVE_ROWS = ("curve-untold", "pessimistic-curve", "exact-first-curve", "history-pessimistic-curve")
#: the seed every fold's GNN is trained with (the folds serve every run seed)
TRAIN_SEED = 0
#: the per-seed differences against ``exclusive``: name -> the row key it compares
VS_EXCLUSIVE = {"node_energy_pct": "node_energy_kwh", "gpu_dynamic_energy_pct": "gpu_dynamic_energy_kwh",
                "mean_jct_pct": "mean_jct_s"}
#: the energies whose share of the oracle's saving is reported (:func:`oracle_share`)
SHARE_KEYS = {"node": "node_energy_kwh", "gpu_dynamic": "gpu_dynamic_energy_kwh"}
#: bootstrap resamples of the seeds for the share's interval, and the generator's seed (the figures are reproducible)
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED = 4000, 0


def run_all(seeds: list[int], policies: list[str], worlds: list[str], traces: list[str] | None, folds: bool,
            cache: Path, lift_caps_waiting: int | None = None, share_if_sooner: bool = False,
            wait_weight: float = 0.0) -> dict:
    from ecolaunch.sim.trace_registry import MEASURED, MODEL, TRACES, gpus_label, trace_names

    out: dict = {"seeds": list(seeds), "traces": {}, "vs_exclusive": {}, "machines": {}, "wall_s": {}, "world": {},
                 "folds": None, "first_curve_z_pooled": None, "coverage": {}, "contract_vs_curve": {}}
    todo = []
    if "measured" in worlds:
        todo += [(name, "measured", None, 1) for name in trace_names(MEASURED)]
    if "model" in worlds:
        todo += [(name, "model", *MODEL_TRACES[name]) for name in trace_names(MODEL)]
    if traces:
        todo = [t for t in todo if t[0] in traces]
    weights = None
    if folds and "measured" in worlds and "gnn" in policies:
        weights = fold_weights(cache)
        sd_z = fold_sd_z(weights)
        first_z, out["first_curve_z_pooled"] = fold_first_z(weights)
        weights = {k: (types, path, sd_z[k], first_z[k]) for k, (types, path) in weights.items()}
        out["folds"] = {str(k): {"types": list(types), "sd_z": round(z, 4), "first_curve_z": round(fz, 4),
                                 "weights": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name}
                        for k, (types, path, z, fz) in weights.items()}
    for name, world, gpus, hosts in todo:
        entry = TRACES[name]
        machine = entry.machine(gpus, hosts)
        if entry.brings_machine:
            gpus = gpus_label(machine)
        out["machines"][name] = f"{hosts} x {gpus}"
        out["world"][name] = world
        out["traces"][name] = {}
        ends: dict[str, list[dict]] = {}
        for policy in policies:
            if world == "model" and policy in FIRST_CURVE_ROWS:
                continue  # a first launch's curve is the measured world's
            start = time.perf_counter()
            runs = [run_one(name, world, machine, policy, seed, weights, lift_caps_waiting, share_if_sooner,
                            wait_weight) for seed in seeds]
            out["wall_s"][f"{name}/{policy}"] = round(time.perf_counter() - start, 2)
            covered = [c for run in runs for c in run.pop("_coverage", [])]
            if covered:
                out["coverage"].setdefault(name, {})[policy] = coverage(covered)
            ends[policy] = [run.pop("_ends") for run in runs]
            out["traces"][name][policy] = over_seeds(runs)
        out["vs_exclusive"][name] = vs_exclusive(out["traces"][name])
        if share_if_sooner and "curve" in ends:
            out["contract_vs_curve"][name] = contract_vs_curve(ends)
    out["goals"] = goals(out["traces"])
    out["first_launch"] = first_launch(out["traces"])
    out["oracle_share"] = oracle_share(out["traces"])
    out["learned_first_goal"] = learned_first_goal(out["traces"])
    out["busy_goal"] = busy_goal(out["traces"]) if share_if_sooner else {}
    return out


#: the share of speed the measured world's multi-GPU jobs keep on a worse-linked set (``--link-slowdown``); None: Gavel's
LINK_SPEED: float | None = None


def run_one(name: str, world_name: str, machine, policy: str, seed: int, weights,
            lift_caps_waiting: int | None = None, share_if_sooner: bool = False, wait_weight: float = 0.0) -> dict:
    from ecolaunch.sim.metrics import summarize
    from ecolaunch.sim.trace_registry import TRACES

    entry = TRACES[name]
    trace = entry.build(machine, seed=seed)
    if world_name == "model":
        sim = entry.simulation(machine, trace, policy, _policy(policy, None, None))
    else:
        sim = entry.simulation(machine, trace, policy, _policy(policy, trace, weights), seed=seed,
                               link_speed=LINK_SPEED)
    sim.lift_caps_waiting, sim.share_if_sooner = lift_caps_waiting, share_if_sooner
    sim.rules = replace(sim.rules, wait_weight=wait_weight)
    result = sim.run(trace)
    extra: dict = {}
    if world_name != "model":
        world = sim.world
        extra = {"first_launches": world.first_launches, "repeat_launches": world.repeat_launches,
                 "adopted_launches": world.adopted_launches, "disowned_launches": world.disowned_launches,
                 "oom_failures": world.oom_failures,
                 "_coverage": [(world.fold_of(kind), covered, measured, run)
                               for kind, covered, measured, run in world.coverage]}
    summary = summarize(result)
    extra["_ends"] = {j.id: (j.end_s, j.contract_deadline_s is not None) for j in result.jobs}
    return {k: round(getattr(summary, k), 4) for k in KEYS} | {
        "jobs": summary.jobs, "shared_jobs_pct": round(summary.shared_jobs_pct, 1),
        "contract_jobs_pct": round(summary.contract_jobs_pct, 2),
        "contract_violations_pct": round(summary.contract_violations_pct, 2),
        "learned_pct": round(100.0 * result.learned_decisions / max(1, result.placements), 1),
        "peak_gpu_power_w": round(result.peak_gpu_power_w, 1),
        "peak_limit_sum_w": round(result.peak_limit_sum_w, 1)} | extra


def contract_vs_curve(ends: dict[str, list[dict]]) -> dict:
    """Each policy's contract jobs (placed under the sharing contract) against the same jobs under ``curve`` on the
    same seeds: how many, and the share that finished later than under ``curve`` (pooled over the seeds), from
    ``{policy: [per seed: {job id: (end_s, under contract)}]}``."""
    out = {}
    for policy, per_seed in ends.items():
        if policy == "curve":
            continue
        pairs = [(end, ends["curve"][i].get(jid, (None, False))[0])
                 for i, seed_ends in enumerate(per_seed) for jid, (end, contract) in seed_ends.items() if contract]
        later = [a > b + 1e-6 for a, b in pairs if a is not None and b is not None]
        out[policy] = {"contract_jobs": len(pairs),
                       "later_than_curve_pct": round(100.0 * sum(later) / len(later), 2) if later else None}
    return out


#: the run indices coverage is reported by: (label, first index, last index)
RUN_BINS = (("1", 1, 1), ("2", 2, 2), ("3-4", 3, 4), ("5-9", 5, 9), ("10+", 10, 10**9))


def coverage(covered: list[tuple[int, bool, bool, int]]) -> dict:
    """The margins' coverage from ``(fold, covered, measured, run index)`` of every capped job alone on its GPUs, over
    all seeds (:meth:`~ecolaunch.sim.measured.MeasuredWorld.record_coverage`): the share whose true slowdown at the cap
    it settled at stayed within its curve's prediction plus the cap margin, in all, per fold of job types and by the
    job's run index (:data:`RUN_BINS`: its 1st launch, 2nd, 3rd-4th, 5th-9th, 10th and later), and the share whose cap
    its history had measured (``at_measured_cap_pct``: there the margin is measurement error alone)."""
    def pct(flags: list[bool]) -> float:
        return round(100.0 * sum(flags) / len(flags), 2)

    folds = sorted({f for f, _, _, _ in covered})
    by_run = {label: [c for _, c, _, r in covered if lo <= r <= hi] for label, lo, hi in RUN_BINS}
    return {"jobs": len(covered), "covered_pct": pct([c for _, c, _, _ in covered]),
            "at_measured_cap_pct": pct([m for _, _, m, _ in covered]),
            "by_fold": {str(f): {"jobs": sum(1 for g, _, _, _ in covered if g == f),
                                 "covered_pct": pct([c for g, c, _, _ in covered if g == f])} for f in folds},
            "by_run": {label: {"jobs": len(flags), "covered_pct": pct(flags)} for label, flags in by_run.items()
                       if flags}}


def _stat(values: list[float]) -> dict:
    mean, half = mean_ci95(values)
    return {"mean": round(mean, 4), "ci95": None if half is None else round(half, 4)}


def over_seeds(runs: list[dict]) -> dict:
    """One policy's row from its runs (one per seed, in seed order): each key's mean, and under ``ci95`` and
    ``per_seed`` the half-width of its 95 % interval and its values."""
    per_seed = {k: [run[k] for run in runs] for k in runs[0]}
    stats = {k: _stat(v) for k, v in per_seed.items()}
    return ({k: s["mean"] for k, s in stats.items()} | {"ci95": {k: s["ci95"] for k, s in stats.items()},
                                                        "per_seed": per_seed})


def paired(rows: dict, policy: str, base: str, key: str, diff) -> dict:
    """``diff(policy's value, base's value)`` on each seed of ``key``, with the mean and 95 % interval of it."""
    values = [round(diff(a, b), 4) for a, b in zip(rows[policy]["per_seed"][key], rows[base]["per_seed"][key])]
    return _stat(values) | {"per_seed": values}


def _pct_over(a: float, b: float) -> float:
    return 100.0 * (a / b - 1.0)


def _pct_saved(a: float, b: float) -> float:
    return 100.0 * (1.0 - a / b)


def vs_exclusive(rows: dict) -> dict:
    """Each policy against ``exclusive`` on the same seeds: the per-seed % difference of node energy and mean JCT."""
    if "exclusive" not in rows:
        return {}
    return {policy: {name: paired(rows, policy, "exclusive", key, _pct_over) for name, key in VS_EXCLUSIVE.items()}
            for policy in rows if policy != "exclusive"}


def _policy(name: str, trace, weights):
    """The policy ``name`` (the measured world's oracle is built by ``measured_simulation``); with ``weights`` the
    ``gnn`` policy of each job's fold. In the measured world (``trace`` given) every policy reads each job's curve
    with the prior held out for its type (:class:`~ecolaunch.sim.measured.HeldOutPriors`)."""
    from ecolaunch.jobmodel.capcurve import default_prior
    from ecolaunch.sim.measured import HeldOutPriors
    from ecolaunch.sim.policies import WithMargin, get_sim_policy

    if name == "oracle" and trace is not None:
        return None
    priors = default_prior if trace is None else HeldOutPriors({j.id: j.kind for j in trace.jobs})
    if name in ("zeus-5w", "zeus-5w-margin"):
        from ecolaunch.policy.zeus import ZeusPolicy

        from ecolaunch.policy.budgeted import BudgetedPolicy

        zeus = ZeusPolicy(cap_step_w=5.0, name=name, priors=priors)
        return BudgetedPolicy(zeus if name == "zeus-5w" else WithMargin(zeus, name), priors)
    if name == "curve-link" and trace is not None:  # the default row with the link rule (policy.linkwait)
        from ecolaunch.policy.budgeted import BudgetedPolicy
        from ecolaunch.policy.registry import curve_link_policy
        from ecolaunch.sim.first_curves import as_launched

        return as_launched(BudgetedPolicy(curve_link_policy(priors=priors), priors), trace, name)
    if (name in FIRST_CURVE_ROWS or name == "curve") and trace is not None:
        from _first_curves import ExactFirstCurve, PessimisticFirstCurve

        from ecolaunch.policy.budgeted import BudgetedPolicy
        from ecolaunch.policy.curve import CurvePolicy
        from ecolaunch.sim.first_curves import HistoryFirstCurve, SimFirstLaunchCurves, as_launched

        bare = BudgetedPolicy(CurvePolicy(name=name, priors=priors), priors)
        if name == "curve-untold":
            return bare  # the ablation: a first launch told nothing, even where a colleague ran the job
        if name == "curve":
            return as_launched(bare, trace)  # what the launcher does by default
        kind_of = {j.id: j.kind for j in trace.jobs}
        supply = {"pessimistic-curve": lambda: PessimisticFirstCurve(kind_of),
                  "exact-first-curve": lambda: ExactFirstCurve(kind_of),
                  "history-pessimistic-curve": lambda: HistoryFirstCurve(kind_of, PessimisticFirstCurve(kind_of)),
                  }[name]()
        return SimFirstLaunchCurves(bare, supply, name)
    if name in ("gnn", "no-gnn", "analytic-share", "util-share") and trace is not None:
        from ecolaunch.policy.budgeted import BudgetedPolicy
        from ecolaunch.policy.curve import CurvePolicy
        from ecolaunch.policy.gnn import gnn_policy
        from ecolaunch.policy.registry import gnn_with_first_curve
        from ecolaunch.sim.first_curves import HistoryFirstCurve, SimFirstLaunchCurves
        from ecolaunch.sim.policies import FoldedPolicy, prior_share

        kind_of = {j.id: j.kind for j in trace.jobs}

        def of_fold(path, z: float, fz: float):
            """The row as each fold's GNN builds it: ``gnn`` keeps back the fold's own cross-fitted sd_z (fold_sd_z)
            and first-curve z (fold_first_z); the rows whose pairs the prior or the rule chooses take the fold's
            first-launch curves and budget alike."""
            if name == "gnn":
                return gnn_with_first_curve(BudgetedPolicy(gnn_policy(weights=path, sd_z=z, priors=priors), priors),
                                            path, first_z=fz)
            return prior_share(name, path, priors=priors, first_z=fz)

        if name == "no-gnn":  # the gnn policy without its learned parts: what the launcher does with `curve`
            inner = BudgetedPolicy(CurvePolicy(name=name, priors=priors), priors)
        elif weights:
            fold_of = {t: k for k, (types, *_) in weights.items() for t in types}  # the world's deal of the types
            inner = FoldedPolicy({k: of_fold(path, z, fz) for k, (_, path, z, fz) in weights.items()},
                                 {j.id: fold_of[j.kind] for j in trace.jobs}, name=name)
        else:
            inner = get_sim_policy(name, priors=priors)
        # as the launcher: a colleague's measured profile of the same job first (history), else the policy's own
        return SimFirstLaunchCurves(inner, HistoryFirstCurve(kind_of), name)
    return get_sim_policy(name, priors=priors)


def training_sources() -> list[Path]:
    """The source files of every ecolaunch module :mod:`ecolaunch.learn.train` imports, at any depth, lazy imports
    inside functions included (read from their import statements, so nothing is imported or run). A package reached
    only as the parent of a module (its ``__init__`` runs first) counts with its module-level imports alone: its
    functions are not called by being imported (the package root's lazy ``launch()`` would drag in the launcher)."""
    import ecolaunch

    root = Path(ecolaunch.__file__).resolve().parents[1]
    found: dict[str, Path] = {}
    walked: dict[str, bool] = {}  # module -> whether its function bodies were walked too
    todo = [("ecolaunch.learn.train", True)]
    while todo:
        name, deep = todo.pop()
        if not name.startswith("ecolaunch") or walked.get(name, False) or (name in walked and not deep):
            continue
        base = root.joinpath(*name.split("."))
        path = next((p for p in (base / "__init__.py", base.with_suffix(".py")) if p.is_file()), None)
        if path is None:  # a name imported from a module, not a module
            continue
        found[name], walked[name] = path, deep
        parts = name.split(".")
        todo += [(".".join(parts[:i]), False) for i in range(1, len(parts))]  # its packages, whose __init__ runs first
        for node in _import_nodes(ast.parse(path.read_text(), str(path)), deep):
            if isinstance(node, ast.Import):
                todo += [(a.name, True) for a in node.names]
            elif node.module:
                todo += [(node.module, True), *((f"{node.module}.{a.name}", True) for a in node.names)]
    return sorted(found.values())


def _import_nodes(tree: ast.AST, deep: bool) -> list:
    """The import statements of a module: all of them, or (``deep`` False) those outside functions."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif deep or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return out


def training_fingerprint() -> str:
    """A hash of what a fold's training depends on: the source of every module it can import
    (:func:`training_sources`) and every file of the data directory the measured tables are read from, with
    :data:`TRAIN_SEED`. Any edit there retrains the folds; an edit elsewhere (the launcher, the CLI) does not."""
    import ecolaunch
    from ecolaunch.sim.models import DATA_DIR

    root = Path(ecolaunch.__file__).resolve().parents[1]
    digest = hashlib.sha256(f"train seed {TRAIN_SEED}".encode())
    for path in [*training_sources(), *sorted(p for p in DATA_DIR.rglob("*") if p.is_file())]:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def fold_weights(cache: Path) -> dict:
    """One GNN per fold of job types, trained without them (cached in ``cache``): fold -> (types, weight file)."""
    from ecolaunch.learn.train import train
    from ecolaunch.sim.measured import FOLDS, MeasuredWorld, holdout_key

    world = MeasuredWorld()  # the deal of job types into folds is the same for every seed
    fingerprint = training_fingerprint()
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for k in range(FOLDS):
        types = world.fold_types(k)
        zeus = sorted(holdout_key(c) for c in world.fold_curves(k))
        tag = hashlib.sha256(json.dumps([types, zeus]).encode()).hexdigest()[:10]  # what it was trained without
        path = cache / f"gnn-fold{k}-{tag}-{fingerprint}.pt"
        if not path.is_file():
            print(f"training the GNN without fold {k} ({len(types)} job types) into {path} ...", file=sys.stderr,
                  flush=True)
            train(TRAIN_SEED, path, holdout_types=types, holdout_zeus=zeus)
        out[k] = (types, path)
    return out


def fold_sd_z(weights: dict) -> dict[int, float]:
    """Each fold's ``sd_z`` (the standard deviations of a learned throughput its ``gnn`` keeps back), cross-fitted as
    ``benchmarks/pair_prediction.py`` does, on the world's folds: the 95th percentile of (predicted - measured) / sd
    on the Gavel pairs of the *other* folds' types, each scored by the GNN trained without them. The launcher's
    :data:`~ecolaunch.policy.energy.SD_Z` is that percentile over every fold's pairs, the scored fold's included."""
    import numpy as np
    from pair_prediction import COVERAGE, gnn_on_pairs, heldout_pairs, z_scores

    zs = {}
    for k, (types, path) in weights.items():
        pairs = heldout_pairs(tuple(types))[0]
        zs[k] = z_scores(pairs, *gnn_on_pairs(path, pairs))
    return {k: float(np.quantile(np.concatenate([z for j, z in zs.items() if j != k]), COVERAGE)) for k in zs}


def fold_first_z(weights: dict) -> tuple[dict[int, float], float]:
    """Each fold's first-curve ``z`` (the standard deviations of a first launch's predicted speed its margin keeps
    back, :class:`~ecolaunch.policy.gnn.GnnFirstCurve`), cross-fitted like :func:`fold_sd_z`: the 99th percentile
    of (predicted - measured) / sd over the measured Zeus curves of the *other* folds, each asked of the GNN trained
    without them (:meth:`~ecolaunch.sim.measured.MeasuredWorld.fold_curves`), with nothing of the job known; and
    that percentile over every fold's curves (what :data:`~ecolaunch.policy.gnn.FIRST_CURVE_Z` is set from)."""
    from _first_curves import first_curve_errors, first_curve_z

    from ecolaunch.policy.gnn import GnnFirstCurve
    from ecolaunch.sim.measured import MeasuredWorld

    world = MeasuredWorld()
    errors = {k: first_curve_errors(GnnFirstCurve(path), world.fold_curves(k)) for k, (_, path) in weights.items()}
    per_fold = {k: first_curve_z([e for j, errs in errors.items() if j != k for e in errs]) for k in errors}
    return per_fold, round(first_curve_z([e for errs in errors.values() for e in errs]), 4)


def goals(traces: dict) -> dict:
    """The issue's goal on each measured trace, paired by seed: gnn >= 5 % less node energy or >= 15 % lower mean JCT
    than curve, at most curve's violations + 0.5 points, within 3 % of the oracle's node energy. ``met``: the goal
    holds at the pessimistic end of each 95 % interval (at the means for one seed)."""
    out = {}
    for name, rows in traces.items():
        if not all(p in rows for p in ("gnn", "curve", "oracle")):
            continue
        r = {"gnn_vs_curve_energy_pct": paired(rows, "gnn", "curve", "node_energy_kwh", _pct_saved),
             "gnn_vs_curve_jct_pct": paired(rows, "gnn", "curve", "mean_jct_s", _pct_saved),
             "violations_over_curve_pp": paired(rows, "gnn", "curve", "qos_violations_pct", lambda a, b: a - b),
             "gnn_over_oracle_energy_pct": paired(rows, "gnn", "oracle", "node_energy_kwh", _pct_over)}
        for v in r.values():
            del v["per_seed"]
        out[name] = r | {"met": bool((_end(r["gnn_vs_curve_energy_pct"], -1) >= 5.0
                                      or _end(r["gnn_vs_curve_jct_pct"], -1) >= 15.0)
                                     and _end(r["violations_over_curve_pp"], 1) <= 0.5
                                     and _end(r["gnn_over_oracle_energy_pct"], 1) <= 3.0)}
    return out


#: the rows beside ``gnn`` whose pairs a rule chooses (the issue "a busy machine"): the same policy and contract
SHARE_ROWS = ("analytic-share", "util-share")


def busy_goal(traces: dict) -> dict:
    """The issue "a busy machine"'s goal on each trace with ``gnn`` and ``curve``, paired by seed: gnn's mean JCT at
    least 15 % lower than curve's, its node energy within +1 % of curve's, its violations (contract ones included) at
    most curve's + 0.5 points, a lower mean JCT than each of :data:`SHARE_ROWS` that ran, and ``learned_pct`` > 0;
    the same figures against ``curve`` for each of those rows. ``met``: at the pessimistic end of each interval."""
    out = {}
    for name, rows in traces.items():
        if not all(p in rows for p in ("gnn", "curve")):
            continue
        rules = [r for r in SHARE_ROWS if r in rows]
        r = {row: {"jct_lower_than_curve_pct": paired(rows, row, "curve", "mean_jct_s", _pct_saved),
                   "energy_over_curve_pct": paired(rows, row, "curve", "node_energy_kwh", _pct_over),
                   "violations_over_curve_pp": paired(rows, row, "curve", "qos_violations_pct", lambda a, b: a - b)}
             for row in ("gnn", *rules)}
        for rule in rules:
            r["gnn"][f"jct_lower_than_{rule}_pct"] = paired(rows, "gnn", rule, "mean_jct_s", _pct_saved)
        for figures in r.values():
            for v in figures.values():
                del v["per_seed"]
        g = r["gnn"]
        out[name] = r | {"met": bool(_end(g["jct_lower_than_curve_pct"], -1) >= 15.0
                                     and _end(g["energy_over_curve_pct"], 1) <= 1.0
                                     and _end(g["violations_over_curve_pp"], 1) <= 0.5
                                     and all(_end(g[f"jct_lower_than_{rule}_pct"], -1) > 0.0 for rule in rules)
                                     and rows["gnn"]["learned_pct"] > 0.0)}
    return out


def first_launch(traces: dict) -> dict:
    """What telling a first launch its curve is worth, on each trace that has the rows, paired by seed: the node energy
    ``pessimistic-curve``, ``curve`` (the launcher's: a colleague's profile, else nothing), ``exact-first-curve`` and
    the oracle save against ``curve-untold`` (told nothing), and against each other (what the machine's history adds
    over the rule, what a perfect predictor adds over the history), with each one's violations minus the other's."""
    pairs = (("pessimistic-curve", "curve-untold"), ("curve", "curve-untold"),
             ("history-pessimistic-curve", "curve-untold"), ("exact-first-curve", "curve-untold"),
             ("oracle", "curve-untold"), ("curve", "pessimistic-curve"),
             ("history-pessimistic-curve", "pessimistic-curve"), ("exact-first-curve", "pessimistic-curve"),
             ("exact-first-curve", "curve"))
    out = {}
    for name, rows in traces.items():
        if not all(p in rows for p in ("curve", *FIRST_CURVE_ROWS, "oracle")):
            continue
        out[name] = {}
        for a, b in pairs + tuple((a, b) for a, b in GNN_PAIRS if a in rows and b in rows):
            saved = paired(rows, a, b, "node_energy_kwh", _pct_saved)
            viol = paired(rows, a, b, "qos_violations_pct", lambda x, y: x - y)
            out[name][f"{a} vs {b}"] = {"energy_saved_pct": saved, "violations_pp": viol}
    return out


def oracle_share(traces: dict) -> dict:
    """Each policy's share of the oracle's saving against ``exclusive``, per trace and energy (:data:`SHARE_KEYS`):
    the ratio of the paired mean differences over the seeds, ``100 * mean(exclusive - policy) / mean(exclusive -
    oracle)``, with a percentile bootstrap 95 % interval over the seeds (:data:`BOOTSTRAP_RESAMPLES` resamples of
    the seeds with replacement, the same resamples for every policy; a resample where the oracle saves nothing is
    left out). None where the oracle saves nothing on average: there is no saving to share."""
    import random

    out: dict = {}
    for name, rows in traces.items():
        if "exclusive" not in rows or "oracle" not in rows:
            continue
        n = len(rows["exclusive"]["per_seed"]["node_energy_kwh"])
        rng = random.Random(BOOTSTRAP_SEED)
        draws = [[rng.randrange(n) for _ in range(n)] for _ in range(BOOTSTRAP_RESAMPLES)] if n > 1 else []
        out[name] = {}
        for policy in rows:
            if policy in ("exclusive", "oracle"):
                continue
            out[name][policy] = {}
            for label, key in SHARE_KEYS.items():
                excl, oracle, mine = (rows[p]["per_seed"][key] for p in ("exclusive", "oracle", policy))
                gap = [e - o for e, o in zip(excl, oracle)]
                saved = [e - m for e, m in zip(excl, mine)]
                point = _share(saved, gap, range(n))
                boot = sorted(v for d in draws if (v := _share(saved, gap, d)) is not None)
                ci = ([round(boot[int(0.025 * (len(boot) - 1))], 2), round(boot[int(0.975 * (len(boot) - 1))], 2)]
                      if point is not None and len(boot) >= 100 else None)
                out[name][policy][label] = {"share_pct": None if point is None else round(point, 2), "ci95": ci}
    return out


def _share(saved: list[float], gap: list[float], idx) -> float | None:
    """``100 * sum(saved) / sum(gap)`` over the seeds ``idx`` (with repeats); None where the oracle saves nothing."""
    whole = sum(gap[i] for i in idx)
    return None if whole <= 0 else 100.0 * sum(saved[i] for i in idx) / whole


def oracle_share_table(result: dict) -> str:
    """The ``oracle_share`` figures as one markdown table."""
    lines = ["| trace | policy | share of the oracle's node-energy saving % | of its dynamic GPU-energy saving % |",
             "|---|---|---|---|"]
    for name, rows in result["oracle_share"].items():
        for policy, r in rows.items():
            cells = []
            for label in SHARE_KEYS:
                v = r[label]
                cells.append("n/a" if v["share_pct"] is None else f"{v['share_pct']:.1f}" + (
                    f" [{v['ci95'][0]:.1f}, {v['ci95'][1]:.1f}]" if v["ci95"] else ""))
            lines.append(f"| {name} | {policy} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def _end(stat: dict, side: int) -> float:
    """The upper (``side`` 1) or lower (-1) end of a figure's 95 % interval (its mean for one seed)."""
    return stat["mean"] + side * (stat["ci95"] or 0.0)


def _pm(value: float, half: float | None, fmt: str, scale: float = 1.0) -> str:
    """``value ± half`` (both divided by ``scale``), or the value alone for one seed."""
    text = format(value / scale, fmt)
    return text if half is None else f"{text} ± {format(half / scale, fmt.lstrip('+'))}"


def markdown(result: dict) -> str:
    lines = []
    for trace, rows in result["traces"].items():
        paired_rows = result["vs_exclusive"].get(trace, {})
        lines += [f"### {trace} ({result['world'][trace]} world, {result['machines'][trace]}, "
                  f"{next(iter(rows.values()))['jobs']:.0f} jobs)", "",
                  "| policy | node kWh | node vs excl. % | dynamic GPU kWh | dyn. vs excl. % | mean JCT h "
                  "| JCT vs excl. % | p95 JCT h | QoS violations % | GPU kWh | job kWh | mean slowdown % | shared % "
                  "| learned % |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for policy, r in rows.items():
            ci = r["ci95"]
            vs = paired_rows.get(policy)
            keys = ("node_energy_pct", "gpu_dynamic_energy_pct", "mean_jct_pct")
            energy, dynamic, jct = (("0", "0", "0") if policy == "exclusive" else ("n/a",) * 3 if vs is None else
                                    (_pm(vs[k]["mean"], vs[k]["ci95"], "+.1f") for k in keys))
            lines.append(
                f"| {policy} | {_pm(r['node_energy_kwh'], ci['node_energy_kwh'], '.1f')} | {energy} "
                f"| {_pm(r['gpu_dynamic_energy_kwh'], ci['gpu_dynamic_energy_kwh'], '.1f')} | {dynamic} "
                f"| {_pm(r['mean_jct_s'], ci['mean_jct_s'], '.2f', 3600)} | {jct} "
                f"| {_pm(r['p95_jct_s'], ci['p95_jct_s'], '.2f', 3600)} "
                f"| {_pm(r['qos_violations_pct'], ci['qos_violations_pct'], '.1f')} "
                f"| {_pm(r['gpu_energy_kwh'], ci['gpu_energy_kwh'], '.1f')} "
                f"| {_pm(r['job_energy_kwh'], ci['job_energy_kwh'], '.1f')} "
                f"| {_pm(r['mean_slowdown_pct'], ci['mean_slowdown_pct'], '.1f')} "
                f"| {r['shared_jobs_pct']:.0f} | {r['learned_pct']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def first_launch_table(result: dict) -> str:
    """The ``first_launch`` figures as one markdown table."""
    lines = ["| trace | comparison | node energy saved % | violations, pp |", "|---|---|---|---|"]
    for name, rows in result["first_launch"].items():
        for comparison, r in rows.items():
            e, v = r["energy_saved_pct"], r["violations_pp"]
            lines.append(f"| {name} | {comparison} | {_pm(e['mean'], e['ci95'], '+.2f')} | "
                         f"{_pm(v['mean'], v['ci95'], '+.2f')} |")
    return "\n".join(lines) + "\n"


def coverage_table(result: dict) -> str:
    """The ``coverage`` figures as markdown tables: per trace and policy, all folds and each fold; then by run index."""
    folds = sorted({f for rows in result["coverage"].values() for r in rows.values() for f in r["by_fold"]})
    lines = ["| trace | policy | jobs | at a measured cap % | covered % | " + " | ".join(f"fold {f} %" for f in folds)
             + " |", "|---|---|---|---|---|" + "---|" * len(folds)]
    runs = ["| trace | policy | " + " | ".join(f"run {label} %" for label, _, _ in RUN_BINS) + " |",
            "|---|---|" + "---|" * len(RUN_BINS)]
    for name, rows in result["coverage"].items():
        for policy, r in rows.items():
            cells = [f"{r['by_fold'][f]['covered_pct']:.1f} ({r['by_fold'][f]['jobs']})" if f in r["by_fold"] else "-"
                     for f in folds]
            lines.append(f"| {name} | {policy} | {r['jobs']} | {r['at_measured_cap_pct']:.1f} | {r['covered_pct']:.1f} | "
                         + " | ".join(cells) + " |")
            by_run = r.get("by_run", {})
            runs.append(f"| {name} | {policy} | " + " | ".join(
                f"{by_run[label]['covered_pct']:.1f} ({by_run[label]['jobs']})" if label in by_run else "-"
                for label, _, _ in RUN_BINS) + " |")
    return ("\n".join(lines) + "\n\nBy the job's run index (1: its first launch on that board; jobs in brackets):\n\n"
            + "\n".join(runs) + "\n")


def plot(result: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    traces = list(result["traces"])
    fig, axes = plt.subplots(1, len(traces), figsize=(4 * len(traces), 3.6), squeeze=False)
    for ax, trace in zip(axes[0], traces):
        for policy, r in result["traces"][trace].items():
            ax.scatter(r["mean_jct_s"] / 3600, r["node_energy_kwh"], label=policy)
            ax.annotate(policy, (r["mean_jct_s"] / 3600, r["node_energy_kwh"]), fontsize=7)
        ax.set_title(trace, fontsize=9)
        ax.set_xlabel("mean JCT (h, mean of the seeds)")
        ax.set_ylabel("node energy (kWh)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


#: the gnn row against its ablation, the rule and the bounds (:func:`first_launch`)
GNN_PAIRS = (("gnn", "curve"), ("gnn", "no-gnn"), ("gnn", "curve-untold"), ("gnn", "pessimistic-curve"),
             ("gnn", "history-pessimistic-curve"))


def learned_first_goal(traces: dict) -> dict:
    """The first-launch issue's goal on each trace with ``gnn``, ``curve``, ``pessimistic-curve`` and the oracle, paired
    by seed: the share of the node-energy gap between ``curve`` and the oracle that ``gnn`` closes (each seed's
    ``(curve - gnn) / (curve - oracle)``, %), its saving over the rule, its violations minus ``curve``'s and its
    ``learned_pct``. ``met``: >= 75 % closed and >= 2 points over the rule at the pessimistic end of each interval,
    violations at most ``curve``'s (the upper end), learned > 0."""
    out = {}
    for name, rows in traces.items():
        if not all(p in rows for p in ("gnn", "curve", "pessimistic-curve", "oracle")):
            continue
        gnn, curve, oracle = (rows[p]["per_seed"]["node_energy_kwh"] for p in ("gnn", "curve", "oracle"))
        closed = [100.0 * (c - g) / (c - o) if c != o else 0.0 for g, c, o in zip(gnn, curve, oracle)]
        r = {"gap_closed_pct": _stat(closed),
             "over_rule_pct": paired(rows, "gnn", "pessimistic-curve", "node_energy_kwh", _pct_saved),
             "violations_over_curve_pp": paired(rows, "gnn", "curve", "qos_violations_pct", lambda a, b: a - b),
             "learned_pct": rows["gnn"]["learned_pct"]}
        for v in r.values():
            if isinstance(v, dict):
                v.pop("per_seed", None)
        out[name] = r | {"met": bool(_end(r["gap_closed_pct"], -1) >= 75.0 and _end(r["over_rule_pct"], -1) >= 2.0
                                     and _end(r["violations_over_curve_pp"], 1) <= 0.0 and r["learned_pct"] > 0)}
    return out


def scale_margins(scale: float) -> None:
    """The margin ablation (``--margin-scale``): :func:`~ecolaunch.jobmodel.capchoice.cap_margin_pct` times ``scale``
    wherever a cap is chosen on a curve or a budget floor is read from one (the cap choice of every policy, the
    profiler's and the closed loop's choice, :mod:`ecolaunch.caps.limits`'s floors). The closed loop's own guard
    on what it measures at its cap (:mod:`ecolaunch.caps.control`) is not scaled. For this process only."""
    import ecolaunch.caps.limits as budget
    import ecolaunch.jobmodel.capchoice as capchoice

    shipped = capchoice.cap_margin_pct

    def scaled(model, cap_w: float, z: float = capchoice.MARGIN_Z) -> float:
        return scale * shipped(model, cap_w, z)

    capchoice.cap_margin_pct = budget.cap_margin_pct = scaled


def pooling_ablation(no_reference_window: bool, repeating_error_pct: float | None) -> None:
    """The ablations of pooled windows (``--no-reference-window``, ``--repeating-error``): closed loops that never
    measure the reference inside a run, and margins that take another part of a profiling window's error as
    repeating (:func:`~ecolaunch.jobmodel.capchoice.window_error_pct`). For this process only."""
    import ecolaunch.jobmodel.capchoice as capchoice

    if no_reference_window:
        capchoice.REFERENCE_RUN_ITERS = 0
    if repeating_error_pct is not None:
        capchoice.REPEATING_WINDOW_ERROR_PCT = float(repeating_error_pct)


#: the measured world's methods that read or write a user's history (their first argument the user):
#: what ``--shared-history`` replaces (``--exact-first-start``: two of them)
USER_KEYED = ("request_profile", "is_first", "note_repeat", "profile_inline", "settle_cap", "loop_cap",
              "record_coverage", "machine_history_profile", "adopt_colleague")


def shared_history() -> None:
    """The headroom of pooling across users (``--shared-history``, not what the launcher does): the measured world
    keeps one history per job type and board, whoever runs it, so every launch of a type after its first is a repeat
    and every run's windows pool with everyone's. For this process only."""
    import functools

    from ecolaunch.sim.measured import MeasuredWorld

    def anyone(method):
        @functools.wraps(method)
        def as_anyone(self, user, *args, **kwargs):
            return method(self, "*", *args, **kwargs)
        return as_anyone

    for name in USER_KEYED:
        setattr(MeasuredWorld, name, anyone(getattr(MeasuredWorld, name)))


def exact_first_start() -> None:
    """The headroom of any first-launch prior (``--exact-first-start``, not what the launcher does): in the measured
    world every first launch of a job type by a user (a colleague's run of it or not) starts from its true curve on
    its board, measured without error at every 25 W as if by many runs (its margins at their floor), and nothing is
    profiled; every row's (under a power budget ``exclusive``'s floors read it too). What a prior from a job's
    neighbours could add beyond a colleague's profile is at most what this adds to it. For this process only."""
    from ecolaunch.sim.measured import MeasuredWorld, _Known

    many = 10_000  # iterations, windows: a point measured as well as any history could
    asked, first = MeasuredWorld.request_profile, MeasuredWorld.is_first

    def known(self, user, kind, board):
        key = (user, kind, board or self.board)
        if key not in self._history:
            points = sorted((replace(p, iterations=many, iter_time_cv_pct=3.0, windows=many, run_iterations=many)
                             for p in self.true_profile(kind, board).cap_points), key=lambda p: p.power_cap_w)
            self._history[key] = _Known(points, min(100.0, 100.0 * self._demand(kind)), points[-1].power_w,
                                        points[-1].iter_time_s, runs=0, updated=self._stamp())

    def request_profile(self, user, kind, board=None):  # placement: on a host of one model
        known(self, user, kind, board)
        return asked(self, user, kind, board)

    def is_first(self, user, kind, board=None):  # the start: the model is known on a host of several too
        known(self, user, kind, board)
        return first(self, user, kind, board)

    MeasuredWorld.request_profile, MeasuredWorld.is_first = request_profile, is_first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="how many seeds every trace and policy runs on")
    parser.add_argument("--first-seed", type=int, default=0, help="the first of them (then first-seed + 1, ...)")
    parser.add_argument("--policy", action="append", help="restrict to these policies (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--world", choices=("measured", "model", "both"), default="measured")
    parser.add_argument("--trace", action="append", help="restrict to these traces (repeatable)")
    parser.add_argument("--no-folds", dest="folds", action="store_false",
                        help="score with the shipped GNN weights (which saw every job type) instead of k-fold ones")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ecolaunch-bench",
                        help="where the k-fold GNN weights are trained to (reused when present)")
    parser.add_argument("--margin-scale", type=float, default=1.0, metavar="S",
                        help="ablation: every cap margin (the cap choice's and the budget's floor, "
                             "capchoice.cap_margin_pct) times S; 0 removes them (default 1: as shipped)")
    parser.add_argument("--no-reference-window", action="store_true",
                        help="ablation: closed loops never measure the uncapped reference inside a run "
                             "(capchoice.REFERENCE_RUN_ITERS = 0); as shipped they do until runs measured 120 "
                             "iterations of it")
    parser.add_argument("--repeating-error", type=float, default=None, metavar="PCT",
                        help="ablation: the part of a profiling window's error the launcher's margins take as "
                             "repeating from run to run (capchoice.REPEATING_WINDOW_ERROR_PCT, shipped 2.2; 0: none)")
    parser.add_argument("--no-colleague-profiles", action="store_true",
                        help="ablation: a first launch is profiled inline even where a colleague ran the same job "
                             "(measured_traces.COLLEAGUE_PROFILES = False); as shipped it starts from the colleague's "
                             "profile")
    parser.add_argument("--shared-history", action="store_true",
                        help="headroom, not what the launcher does: one history per job type and board in the "
                             "measured world, whoever runs it (every run pools with every user's)")
    parser.add_argument("--exact-first-start", action="store_true",
                        help="headroom, not what the launcher does: every first launch starts from its true curve, "
                             "measured without error (what any first-launch prior could add at most)")
    parser.add_argument("--lift-caps-waiting", type=int, default=None, metavar="N",
                        help="ablation: while at least N jobs wait, every running job runs uncapped (its caps come "
                             "back when fewer wait); not under a power budget. The launcher does not do this")
    parser.add_argument("--wait-weight", type=float, default=0.0, metavar="W",
                        help="caps that weigh the queue: every trace runs under [energy] wait_weight = W "
                             "(capchoice.queue_eta; default 0: the queue is not counted, as shipped)")
    parser.add_argument("--link-slowdown", type=float, default=None, metavar="PCT",
                        help="the measured world's multi-GPU jobs run PCT %% slower on a worse-linked set, every type "
                             "alike (a lab's `ecolaunch calibrate --links` figure); default: Gavel's across-server "
                             "slowdown of each type")
    parser.add_argument("--share-if-sooner", action="store_true",
                        help="every job asks for the sharing contract and knows its length exactly "
                             "(Simulation(share_if_sooner=True)): an upper bound on what a history tells")
    args = parser.parse_args()
    if args.link_slowdown is not None:
        if not args.link_slowdown >= 0:
            parser.error(f"--link-slowdown must be a percentage >= 0, got {args.link_slowdown}")
        from ecolaunch.sim.measured import link_speed_of

        global LINK_SPEED
        LINK_SPEED = link_speed_of(args.link_slowdown)
    if args.lift_caps_waiting is not None and args.lift_caps_waiting < 1:
        parser.error(f"--lift-caps-waiting must be a whole number >= 1, got {args.lift_caps_waiting}")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if not 0 <= args.wait_weight <= 100:
        parser.error(f"--wait-weight must be a number from 0 to 100, got {args.wait_weight}")
    if not args.margin_scale >= 0:
        parser.error(f"--margin-scale must be a number >= 0, got {args.margin_scale}")
    if args.margin_scale != 1.0:
        scale_margins(args.margin_scale)
    if args.repeating_error is not None and not args.repeating_error >= 0:
        parser.error(f"--repeating-error must be a number >= 0, got {args.repeating_error}")
    pooling_ablation(args.no_reference_window, args.repeating_error)
    if args.no_colleague_profiles:
        import ecolaunch.sim.measured_traces as measured_traces

        measured_traces.COLLEAGUE_PROFILES = False
    if args.shared_history:
        shared_history()
    if args.exact_first_start:
        exact_first_start()

    from ecolaunch.sim.policies import sim_policy_names

    policies = args.policy or [*sim_policy_names(), "no-gnn", *ABLATIONS, *FIRST_CURVE_ROWS]
    worlds = ["measured", "model"] if args.world == "both" else [args.world]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    result = run_all(seeds, policies, worlds, args.trace, args.folds, args.cache, args.lift_caps_waiting,
                     args.share_if_sooner, args.wait_weight)
    result["margin_scale"], result["lift_caps_waiting"] = args.margin_scale, args.lift_caps_waiting
    result["reference_window"], result["repeating_error_pct"] = (not args.no_reference_window,
                                                                 args.repeating_error)
    result["share_if_sooner"], result["wait_weight"] = args.share_if_sooner, args.wait_weight
    result["colleague_profiles"], result["shared_history"] = not args.no_colleague_profiles, args.shared_history
    result["exact_first_start"] = args.exact_first_start
    result["link_slowdown_pct"] = args.link_slowdown
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    folds = ("the GNN scoring a job was trained without its job type (k-fold by type)" if result["folds"] else
             "the shipped GNN weights (trained on every job type: not a held-out result)")
    (args.out / "energy.md").write_text(
        "# Energy of every policy on the standard traces\n\nGenerated by `python benchmarks/energy.py` "
        f"(seeds {', '.join(map(str, seeds))}; world {args.world}; {folds}). Every figure is the mean over the seeds "
        "± the half-width of its 95 % interval (Student's t on the seeds); `vs excl.` is the mean of each seed's "
        "difference against `exclusive` (FIFO, default power) on the same seed. `zeus-5w` and `zeus-5w-margin` are "
        "ablations, not baselines (see the script's docstring); `curve` is what the launcher does by default (in the "
        "measured world a first launch told a colleague's measured profile of the job where there is one); "
        "`curve-untold` is the bare rule, told nothing; `no-gnn` is `gnn` without its learned parts (in the measured "
        "world the same as `curve`); `dynamic GPU kWh` is what the GPUs drew above their idle power; "
        "`learned %` is the share of placements the policy's learned part decided."
        + (f" Ablation: every cap margin times {args.margin_scale:g} (`--margin-scale`)."
           if args.margin_scale != 1.0 else "")
        + (f" Ablation: every running job uncapped while at least {args.lift_caps_waiting} wait "
           "(`--lift-caps-waiting`)." if args.lift_caps_waiting else "")
        + (" Every job asks for the sharing contract and knows its length exactly (`--share-if-sooner`)."
           if args.share_if_sooner else "")
        + (f" Caps weigh the queue: `[energy] wait_weight = {args.wait_weight:g}` (`--wait-weight`)."
           if args.wait_weight else "")
        + (f" A worse-linked set slows every multi-GPU job by {args.link_slowdown:g} % (`--link-slowdown`), not "
           "Gavel's across-server figure of its type." if args.link_slowdown is not None else "") + "\n\n" + table
        + "\n## Goals (gnn against curve and the oracle, paired by seed)\n\n```json\n"
        + json.dumps(result["goals"], indent=2) + "\n```\n"
        + ("\n## Share of the oracle's saving against `exclusive` (ratio of paired means, bootstrap 95 % interval "
           "over the seeds)\n\n" + oracle_share_table(result) if result["oracle_share"] else "")
        + ("\n## First launches told a curve (paired by seed)\n\n" + first_launch_table(result)
           if result["first_launch"] else "")
        + ("\n## The GNN's first-launch curves: the goal (paired by seed)\n\n```json\n"
           + json.dumps(result["learned_first_goal"], indent=2) + "\n```\n" if result["learned_first_goal"] else "")
        + ("\n## A busy machine: the goal (paired by seed against `curve`)\n\n```json\n"
           + json.dumps(result["busy_goal"], indent=2) + "\n```\n" if result["busy_goal"] else "")
        + ("\n## Margin coverage (capped jobs alone on their GPUs, all seeds)\n\n" + coverage_table(result)
           if result["coverage"] else "")
        + ("\n## Folds (job types each fold's GNN was trained without)\n\n" + "".join(
            f"- fold {k}: {', '.join(f['types'])}\n" for k, f in result["folds"].items()) if result["folds"] else ""))
    (args.out / "energy.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    plotted = plot(result, args.out / "energy.png")
    emit({k: result.get(k) for k in ("seeds", "traces", "vs_exclusive", "oracle_share", "goals", "first_launch",
                                     "learned_first_goal",
                                     "busy_goal",
                                     "coverage", "folds", "first_curve_z_pooled", "margin_scale",
                                     "lift_caps_waiting", "share_if_sooner", "wait_weight", "contract_vs_curve")},
         args.json,
         table + ("" if plotted else "\n(matplotlib not installed: no energy.png)"))


if __name__ == "__main__":
    main()
