"""What a first launch's cap curve could be told before it runs, in the measured world: the bounds a predictor is
judged between.

What lives here: :class:`FirstLaunchCurves` (any policy, with a first launch's missing curve supplied before it
decides) and the two suppliers the energy benchmark compares a predictor with: :class:`PessimisticFirstCurve` (the
rule a skeptic tries first: the most pessimistic curve of the job types of the *other* folds, on the job's board)
and :class:`ExactFirstCurve` (the job's true curve: what a perfect first-launch predictor would say, an upper
bound). What does not: the world's truth (:mod:`ecolaunch.sim.measured`), the budget that reads the curve
(:mod:`ecolaunch.admin.budget`).

**Why.** A job with no curve cannot be capped: under a power budget it waits for watts the running jobs' margins
keep (the budget never lowers a job it knows nothing of, :func:`ecolaunch.admin.budget.no_curve_floor_w`). A
supplied curve lets the budget admit it at once at a cap the curve allows within its bound; the job is still
profiled inline when it starts, and its profiler and closed loop take over from the measurement. The supplied curve
is the decision's alone: the job's record keeps what was measured.

**The pessimistic curve.** On the job's board, for every cap of the 25 W grid, the highest time ratio (capped /
uncapped) and the highest power any job type outside the job's fold shows there (a type's own curve never informs
its own launch), with the median uncapped iteration time of those types standing in for the job's (only ratios
and the budget's tie-breaks read it). Pointwise maxima: no single type is that slow and that hungry at once, which
is what makes it a safe rule rather than a prediction.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping

from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.profile.powercap import cap_grid
from ecolaunch.sim.measured import MeasuredWorld
from ecolaunch.state.graph import StateGraph

__all__ = ["ExactFirstCurve", "FirstLaunchCurves", "PessimisticFirstCurve"]

#: the grid a supplied curve is given on (the oracle's and the truth profile's)
CURVE_STEP_W = 25.0


def _board(world: MeasuredWorld, state: StateGraph, job: JobRequest) -> str | None:
    """The measured board the job's host runs, or None when it mixes models (no curve before the model is known,
    as for a real launch)."""
    names = {g.name for g in state.hosts[job.host].gpus.values()}
    return world.board_of(names.pop()) if len(names) == 1 else None


class ExactFirstCurve:
    """The job's true curve on its board (an upper bound on any first-launch predictor)."""

    name = "exact"

    def __init__(self, kind_of: Mapping[str, str]) -> None:
        self.kind_of, self.world = dict(kind_of), MeasuredWorld()

    def __call__(self, state: StateGraph, job: JobRequest) -> Profile | None:
        board = _board(self.world, state, job)
        return None if board is None else self.world.true_profile(self.kind_of[job.id], board)


class PessimisticFirstCurve:
    """The most pessimistic curve of the other folds' job types on the job's board (module docstring)."""

    name = "pessimistic"

    def __init__(self, kind_of: Mapping[str, str]) -> None:
        self.kind_of, self.world = dict(kind_of), MeasuredWorld()
        self._cache: dict[tuple[int, str], Profile] = {}

    def __call__(self, state: StateGraph, job: JobRequest) -> Profile | None:
        board = _board(self.world, state, job)
        if board is None:
            return None
        fold = self.world.fold_of(self.kind_of[job.id])
        key = (fold, board)
        if key not in self._cache:
            self._cache[key] = self._curve(fold, board)
        return self._cache[key]

    def _curve(self, fold: int, board: str) -> Profile:
        model = self.world.board_model(board)
        kinds = [self.world.job_kind(k, board) for k in self.world.kinds if self.world.fold_of(k) != fold]
        t0 = statistics.median(k.iter_time_s for k in kinds)
        points = tuple(CapPoint(c, t0 * max(k.time_ratio(c) for k in kinds),
                                max(k.curve.power_w(min(c, k.curve.max_cap_w)) for k in kinds))
                       for c in cap_grid(model.power_limit_min_w, model.power_limit_max_w, CURVE_STEP_W))
        return Profile(t0, None, None, None, points[-1].power_w, points)


class FirstLaunchCurves:
    """``policy`` deciding a job that has no curve (a first launch) as if ``supply`` had told it one; the decision
    says so in ``predicted["first_curve"]`` (the supplier's name). ``supply(state, job)``: a profile, or None (the
    job is decided as it is)."""

    def __init__(self, policy, supply, name: str) -> None:
        self.policy, self.supply, self.name = policy, supply, name

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
        decision = self.policy.decide(state, dataclasses.replace(job, profile=dataclasses.replace(
            supplied, memory_mib=memory if memory is not None else supplied.memory_mib)), rules)
        if decision is None:
            return None
        return dataclasses.replace(decision, policy=self.name,
                                   predicted={**decision.predicted, "first_curve": self.supply.name})
