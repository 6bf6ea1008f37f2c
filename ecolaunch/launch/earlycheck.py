"""The early-stage check of a run with a known profile: once, is the job slower than its bound at the cap it runs at?

:class:`EarlyCheck` waits, from the moment it is armed, for ``skip`` iterations (the job's start-up, or the settling
after a cap change) and then ``measured_iters`` more, and compares their median iteration time with the profile's
(:func:`~ecolaunch.profile.profiler.check_early`). It only reports: the run observer logs the finding and keeps it
for the summary and the history record.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecolaunch.profile import channel
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

    @property
    def armed(self) -> bool:
        return self._from_s is not None

    def arm(self, from_s: float, skip: int) -> None:
        """Check the iterations that start after ``from_s``, but the first ``skip`` of them."""
        self._from_s, self._skip = from_s, skip

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
        return check_early(profile, times, allowed_slowdown_pct, cap_w=cap,
                           max_cap_w=None if bounds_w is None else bounds_w[1])
