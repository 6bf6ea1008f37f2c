"""Watching one run: the one loop that drives the run's plug-ins, and what the CLI shows when the job ends.

What lives here: :class:`RunObserver` (the context manager the launcher wraps around ``run_workers``; its constructor
touches no device or file; one loop, :meth:`RunObserver.poll`, drives the plug-ins in order: profiling, the early
check, the closed loop, pace-matching, the record) and :class:`RunSummary` / :func:`format_summary`. What does not:
the run's state and configuration (:mod:`ecolaunch.run.state`), the plug-ins (one module each in this package), the
caps (:mod:`ecolaunch.caps`). How a run is observed: docs/profiling.md, "The run's observer".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ecolaunch.caps.job import RunCaps
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.caps.control import ClosedLoop
from ecolaunch.clock import Clock
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.errors import EcolaunchError
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.profile import channel
from ecolaunch.profile.earlycheck import EarlyCheck
from ecolaunch.profile.history import History, JobRecord, declared_steps, launch_hints
from ecolaunch.profile.modes import ProfileAction, pre_run_env
from ecolaunch.profile.monitor import RunMonitor
from ecolaunch.profile.profiler import ProfileResult
from ecolaunch.profile.record import RunRecorder
from ecolaunch.run.closedloop import Following, follow
from ecolaunch.run.earlycheck import Checking
from ecolaunch.run.pacing import Pacing
from ecolaunch.run.profiling import Profiling
from ecolaunch.run.record import Recording
from ecolaunch.run.state import ObserveConfig, Part, Run, RunState, guard
from ecolaunch.statedir import StateLayout

__all__ = ["ObserveConfig", "RunObserver", "RunSummary", "format_summary"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What the CLI shows when a job ends. Energies in J; ``None``: not known. ``mean_power_w`` is per GPU (the
    GPUs' energy over the run, divided by the run time and by ``gpus``, their number)."""

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
    gpus: int = 1
    #: why this run updated nothing in the history (its iterations were not its profile's job undisturbed)
    not_learned: str | None = None
    #: what the ranks waited at the all-reduce for the slowest (``ecolaunch.allreduce_wait_hook``), one line
    allreduce_wait: str | None = None
    #: the error of ``measured_slowdown_pct`` (percentage points; None: not known): a slowdown within it is none
    measured_error_pp: float | None = None

    @property
    def energy_wh(self) -> float | None:
        return None if self.energy_j is None else self.energy_j / 3600.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "findings": list(self.findings), "cap_moves": list(self.cap_moves),
                "energy_wh": self.energy_wh}


def format_summary(s: RunSummary) -> str:
    """The end-of-job lines, each starting ``ecolaunch:``."""
    energy = "energy N/A" if s.energy_j is None else f"{s.energy_j / 1e3:.3g} kJ ({s.energy_wh:.3g} Wh)"
    power = "" if s.mean_power_w is None else f", mean power {s.mean_power_w:.0f} W per GPU" + (
        f" ({s.gpus} GPUs)" if s.gpus > 1 else "")
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
    if s.measured_slowdown_pct is not None and s.final_cap_w is not None and s.not_learned is None:
        lines.append(f"ecolaunch: power cap: ended at {s.final_cap_w:.0f} W, measured {_how_fast(s)} "
                     "(kept in the history for the next launch)")
    if s.allreduce_wait:
        lines.append(f"ecolaunch: {s.allreduce_wait}")
    lines += [f"ecolaunch: warning: {f}" for f in s.findings]
    if s.not_learned is not None:
        lines.append(f"ecolaunch: history: not updated from this run: {s.not_learned}")
    return "\n".join(lines)


def _how_fast(s: RunSummary) -> str:
    """The measured slowdown against alone and uncapped in words: one within its measurement error is none."""
    slow, error = s.measured_slowdown_pct, s.measured_error_pp
    if error is not None and abs(slow) <= error:
        return f"as fast as alone and uncapped within its measurement error of ±{error:.1f} points"
    how = (f"{slow:.1f} % slower than" if slow >= 0.05 else "as fast as" if slow > -0.05 else
           f"{-slow:.1f} % faster than")
    return f"{how} alone and uncapped" + ("" if error is None else f", beyond its measurement error of ±{error:.1f} points")


class RunObserver:
    """Observes one run configured by ``config`` (docs/profiling.md, "The run's observer").

    Args:
        history: where the profile and the record go.
        set_cap: ``set_cap(uuid, watts)`` to change caps (profiling, live adjustment; in a launch
            :meth:`~ecolaunch.caps.job.JobCaps.set_cap`); None: never change caps.
        ceiling_w: the most the closed loop may raise the job's cap to now (a power budget's ceiling,
            :meth:`~ecolaunch.caps.job.JobCaps.ceiling_w`); None: no ceiling.
        on_profile_done: called once when a time-window profile (an uninstrumented script) ends, so that a
            pre-launch run can stop its workers; instrumented workers stop at ``ECOLAUNCH_PROFILE_STEPS``.
        wall_clock: the wall time of the record (the run's own clock is ``clock``).
    """

    def __init__(self, config: ObserveConfig, backend: GpuBackend, *, clock: Clock, history: History,
                 set_cap: Callable[[str, float], Any] | None = None,
                 ceiling_w: Callable[[], float | None] | None = None,
                 on_profile_done: Callable[[], None] | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.job_id, self.mode = config.job_id, config.mode
        self._backend = backend
        uuids = config.gpu_uuids
        settings = config.profiler_settings()
        suffix = "-profile" if self.mode is ProfileAction.PRE else ""
        hooks = StateLayout(config.state_dir).run_hooks(f"{config.job_id}{suffix}")
        monitor = RunMonitor(backend, uuids, hooks, clock=clock, interval_s=config.interval_s, poll_s=config.poll_s,
                             background=config.background)
        recorder = RunRecorder(config.job_id, uuids, history=history, fingerprint=config.fingerprint,
                               match=config.match, sampler=monitor.sampler, clock=clock, wall_clock=wall_clock,
                               colocated_with=config.colocated_with,
                               co_resident_power_w=config.co_resident_power_w, idle_power_w=config.idle_power_w)
        self.run = Run(config, clock, wall_clock, monitor, RunCaps(config.job_id, uuids, set_cap), recorder,
                       EarlyCheck(settings, monitor.sampler, uuids), settings, config.allowed_slowdown_pct,
                       config.profile, ceiling_w=ceiling_w, on_profile_done=on_profile_done)
        self.profiling, self.pacing, self.recording = Profiling(), Pacing(), Recording()
        #: the plug-ins, in the order each poll steps them and the end finishes them
        self.parts: tuple[Part, ...] = (self.profiling, Checking(), Following(), self.pacing, self.recording)
        self._hints_read = False
        #: the steps marked and the mean step time so far, as the monitor thread last read them (see :meth:`progress`)
        self._steps: tuple[int, float | None] = (0, None)

    # --- what the run holds, for the launcher and the tests -----------------------------------------------
    @property
    def monitor(self) -> RunMonitor:
        return self.run.monitor

    @property
    def result(self) -> ProfileResult | None:
        return self.run.result

    @property
    def loop(self) -> ClosedLoop | None:
        return self.run.loop

    @property
    def findings(self) -> list[str]:
        return self.run.findings

    @property
    def record(self) -> JobRecord | None:
        return self.run.record

    # --- the launcher's side ----------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        """Variables for the workers: the hook channel (and the profiling-run limits in ``pre`` mode)."""
        monitor = self.run.monitor
        if not monitor.open_channel():
            return {}
        env = {channel.ENV_HOOK_DIR: str(monitor.hook_dir)}
        if self.mode is ProfileAction.PRE:
            env.update(pre_run_env(self.run.settings))
        return env

    def set_exit_code(self, code: int | None) -> None:
        self.run.exit_code = code

    def set_waiting(self, share: float) -> None:
        """From now on ``share`` waiting jobs are delayed by this job's slowdown (the heartbeat's
        :class:`~ecolaunch.launch.session.Beat`): the closed loop weighs them under ``[energy] wait_weight``."""
        Following.set_waiting(self.run, share)

    def set_co_residents(self, uuid: str, jobs: Mapping[str, float | None]) -> None:
        """From now on, ``jobs`` (job id -> profile ``power_w`` or None) share GPU ``uuid`` with this job."""
        if self.run.recorder.set_co_residents(uuid, jobs):
            Following.shared_now(self.run, uuid)

    def new_round(self) -> list[str]:
        """The workers restart in a new rendezvous round (another node joined or left, or a restart): the caps
        pacing moved go back to where pacing found them, and pacing starts afresh (the lines to print)."""
        return self.pacing.new_round()

    def __enter__(self) -> RunObserver:
        self.run.t0, self.run.wall0 = self.run.clock.now(), self.run.wall()
        guard(self.job_id, "start observing", self._start)
        return self

    def __exit__(self, *exc: object) -> bool:
        guard(self.job_id, "finish observing", self._finish)
        return False  # never swallow the launch's own exceptions

    def poll(self) -> bool:
        """One step of the run's loop: read new step marks, then step every plug-in.

        Returns False when the step failed (logged as a warning); the monitor thread then stops polling.
        """
        return guard(self.job_id, "follow the run", self._poll, False)

    def measured_profile(self) -> Profile | None:
        """The profile this run measured (its profiler done, with power), None before or without one (for the
        heartbeat, another thread: one attribute read)."""
        result = self.run.result
        profile = None if result is None else result.profile
        return profile if profile is not None and profile.knows_power else None

    def progress(self) -> JobProgress | None:
        """The run so far (for the heartbeat, another thread): the steps and the mean step time the monitor thread
        last read, the job's share of its GPUs' energy and the estimated saving against uncapped
        (:meth:`~ecolaunch.profile.record.RunRecorder.so_far`), the steps the whole run is declared to mark
        (``--steps``, else what the script declares: :func:`~ecolaunch.profile.history.declared_steps`); None, logged,
        when it cannot be measured."""
        measured: list[JobProgress] = []
        run = self.run

        def measure() -> None:
            iterations, iter_time_s = self._steps
            energy_j, saving_j = run.recorder.so_far(run.profile, run.bounds[1] if run.bounds else None)
            total = self.config.steps or declared_steps(run.monitor.hints())
            measured.append(JobProgress(at=run.wall(), iterations=iterations, iter_time_s=iter_time_s,
                                        energy_j=energy_j, saving_j=saving_j, total_iterations=total))

        guard(self.job_id, "measure the run so far", measure)
        return measured[0] if measured else None

    def summary(self) -> RunSummary:
        run, rec = self.run, self.run.record
        ctl = run.loop.controller if run.loop is not None else None
        duration = rec.duration_s if rec else max(0.0, run.t1 - run.t0)
        gpu_j = rec.gpu_energy_j if rec else None
        n = max(1, len(run.uuids))
        waits = self.recording.waits
        return RunSummary(
            self.job_id, duration, rec.energy_j if rec else None, gpu_j,
            gpu_j / duration / n if gpu_j is not None and duration > 0 else None,
            rec.iterations if rec else None, rec.iter_time_s if rec else None, self.config.source,
            run.result.recommended_cap_w if run.result else None, run.result.reason if run.result else None,
            tuple(run.findings), self.config.profiling_energy_j,
            (*(m.reason for m in (ctl.moves if ctl else ())), *((ctl.disowned,) if ctl and ctl.disowned else ()),
             *self.pacing.lines()),
            ctl.measured_slowdown_pct if ctl else None,
            ctl.cap_w if ctl and ctl.measured_slowdown_pct is not None else None, n, self.not_learned(),
            waits.line() if waits is not None else None,
            measured_error_pp=ctl.measured_error_pp if ctl else None)

    def not_learned(self) -> str | None:
        """Why this run updates nothing in the history (:meth:`~ecolaunch.run.state.Run.not_learned`)."""
        return self.run.not_learned()

    # --- the loop ----------------------------------------------------------------------------------
    def _start(self) -> None:
        """Read the job's GPUs, then put the run in its first state: profiling (``inline``, ``pre``), following its
        known curve, or watching; then start the monitor thread, which polls."""
        run = self.run
        snaps = [g for g in self._backend.gpus() if g.uuid in run.uuids]
        run.recorder.names = {g.uuid: g.name for g in snaps}
        run.caps.found = {g.uuid: g.power_limit_w for g in snaps}
        run.max_w = {g.uuid: g.power_limit_max_w for g in snaps if g.power_limit_max_w}
        try:
            run.bounds = job_cap_bounds(self.config.rules, snaps)
        except EcolaunchError as e:  # a driver reporting a broken limit range: profile without changing caps
            logger.warning("no power-cap bounds for job %s: %s", self.job_id, e)
        run.state = RunState.WATCHING
        for part in self.parts:
            part.start(run)
        if run.state is not RunState.PROFILING and run.profile is not None:
            current = [c for c in run.caps.found.values() if c is not None]
            # the first iterations are the job's own start-up (allocator, autotuning): the loop starts after them
            looped = follow(run, min(current) if current else None, run.settings.warmup_iters)
            run.early.arm(run.t0, run.settings.warmup_iters, slowdown=not looped)
        run.monitor.start(self.poll, self._on_monitor_failure)

    def _on_monitor_failure(self) -> None:
        self.profiling.abort(self.run)

    def _adopt_hints(self) -> None:
        """Once the script declared a tighter bound (``@ecolaunch.job(max_slowdown_pct=...)``), this run keeps it: the
        profiler's cap choice and the closed loop use it (the launch already used a declared bound from history)."""
        self._hints_read = True
        run = self.run
        declared = launch_hints(run.monitor.hints()).get("max_slowdown_pct")
        if declared is None or declared >= run.allowed_slowdown_pct:
            return
        logger.info("job %s declares a %.3g %% slowdown bound (was %.3g %%)", self.job_id, declared,
                    run.allowed_slowdown_pct)
        run.allowed_slowdown_pct = declared

    def _poll(self, final: bool) -> None:
        run = self.run
        stamps = run.monitor.read(final=final)
        reader = run.monitor.reader
        self._steps = (reader.count(), reader.mean_iter_time_s(run.settings.warmup_iters))
        if stamps and not self._hints_read:  # a script writes its hints before its first step
            self._adopt_hints()
        for part in self.parts:
            part.step(run, stamps, final)

    def _finish(self) -> None:
        run = self.run
        run.monitor.stop()
        run.t1, run.wall1 = run.clock.now(), run.wall()
        guard(self.job_id, "read the run's last step marks", self._poll, True)
        first, *rest = self.parts  # profiling: an unfinished profile puts back the caps it set, then the run's go back
        first.finish(run)
        guard(self.job_id, "restore the power caps", run.caps.restore)
        for part in rest:
            part.finish(run)
        run.state = RunState.ENDED
        run.monitor.close()
