"""The early-stage check of a run with a known profile: once, is this run its profile's job, and is it slower than
its bound at the cap it runs at?

What lives here: :class:`EarlyCheck` (it only reports). What does not: the tests it applies
(:func:`~ecolaunch.jobmodel.capchoice.off_profile`, :func:`~ecolaunch.profile.profiler.check_early`), what the run
does with its findings (:mod:`ecolaunch.run.earlycheck`). What it reads, and when: docs/profiling.md, "The early
check".
"""

from __future__ import annotations

from collections.abc import Sequence

from ecolaunch.jobmodel.capcurve import profile_curve
from ecolaunch.profile import channel
from ecolaunch.jobmodel.capchoice import iteration_stats, off_profile
from ecolaunch.profile.history import Profile
from ecolaunch.profile.modes import ProfilerSettings
from ecolaunch.profile.profiler import SlowdownFinding, check_early
from ecolaunch.profile.sampler import Sampler


class EarlyCheck:
    """The check of one run, read on the first of its GPUs (one cap for the whole job)."""

    def __init__(self, settings: ProfilerSettings, sampler: Sampler, gpu_uuids: Sequence[str]) -> None:
        self._measured = settings.measured_iters
        self._sampler, self._uuids = sampler, tuple(gpu_uuids)
        self._from_s: float | None = None
        self._skip = settings.warmup_iters
        self._slowdown = False
        #: why the checked iterations cannot be the profile's job undisturbed, once checked (None: they can)
        self.off_profile: str | None = None

    @property
    def armed(self) -> bool:
        return self._from_s is not None

    def arm(self, from_s: float, skip: int, *, slowdown: bool) -> None:
        """Check the iterations that start after ``from_s``, but the first ``skip`` of them; ``slowdown``: against
        the bound too (the closed loop, where it runs, measures that itself)."""
        self._from_s, self._skip, self._slowdown = from_s, skip, slowdown

    def step(self, stamps: Sequence[float], profile: Profile | None, allowed_slowdown_pct: float,
             bounds_w: tuple[float, float] | None) -> SlowdownFinding | None:
        """Check once enough iterations ran (then disarm); the finding when the job runs slower than its bound."""
        first = next((i for i, t in enumerate(stamps) if t > self._from_s), None)  # type: ignore[operator]
        if first is None or len(stamps) - 1 - first < self._skip + self._measured:
            return None
        start = first + self._skip
        times = channel.iteration_times(stamps[start:start + self._measured + 1], 0)
        self._from_s = None  # once per run
        series = self._sampler.series(self._uuids[0])
        cap = series[-1].power_limit_w if series else None
        top = bounds_w[1] if bounds_w is not None else cap
        curve = profile_curve(profile, top) if top else None
        stats = iteration_stats(times)
        if curve is not None and stats is not None:
            self.off_profile = off_profile(curve, cap or top, stats)
        if not self._slowdown:
            return None
        return check_early(profile, times, allowed_slowdown_pct, cap_w=cap,
                           max_cap_w=None if bounds_w is None else bounds_w[1])
