"""Accounting across finished jobs: each job's energy, GPU-hours and estimated saving, and their totals by group.

What lives here: :class:`JobUsage` (one :class:`~ecolaunch.profile.history.JobRecord`'s numbers, :meth:`JobUsage.of`),
:class:`Usage` (a group's sums) and :func:`summarize` (the groups ``ecolaunch report --by user|day|job`` lists). The
command line, its ``--since`` and the table, CSV and JSON forms are ``ecolaunch.cli.accounting``'s.

The numbers of one job, from its record:

- **energy**: the job's share of its GPUs' energy over the run (``energy_j``, see
  :mod:`ecolaunch.profile.attribution`), plus the energy of a pre-launch profiling run (``profiling_energy_j``).
- **GPU-hours**: the GPUs it was placed on times its run time (a job sharing a GPU counts the GPU whole, as does the
  job it shares it with; a pre-launch profiling run's time is not counted).
- **the saving against alone and uncapped** (:data:`ESTIMATE`): an estimate, made only for a job whose record holds
  its iteration count and mean iteration time and whose profile holds its uncapped iteration time and power. Its
  iterations alone and uncapped would have used ``iterations × profile.iter_time_s × profile.power_w × GPUs``; the
  same iterations as they ran used the job's energy times the fraction of its run spent iterating
  (``iterations × iter_time_s / duration_s``, at most 1); start-up and teardown count the same either way. The saving
  is the first minus the second, minus the profiling run's energy. It covers what a cap saved, and the
  energy sharing a GPU saved; a run slower than its profile (a stalled data loader, a busy CPU) makes it negative.
  A run whose iterations were far outside its profile's spread (its record's ``not_learned``: disturbed, or not the
  job it matched) gets no estimate: its profile does not describe it, so the difference is not the cap's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ecolaunch.profile.history import JobRecord

__all__ = ["BY", "ESTIMATE", "JobUsage", "Usage", "summarize"]

#: how the saving is estimated, in words (the report prints it under its table, and in its JSON)
ESTIMATE = ("the saving is an estimate against running alone and uncapped, made for the undisturbed jobs whose "
            "profile holds their uncapped iteration time and power: their iterations at that time and power, minus "
            "the measured energy of the same iterations and of any pre-launch profiling run")

J_PER_KWH = 3.6e6


@dataclass(frozen=True, slots=True)
class JobUsage:
    """One finished job's numbers (see the module docstring). Energies in J; ``None``: not known."""

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

    @classmethod
    def of(cls, rec: JobRecord) -> JobUsage:
        profiling_j = rec.profiling_energy_j or 0.0
        energy_j = None if rec.energy_j is None else rec.energy_j + profiling_j
        uncapped_j = saving_j = None
        p = rec.profile
        if (rec.not_learned is None and p is not None and p.iter_time_s and p.power_w and rec.iterations
                and rec.iter_time_s and rec.energy_j is not None and rec.duration_s > 0 and rec.gpus):
            uncapped_j = rec.iterations * p.iter_time_s * p.power_w * len(rec.gpus)
            iterating = min(1.0, rec.iterations * rec.iter_time_s / rec.duration_s)
            saving_j = uncapped_j - rec.energy_j * iterating - profiling_j
        return cls(rec.job_id, rec.user, rec.name, rec.ended, len(rec.gpus), energy_j,
                   len(rec.gpus) * rec.duration_s / 3600.0, uncapped_j, saving_j)

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


@dataclass(frozen=True, slots=True)
class Usage:
    """The sums over a group of jobs. ``uncapped_j`` and ``saving_j`` are over the ``estimated`` jobs only."""

    jobs: int
    energy_j: float
    gpu_hours: float
    estimated: int
    uncapped_j: float
    saving_j: float

    @classmethod
    def of(cls, jobs: Iterable[JobUsage]) -> Usage:
        jobs = list(jobs)
        estimated = [j for j in jobs if j.uncapped_j is not None and j.saving_j is not None]
        return cls(len(jobs), sum(j.energy_j or 0.0 for j in jobs), sum(j.gpu_hours for j in jobs), len(estimated),
                   sum(j.uncapped_j for j in estimated), sum(j.saving_j for j in estimated))

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
