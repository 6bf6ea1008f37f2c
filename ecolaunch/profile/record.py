"""What one run leaves behind: its share of the GPUs' energy, its profile and its record in the history.

:class:`RunRecorder` keeps who shared each GPU with the job and when (the decision's co-residents, then the
heartbeat's), attributes each GPU's sampled energy among them by demand (:mod:`ecolaunch.profile.attribution`), and
writes the job's profile (:meth:`~ecolaunch.profile.history.History.store_profile`, with what the script declared)
and its :class:`~ecolaunch.profile.history.JobRecord`. A failed write is logged: the history never breaks a launch.
While the job runs, :meth:`RunRecorder.so_far` gives the same attribution up to now, with
:func:`saving_estimate_j`, for the progress the launcher writes at each heartbeat.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ecolaunch.clock import Clock
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.capcurve import CapCurve, profile_curve
from ecolaunch.profile.attribution import attribute, demand_weight, intervals_from_samples
from ecolaunch.profile.history import History, JobMatch, JobRecord, Profile, launch_hints
from ecolaunch.profile.profiler import ProfileResult
from ecolaunch.profile.sampler import Sampler, downsample

logger = logging.getLogger(__name__)

SAMPLE_POINTS = 240  # per GPU in a history record: one point every 15 s of a 1-hour job


@dataclass(frozen=True, slots=True)
class RunSpan:
    """When a run began and ended: on the run's clock (``t0_s``, ``t1_s``) and on the wall clock."""

    t0_s: float
    t1_s: float
    wall0: float
    wall1: float


class RunRecorder:
    """Energy and history of one run of ``job_id`` on ``gpu_uuids`` (see the module docstring).

    Args:
        history, fingerprint: where the profile and the record go (fingerprint None: no profile is stored).
        match: how the launch matched its history (the record keeps it); a key the script declares
            (``@ecolaunch.job(key=...)``) where the command line gave none moves the profile under that key, and
            the script's next launches are matched by it.
        colocated_with, co_resident_power_w: per GPU the jobs already on it (the decision's), and their profiles'
            ``power_w`` where known; idle_power_w: per GPU (default: the catalogue's assumption).
        wall_clock: the time a stored profile is stamped with.
    """

    def __init__(self, job_id: str, gpu_uuids: tuple[str, ...], *, history: History, fingerprint: str | None,
                 sampler: Sampler, clock: Clock, wall_clock: Any, match: JobMatch | None = None,
                 colocated_with: Mapping[str, Sequence[str]] | None = None,
                 co_resident_power_w: Mapping[str, float | None] | None = None,
                 idle_power_w: Mapping[str, float | None] | None = None) -> None:
        self._job_id, self._uuids = job_id, gpu_uuids
        self._history, self.fingerprint, self._match = history, fingerprint, match
        self._sampler, self._clock, self._wall = sampler, clock, wall_clock
        self._idle_given = dict(idle_power_w or {})
        #: each GPU's model name (read when the run begins)
        self.names: dict[str, str] = {}
        others = co_resident_power_w or {}
        self._residency: dict[str, list[tuple[float, dict[str, float | None]]]] = {
            u: [(-math.inf, {j: others.get(j) for j in (colocated_with or {}).get(u, ())})] for u in gpu_uuids}
        self._lock = threading.Lock()

    def set_co_residents(self, uuid: str, jobs: Mapping[str, float | None]) -> bool:
        """From now on, ``jobs`` (job id -> profile ``power_w`` or None) share GPU ``uuid`` with this job; True when
        that changed the GPU's co-residents to some other job."""
        others = {j: w for j, w in jobs.items() if j != self._job_id}
        with self._lock:
            if uuid in self._residency and others != self._residency[uuid][-1][1]:
                self._residency[uuid].append((self._clock.now(), others))
                return bool(others)
        return False

    def shared(self) -> bool:
        """Whether any GPU of the job had another job on it during the run."""
        with self._lock:
            return any(others for changes in self._residency.values() for _, others in changes)

    def hints_changed(self, hints: Mapping[str, Any]) -> bool:
        """Whether the script declared something history does not keep yet (``--profile auto``, its bound)."""
        if self.fingerprint is None:
            return False
        entry = self._history.lookup(self.fingerprint)
        return hints.get("profile_safe") is True or launch_hints(hints) != (entry.hints if entry else {})

    def store_profile(self, measured: Profile | None, hints: Mapping[str, Any], *, refused: bool = False) -> None:
        """Store ``measured`` (None: what history knew, kept when this run measured nothing) with what the script
        declared in ``hints``. ``refused``: the run contradicted the colleague's profile it started from; an entry
        without a profile is stored all the same, so that the next launch profiles the job rather than start from
        the colleague's again."""
        if self.fingerprint is None:
            return
        before = self._history.lookup(self.fingerprint)
        self._adopt_key(launch_hints(hints).get("key"))
        entry = self._history.lookup(self.fingerprint)
        profile = measured or (entry.profile if entry else None) or (before.profile if before else None)
        safe = hints.get("profile_safe") is True or bool(entry and entry.profile_safe)
        declared = {**(entry.hints if entry else {}), **launch_hints(hints)}
        if profile is not None and not profile.memory_mib and declared.get("memory_mib"):
            # a peak the GPUs could not show (a CPU job on simulated GPUs): what the script declared
            profile = replace(profile, memory_mib=declared["memory_mib"])
        if profile is None and not safe and not declared and not refused:
            return
        try:
            self._history.store_profile(self.fingerprint, profile, profile_safe=safe, job_id=self._job_id,
                                        now=self._wall(), hints=declared)
        except Exception as e:  # noqa: BLE001
            logger.warning("could not store the profile of job %s: %s", self._job_id, e)

    def _adopt_key(self, key: str | None) -> None:
        """The script declares ``key``: from now on its profile is the key's, and its next launches find the key
        (a key on the command line wins)."""
        match = self._match
        if key is None or match is None or match.key_from_cli or key == match.key:
            return
        self.fingerprint = match.identity.fingerprint(key)
        try:
            self._history.store_profile(match.identity.key_fingerprint(), None, job_id=self._job_id,
                                        now=self._wall(), hints={"key": key})
        except Exception as e:  # noqa: BLE001
            logger.warning("could not remember the job key of job %s: %s", self._job_id, e)

    def build(self, span: RunSpan, *, user: str, name: str, hints: Mapping[str, Any], profile: Profile | None,
              exit_code: int | None, iterations: int, iter_time_s: float | None, source: str,
              result: ProfileResult | None, findings: Sequence[str],
              profiling_energy_j: float | None, name_given: bool = False,
              not_learned: str | None = None, predicted_s: float | None = None) -> JobRecord:
        """The run's record: the job's share of each GPU's energy, the caps it ran at, a short sample series; named
        ``name`` when ``name_given`` (``--name``), else as the script declares, else ``name``; ``predicted_s``: its
        length as the launch expected it."""
        job_j = gpu_j = 0.0
        caps, coloc, samples = {}, {}, {}  # per GPU: dominant cap, co-resident jobs, short series
        for uuid, (series, share_j, others) in self._shares(profile).items():
            job_j += share_j
            gpu_j += self._sampler.energy_j(uuid)
            coloc[uuid] = others
            caps[uuid] = _dominant_cap(series)
            samples[uuid] = downsample(series, SAMPLE_POINTS, origin_s=span.t0_s)
        declared_name = hints.get("name") if isinstance(hints.get("name"), str) and not name_given else name
        return JobRecord(
            job_id=self._job_id, user=user, name=declared_name or self._job_id, fingerprint=self.fingerprint,
            started=span.wall0, ended=span.wall1, duration_s=max(0.0, span.t1_s - span.t0_s),
            exit_code=exit_code, gpus=self._uuids, gpu_names=tuple(self.names.get(u, "") for u in self._uuids),
            power_caps_w=caps, colocated_with={u: j for u, j in coloc.items() if j}, energy_j=job_j,
            gpu_energy_j=gpu_j, profiling_energy_j=profiling_energy_j, iterations=iterations,
            iter_time_s=iter_time_s, profile=profile,
            profile_action=source, recommended_cap_w=result.recommended_cap_w if result else None,
            recommendation=result.reason if result else None, findings=tuple(findings),
            samples=samples, history_match=self._match.how if self._match else None,
            profile_from=self._match.profile_from if self._match else None, not_learned=not_learned,
            predicted_s=predicted_s)

    def so_far(self, profile: Profile | None, top_cap_w: float | None) -> tuple[float, float | None]:
        """The job's share of its GPUs' energy so far (J, as :meth:`build` attributes it), and the estimated saving
        so far against running uncapped at ``top_cap_w`` (:func:`saving_estimate_j`; None without a cap curve)."""
        curve = profile_curve(profile, top_cap_w) if top_cap_w else None
        job_j, saving_j = 0.0, 0.0
        for series, share_j, _ in self._shares(profile).values():
            job_j += share_j
            if curve is not None:
                saving_j += saving_estimate_j(series, share_j, curve, top_cap_w)
        return job_j, saving_j if curve is not None else None

    def _shares(self, profile: Profile | None) -> dict[str, tuple[list[Any], float, list[str]]]:
        """Per GPU: its sampled series, the job's share of its energy, and the jobs that shared it."""
        own_w = profile.power_w if profile else None
        out = {}
        for uuid in self._uuids:
            series = self._sampler.series(uuid)
            idle = self._idle(uuid)
            with self._lock:
                changes = [(t, {**{j: demand_weight(w, idle) for j, w in others.items()},
                                self._job_id: demand_weight(own_w, idle)}) for t, others in self._residency[uuid]]
                coloc = sorted({j for _, others in self._residency[uuid] for j in others})
            share = attribute(intervals_from_samples(series, changes), idle)
            out[uuid] = (series, share.energy_j.get(self._job_id, 0.0), coloc)
        return out

    def write(self, record: JobRecord) -> None:
        """Add ``record`` to the history; a run that completed (exit code 0) also tells its job's next launches
        how long to expect (:meth:`~ecolaunch.profile.history.History.note_run`), unless it updates nothing in the
        history (``not_learned``: a disturbed run, or not the job its profile matched)."""
        try:
            self._history.record(record)
        except Exception as e:  # noqa: BLE001
            logger.warning("could not store job %s in the history: %s", self._job_id, e)
        if record.exit_code != 0 or self.fingerprint is None or record.not_learned is not None:
            return
        try:
            self._history.note_run(self.fingerprint, record.duration_s, record.iterations, job_id=self._job_id,
                                   now=self._wall())
        except Exception as e:  # noqa: BLE001
            logger.warning("could not note the length of job %s in the history: %s", self._job_id, e)

    def _idle(self, uuid: str) -> float | None:
        if uuid in self._idle_given:
            return self._idle_given[uuid]
        # lazy: the launch path loads the catalogue only for a GPU whose idle power it was not given
        from ecolaunch.devices.catalogue import lookup

        try:
            return lookup(self.names.get(uuid, "")).idle_power_w  # an assumption of the catalogue
        except ConfigError:
            return None


def saving_estimate_j(series: Sequence[Any], share_j: float, curve: CapCurve, top_cap_w: float) -> float:
    """An estimate of the energy a job saved on one GPU against running uncapped (at ``top_cap_w``), for the same work.

    Each sampled interval's energy, run at the GPU's power limit then (``c``), would have been ``E(top) / E(c)`` times
    as much uncapped, where ``E`` is the job's energy per iteration on its cap curve (time x power, as the cap choice
    reads it): the saving is the sum of ``energy x (E(top) / E(c) - 1)``, scaled to the job's share ``share_j`` of the
    GPU's energy. An interval at or above ``top_cap_w`` (or at an unknown limit) saves nothing. It reads the curve,
    not a measurement of the job uncapped: an estimate, negative where the curve says a cap cost energy.
    """
    top = curve.at(top_cap_w)
    top_j = top.iter_time_s * top.power_w
    ratios: dict[float, float] = {}
    gpu_j = saved_j = 0.0
    for a, b in zip(series, series[1:]):
        energy = max(0.0, b.energy_j - a.energy_j)
        gpu_j += energy
        cap = a.power_limit_w
        if cap is None or cap >= top_cap_w:
            continue
        if cap not in ratios:
            at = curve.at(cap)
            cost_j = at.iter_time_s * at.power_w
            ratios[cap] = top_j / cost_j if cost_j > 0 else 1.0
        saved_j += energy * (ratios[cap] - 1.0)
    return saved_j * share_j / gpu_j if gpu_j > 0 else 0.0


def _dominant_cap(series: Sequence[Any]) -> float | None:
    """The power limit a GPU spent the most sampled time at."""
    spent: dict[float | None, float] = {}
    for a, b in zip(series, series[1:]):
        spent[a.power_limit_w] = spent.get(a.power_limit_w, 0.0) + (b.t_s - a.t_s)
    return max(spent, key=spent.__getitem__) if spent else (series[-1].power_limit_w if series else None)
