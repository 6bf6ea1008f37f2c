"""What a first launch's cap curve could be told before it runs, in the measured world: the bounds a predictor is
judged between, and what the machine's history gives.

What lives here: the three suppliers the energy benchmark compares, each a first launch's curve for
:class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves` (the policy layer's wrapper; :class:`SimFirstLaunchCurves`
binds it to the simulation's world): :class:`PessimisticFirstCurve` (the rule a skeptic tries first: the most
pessimistic curve of the job types of the *other* folds, on the job's board), :class:`HistoryFirstCurve` (what the
launcher does: the profile another user measured of the same job on this machine; else nothing, or the pessimistic
curve; :func:`as_launched` wraps a policy with it) and
:class:`ExactFirstCurve` (the job's true curve: what a perfect first-launch predictor would say, an upper bound).
What does not: the world's truth (:mod:`ecolaunch.sim.measured`), the budget that reads the curve
(:mod:`ecolaunch.admin.budget`).

**Why** a first launch is told a curve at all: :mod:`ecolaunch.policy.firstcurve`.

**The pessimistic curve.** On the job's board, for every cap of the 25 W grid, the highest time ratio (capped /
uncapped) and the highest power any job type outside the job's fold shows there (a type's own curve never informs
its own launch), with the median uncapped iteration time of those types standing in for the job's (only ratios
and the budget's tie-breaks read it). Pointwise maxima: no single type is that slow and that hungry at once, which
is what makes it a safe rule rather than a prediction.

**The history's curve** is another user's measured one of the same type (the world's
:meth:`~ecolaunch.sim.measured.MeasuredWorld.machine_history_profile`): its profiled points and what its closed
loop learned, with their noise. The world's users run each other's job types (a lab's shared scripts), so most
first launches by a user find one.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ecolaunch.devices.catalogue import CATALOGUE
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.firstcurve import FirstLaunchCurves
from ecolaunch.profile.powercap import cap_grid
from ecolaunch.sim.measured import MeasuredWorld
from ecolaunch.sim.truth import TruthCurve
from ecolaunch.state.graph import GpuNode, StateGraph

__all__ = ["ExactFirstCurve", "FirstCurveError", "HistoryFirstCurve", "PessimisticFirstCurve", "SimFirstLaunchCurves",
           "first_curve_errors", "first_curve_z"]

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


class HistoryFirstCurve:
    """What the history of the machine says of a first launch: the profile another user measured of the same job
    type on the job's board (:meth:`~ecolaunch.sim.measured.MeasuredWorld.machine_history_profile`: a colleague ran
    the same script the same way), else ``fallback``'s curve (None: nothing, as the launcher does). The world is the
    simulation's own, bound when it is made (:meth:`bind_world`): its history grows as the run goes."""

    name = "history"

    def __init__(self, kind_of: Mapping[str, str], fallback=None) -> None:
        self.kind_of, self.fallback = dict(kind_of), fallback
        self.world: MeasuredWorld | None = None
        self.told = {"history": 0, "fallback": 0}

    def bind_world(self, world: MeasuredWorld) -> None:
        self.world = world

    def __call__(self, state: StateGraph, job: JobRequest) -> Profile | None:
        if self.world is None:
            raise RuntimeError("HistoryFirstCurve reads the simulation's world: bind_world() it first")
        board = _board(self.world, state, job)
        if board is None:
            return None
        known = self.world.machine_history_profile(job.user, self.kind_of[job.id], board)
        self.told["history" if known is not None else "fallback"] += 1
        if known is not None or self.fallback is None:
            return known
        return self.fallback(state, job)


class SimFirstLaunchCurves(FirstLaunchCurves):
    """:class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves` in the simulator: the supplier reads the simulation's
    own world where it needs one (:class:`HistoryFirstCurve`), bound when the simulation is made."""

    def bind_world(self, world: MeasuredWorld) -> None:
        if hasattr(self.supply, "bind_world"):
            self.supply.bind_world(world)


# --- scoring a learned first-launch curve on measured ones ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FirstCurveError:
    """One measured cap of one measured curve, against a learned first-launch curve asked with nothing measured:
    ``cap_frac`` (cap / the board's max limit), the predicted and the measured normalized throughput, and the
    prediction's standard deviation."""

    curve: str
    cap_frac: float
    predicted: float
    sd: float
    measured: float

    @property
    def z(self) -> float:
        """How many standard deviations the prediction lies above the measurement (inf where sd is 0)."""
        gap = self.predicted - self.measured
        return gap / self.sd if self.sd > 0 else (float("inf") if gap > 0 else float("-inf") if gap < 0 else 0.0)


def first_curve_errors(supply, curves: Iterable[TruthCurve]) -> list[FirstCurveError]:
    """``supply`` (a :class:`~ecolaunch.policy.gnn.GnnFirstCurve`) asked for a job nothing is known of on each
    curve's board, scored at each of its measured caps below the top and within the board's range (the top is
    uncapped, by definition exact). Curves of boards the catalogue does not know are skipped."""
    out = []
    for curve in curves:
        model = CATALOGUE.get(curve.gpu_model)
        if model is None:
            continue
        rows = {round(cap, 6): (speed, sd) for cap, speed, sd, _ in supply.speeds(GpuNode.from_model(model))}
        top = curve.iter_time_s(curve.uncapped_cap_w)
        for p in curve.points:
            key = round(p.power_cap_w, 6)
            if p.power_cap_w >= curve.uncapped_cap_w or key not in rows:
                continue
            speed, sd = rows[key]
            out.append(FirstCurveError(curve.name, p.power_cap_w / model.power_limit_max_w, speed, sd,
                                       top / p.iter_time_s))
    return out


def first_curve_z(errors: Sequence[FirstCurveError], coverage: float = 0.99) -> float:
    """The standard deviations to keep back so that ``coverage`` of ``errors`` lie at or above the prediction minus
    them (the quantile of their z, at least 0)."""
    zs = [e.z for e in errors if e.sd > 0]
    if not zs:
        raise ValueError("no errors with a standard deviation to calibrate on")
    return max(0.0, float(np.quantile(np.asarray(zs), coverage)))


def as_launched(policy, trace, name: str = "curve") -> SimFirstLaunchCurves:
    """``policy`` as the launcher runs it by default in the measured world: a first launch told the profile another
    user of the machine measured of the same job where there is one, else nothing (:class:`HistoryFirstCurve`). What
    the ``curve`` row of ``benchmarks/energy.py`` and ``ecolaunch simulate --policy curve`` on a measured trace run."""
    return SimFirstLaunchCurves(policy, HistoryFirstCurve({j.id: j.kind for j in trace.jobs}), name)
