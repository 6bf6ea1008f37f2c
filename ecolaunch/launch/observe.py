"""Watching one run: the observer that composes sampling, profiling, the closed loop, the early check and the record.

What lives here: :class:`ObserveConfig` (what one run is observed with, as data; the job's bound comes resolved in
``allowed_slowdown_pct``), :class:`RunObserver` (the context manager the launcher wraps around ``run_workers``; its
constructor touches no device or file), and :class:`RunSummary` / :func:`format_summary` (what the CLI prints when the
job ends). What does not: the parts it composes, one job each (:class:`~ecolaunch.launch.monitor.RunMonitor`,
:class:`~ecolaunch.profile.profiler.Profiler`, :class:`~ecolaunch.caps.control.ClosedLoop`,
:class:`~ecolaunch.launch.earlycheck.EarlyCheck`, :class:`~ecolaunch.caps.job.RunCaps`,
:class:`~ecolaunch.launch.record.RunRecorder`). How a run is observed: docs/profiling.md, "The run's observer".
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ecolaunch.admin.rules import Rules, profiler_settings
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.clock import Clock
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.errors import EcolaunchError
from ecolaunch.caps.control import ClosedLoop, ControlSettings, Feeds, start_loop
from ecolaunch.caps.job import RunCaps
from ecolaunch.profile.ddpwait import RankWaits, rank_waits
from ecolaunch.profile.pacing import WINDOW_ITERS, PaceController, WaitReader, pace_summary
from ecolaunch.launch.earlycheck import EarlyCheck
from ecolaunch.launch.monitor import RunMonitor
from ecolaunch.launch.record import RunRecorder, RunSpan
from ecolaunch.profile import channel
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.profile.history import History, JobMatch, JobRecord, declared_steps, launch_hints
from ecolaunch.profile.modes import ProfileAction, ProfilerSettings, pre_run_env
from ecolaunch.jobmodel.capcurve import merge_points
from ecolaunch.profile.profiler import Phase, Profiler, ProfileResult
from ecolaunch.profile.sampler import DEFAULT_INTERVAL_S
from ecolaunch.statedir import StateLayout

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObserveConfig:
    """What one run of job ``job_id`` on ``gpu_uuids`` is observed with (data only; the observer's collaborators,
    the backend, clocks, history and cap setter, are :class:`RunObserver`'s arguments).

    Args:
        mode: the resolved profiling action (:class:`~ecolaunch.profile.modes.ProfileAction` or its value).
        fingerprint: the job's history key (None: no profile is stored); match: how the launch matched its history
            (:meth:`~ecolaunch.profile.history.History.match`: its record says so; a key the script declares is
            remembered through it), None: not matched.
        rules, allowed_slowdown_pct: the admin policy (cap bounds, eta) and the job's bound, resolved by the launch
            (:func:`~ecolaunch.admin.rules.job_bound_pct`).
        profile: what is known of the job before this run (history, or a pre-launch run).
        colocated_with, co_resident_power_w: per GPU the jobs already on it (the decision's), and their profiles'
            ``power_w`` where known; idle_power_w: per GPU (default: the catalogue's assumption).
        settings: the profiler's (default: from ``rules``); control: the closed loop's (default: its own).
        background: run the sampler and monitor threads (tests pass False and call :meth:`RunObserver.poll`);
            interval_s, poll_s: seconds between GPU samples, and between polls of the step marks.
        profiling_energy_j: what a pre-launch profiling run used (for the summary and the record).
        profile_source: what the record calls the profiling action (default ``mode``'s value; e.g. ``"pre"``
            for the real run after a pre-launch profiling run, which itself runs in ``history`` mode).
        closed_loop: whether the closed loop may run; pace: whether pace-matching may lower single GPUs' caps
            (:mod:`ecolaunch.profile.pacing`; not on a node of a multi-node job whose caps are the leader's).
        peer_waits: a job over several nodes that paces on each node: publishes this node's ranks' mean spans of a
            window and returns the shortest of the other nodes' (:meth:`~ecolaunch.launch.nodes.Meeting.share_waits`).
        steps: the run's length as the command line declares it (``--steps``; None: what the script declares);
            predicted_s: its length in seconds as the launch expected it (the request's ``expected_s``), which the
            record keeps.
    """

    job_id: str
    gpu_uuids: tuple[str, ...]
    state_dir: Path
    mode: ProfileAction
    fingerprint: str | None
    rules: Rules
    allowed_slowdown_pct: float
    user: str = ""
    name: str = ""
    #: ``name`` is the command line's (``--name``): it wins over the name the script declares (``@ecolaunch.job``)
    name_given: bool = False
    profile: Profile | None = None
    colocated_with: Mapping[str, Sequence[str]] | None = None
    co_resident_power_w: Mapping[str, float | None] | None = None
    idle_power_w: Mapping[str, float | None] | None = None
    settings: ProfilerSettings | None = None
    control: ControlSettings | None = None
    interval_s: float = DEFAULT_INTERVAL_S
    poll_s: float = 1.0
    background: bool = True
    profiling_energy_j: float | None = None
    profile_source: str | None = None
    closed_loop: bool = True
    pace: bool = True
    match: JobMatch | None = None
    peer_waits: Callable[[Mapping[int, float]], float | None] | None = None
    steps: int | None = None
    predicted_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", ProfileAction(self.mode))
        object.__setattr__(self, "gpu_uuids", tuple(self.gpu_uuids))
        object.__setattr__(self, "state_dir", Path(self.state_dir))

    @property
    def source(self) -> str:
        """What the record calls the profiling action."""
        return self.profile_source or self.mode.value

    def profiler_settings(self) -> ProfilerSettings:
        return self.settings or profiler_settings(self.rules)


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


def with_points(profile: Profile, points: Sequence[Any], top_cap_w: float) -> Profile:
    """``profile`` with ``points`` as its cap points (those at one cap pooled); when one lies at ``top_cap_w`` (the
    admin's maximum: uncapped), the profile's uncapped iteration time and power are that point's, so that the
    profile never holds two figures for the uncapped job."""
    merged = merge_points(points)
    top = next((p for p in merged if p.power_cap_w >= top_cap_w - 1e-6), None)
    if top is None:
        return replace(profile, cap_points=merged)
    return replace(profile, cap_points=merged, iter_time_s=top.iter_time_s, power_w=top.power_w)


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
        ceiling_w: the most the closed loop may raise the job's cap to now (a power budget's,
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
        self._backend, self._uuids, self._clock, self._wall = backend, config.gpu_uuids, clock, wall_clock
        self._ceiling_w, self._on_done = ceiling_w, on_profile_done
        self._waiting = 0.0  # the waiting jobs this job's slowdown delays, as the last heartbeat said (set_waiting)
        #: the job's bound; tightened once when the script declares a tighter one (:meth:`_adopt_hints`)
        self.allowed_slowdown_pct = config.allowed_slowdown_pct
        self.profile = config.profile
        self.settings = config.profiler_settings()
        suffix = "-profile" if self.mode is ProfileAction.PRE else ""
        hooks = StateLayout(config.state_dir).run_hooks(f"{config.job_id}{suffix}")
        self.monitor = RunMonitor(backend, self._uuids, hooks,
                                  clock=clock, interval_s=config.interval_s, poll_s=config.poll_s,
                                  background=config.background)
        self.caps = RunCaps(config.job_id, self._uuids, set_cap)
        self.recorder = RunRecorder(config.job_id, self._uuids, history=history, fingerprint=config.fingerprint,
                                    match=config.match,
                                    sampler=self.monitor.sampler, clock=clock, wall_clock=wall_clock,
                                    colocated_with=config.colocated_with,
                                    co_resident_power_w=config.co_resident_power_w, idle_power_w=config.idle_power_w)
        self.early = EarlyCheck(self.settings, self.monitor.sampler, self._uuids)
        self.profiler: Profiler | None = None
        self.loop: ClosedLoop | None = None
        self.result: ProfileResult | None = None
        self.findings: list[str] = []
        self._waits: RankWaits | None = None
        #: pace-matching (:mod:`ecolaunch.profile.pacing`): the ranks' waits, the controller, where its window began
        self._wait_reader: WaitReader | None = None
        self.pace: PaceController | None = None
        self._pace_from = (0, 0)  # (waits, closed-loop moves) at the last decision
        self._pace_fresh = True  # the next window also waits out the warm-up (first iterations, or a new round's)
        self._pace_lock = threading.Lock()  # a new rendezvous round (torch's thread) against the polls
        self._max_w: dict[str, float] = {}
        self.record: JobRecord | None = None
        self._exit_code: int | None = None
        self._bounds: tuple[float, float] | None = None
        self._hints_read = False
        #: the steps marked and the mean step time so far, as the monitor thread last read them (see :meth:`progress`)
        self._steps: tuple[int, float | None] = (0, None)
        self._t0 = self._t1 = self._wall0 = self._wall1 = 0.0

    # --- the launcher's side ----------------------------------------------------------------------
    def worker_env(self) -> dict[str, str]:
        """Variables for the workers: the hook channel (and the profiling-run limits in ``pre`` mode)."""
        if not self.monitor.open_channel():
            return {}
        env = {channel.ENV_HOOK_DIR: str(self.monitor.hook_dir)}
        if self.mode is ProfileAction.PRE:
            env.update(pre_run_env(self.settings))
        return env

    def set_exit_code(self, code: int | None) -> None:
        self._exit_code = code

    def set_waiting(self, share: float) -> None:
        """From now on ``share`` waiting jobs are delayed by this job's slowdown (the heartbeat's
        :class:`~ecolaunch.launch.session.Beat`): the closed loop weighs them under ``[energy] wait_weight``."""
        self._waiting = share
        loop = self.loop
        if loop is not None:
            loop.controller.set_waiting(share)

    def set_co_residents(self, uuid: str, jobs: Mapping[str, float | None]) -> None:
        """From now on, ``jobs`` (job id -> profile ``power_w`` or None) share GPU ``uuid`` with this job."""
        if self.recorder.set_co_residents(uuid, jobs) and self.loop is not None and not self.loop.stopped:
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

    def measured_profile(self) -> Profile | None:
        """The profile this run measured (its profiler done, with power), None before or without one (for the
        heartbeat, another thread: one attribute read)."""
        result = self.result
        profile = None if result is None else result.profile
        return profile if profile is not None and profile.knows_power else None

    def progress(self) -> JobProgress | None:
        """The run so far (for the heartbeat, another thread): the steps and the mean step time the monitor thread
        last read, the job's share of its GPUs' energy and the estimated saving against uncapped
        (:meth:`~ecolaunch.launch.record.RunRecorder.so_far`), the steps the whole run is declared to mark
        (``--steps``, else what the script declares: :func:`~ecolaunch.profile.history.declared_steps`); None, logged,
        when it cannot be measured."""
        measured: list[JobProgress] = []

        def measure() -> None:
            iterations, iter_time_s = self._steps
            energy_j, saving_j = self.recorder.so_far(self.profile, self._bounds[1] if self._bounds else None)
            total = self.config.steps or declared_steps(self.monitor.hints())
            measured.append(JobProgress(at=self._wall(), iterations=iterations, iter_time_s=iter_time_s,
                                        energy_j=energy_j, saving_j=saving_j, total_iterations=total))

        self._guard("measure the run so far", measure)
        return measured[0] if measured else None

    def summary(self) -> RunSummary:
        rec = self.record
        ctl = self.loop.controller if self.loop is not None else None
        duration = rec.duration_s if rec else max(0.0, self._t1 - self._t0)
        gpu_j = rec.gpu_energy_j if rec else None
        n = max(1, len(self._uuids))
        return RunSummary(
            self.job_id, duration, rec.energy_j if rec else None, gpu_j,
            gpu_j / duration / n if gpu_j is not None and duration > 0 else None,
            rec.iterations if rec else None, rec.iter_time_s if rec else None, self.config.source,
            self.result.recommended_cap_w if self.result else None, self.result.reason if self.result else None,
            tuple(self.findings), self.config.profiling_energy_j,
            (*(m.reason for m in (ctl.moves if ctl else ())), *pace_summary(self.pace)),
            ctl.measured_slowdown_pct if ctl else None,
            ctl.cap_w if ctl and ctl.measured_slowdown_pct is not None else None, n, self.not_learned(),
            self._waits.line() if self._waits is not None else None,
            measured_error_pp=ctl.measured_error_pp if ctl else None)

    def not_learned(self) -> str | None:
        """Why this run updates nothing in the history: its iterations cannot be its profile's job undisturbed
        (:func:`~ecolaunch.jobmodel.capchoice.off_profile`, seen by the early check or the closed loop); None when
        it learns as usual, and for a run that shared a GPU (the others slow it: its profile is the job alone; no
        cap point is learned there anyway)."""
        why = self.early.off_profile or (self.loop.controller.off_profile if self.loop is not None else None)
        if why is None or self.recorder.shared():  # on a shared GPU the others slow it: its profile is solo
            return None
        return (f"{why}: a stall, a CPU or GPU shared with other work, or another job under this history match "
                f"(`ecolaunch history {self.job_id}` says which; `--fresh-profile` measures the job again)")

    # --- internals ---------------------------------------------------------------------------------
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
        self.recorder.names = {g.uuid: g.name for g in snaps}
        self.caps.found = {g.uuid: g.power_limit_w for g in snaps}
        self._max_w = {g.uuid: g.power_limit_max_w for g in snaps if g.power_limit_max_w}
        try:
            self._bounds = job_cap_bounds(self.config.rules, snaps)
        except EcolaunchError as e:  # a driver reporting a broken limit range: profile without changing caps
            logger.warning("no power-cap bounds for job %s: %s", self.job_id, e)
        if self.mode in (ProfileAction.INLINE, ProfileAction.PRE):
            self.profiler = Profiler(self._uuids, self.monitor.sampler, clock=self._clock, bounds_w=self._bounds,
                                     caps=self.caps, allowed_slowdown_pct=self.allowed_slowdown_pct,
                                     eta=self.config.rules.eta, settings=self.settings)
            self.profiler.update([])  # cap 0 is set now, before the workers start
        elif self.profile is not None:
            current = [c for c in self.caps.found.values() if c is not None]
            # the first iterations are the job's own start-up (allocator, autotuning): the loop starts after them
            looped = self._follow_from(min(current) if current else None, self.settings.warmup_iters)
            self.early.arm(self._t0, self.settings.warmup_iters, slowdown=not looped)
        self.monitor.start(self.poll, self._on_monitor_failure)

    def _on_monitor_failure(self) -> None:
        if self.profiler is not None:
            self._guard("restore the power caps", self.profiler.abort, "observation failed")

    def _adopt_hints(self) -> None:
        """Once the script declared a tighter bound (``@ecolaunch.job(max_slowdown_pct=...)``), this run keeps it: the
        profiler's cap choice and the closed loop use it (the launch already used a declared bound from history)."""
        self._hints_read = True
        declared = launch_hints(self.monitor.hints()).get("max_slowdown_pct")
        if declared is None or declared >= self.allowed_slowdown_pct:
            return
        logger.info("job %s declares a %.3g %% slowdown bound (was %.3g %%)", self.job_id, declared,
                    self.allowed_slowdown_pct)
        self.allowed_slowdown_pct = declared
        if self.profiler is not None:
            self.profiler.allowed_slowdown_pct = declared
        if self.loop is not None:
            self.loop.controller.allowed_slowdown_pct = declared

    def _poll(self, final: bool) -> None:
        stamps = self.monitor.read(final=final)
        reader = self.monitor.reader
        self._steps = (reader.count(), reader.mean_iter_time_s(self.settings.warmup_iters))
        if stamps and not self._hints_read:  # a script writes its hints before its first step
            self._adopt_hints()
        if self.profiler is not None and self.result is None:
            if self.profiler.update(stamps, final=final) is Phase.DONE:
                self._profiled(final)
        if self.early.armed and not final:
            self._early_check(stamps)
        if self.loop is not None and not final:
            self.loop.step()
        if not final:
            self._pace_step()

    def new_round(self) -> list[str]:
        """The workers restart in a new rendezvous round (another node joined or left, or a restart): the caps
        pacing moved go back to where pacing found them, and pacing starts afresh once the new round's workers
        have run a window (the lines to print)."""
        with self._pace_lock:
            lines = [] if self.pace is None else [m.reason for m in self.pace.restore()]
            self.pace, self._pace_fresh = None, True
            if self._wait_reader is not None:
                self._wait_reader.skip_existing()
            self._pace_from = (0, self._pace_from[1])
            return lines

    def _pace_step(self) -> None:
        with self._pace_lock:
            self._pace_window()

    def _pace_window(self) -> None:
        """Pace-matching (:mod:`ecolaunch.profile.pacing`): once the profile is done, every window of every rank's
        all-reduce waits (``ecolaunch.allreduce_wait_hook``), lower the cap of the rank that waits most. A move of
        the closed loop (one cap for every GPU) starts pacing afresh from its cap."""
        peers = self.config.peer_waits
        if (not self.config.pace or len(self._uuids) < (1 if peers else 2) or not self.caps.can_set or self.mode is ProfileAction.PRE
                or (self.profiler is not None and self.result is None) or self.recorder.shared()):
            return
        if self._wait_reader is None:
            self._wait_reader = WaitReader(self.monitor.hook_dir)
        self._wait_reader.poll()
        waits, loop_moves = self._wait_reader.count(), len(self.loop.controller.moves) if self.loop else 0
        # the first decision also waits out the warm-up (first iterations are slow on every rank)
        window = WINDOW_ITERS + (self.settings.warmup_iters if self._pace_fresh else 0)
        if waits - self._pace_from[0] < window:
            return
        if loop_moves != self._pace_from[1]:  # the closed loop moved every GPU: what pacing measured is gone
            self._pace_from, self.pace = (waits, loop_moves), None
            return
        _, stamps = self.monitor.reader.since(self.monitor.reader.count() - WINDOW_ITERS - 1)
        if len(stamps) < 2:
            return
        times = channel.iteration_times(stamps, 0)
        if not times:
            return
        iter_time_s = sum(times) / len(times)
        iter_se_s = statistics.stdev(times) / math.sqrt(len(times)) if len(times) > 1 else 0.0
        if self.pace is None:
            caps = {u: self.caps.current(u) or self._max_w.get(u) for u in self._uuids}
            if any(c is None for c in caps.values()) or any(u not in self._max_w for u in self._uuids):
                return
            self.pace = PaceController(self._uuids, caps, self._max_w, self.caps.set)
        self._pace_from, self._pace_fresh = (waits, loop_moves), False
        spans = self._wait_reader.mean_spans(WINDOW_ITERS)
        move = self.pace.decide(spans, iter_time_s, iter_se_s, floor_s=peers(spans) if peers else None)
        if move is not None:
            logger.info("job %s: %s", self.job_id, move.reason)

    def _profiled(self, final: bool) -> None:
        self.result = self.profiler.result  # type: ignore[union-attr]
        if self.result is not None and self.result.profile is not None:
            self.profile = self.result.profile
        self._store_profile(self.monitor.hints())
        if self.mode is ProfileAction.PRE:
            # An instrumented run stops itself cleanly at its step limit; only a time-window profile needs help.
            if self._on_done is not None and not final and self.profiler.instrumented is False:  # type: ignore[union-attr]
                self._on_done()
            return
        choice = self.result.choice if self.result else None
        if choice is not None and self.caps.can_set and self._bounds is not None and not final:
            # from the next stamp on, the job runs at the chosen cap (set only when it differs from the cap the
            # profiler restored: no change for nothing); the closed loop follows it
            found = [c for c in self.caps.found.values() if c is not None]
            if (found and abs(min(found) - choice.cap_w) <= 0.5) or self.caps.apply(
                    choice.cap_w, f"profiled: setting the power cap to {choice.cap_w:.0f} W"):
                self._follow_from(choice.cap_w, self.monitor.reader.count())
        if not final and self.profile is not None:
            self.early.arm(self._clock.now(), self.settings.settle_iters, slowdown=self.loop is None)

    def _follow_from(self, cap_w: float | None, stamp_index: int) -> bool:
        """Start the closed loop at ``cap_w`` (None: the top of the bounds) when it can run: a known curve, caps
        that may be changed, and GPUs this job has to itself (on a shared GPU a cap is everyone's)."""
        if not (self.config.closed_loop and self.profile is not None and self.caps.can_set
                and self._bounds is not None) or self.recorder.shared():
            return False
        feeds = Feeds(self.monitor.reader, self.monitor.sampler, self._uuids, self._clock, self.caps.apply,
                      self._ceiling_w)
        self.loop = start_loop(self.profile, self.config.rules, self._bounds, self.allowed_slowdown_pct, cap_w, feeds,
                               stamp_index, waiting=self._waiting, control=self.config.control)
        return self.loop is not None

    def _early_check(self, stamps: Sequence[float]) -> None:
        finding = self.early.step(stamps, self.profile, self.allowed_slowdown_pct, self._bounds)
        if self.early.off_profile is not None and not self.recorder.shared():
            match = self.config.match
            logger.warning("job %s: %s: a disturbed run, or not the job whose profile it matched (%s)", self.job_id,
                           self.early.off_profile, match.how if match is not None else "its fingerprint")
        if finding is None:
            return
        # without the closed loop (caps may not be changed, or the GPU is shared) the check only reports
        logger.warning("job %s: %s", self.job_id, finding.message)
        self.findings.append(finding.message)

    def _finish(self) -> None:
        self.monitor.stop()
        self._t1, self._wall1 = self._clock.now(), self._wall()
        self._guard("read the run's last step marks", self._poll, final=True)
        if self.profiler is not None and self.profiler.phase is not Phase.DONE:
            self._guard("restore the power caps", self.profiler.abort, "observation failed")
        self._guard("restore the power caps", self.caps.restore)
        hints = self.monitor.hints()
        not_learned = self.not_learned()
        learned = self.loop.controller.learned() if self.loop is not None and not_learned is None else ()
        if learned and self.profile is not None and self._bounds is not None:
            # what the run measured at the caps it ran at: the next launch starts from the corrected curve
            self.profile = with_points(self.profile, (*self.profile.cap_points, *learned), self._bounds[1])
        reader = self.monitor.reader
        self.record = self.recorder.build(
            RunSpan(self._t0, self._t1, self._wall0, self._wall1), user=self.config.user, name=self.config.name,
            name_given=self.config.name_given, hints=hints, profile=self.profile, exit_code=self._exit_code, iterations=reader.count(),
            iter_time_s=reader.mean_iter_time_s(self.settings.warmup_iters), source=self.config.source,
            result=self.result, findings=self.findings, profiling_energy_j=self.config.profiling_energy_j,
            not_learned=not_learned, predicted_s=self.config.predicted_s)
        if not_learned is not None:
            logger.info("job %s: the history is not updated from this run: %s", self.job_id, not_learned)
        elif learned and self.profile is not None or (self.result is None and self.recorder.hints_changed(hints)):
            # the corrected curve; or what the script declared, for the next launch (--profile auto, its bound)
            self._store_profile(hints)
        if self.mode is not ProfileAction.PRE:  # a profiling run leaves its profile only
            self.recorder.write(self.record)
        self._waits = rank_waits(channel.read_waits(self.monitor.hook_dir), self.record.iter_time_s,
                                 self.settings.warmup_iters)
        self.monitor.close()

    def _store_profile(self, hints: Mapping[str, Any]) -> None:
        self.recorder.store_profile((self.profile if self.loop is not None else None)
                                    or (self.result.profile if self.result else None), hints)
