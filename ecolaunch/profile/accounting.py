"""Accounting across finished jobs: each job's energy, GPU-hours and estimated saving, and their totals by group.

What lives here: :class:`JobUsage` (one :class:`~ecolaunch.profile.history.JobRecord`'s numbers, :meth:`JobUsage.of`),
:class:`Usage` (a group's sums), :func:`summarize` (the groups ``ecolaunch report --by user|day|job`` lists),
:func:`saving_error_pct` and :func:`ran_uncapped`. What does not: the command line, its ``--since`` and the table, CSV
and JSON forms (``ecolaunch.cli.accounting``), a shared GPU's split (:mod:`ecolaunch.profile.attribution`). What
each number is, and the saving's estimate and error: docs/accounting.md, "What the numbers are".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ecolaunch.jobmodel.capcurve import fit_curve
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.capchoice import MARGIN_Z, MIN_MARGIN_PP, reference_se_pct
from ecolaunch.profile.history import JobRecord

__all__ = ["BY", "ESTIMATE", "JobUsage", "Usage", "ran_uncapped", "saving_error_pct", "summarize"]

#: how the saving is estimated, in words (the report prints it under its table, and in its JSON)
ESTIMATE = ("the saving is an estimate against running alone and uncapped, made for the undisturbed jobs whose "
            "profile holds their uncapped iteration time and power: their iterations at that time and power, minus "
            "the measured energy of the same iterations and of any pre-launch profiling run")

J_PER_KWH = 3.6e6
#: a power limit this many watts below the uncapped cap is still uncapped (drivers round to whole watts or mW)
UNCAPPED_TOLERANCE_W = 1.0


@dataclass(frozen=True, slots=True)
class JobUsage:
    """One finished job's numbers (docs/accounting.md, "What the numbers are"). Energies in J; ``None``: not known."""

    job_id: str
    user: str
    name: str
    ended: float
    gpus: int
    energy_j: float | None
    gpu_hours: float
    #: the job's iterations alone and uncapped, by its profile (None: no estimate)
    uncapped_j: float | None
    #: the estimated saving against that (None: no estimate)
    saving_j: float | None
    #: the error of ``saving_j`` (J, :func:`saving_error_pct` of ``uncapped_j``; None: no estimate)
    saving_error_j: float | None = None
    #: the job ran alone and uncapped (:func:`ran_uncapped`): its saving is 0, no estimate
    uncapped: bool = False

    @classmethod
    def of(cls, rec: JobRecord) -> JobUsage:
        profiling_j = rec.profiling_energy_j or 0.0
        energy_j = None if rec.energy_j is None else rec.energy_j + profiling_j
        uncapped_j = saving_j = error_j = None
        alone_uncapped = False
        p = rec.profile
        if (rec.not_learned is None and p is not None and p.iter_time_s and p.power_w and rec.iterations
                and rec.iter_time_s and rec.energy_j is not None and rec.duration_s > 0 and rec.gpus):
            iterating = min(1.0, rec.iterations * rec.iter_time_s / rec.duration_s)
            alone_uncapped = ran_uncapped(rec)
            if alone_uncapped:  # the baseline itself: what its iterations used is what they use alone and uncapped
                uncapped_j, saving_j, error_j = rec.energy_j * iterating, 0.0, 0.0
            else:
                uncapped_j = rec.iterations * p.iter_time_s * p.power_w * len(rec.gpus)
                saving_j = uncapped_j - rec.energy_j * iterating - profiling_j
                error_j = uncapped_j * saving_error_pct(p) / 100.0
        return cls(rec.job_id, rec.user, rec.name, rec.ended, len(rec.gpus), energy_j,
                   len(rec.gpus) * rec.duration_s / 3600.0, uncapped_j, saving_j, error_j, alone_uncapped)

    @property
    def energy_kwh(self) -> float | None:
        return _kwh(self.energy_j)

    @property
    def uncapped_kwh(self) -> float | None:
        return _kwh(self.uncapped_j)

    @property
    def saving_kwh(self) -> float | None:
        return _kwh(self.saving_j)

    @property
    def saving_pct(self) -> float | None:
        """The estimated saving in % of the energy alone and uncapped; None without an estimate."""
        return _pct(self.saving_j, self.uncapped_j)

    @property
    def saving_error_pct(self) -> float | None:
        """The error of :attr:`saving_pct` (percentage points); None without an estimate."""
        return _pct(self.saving_error_j, self.uncapped_j)


@dataclass(frozen=True, slots=True)
class Usage:
    """The sums over a group of jobs. ``uncapped_j`` and ``saving_j`` are over the ``estimated`` jobs only."""

    jobs: int
    energy_j: float
    gpu_hours: float
    estimated: int
    uncapped_j: float
    saving_j: float
    #: the error of ``saving_j``: the jobs' errors added in quadrature (J)
    saving_error_j: float = 0.0
    #: how many of the ``estimated`` jobs ran alone and uncapped (saving 0, no error)
    uncapped: int = 0

    @classmethod
    def of(cls, jobs: Iterable[JobUsage]) -> Usage:
        jobs = list(jobs)
        estimated = [j for j in jobs if j.uncapped_j is not None and j.saving_j is not None]
        return cls(len(jobs), sum(j.energy_j or 0.0 for j in jobs), sum(j.gpu_hours for j in jobs), len(estimated),
                   sum(j.uncapped_j for j in estimated), sum(j.saving_j for j in estimated),
                   math.sqrt(sum((j.saving_error_j or 0.0) ** 2 for j in estimated)),
                   sum(1 for j in estimated if j.uncapped))

    @property
    def energy_kwh(self) -> float:
        return self.energy_j / J_PER_KWH

    @property
    def uncapped_kwh(self) -> float | None:
        """The estimated jobs' energy alone and uncapped in kWh; None when no job of the group has an estimate."""
        return _kwh(self.uncapped_j) if self.estimated else None

    @property
    def saving_kwh(self) -> float | None:
        """The estimated saving in kWh; None when no job of the group has an estimate."""
        return _kwh(self.saving_j) if self.estimated else None

    @property
    def saving_pct(self) -> float | None:
        """The estimated saving in % of the estimated jobs' energy alone and uncapped; None without an estimate."""
        return _pct(self.saving_j, self.uncapped_j) if self.estimated else None

    @property
    def saving_error_pct(self) -> float | None:
        """The error of :attr:`saving_pct` (percentage points); None without an estimate."""
        return _pct(self.saving_error_j, self.uncapped_j) if self.estimated else None


def ran_uncapped(rec: JobRecord) -> bool:
    """Whether the record shows the job alone and uncapped all through its run: no GPU shared, no pre-launch
    profiling run, and every sampled power limit of every GPU (and the limit each spent most of the run at) at or
    above the highest cap of its profile (its uncapped reference: the admin's maximum when it was measured). False
    when the record cannot tell (no cap points, no samples, a limit not read). A cap held for less than one point of
    the record's short series may not show: it saved next to nothing of the run."""
    p = rec.profile
    if p is None or not p.cap_points or rec.colocated_with or rec.profiling_energy_j or not rec.gpus:
        return False
    top_w = max(pt.power_cap_w for pt in p.cap_points)
    limits = [rec.power_caps_w.get(u) for u in rec.gpus]
    for uuid in rec.gpus:
        samples = rec.samples.get(uuid) or []
        if not samples:
            return False
        limits += [s.get("power_limit_w") if isinstance(s, dict) else None for s in samples]
    return all(w is not None and w >= top_w - UNCAPPED_TOLERANCE_W for w in limits)


def saving_error_pct(profile: Profile) -> float:
    """The error of a saving estimated from ``profile`` (% of its energy alone and uncapped): ``MARGIN_Z`` standard
    errors of its uncapped reference time (:func:`~ecolaunch.jobmodel.capchoice.reference_se_pct`), at least
    ``MIN_MARGIN_PP`` (also when its cap points, and so their spread, are not known)."""
    if not profile.cap_points:
        return MIN_MARGIN_PP
    return max(MIN_MARGIN_PP, MARGIN_Z * reference_se_pct(fit_curve(profile.cap_points)))


def _kwh(joules: float | None) -> float | None:
    return None if joules is None else joules / J_PER_KWH


def _pct(saving_j: float | None, uncapped_j: float | None) -> float | None:
    return 100.0 * saving_j / uncapped_j if saving_j is not None and uncapped_j else None


def _day(job: JobUsage) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(job.ended))


#: what each ``--by`` groups on: the job's user, the local day it ended, or the job itself
BY: dict[str, Callable[[JobUsage], str]] = {"user": lambda j: j.user, "day": _day, "job": lambda j: j.job_id}


def summarize(records: Iterable[JobRecord], by: str, *, since: float | None = None,
              users: Iterable[str] = ()) -> tuple[list[tuple[str, Usage, list[JobUsage]]], Usage]:
    """The groups of the jobs that ended at or after ``since`` (any time: None), of ``users`` only when given, and
    the total over them. Each group is (its key, its sums, its jobs newest first); users are in name order, days and
    jobs newest first."""
    wanted = set(users)
    jobs = [JobUsage.of(r) for r in records
            if (since is None or r.ended >= since) and (not wanted or r.user in wanted)]
    groups: dict[str, list[JobUsage]] = {}
    for job in sorted(jobs, key=lambda j: (-j.ended, j.job_id)):
        groups.setdefault(BY[by](job), []).append(job)
    order = list(groups) if by == "job" else sorted(groups, reverse=by == "day")
    return [(k, Usage.of(groups[k]), groups[k]) for k in order], Usage.of(jobs)
