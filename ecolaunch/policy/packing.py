"""Baseline policies that share GPUs: first-fit packing, Lucid's packing rule, and EaCO.

What lives here: the three policies and :func:`shareable_gpus`, through which they respect the admin rules. What
does not: what they believe about sharing (:mod:`ecolaunch.policy.estimate`). What each does: the README's policy
table and docs/simulator.md#what-the-baselines-believe.
"""

from __future__ import annotations

from collections.abc import Callable

from ecolaunch.admin.rules import Rules
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.policy.candidates import eligible_gpus
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.policy.estimate import shared_speeds
from ecolaunch.state.graph import GpuNode, StateGraph

LUCID_SAFE_SPEED = 0.95
EACO_MAX_DEMAND = 1.0
EACO_MAX_MEMORY_FRACTION = 0.9


def shareable_gpus(state: StateGraph, job: JobRequest, rules: Rules) -> list[GpuNode]:
    """Eligible GPUs that can take one more job: co-location allowed, job count and memory (with margin) fit."""
    need = (job.memory_mib or 0) + rules.memory_margin_mib
    out = []
    for gpu in eligible_gpus(state, job, rules):
        jobs = state.jobs_on(gpu.uuid)
        if gpu.foreign_pids or (jobs and not rules.allow_colocation) or len(jobs) >= rules.max_jobs_per_gpu:
            continue
        if gpu.memory_free_mib >= (need if jobs else job.memory_mib or 0):
            out.append(gpu)
    return out


def _profiles_on(state: StateGraph, gpu: GpuNode) -> list[Profile]:
    return [j.profile or Profile() for j in state.jobs_on(gpu.uuid)]


def _decide(
    name: str,
    state: StateGraph,
    job: JobRequest,
    rules: Rules,
    accept: Callable[[StateGraph, GpuNode], bool],
    order: Callable[[GpuNode], tuple],
    why: str,
) -> Decision | None:
    host = state.hosts.get(job.host)
    if host is None:
        return None
    shared = [g for g in shareable_gpus(state, job, rules) if state.jobs_on(g.uuid) and accept(state, g)]
    chosen = sorted(shared, key=order)[: job.nproc] if len(shared) >= job.nproc else None
    if chosen is None:
        fallback = ExclusivePolicy().decide(state, job, rules)
        if fallback is None:
            return None
        return Decision(name, fallback.gpus, fallback.power_caps_w, fallback.colocated_with,
                        [f"no GPU passes the {name} sharing rule: {fallback.reasons[0]}"])
    uuids = tuple(g.uuid for g in sorted(chosen, key=lambda g: g.index))
    return Decision(
        policy=name,
        gpus=uuids,
        power_caps_w={u: None for u in uuids},
        colocated_with={u: [j.id for j in state.jobs_on(u)] for u in uuids},
        reasons=[f"shares GPU {','.join(str(g.index) for g in chosen)}: {why}"],
    )


class FirstFitPolicy:
    """Share whenever memory fits: the lowest-indexed GPUs with room, else idle GPUs."""

    name = "first-fit"

    def __repr__(self) -> str:
        return "FirstFitPolicy()"

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        return _decide(self.name, state, job, rules, lambda s, g: True, lambda g: g.index, "memory fits")


class LucidPolicy:
    """Share only when every job on the GPU keeps a predicted speed >= 0.95."""

    name = "lucid"

    def __repr__(self) -> str:
        return f"LucidPolicy(safe_speed={LUCID_SAFE_SPEED})"

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        def safe(s: StateGraph, g: GpuNode) -> bool:
            return min(shared_speeds([*_profiles_on(s, g), job.profile or Profile()])) >= LUCID_SAFE_SPEED

        return _decide(self.name, state, job, rules, safe, lambda g: g.index,
                       f"predicted speed of every job >= {LUCID_SAFE_SPEED}")


class EacoPolicy:
    """Consolidate onto the busiest GPU under the utilization and memory thresholds, within every job's bound."""

    name = "eaco"
    #: the simulator undoes a shared placement whose measured slowdown breaks the job's bound (early-epoch check)
    undo_on_violation = True

    def __repr__(self) -> str:
        return f"EacoPolicy(max_demand={EACO_MAX_DEMAND}, max_memory_fraction={EACO_MAX_MEMORY_FRACTION})"

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        def fits(s: StateGraph, g: GpuNode) -> bool:
            profiles = [*_profiles_on(s, g), job.profile or Profile()]
            load = sum(p.demand for p in profiles)
            memory = g.memory_used_mib + (job.memory_mib or 0)
            if load > EACO_MAX_DEMAND or memory > EACO_MAX_MEMORY_FRACTION * g.memory_total_mib:
                return False
            bounds = [j.request.get("allowed_slowdown_pct", rules.default_slowdown_pct) for j in s.jobs_on(g.uuid)]
            speeds = shared_speeds(profiles)
            return all(100.0 * (1.0 / x - 1.0) <= b for x, b in zip(speeds, [*bounds, job.allowed_slowdown_pct]))

        def busiest(g: GpuNode) -> tuple:
            return (-sum(p.demand for p in _profiles_on(state, g)), g.index)

        return _decide(self.name, state, job, rules, fits, busiest,
                       f"busiest GPU under {EACO_MAX_DEMAND:.0%} demand and {EACO_MAX_MEMORY_FRACTION:.0%} memory")


