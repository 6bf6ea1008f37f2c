"""The run's closed-loop plug-in: once the job's curve is known, its cap follows it for the whole run.

What lives here: :func:`follow` (start the loop, from the run's start or from profiling) and :class:`Following` (a
:class:`~ecolaunch.run.state.Part`: a step of the loop at every poll, what it measured at the end). What does not:
the loop and its decisions (:mod:`ecolaunch.caps.control`), setting the caps (the run's
:class:`~ecolaunch.caps.job.RunCaps`). Why a loop, and its rules: docs/profiling.md#the-closed-loop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from ecolaunch.caps.control import Feeds, start_loop
from ecolaunch.jobmodel.capcurve import merge_points
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.run.state import Part, Run, RunState

logger = logging.getLogger(__name__)


def follow(run: Run, cap_w: float | None, stamp_index: int) -> bool:
    """Start the closed loop at ``cap_w`` (None: the top of the bounds) from stamp ``stamp_index`` on, when it can
    run: a known curve, caps that may be changed, and GPUs this job has to itself (on a shared GPU a cap is
    everyone's). Returns whether it started."""
    if not (run.config.closed_loop and run.profile is not None and run.caps.can_set
            and run.bounds is not None) or run.shared():
        return False
    feeds = Feeds(run.monitor.reader, run.monitor.sampler, run.uuids, run.clock, run.caps.apply, run.ceiling_w)
    run.loop = start_loop(run.profile, run.config.rules, run.bounds, run.allowed_slowdown_pct, cap_w, feeds,
                          stamp_index, waiting=run.waiting, control=run.config.control, borrowed=run.adopted)
    if run.loop is not None:
        run.state = RunState.FOLLOWING
    return run.loop is not None


def with_points(profile: Profile, points: Sequence[CapPoint], top_cap_w: float) -> Profile:
    """``profile`` with ``points`` as its cap points (those at one cap pooled); when one lies at ``top_cap_w`` (the
    admin's maximum: uncapped), the profile's uncapped iteration time and power are that point's, so that the
    profile never holds two figures for the uncapped job."""
    merged = merge_points(points)
    top = next((p for p in merged if p.power_cap_w >= top_cap_w - 1e-6), None)
    if top is None:
        return replace(profile, cap_points=merged)
    return replace(profile, cap_points=merged, iter_time_s=top.iter_time_s, power_w=top.power_w)


class Following(Part):
    """Steps the run's closed loop (:attr:`Run.loop <ecolaunch.run.state.Run.loop>`) once :func:`follow` started it,
    from the observer's start (a known profile) or from profiling."""

    def step(self, run: Run, stamps: Sequence[float], final: bool) -> None:
        loop = run.loop
        if loop is None or final:
            return
        loop.controller.allowed_slowdown_pct = run.allowed_slowdown_pct  # a bound the script declared meanwhile
        loop.step()
        if loop.stopped and run.state is RunState.FOLLOWING:
            run.state = RunState.WATCHING

    def finish(self, run: Run) -> None:
        """What the run measured at the caps it ran at, when it may teach the curve: the next launch starts from the
        corrected curve."""
        learned = run.loop.controller.learned() if run.loop is not None and run.not_learned() is None else ()
        run.learned = learned
        if learned and run.profile is not None and run.bounds is not None:
            # a colleague's profile its own reference contradicted: the run's measurements alone
            kept = () if run.disowned else run.profile.cap_points
            run.profile = with_points(run.profile, (*kept, *learned), run.bounds[1])

    @staticmethod
    def set_waiting(run: Run, share: float) -> None:
        """From now on ``share`` waiting jobs are delayed by this job's slowdown: the loop weighs them."""
        run.waiting = share
        loop = run.loop
        if loop is not None:
            loop.controller.set_waiting(share)

    @staticmethod
    def shared_now(run: Run, uuid: str) -> None:
        """GPU ``uuid`` is now shared: its cap is every job's on it (the highest wish wins), so the loop stops."""
        if run.loop is not None and not run.loop.stopped:
            logger.info("job %s: GPU %s is now shared; the closed loop stops", run.job_id, uuid)
            run.loop.stopped = True
            run.state = RunState.WATCHING
