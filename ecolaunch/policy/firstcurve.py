"""A first launch decided with a curve it was told: what the launcher knows of a job before its own profile exists.

What lives here: :class:`FirstLaunchCurves` (any policy, with a first launch's missing curve supplied before it
decides). Who supplies it: the ``gnn`` policy, from the GNN's prediction (:class:`ecolaunch.policy.gnn.GnnFirstCurve`)
for a job nobody on the machine has run (one a colleague ran starts from their profile as its own:
``ecolaunch.launch.pipeline``, docs/profiling.md#a-colleagues-profile-of-the-same-job); the simulator, from the
world's history (:mod:`ecolaunch.sim.first_curves`); the benchmarks' bounds (``benchmarks/_first_curves.py``). What does not: the budget that reads the curve
(:mod:`ecolaunch.caps.limits`), the profiler that measures the job's own. Why:
docs/profiling.md#how-a-launch-finds-its-job-in-the-history and docs/gnn.md.
"""

from __future__ import annotations

import dataclasses

from ecolaunch.policy.base import MEASURED_CURVE, Decision, JobRequest
from ecolaunch.state.graph import StateGraph

__all__ = ["FirstLaunchCurves", "MEASURED_CURVE"]


class FirstLaunchCurves:
    """``policy`` deciding a job that has no curve (a first launch) as if ``supply`` had told it one; the decision
    says so in ``predicted["first_curve"]`` (the supplier's ``name``) and, with ``why``, in its first reason, and
    ``predicted["learned"]`` is True when the supplier is a learned model (its ``learned`` attribute); a supplier
    with ``described_as`` names its curve so in the reasons (the request's ``curve_named``; else
    :data:`~ecolaunch.policy.base.MEASURED_CURVE`).
    ``supply(state, job)``: a profile with power, or None (the job is decided as it is). ``name``: the decision's
    policy name (None: the inner policy's)."""

    def __init__(self, policy, supply, name: str | None = None, *, why: str | None = None) -> None:
        self.policy, self.supply = policy, supply
        self.name = policy.name if name is None else name
        self.why = why

    def __repr__(self) -> str:
        return f"FirstLaunchCurves({self.policy!r}, {self.supply.name})"

    def __getattr__(self, name: str):  # the inner policy's (a power budget's ``rebalance``)
        return getattr(self.__dict__["policy"], name)

    def decide(self, state: StateGraph, job: JobRequest, rules) -> Decision | None:
        supplied = None
        if not (job.profile and job.profile.knows_power) and not job.elastic:
            supplied = self.supply(state, job)
        if supplied is None:
            decision = self.policy.decide(state, job, rules)
            return None if decision is None else dataclasses.replace(decision, policy=self.name)
        memory = job.memory_mib
        told = dataclasses.replace(job, profile=dataclasses.replace(
            supplied, memory_mib=memory if memory is not None else supplied.memory_mib),
            curve_named=getattr(self.supply, "described_as", MEASURED_CURVE))
        decision = self.policy.decide(state, told, rules)
        if decision is None:
            return None
        reasons = [self.why, *decision.reasons] if self.why else decision.reasons
        predicted = {**decision.predicted, "first_curve": self.supply.name}
        if getattr(self.supply, "learned", False):
            predicted["learned"] = True
        return dataclasses.replace(decision, policy=self.name, reasons=reasons, predicted=predicted)
