"""The run's profiling plug-in: the profiler steps through its caps, then hands the run its profile and its cap.

What lives here: :class:`Profiling` (a :class:`~ecolaunch.run.state.Part`). What does not: the profiling state
machine (:class:`~ecolaunch.profile.profiler.Profiler`), the closed loop it hands over to
(:mod:`ecolaunch.run.closedloop`), the early check it arms (:mod:`ecolaunch.run.earlycheck`). How a profile is
measured: docs/profiling.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecolaunch.profile.modes import ProfileAction
from ecolaunch.profile.profiler import Phase, Profiler
from ecolaunch.run.closedloop import follow
from ecolaunch.run.state import Part, Run, RunState, guard


class Profiling(Part):
    """Profiles the run in ``inline`` and ``pre`` mode (nothing in the others)."""

    def __init__(self) -> None:
        self.profiler: Profiler | None = None

    def start(self, run: Run) -> None:
        if run.mode not in (ProfileAction.INLINE, ProfileAction.PRE):
            return
        self.profiler = Profiler(run.uuids, run.monitor.sampler, clock=run.clock, bounds_w=run.bounds, caps=run.caps,
                                 allowed_slowdown_pct=run.allowed_slowdown_pct, eta=run.config.rules.eta,
                                 settings=run.settings)
        run.state = RunState.PROFILING
        self.profiler.update([])  # cap 0 is set now, before the workers start

    def step(self, run: Run, stamps: Sequence[float], final: bool) -> None:
        if self.profiler is None or run.result is not None:
            return
        self.profiler.allowed_slowdown_pct = run.allowed_slowdown_pct  # a bound the script declared meanwhile
        if self.profiler.update(stamps, final=final) is Phase.DONE:
            self._profiled(run, final)

    def finish(self, run: Run) -> None:
        if self.profiler is not None and self.profiler.phase is not Phase.DONE:
            guard(run.job_id, "restore the power caps", self.profiler.abort, "observation failed")

    def abort(self, run: Run) -> None:
        """Observation failed (the monitor stops): restore the caps profiling set."""
        if self.profiler is not None:
            guard(run.job_id, "restore the power caps", self.profiler.abort, "observation failed")

    def _profiled(self, run: Run, final: bool) -> None:
        run.result = self.profiler.result  # type: ignore[union-attr]
        run.state = RunState.WATCHING
        if run.result is not None and run.result.profile is not None:
            run.profile = run.result.profile
        run.store_profile(run.monitor.hints())
        if run.mode is ProfileAction.PRE:
            # An instrumented run stops itself cleanly at its step limit; only a time-window profile needs help.
            if run.on_profile_done is not None and not final and self.profiler.instrumented is False:  # type: ignore[union-attr]
                run.on_profile_done()
            return
        choice = run.result.choice if run.result else None
        if choice is not None and run.caps.can_set and run.bounds is not None and not final:
            # from the next stamp on, the job runs at the chosen cap (set only when it differs from the cap the
            # profiler restored: no change for nothing); the closed loop follows it
            found = [c for c in run.caps.found.values() if c is not None]
            if (found and abs(min(found) - choice.cap_w) <= 0.5) or run.caps.apply(
                    choice.cap_w, f"profiled: setting the power cap to {choice.cap_w:.0f} W"):
                follow(run, choice.cap_w, run.monitor.reader.count())
        if not final and run.profile is not None:
            run.early.arm(run.clock.now(), run.settings.settle_iters, slowdown=run.loop is None)
