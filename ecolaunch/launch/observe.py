"""Watching one run: sampling, profiling, the early-stage check, energy, and the history record.

What lives here: :class:`RunObserver`, the context manager the launcher wraps around ``run_workers``, and
:class:`RunSummary` / :func:`format_summary` (what the CLI prints when the job ends)::

    with RunObserver(backend, job_id, gpus, state_dir, clock=SystemClock(), mode=plan.action, ...) as obs:
        outcome = run_workers(args, {**env, **obs.worker_env()})
        obs.set_exit_code(outcome.exit_code)
    click.echo(format_summary(obs.summary()), err=True)

On enter the sampler starts and a monitor thread polls the workers' step marks every ``poll_s``: in
``inline`` and ``pre`` mode it drives the :class:`~ecolaunch.profile.profiler.Profiler`; with a known profile
it runs the early-stage check (and raises a cap live when the check finds the job too slow under it). In
``inline`` mode the chosen cap is set live once profiling is done. On exit the caps this observer set are
restored to those it found, the job's energy is attributed (:mod:`ecolaunch.profile.energy`), and the profile
and the :class:`~ecolaunch.profile.history.JobRecord` are stored (a ``pre`` run stores the profile only).

Observation never breaks a launch: a failure after construction (devices, files, the profiler) is logged as
a warning and the job runs on. The constructor only checks its arguments and touches no device or file.
"""

from __future__ import annotations

import logging
import math
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import Clock
from ecolaunch.devices.base import GpuBackend
from ecolaunch.errors import ConfigError, EcolaunchError
from ecolaunch.launch.closedloop import ClosedLoop
from ecolaunch.profile import channel
from ecolaunch.profile.control import CapController, ControlSettings
from ecolaunch.profile.energy import attribute, demand_weight, intervals_from_samples
from ecolaunch.job.profile import Profile
from ecolaunch.profile.history import History, JobRecord, launch_hints
from ecolaunch.profile.modes import ProfileAction, ProfilerSettings, job_cap_bounds, pre_run_env
from ecolaunch.profile.powercap import merge_points
from ecolaunch.profile.profiler import Phase, Profiler, ProfileResult, check_early
from ecolaunch.profile.sampler import DEFAULT_INTERVAL_S, Sampler, downsample

logger = logging.getLogger(__name__)

HOOKS_DIR = "hooks"
SAMPLE_POINTS = 240  # per GPU in a history record: one point every 15 s of a 1-hour job


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What the CLI shows when a job ends. Energies in J; ``None``: not known."""

    job_id: str
    duration_s: float
    energy_j: float | None
    gpu_energy_j: float | None
    mean_power_w: float | None
    iterations: int | None
    iter_time_s: float | None
    profile_action: str
    recommended_cap_w: float | None
    recommendation: str | None
    findings: tuple[str, ...] = ()
    profiling_energy_j: float | None = None
    #: the closed loop's moves (one line each), and the slowdown it last measured at the cap the run ended on
    cap_moves: tuple[str, ...] = ()
    measured_slowdown_pct: float | None = None
    final_cap_w: float | None = None

    @property
    def energy_wh(self) -> float | None:
        return None if self.energy_j is None else self.energy_j / 3600.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "findings": list(self.findings), "cap_moves": list(self.cap_moves),
                "energy_wh": self.energy_wh}


def format_summary(s: RunSummary) -> str:
    """The end-of-job lines, each starting ``ecolaunch:``."""
    energy = "energy N/A" if s.energy_j is None else f"{s.energy_j / 1e3:.3g} kJ ({s.energy_wh:.3g} Wh)"
    power = "" if s.mean_power_w is None else f", mean GPU power {s.mean_power_w:.0f} W"
    shared = ("" if s.gpu_energy_j is None or s.energy_j is None or abs(s.gpu_energy_j - s.energy_j) < 0.5
              else f" (its share of {s.gpu_energy_j / 1e3:.3g} kJ on shared GPUs)")
    lines = [f"ecolaunch: job {s.job_id} used {energy}{shared} in {s.duration_s:.1f} s{power}"]
    if s.iterations:
        it = "" if s.iter_time_s is None else f", {s.iter_time_s * 1e3:.1f} ms per iteration"
        lines.append(f"ecolaunch: {s.iterations} iterations{it}")
    if s.profiling_energy_j:
        lines.append(f"ecolaunch: plus {s.profiling_energy_j / 1e3:.3g} kJ for the pre-launch profiling run")
    if s.recommendation:
        lines.append(f"ecolaunch: power cap: {s.recommendation}")
    lines += [f"ecolaunch: power cap: {m}" for m in s.cap_moves]
    if s.measured_slowdown_pct is not None and s.final_cap_w is not None:
        slow = s.measured_slowdown_pct
        how = f"{slow:.1f} % slower" if slow >= 0.05 else ("as fast" if slow > -0.05 else f"{-slow:.1f} % faster")
        lines.append(f"ecolaunch: power cap: ended at {s.final_cap_w:.0f} W, measured {how} than alone and uncapped "
                     "(kept in the history for the next launch)")
    lines += [f"ecolaunch: warning: {f}" for f in s.findings]
    return "\n".join(lines)


class RunObserver:
    """Observes one run of job ``job_id`` on ``gpu_uuids`` (see the module docstring).

    Args:
        mode: the resolved profiling action (:class:`~ecolaunch.profile.modes.ProfileAction` or its value).
        history, fingerprint: where the profile and record go (fingerprint None: no profile is stored).
        rules, slowdown_pct: the admin policy (cap bounds, eta, budget) and the job's slowdown bound.
        set_cap: ``set_cap(uuid, watts)`` to change caps (profiling, live adjustment); None: never change caps.
        profile: what is known of the job before this run (history, or a pre-launch run).
        colocated_with, co_resident_power_w: per GPU the jobs already on it (the decision's), and their
            profiles' ``power_w`` where known; idle_power_w: per GPU (default: the catalogue's assumption).
        background: run the sampler and monitor threads (tests pass False and call :meth:`poll`);
            interval_s, poll_s: seconds between GPU samples, and between polls of the step marks.
        on_profile_done: called once when a time-window profile (an uninstrumented script) ends, so that a
            pre-launch run can stop its workers; instrumented workers stop at ``ECOLAUNCH_PROFILE_STEPS``.
        profile_source: what the record calls the profiling action (default ``mode``'s value; e.g. ``"pre"``
            for the real run after a pre-launch profiling run, which itself runs in ``history`` mode).
        ceiling_w: the most the closed loop may raise the job's cap to now (a power budget's,
            :meth:`~ecolaunch.launch.caps.JobCaps.ceiling_w`); None: no ceiling.
    """

    def __init__(self, backend: GpuBackend, job_id: str, gpu_uuids: Sequence[str], state_dir: Path | str, *,
                 clock: Clock, mode: ProfileAction | str, history: History, fingerprint: str | None, rules: Rules,
                 slowdown_pct: float, set_cap: Callable[[str, float], None] | None = None, user: str = "",
                 name: str = "", profile: Profile | None = None,
                 colocated_with: Mapping[str, Sequence[str]] | None = None,
                 co_resident_power_w: Mapping[str, float | None] | None = None,
                 idle_power_w: Mapping[str, float | None] | None = None, settings: ProfilerSettings | None = None,
                 interval_s: float = DEFAULT_INTERVAL_S, poll_s: float = 1.0, background: bool = True,
                 on_profile_done: Callable[[], None] | None = None, profiling_energy_j: float | None = None,
                 profile_source: str | None = None, wall_clock: Callable[[], float] = time.time,
                 control: ControlSettings | None = None, closed_loop: bool = True,
                 ceiling_w: Callable[[], float | None] | None = None) -> None:
        self.mode = ProfileAction(mode)
        self._source = profile_source or self.mode.value
        self.job_id, self.user, self.name = job_id, user, name
        self._backend, self._uuids, self._clock = backend, tuple(gpu_uuids), clock
        self._history, self._fp, self._rules = history, fingerprint, rules
        self._slowdown, self._user_set_cap, self._wall = slowdown_pct, set_cap, wall_clock
        self._ceiling_w = ceiling_w  # a power budget's ceiling for the closed loop (JobCaps.ceiling_w)
        self._set_cap = None if set_cap is None else self._set  # every change goes through _set
        self.caps_changed = False  # whether this observer changed any cap (the launcher restores on release)
        self.profile = profile
        self.settings = settings or ProfilerSettings.from_rules(rules)
        self._poll_s, self._background, self._on_done = poll_s, background, on_profile_done
        self._profiling_energy_j = profiling_energy_j
        self._idle_given = dict(idle_power_w or {})
        suffix = "-profile" if self.mode is ProfileAction.PRE else ""
        self.hook_dir = Path(state_dir) / HOOKS_DIR / f"{job_id}{suffix}"
        self.sampler = Sampler(backend, self._uuids, clock=clock, interval_s=interval_s)
        self.reader = channel.StepReader(self.hook_dir)
        self.profiler: Profiler | None = None
        self.result: ProfileResult | None = None
        self.findings: list[str] = []
        self.record: JobRecord | None = None
        self._exit_code: int | None = None
        self._bounds: tuple[float, float] | None = None
        self._found: dict[str, float | None] = {}
        self._names: dict[str, str] = {}
        self._live: dict[str, float] = {}  # caps this observer set live (restored on exit)
        self._check_from_s: float | None = None
        self._check_skip = self.settings.warmup_iters
        self._control, self._closed_loop = control, closed_loop
        self.loop: ClosedLoop | None = None
        self._hints_read = False
        others = co_resident_power_w or {}
        self._residency: dict[str, list[tuple[float, dict[str, float | None]]]] = {
            u: [(-math.inf, {j: others.get(j) for j in (colocated_with or {}).get(u, ())})] for u in self._uuids}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = self._wall0 = self._wall1 = 0.0

    # --- the launcher's side ----------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        """Variables for the workers: the hook channel (and the profiling-run limits in ``pre`` mode)."""
        try:
            self.hook_dir = self.reader.directory = channel.create_hook_dir(self.hook_dir)  # fresh, private, unguessable
        except OSError as e:
            logger.warning("cannot create the step-hook directory %s (%s); iterations will not be measured",
                           self.hook_dir, e.strerror or e)
            return {}
        env = {channel.ENV_HOOK_DIR: str(self.hook_dir)}
        if self.mode is ProfileAction.PRE:
            env.update(pre_run_env(self.settings))
        return env

    def set_exit_code(self, code: int | None) -> None:
        self._exit_code = code

    def set_co_residents(self, uuid: str, jobs: Mapping[str, float | None]) -> None:
        """From now on, ``jobs`` (job id -> profile ``power_w`` or None) share GPU ``uuid`` with this job."""
        others = {j: w for j, w in jobs.items() if j != self.job_id}
        with self._lock:
            if uuid in self._residency and others != self._residency[uuid][-1][1]:
                self._residency[uuid].append((self._clock.now(), others))
                if others and self.loop is not None and not self.loop.stopped:
                    # a shared GPU's cap is every job's on it (the highest wish wins): this run stops moving it
                    logger.info("job %s: GPU %s is now shared; the closed loop stops", self.job_id, uuid)
                    self.loop.stopped = True

    def __enter__(self) -> RunObserver:
        self._t0, self._wall0 = self._clock.now(), self._wall()
        self._guard("start observing", self._start)
        return self

    def __exit__(self, *exc: object) -> bool:
        self._guard("finish observing", self._finish)
        return False  # never swallow the launch's own exceptions

    def poll(self) -> bool:
        """One monitor step: read new step marks, drive the profiler, run the early-stage check.

        Returns False when the step failed (logged as a warning); the monitor thread then stops polling.
        """
        return self._guard("follow the run", self._poll, final=False)

    def summary(self) -> RunSummary:
        rec = self.record
        ctl = self.loop.controller if self.loop is not None else None
        duration = rec.duration_s if rec else max(0.0, self._t1 - self._t0)
        gpu_j = rec.gpu_energy_j if rec else None
        return RunSummary(
            self.job_id, duration, rec.energy_j if rec else None, gpu_j,
            gpu_j / duration if gpu_j is not None and duration > 0 else None,
            rec.iterations if rec else None, rec.iter_time_s if rec else None, self._source,
            self.result.recommended_cap_w if self.result else None, self.result.reason if self.result else None,
            tuple(self.findings), self._profiling_energy_j,
            tuple(m.reason for m in ctl.moves) if ctl else (), ctl.measured_slowdown_pct if ctl else None,
            ctl.cap_w if ctl and ctl.measured_slowdown_pct is not None else None)

    # --- internals ---------------------------------------------------------------------------------
    def _set(self, uuid: str, watts: float) -> None:
        self._user_set_cap(uuid, watts)  # type: ignore[misc]
        self.caps_changed = True

    def _guard(self, what: str, fn: Callable[..., None], *args: Any, **kwargs: Any) -> bool:
        try:
            fn(*args, **kwargs)
            return True
        except Exception as e:  # noqa: BLE001 - observation must never break a launch
            logger.warning("ecolaunch could not %s for job %s: %s: %s", what, self.job_id, type(e).__name__, e)
            logger.debug("observation failure", exc_info=True)
            return False

    def _start(self) -> None:
        snaps = [g for g in self._backend.gpus() if g.uuid in self._uuids]
        self._names = {g.uuid: g.name for g in snaps}
        self._found = {g.uuid: g.power_limit_w for g in snaps}
        try:
            self._bounds = job_cap_bounds(self._rules, snaps)
        except EcolaunchError as e:  # a driver reporting a broken limit range: profile without changing caps
            logger.warning("no power-cap bounds for job %s: %s", self.job_id, e)
        if self.mode in (ProfileAction.INLINE, ProfileAction.PRE):
            self.profiler = Profiler(self._uuids, self.sampler, clock=self._clock, bounds_w=self._bounds,
                                     found_caps_w=self._found, set_cap=self._set_cap,
                                     allowed_slowdown_pct=self._slowdown, eta=self._rules.eta, settings=self.settings)
            self.profiler.update([])  # cap 0 is set now, before the workers start
        elif self.profile is not None:
            current = [c for c in self._found.values() if c is not None]
            # the first iterations are the job's own start-up (allocator, autotuning): the loop starts after them
            if not self._follow_from(min(current) if current else None, self.settings.warmup_iters):
                self._check_from_s = self._t0
        if self._background:
            self.sampler.start()
            self._thread = threading.Thread(target=self._monitor, name="ecolaunch-observer", daemon=True)
            self._thread.start()
        else:
            self.sampler.sample_once()

    def _monitor(self) -> None:
        while not self._stop.wait(self._poll_s):
            if not self.poll():
                if self.profiler is not None:
                    self._guard("restore the power caps", self.profiler.abort, "observation failed")
                return

    def _adopt_hints(self) -> None:
        """Once the script declared a tighter bound (``@ecolaunch.job(max_slowdown_pct=...)``), this run keeps it: the
        profiler's cap choice and the closed loop use it (the launch already used a declared bound from history)."""
        self._hints_read = True
        declared = launch_hints(channel.read_hints(self.hook_dir)).get("max_slowdown_pct")
        if declared is None or declared >= self._slowdown:
            return
        logger.info("job %s declares a %.3g %% slowdown bound (was %.3g %%)", self.job_id, declared, self._slowdown)
        self._slowdown = declared
        if self.profiler is not None:
            self.profiler.allowed_slowdown_pct = declared
        if self.loop is not None:
            self.loop.controller.allowed_slowdown_pct = declared

    def _poll(self, final: bool) -> None:
        if not final and not self._background:
            self.sampler.sample_once()
        self.reader.poll()
        stamps = self.reader.stamps()
        if stamps and not self._hints_read:  # a script writes its hints before its first step
            self._adopt_hints()
        if self.profiler is not None and self.result is None:
            if self.profiler.update(stamps, final=final) is Phase.DONE:
                self._profiled(final)
        if self._check_from_s is not None and not final:
            self._early_check(stamps)
        if self.loop is not None and not final:
            self.loop.step()

    def _profiled(self, final: bool) -> None:
        self.result = self.profiler.result  # type: ignore[union-attr]
        if self.result is not None and self.result.profile is not None:
            self.profile = self.result.profile
        self._store_profile()
        if self.mode is ProfileAction.PRE:
            # An instrumented run stops itself cleanly at its step limit; only a time-window profile needs help.
            if self._on_done is not None and not final and self.profiler.instrumented is False:  # type: ignore[union-attr]
                self._on_done()
            return
        choice = self.result.choice if self.result else None
        if choice is not None and self._set_cap is not None and self._bounds is not None and not final:
            # from the next stamp on, the job runs at the chosen cap (set only when it differs from the cap the
            # profiler restored: no change for nothing); the closed loop follows it
            found = [c for c in self._found.values() if c is not None]
            if (found and abs(min(found) - choice.cap_w) <= 0.5) or self._apply_live(
                    choice.cap_w, f"profiled: setting the power cap to {choice.cap_w:.0f} W"):
                self._follow_from(choice.cap_w, self.reader.count())
        if not final and self.loop is None:
            self._check_from_s, self._check_skip = self._clock.now(), self.settings.settle_iters

    def _follow_from(self, cap_w: float | None, stamp_index: int) -> bool:
        """Start the closed loop at ``cap_w`` (None: the top of the bounds) when it can run: a known curve, caps
        that may be changed, and GPUs this job has to itself (on a shared GPU a cap is everyone's)."""
        shared = any(others for changes in self._residency.values() for _, others in changes)
        if not (self._closed_loop and self.profile is not None and self._set_cap is not None
                and self._bounds is not None) or shared:
            return False
        lo, hi = self._bounds
        points = self.profile.curve_points(hi)
        if not points:
            return False
        cap = hi if cap_w is None else min(max(cap_w, lo), hi)
        controller = CapController(points, self._bounds, self._slowdown, cap, eta=self._rules.eta,
                                   settings=self._control)
        self.loop = ClosedLoop(controller, self.reader, self.sampler, self._uuids, self._clock,
                               self._apply_live, stamp_index, ceiling_w=self._ceiling_w)
        return True

    def _early_check(self, stamps: Sequence[float]) -> None:
        first = next((i for i, t in enumerate(stamps) if t > self._check_from_s), None)  # type: ignore[operator]
        if first is None or len(stamps) - 1 - first < self._check_skip + self.settings.measured_iters:
            return
        start = first + self._check_skip
        times = channel.iteration_times(stamps[start:start + self.settings.measured_iters + 1], 0)
        self._check_from_s = None  # once per run
        series = self.sampler.series(self._uuids[0])
        cap = series[-1].power_limit_w if series else None
        finding = check_early(self.profile, times, self._slowdown, cap_w=cap,
                              max_cap_w=None if self._bounds is None else self._bounds[1])
        if finding is None:
            return
        # without the closed loop (caps may not be changed, or the GPU is shared) the check only reports
        logger.warning("job %s: %s", self.job_id, finding.message)
        self.findings.append(finding.message)

    def _apply_live(self, cap_w: float, why: str) -> bool:
        for uuid in self._uuids:
            try:
                self._set_cap(uuid, cap_w)  # type: ignore[misc]
                self._live[uuid] = cap_w
            except Exception as e:  # noqa: BLE001 - a failed live change leaves the cap as it was
                logger.warning("could not set GPU %s to %.0f W (%s): %s", uuid, cap_w, why, e)
                return False
        logger.info("job %s: %s", self.job_id, why)
        return True

    def _finish(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self._poll_s))
        self.sampler.stop()
        self._t1, self._wall1 = self._clock.now(), self._wall()
        self._guard("read the run's last step marks", self._poll, final=True)
        if self.profiler is not None and self.profiler.phase is not Phase.DONE:
            self._guard("restore the power caps", self.profiler.abort, "observation failed")
        self._guard("restore the power caps", self._restore_live)
        hints = channel.read_hints(self.hook_dir)
        learned = self.loop.controller.learned() if self.loop is not None else ()
        if learned and self.profile is not None:
            # what the run measured at the caps it ran at: the next launch starts from the corrected curve
            self.profile = replace(self.profile, cap_points=merge_points((*self.profile.cap_points, *learned)))
        self.record = self._build_record(hints)
        entry = self._history.lookup(self._fp) if self._fp is not None else None
        if learned and self.profile is not None or (self.result is None and self._fp is not None and (
                hints.get("profile_safe") is True or launch_hints(hints) != (entry.hints if entry else {}))):
            # the corrected curve; or what the script declared, for the next launch (--profile auto, its bound)
            self._store_profile(hints)
        if self.mode is not ProfileAction.PRE:  # a profiling run leaves its profile only
            try:
                self._history.record(self.record)
            except Exception as e:  # noqa: BLE001
                logger.warning("could not store job %s in the history: %s", self.job_id, e)
        shutil.rmtree(self.hook_dir, ignore_errors=True)

    def _restore_live(self) -> None:
        for uuid in list(self._live):
            found = self._found.get(uuid)
            if found is not None and found != self._live[uuid] and self._set_cap is not None:
                try:
                    self._set_cap(uuid, found)
                except Exception as e:  # noqa: BLE001
                    logger.warning("could not restore GPU %s to %.0f W: %s", uuid, found, e)
        self._live.clear()

    def _store_profile(self, hints: Mapping[str, Any] | None = None) -> None:
        if self._fp is None:
            return
        hints = channel.read_hints(self.hook_dir) if hints is None else hints
        entry = self._history.lookup(self._fp)  # keep what history knew when this run measured nothing
        profile = ((self.profile if self.loop is not None else None)
                   or (self.result.profile if self.result else None) or (entry.profile if entry else None))
        safe = hints.get("profile_safe") is True or bool(entry and entry.profile_safe)
        declared = {**(entry.hints if entry else {}), **launch_hints(hints)}
        if profile is not None and not profile.memory_mib and declared.get("memory_mib"):
            # a peak the GPUs could not show (a CPU job on simulated GPUs): what the script declared
            profile = replace(profile, memory_mib=declared["memory_mib"])
        if profile is None and not safe and not declared:
            return
        try:
            self._history.store_profile(self._fp, profile, profile_safe=safe, job_id=self.job_id, now=self._wall(),
                                        hints=declared)
        except Exception as e:  # noqa: BLE001
            logger.warning("could not store the profile of job %s: %s", self.job_id, e)

    def _idle(self, uuid: str) -> float | None:
        if uuid in self._idle_given:
            return self._idle_given[uuid]
        from ecolaunch.devices.catalogue import lookup

        try:
            return lookup(self._names.get(uuid, "")).idle_power_w  # an assumption of the catalogue
        except ConfigError:
            return None

    def _build_record(self, hints: Mapping[str, Any]) -> JobRecord:
        own_w = self.profile.power_w if self.profile else None
        job_j = gpu_j = 0.0
        caps, coloc, samples = {}, {}, {}  # per GPU: dominant cap, co-resident jobs, short series
        for uuid in self._uuids:
            series = self.sampler.series(uuid)
            idle = self._idle(uuid)
            with self._lock:
                changes = [(t, {**{j: demand_weight(w, idle) for j, w in others.items()},
                                self.job_id: demand_weight(own_w, idle)}) for t, others in self._residency[uuid]]
                coloc[uuid] = sorted({j for _, others in self._residency[uuid] for j in others})
            share = attribute(intervals_from_samples(series, changes), idle)
            job_j += share.energy_j.get(self.job_id, 0.0)
            gpu_j += self.sampler.energy_j(uuid)
            caps[uuid] = _dominant_cap(series)
            samples[uuid] = downsample(series, SAMPLE_POINTS, origin_s=self._t0)
        name = hints.get("name") if isinstance(hints.get("name"), str) else self.name
        return JobRecord(
            job_id=self.job_id, user=self.user, name=name or self.job_id, fingerprint=self._fp,
            started=self._wall0, ended=self._wall1, duration_s=max(0.0, self._t1 - self._t0),
            exit_code=self._exit_code, gpus=self._uuids, gpu_names=tuple(self._names.get(u, "") for u in self._uuids),
            power_caps_w=caps, colocated_with={u: j for u, j in coloc.items() if j}, energy_j=job_j,
            gpu_energy_j=gpu_j, profiling_energy_j=self._profiling_energy_j, iterations=self.reader.count(),
            iter_time_s=self.reader.mean_iter_time_s(self.settings.warmup_iters), profile=self.profile,
            profile_action=self._source, recommended_cap_w=self.result.recommended_cap_w if self.result else None,
            recommendation=self.result.reason if self.result else None, findings=tuple(self.findings),
            samples=samples)


def _dominant_cap(series: Sequence[Any]) -> float | None:
    """The power limit a GPU spent the most sampled time at."""
    spent: dict[float | None, float] = {}
    for a, b in zip(series, series[1:]):
        spent[a.power_limit_w] = spent.get(a.power_limit_w, 0.0) + (b.t_s - a.t_s)
    return max(spent, key=spent.__getitem__) if spent else (series[-1].power_limit_w if series else None)
