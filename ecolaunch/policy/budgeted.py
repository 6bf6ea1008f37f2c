"""Every placement policy under the host's power budget (``[power] max_total_w``).

What lives here: :class:`BudgetedPolicy`, the wrapper ``get_policy`` puts around every placement policy, so that
the launcher and the simulator meet the budget alike; :func:`fit_budget` (one decision's caps, jointly with the
running jobs') and :func:`book_budget` (what the state graph records once a decision is booked). What does not:
the arithmetic, what the budget bounds and how it is allocated (:mod:`ecolaunch.caps.limits`, module docstring).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ecolaunch.caps.limits import (EPS_W, GpuDemand, Newcomer, allocate, bounds_or_none, budgeted_on_host,
                                    curve_at, host_demands, may_cap, rebalance)
from ecolaunch.admin.rules import Rules
from ecolaunch.jobmodel.capcurve import Priors, default_prior
from ecolaunch.policy.base import Decision, JobRequest, Policy
from ecolaunch.state.graph import Host, StateGraph
from ecolaunch.validate import number_or_none

__all__ = ["BudgetedPolicy", "book_budget", "fit_budget", "over_budget"]

logger = logging.getLogger(__name__)


# --- what the state graph records -------------------------------------------------------------------------------
def book_budget(state: StateGraph, decision: Decision) -> dict[str, float]:
    """``state.budget_caps_w`` after ``decision`` was booked (its job is running): the caps of GPUs still busy, the
    decision's re-caps of running jobs, and its own GPUs' budget caps. Sets it and returns it."""
    busy = {u for job in state.running_jobs() for u in job.gpus}
    caps = {u: w for u, w in state.budget_caps_w.items() if u in busy}
    caps.update(decision.recaps_w)
    budget = decision.predicted.get("budget") if isinstance(decision.predicted, dict) else None
    if isinstance(budget, dict) and isinstance(budget.get("caps_w"), dict):
        caps.update({u: float(w) for u, w in budget["caps_w"].items()
                     if number_or_none(w, positive=True) is not None})
    state.budget_caps_w = caps
    return caps


# --- the policy wrapper -----------------------------------------------------------------------------------------
class BudgetedPolicy:
    """Any placement policy under the host's power budget (:mod:`ecolaunch.caps.limits`); without a budget, the
    inner policy.

    ``decide`` returns the inner decision with its own GPUs' budget caps and ``recaps_w`` (new budget caps for GPUs
    of running jobs), or None (the job waits) when no allocation fits. ``rebalance`` is :func:`rebalance`. Other
    attributes are the inner policy's. ``priors``: each job's curve prior, by job id (the launcher's default).
    """

    def __init__(self, inner: Policy, priors: Priors = default_prior) -> None:
        self.inner = inner
        self.name = inner.name
        self.priors = priors

    def __repr__(self) -> str:
        return f"BudgetedPolicy({self.inner!r})"

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.inner, name)

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        decision = self.inner.decide(state, job, rules)
        if decision is None or rules.power_max_total_w is None:
            return decision
        return fit_budget(state, job, rules, decision, self.priors)

    def rebalance(self, state: StateGraph, rules: Rules) -> dict[str, float]:
        return rebalance(state, rules, self.priors)


def fit_budget(state: StateGraph, job: JobRequest, rules: Rules, decision: Decision,
               priors: Priors = default_prior) -> Decision | None:
    """``decision`` with caps that meet the budget jointly with the running jobs, or None when none fit (each job's
    curve read with its prior: ``priors``, by job id)."""
    budget = rules.power_max_total_w
    host = state.hosts.get(job.host)
    if budget is None or host is None or any(u not in host.gpus for u in decision.gpus):
        return decision  # admission refuses a decision naming GPUs the host lacks
    demands = _demands(state, host, job, rules, decision, priors)
    caps = allocate(demands, budget)
    if caps is None:
        logger.info("job %s waits: %s", job.id, _over_budget(host, decision, demands, budget))
        return None
    by_uuid = {d.uuid: d for d in demands}
    budgeted = budgeted_on_host(state, host, rules)
    own = {u: caps[u] for u in decision.gpus if by_uuid[u].group == job.id}
    power_caps = dict(decision.power_caps_w)
    for u, cap in own.items():
        gpu, d = host.gpus[u], by_uuid[u]
        unchanged = cap >= d.wanted_w - EPS_W and (gpu.power_limit_w is None or gpu.power_limit_w <= cap + 0.5)
        power_caps[u] = decision.power_caps_w.get(u) if unchanged else cap
    recaps = {u: caps[u] for u in sorted(budgeted) if _changed(state.budget_caps_w.get(u), caps[u])}
    # the budget caps of the job's own GPUs (those it does not share, that ecolaunch may cap), booked with it
    booked = {u: caps[u] for u in decision.gpus if u not in budgeted and may_cap(rules, host.gpus[u])
              and bounds_or_none(rules, [host.gpus[u]]) is not None}
    total = sum(caps.values())
    reasons = [_reason(host, job, demands, caps, own, recaps, budget, total)]
    predicted = {**decision.predicted, "budget": {
        "budget_w": budget, "total_w": round(total, 1),
        "wanted_w": {u: by_uuid[u].wanted_w for u in booked}, "floor_w": {u: by_uuid[u].floor_w for u in booked},
        "caps_w": booked,
        "slowdown_pct": {d.job_id: round(curve_at(d.curve, caps[d.uuid])[0], 2) for d in demands
                         if d.job_id is not None and d.curve and (d.uuid in own or d.uuid in recaps)},
    }}
    return dataclasses.replace(decision, power_caps_w=power_caps, recaps_w=recaps, predicted=predicted,
                               reasons=[*decision.reasons, *reasons])


def over_budget(state: StateGraph, job: JobRequest, rules: Rules, decision: Decision,
                priors: Priors = default_prior) -> str | None:
    """Why ``decision`` cannot meet the power budget, in words (the floors of the host's caps with the job placed
    as decided, against the budget); None when it can, or without a budget."""
    budget = rules.power_max_total_w
    host = state.hosts.get(job.host)
    if budget is None or host is None or any(u not in host.gpus for u in decision.gpus):
        return None
    demands = _demands(state, host, job, rules, decision, priors)
    return None if allocate(demands, budget) is not None else _over_budget(host, decision, demands, budget)


def _demands(state: StateGraph, host: Host, job: JobRequest, rules: Rules, decision: Decision,
             priors: Priors) -> list[GpuDemand]:
    """The host's GPUs as the budget sees them with the job placed as ``decision`` says."""
    asked = [w for w in (number_or_none(decision.power_caps_w.get(u), positive=True) for u in decision.gpus)
             if w is not None]
    newcomer = Newcomer(job.id, tuple(decision.gpus), max(asked) if asked else None, job.profile,
                        job.allowed_slowdown_pct)
    return host_demands(state, host, rules, newcomer, priors)


def _over_budget(host: Host, decision: Decision, demands: Sequence[GpuDemand], budget: float) -> str:
    floors = sum(d.floor_w for d in demands)
    return (f"with it on GPU {','.join(str(host.gpus[u].index) for u in decision.gpus)} the host's caps cannot go "
            f"below {floors:.0f} W, over the {budget:g} W power budget")


def _changed(before: Any, after: float) -> bool:
    watts = number_or_none(before, positive=True)
    return watts is None or abs(watts - after) > 0.05


def _reason(host: Host, job: JobRequest, demands: Sequence[GpuDemand], caps: Mapping[str, float],
            own: Mapping[str, float], recaps: Mapping[str, float], budget: float, total: float) -> str:
    words = [f"power budget {budget:g} W: {total:.0f} W with this job (GPUs without a job at their minimum limits)"]
    lowered = {d.job_id: d for d in demands if d.uuid in own and caps[d.uuid] < d.wanted_w - EPS_W}
    for d in lowered.values():
        slow = curve_at(d.curve, caps[d.uuid])[0]
        words.append(f"this job capped at {caps[d.uuid]:.0f} W, not {d.wanted_w:.0f} W (predicted {slow:.1f} % "
                     f"slower than uncapped, bound {job.allowed_slowdown_pct:g} %)")
    seen = set()
    for d in demands:
        if d.uuid not in recaps or d.job_id in seen or d.job_id is None or d.job_id == job.id:
            continue
        seen.add(d.job_id)
        gpus = ",".join(str(host.gpus[e.uuid].index) for e in demands if e.job_id == d.job_id and e.uuid in recaps)
        slow = f", predicted {curve_at(d.curve, caps[d.uuid])[0]:.1f} % slower" if d.curve else ""
        words.append(f"job {d.job_id} on GPU {gpus} to {caps[d.uuid]:.0f} W{slow}")
    return "; ".join(words)
