"""When to profile: ``--profile auto|pre|inline|off`` resolved against the job's history.

What lives here: :class:`ProfileMode` (what the user asks), :class:`ProfileAction` (what the launcher does),
:class:`ProfilePlan`, :func:`parse_mode`, :func:`resolve_mode`, how long profiling lasts (:class:`ProfilerSettings`;
the admin's ``[profiling]`` budget bounds them: :func:`ecolaunch.admin.rules.profiler_settings`), and the
environment of a pre-launch profiling run (:func:`pre_run_env`, :func:`pre_run_steps`). What does not: stopping an
uninstrumented pre-launch run (``RunObserver(on_profile_done=...)``). The modes, and why ``auto`` never runs a
script twice unasked: docs/profiling.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ecolaunch.errors import ConfigError
from ecolaunch.profile.channel import ENV_PROFILE_STEPS, ENV_PROFILING
from ecolaunch.jobmodel.powercap import DEFAULT_MEASURED_ITERS_PER_CAP, DEFAULT_WARMUP_ITERS_PER_CAP
from ecolaunch.validate import integer, is_integer, is_number

if TYPE_CHECKING:  # kept out of the import: the launch's argument parser imports this module
    from ecolaunch.jobmodel.profile import Profile
    from ecolaunch.profile.history import ProfileEntry

DEFAULT_MODE = "auto"
DEFAULT_WARMUP_ITERS = 10  # the job's own start-up (allocator, cudnn autotune, data workers); Zeus waits 10 too


class ProfileMode(enum.Enum):
    """What ``--profile`` asks for."""

    AUTO = "auto"
    PRE = "pre"
    INLINE = "inline"
    OFF = "off"


class ProfileAction(enum.Enum):
    """What the launcher does about profiling this launch."""

    HISTORY = "history"
    PRE = "pre"
    INLINE = "inline"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class ProfilePlan:
    """The resolved action, the profile known before launch (from history) and one line saying why."""

    action: ProfileAction
    profile: Profile | None
    reason: str


def parse_mode(value: str | ProfileMode) -> ProfileMode:
    """``"auto"``/``"pre"``/``"inline"``/``"off"`` (any case) -> :class:`ProfileMode`; ConfigError otherwise."""
    if isinstance(value, ProfileMode):
        return value
    try:
        return ProfileMode(str(value).strip().lower())
    except ValueError:
        raise ConfigError(f"--profile {value!r} is not a profiling mode",
                          hint="use one of: " + ", ".join(m.value for m in ProfileMode)) from None


def resolve_mode(requested: str | ProfileMode, entry: ProfileEntry | None) -> ProfilePlan:
    """Resolve ``--profile`` for a job whose history entry (by fingerprint) is ``entry`` (None: unknown job)."""
    mode = parse_mode(requested)
    known = entry.profile if entry is not None else None
    if mode is ProfileMode.OFF:
        why = "profiling off" + ("; using the profile in history" if known else "; the job is placed without a profile")
        return ProfilePlan(ProfileAction.OFF, known, why)
    if known is not None:
        return ProfilePlan(ProfileAction.HISTORY, known,
                           f"history has a profile of this job (fingerprint {entry.fingerprint[:12]}"  # type: ignore[union-attr]
                           + (f", from job {entry.job_id})" if entry.job_id else ")"))  # type: ignore[union-attr]
    if mode is ProfileMode.PRE:
        return ProfilePlan(ProfileAction.PRE, None, "--profile pre: a short profiling run first, then the real run")
    if mode is ProfileMode.INLINE:
        return ProfilePlan(ProfileAction.INLINE, None, "--profile inline: profiling the real run's first iterations")
    if entry is not None and entry.profile_safe:
        return ProfilePlan(ProfileAction.PRE, None,
                           "a previous run declared the script safe to profile: a short profiling run first")
    return ProfilePlan(ProfileAction.INLINE, None,
                       "unknown job: profiling the real run's first iterations (a pre-launch run would execute "
                       "them twice; use --profile pre or @ecolaunch.job(profile_safe=True) to allow it)")


@dataclass(frozen=True, slots=True)
class ProfilerSettings:
    """How long to profile. ``max_iterations``/``max_time_s`` are the admin's budget (None: none; 0: never).

    Iterations count from the first step mark; the time budget runs from the first step mark (or, for an
    uninstrumented job, from the start of its time window), so a slow start-up does not spend it.
    ``max_caps = 0``: measure at the GPUs' current caps without changing them.
    """

    warmup_iters: int = DEFAULT_WARMUP_ITERS
    settle_iters: int = DEFAULT_WARMUP_ITERS_PER_CAP
    measured_iters: int = DEFAULT_MEASURED_ITERS_PER_CAP
    max_caps: int = 3
    uninstrumented_after_s: float = 60.0
    window_warmup_s: float = 30.0
    window_measure_s: float = 30.0
    max_iterations: int | None = None
    max_time_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("warmup_iters", "settle_iters", "max_caps"):
            integer(getattr(self, name), what=f"profiling {name}", lo=0)
        integer(self.measured_iters, what="profiling measured_iters", lo=1)
        for name in ("uninstrumented_after_s", "window_warmup_s", "window_measure_s", "max_time_s"):
            v = getattr(self, name)
            if v is not None and not (is_number(v) and v >= 0):
                raise ConfigError(f"profiling {name} must be >= 0 seconds, got {v!r}")
        if self.window_measure_s <= 0:
            raise ConfigError(f"profiling window_measure_s must be > 0, got {self.window_measure_s!r}")
        if self.max_iterations is not None and not (is_integer(self.max_iterations) and self.max_iterations >= 0):
            raise ConfigError(f"profiling max_iterations must be a whole number >= 0, got {self.max_iterations!r}")

    def planned_steps(self) -> int:
        """Step marks a full instrumented profile needs (the first stamp opens the first iteration)."""
        return 1 + self.warmup_iters + self.measured_iters + max(0, self.max_caps - 1) * (self.settle_iters + self.measured_iters)


def pre_run_steps(settings: ProfilerSettings) -> int:
    """Step marks after which a pre-launch profiling run's workers exit: twice a full profile's."""
    return 2 * settings.planned_steps()


def pre_run_env(settings: ProfilerSettings) -> dict[str, str]:
    """Variables added to the workers of a pre-launch profiling run."""
    return {ENV_PROFILING: "1", ENV_PROFILE_STEPS: str(pre_run_steps(settings))}
