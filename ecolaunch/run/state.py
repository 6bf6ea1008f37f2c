"""The state of one observed run: what it is observed with, where it stands, and what its plug-ins share.

What lives here: :class:`ObserveConfig` (what one run is observed with, as data; the job's bound comes resolved in
``allowed_slowdown_pct``), :class:`RunState` (where the run stands), :class:`Run` (what the plug-ins share: the run's
monitor, caps, recorder and early check, its bounds and profile, the closed loop, the findings), :class:`Part` (the
one interface of a plug-in) and :func:`guard`. What does not: the loop that drives the plug-ins
(:mod:`ecolaunch.run.observer`), the plug-ins themselves (one module each in this package), the parts they drive
(the profiler, the monitor, the recorder and the early check in ``ecolaunch.profile``; the closed loop and the run's
caps in ``ecolaunch.caps``). How a run is observed: docs/profiling.md, "The run's observer".
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ecolaunch.admin.rules import Rules, profiler_settings
from ecolaunch.caps.control import ClosedLoop, ControlSettings
from ecolaunch.caps.job import RunCaps
from ecolaunch.clock import Clock
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.earlycheck import EarlyCheck
from ecolaunch.profile.history import JobMatch, JobRecord
from ecolaunch.profile.modes import ProfileAction, ProfilerSettings
from ecolaunch.profile.monitor import RunMonitor
from ecolaunch.profile.profiler import ProfileResult
from ecolaunch.profile.record import RunRecorder
from ecolaunch.profile.sampler import DEFAULT_INTERVAL_S

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


class RunState(enum.Enum):
    """Where an observed run stands: the observer and the plug-ins move it, every plug-in reads it."""

    STARTING = "starting"  # constructed: no device or file touched yet
    PROFILING = "profiling"  # the profiler steps through its caps (``inline``, ``pre``)
    FOLLOWING = "following"  # the closed loop moves the job's cap along its curve
    WATCHING = "watching"  # the caps stay as they are (no curve yet, caps that may not change, a shared GPU)
    ENDED = "ended"  # the caps the run set are restored, the record written


@dataclass(eq=False)
class Run:
    """What the plug-ins of one run share (one object per run, on the observer's thread but for ``waiting``, which
    the heartbeat sets).

    Args:
        config: what the run is observed with.
        clock, wall: the run's clock (stamps, readings) and the wall clock of its record.
        monitor, caps, recorder, early: the run's step marks and readings, its caps (the one way back to the caps it
            found), what it leaves in the history, and its early check.
        settings: the profiler's (and the early check's) settings.
        allowed_slowdown_pct: the job's bound; tightened once when the script declares a tighter one.
        profile: what is known of the job: the configuration's, then the profiler's, then the corrected curve.
        ceiling_w: the most the closed loop may raise the job's cap to now (a power budget's), None: no ceiling.
        on_profile_done: called once when a time-window profile ends (a pre-launch run stops its workers).
    """

    config: ObserveConfig
    clock: Clock
    wall: Callable[[], float]
    monitor: RunMonitor
    caps: RunCaps
    recorder: RunRecorder
    early: EarlyCheck
    settings: ProfilerSettings
    allowed_slowdown_pct: float
    profile: Profile | None
    ceiling_w: Callable[[], float | None] | None = None
    on_profile_done: Callable[[], None] | None = None
    state: RunState = RunState.STARTING
    #: the caps the job may run at under the admin policy (None: not known, caps are not changed)
    bounds: tuple[float, float] | None = None
    #: each GPU's highest limit (pace-matching raises no cap above it)
    max_w: dict[str, float] = field(default_factory=dict)
    #: the profiler's result once it is done (None: no profiling, or not done)
    result: ProfileResult | None = None
    #: the closed loop, once started (it stays for the summary when it stops)
    loop: ClosedLoop | None = None
    #: the points the closed loop measured, once the run ended and when the run may teach its curve
    learned: tuple[CapPoint, ...] = ()
    #: the waiting jobs this job's slowdown delays, as the last heartbeat said
    waiting: float = 0.0
    findings: list[str] = field(default_factory=list)
    exit_code: int | None = None
    record: JobRecord | None = None
    #: (the run's clock, the wall clock) when observation began and ended
    t0: float = 0.0
    wall0: float = 0.0
    t1: float = 0.0
    wall1: float = 0.0

    @property
    def job_id(self) -> str:
        return self.config.job_id

    @property
    def uuids(self) -> tuple[str, ...]:
        return self.config.gpu_uuids

    @property
    def mode(self) -> ProfileAction:
        return self.config.mode

    @property
    def adopted(self) -> bool:
        """Whether the run started from a colleague's profile of the job (docs/profiling.md#a-colleagues-profile-of-the-same-job)."""
        return self.config.match is not None and self.config.match.colleague is not None

    @property
    def disowned(self) -> str | None:
        """Why the closed loop dropped the colleague's profile it started from (its own reference contradicts it:
        :class:`~ecolaunch.caps.control.CapController`), None when it did not."""
        return self.loop.controller.disowned if self.loop is not None else None

    def shared(self) -> bool:
        """Whether another job shares one of this job's GPUs (its cap is everyone's there)."""
        return self.recorder.shared()

    def not_learned(self) -> str | None:
        """Why this run updates nothing in the history: its iterations cannot be its profile's job undisturbed
        (:func:`~ecolaunch.jobmodel.capchoice.off_profile`, seen by the early check or the closed loop); None when
        it learns as usual, and for a run that shared a GPU (the others slow it: its profile is the job alone; no
        cap point is learned there anyway)."""
        why = self.early.off_profile or (self.loop.controller.off_profile if self.loop is not None else None)
        if why is None or self.shared():  # on a shared GPU the others slow it: its profile is solo
            return None
        return (f"{why}: a stall, a CPU or GPU shared with other work, or another job under this history match "
                f"(`ecolaunch history {self.job_id}` says which; `--fresh-profile` measures the job again)")

    def store_profile(self, hints: Mapping[str, Any]) -> None:
        """Store what is known of the job: the corrected curve while a closed loop runs, else what profiling measured."""
        self.recorder.store_profile((self.profile if self.loop is not None else None)
                                    or (self.result.profile if self.result else None), hints)


class Part:
    """A plug-in of the run: the observer calls :meth:`start` once, when observation begins, :meth:`step` at every
    poll of the step marks (``stamps``: the marks read so far; ``final``: the last poll, after the workers ended),
    and :meth:`finish` once, when observation ends, in the order of the observer's list. Each does nothing unless a
    plug-in says otherwise."""

    def start(self, run: Run) -> None:
        """Observation begins (the run's bounds and found caps are read)."""

    def step(self, run: Run, stamps: Sequence[float], final: bool) -> None:
        """One poll of the step marks."""

    def finish(self, run: Run) -> None:
        """Observation ends (the workers ended, their last marks read)."""


def guard(job_id: str, what: str, fn: Callable[..., Any], *args: Any) -> bool:
    """Run ``fn(*args)``; an exception is logged as a warning (``what`` failed for job ``job_id``), never raised:
    observation must never break a launch. Returns whether it ran through."""
    try:
        fn(*args)
        return True
    except Exception as e:  # noqa: BLE001 - observation must never break a launch
        logger.warning("ecolaunch could not %s for job %s: %s: %s", what, job_id, type(e).__name__, e)
        logger.debug("observation failure", exc_info=True)
        return False
