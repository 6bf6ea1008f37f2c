"""The first-launch curves ``energy.py`` compares with what the launcher is told, and the scoring of a learned one.

What lives here: two suppliers of a first launch's curve for :class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves`,
the bounds any first-launch predictor is judged between: :class:`PessimisticFirstCurve` (the rule a skeptic tries
first: the most pessimistic curve of the job types of the *other* folds, on the job's board) and
:class:`ExactFirstCurve` (the job's true curve: what a perfect first-launch predictor would say, an upper bound);
and :func:`first_curve_errors` and :func:`first_curve_z`, which score a learned first-launch curve on measured ones
(how :data:`ecolaunch.policy.gnn.FIRST_CURVE_Z` is set). What does not: what the launcher is told
(:class:`~ecolaunch.sim.first_curves.HistoryFirstCurve`, which the simulator runs), the world's truth
(:mod:`ecolaunch.sim.measured`). They live beside the benchmark because only the benchmarks and tests run them.

**The pessimistic curve.** On the job's board, for every cap of the 25 W grid, the highest time ratio (capped /
uncapped) and the highest power any job type outside the job's fold shows there (a type's own curve never informs
its own launch), with the median uncapped iteration time of those types standing in for the job's (only ratios
and the budget's tie-breaks read it). Pointwise maxima: no single type is that slow and that hungry at once, which
is what makes it a safe rule rather than a prediction.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ecolaunch.devices.catalogue import CATALOGUE
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.base import JobRequest
from ecolaunch.jobmodel.powercap import cap_grid
from ecolaunch.sim.first_curves import job_board
from ecolaunch.sim.measured import MeasuredWorld
from ecolaunch.sim.truth import TruthCurve
from ecolaunch.state.graph import GpuNode, StateGraph

__all__ = ["ExactFirstCurve", "FirstCurveError", "PessimisticFirstCurve", "first_curve_errors", "first_curve_z"]

#: the grid a supplied curve is given on (the oracle's and the truth profile's)
CURVE_STEP_W = 25.0


class ExactFirstCurve:
    """The job's true curve on its board (an upper bound on any first-launch predictor)."""

    name = "exact"

    def __init__(self, kind_of: Mapping[str, str]) -> None:
        self.kind_of, self.world = dict(kind_of), MeasuredWorld()

    def __call__(self, state: StateGraph, job: JobRequest) -> Profile | None:
        board = job_board(self.world, state, job)
        return None if board is None else self.world.true_profile(self.kind_of[job.id], board)


class PessimisticFirstCurve:
    """The most pessimistic curve of the other folds' job types on the job's board (module docstring)."""

    name = "pessimistic"

    def __init__(self, kind_of: Mapping[str, str]) -> None:
        self.kind_of, self.world = dict(kind_of), MeasuredWorld()
        self._cache: dict[tuple[int, str], Profile] = {}

    def __call__(self, state: StateGraph, job: JobRequest) -> Profile | None:
        board = job_board(self.world, state, job)
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
