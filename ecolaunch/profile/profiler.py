"""The profiling state machine: a job's first iterations measured at a few power caps, on an injected clock.

What lives here: :class:`Phase` (its docstring draws the states), :class:`Profiler`, :class:`ProfileResult` (the
profile and the cap choice), and the early-stage check of a real run, :func:`check_early` ->
:class:`SlowdownFinding`. What does not: which lower caps can bind the job
(:func:`~ecolaunch.jobmodel.powercap.profile_caps`), how long and within which caps (``modes``; the defaults'
reasons: :mod:`ecolaunch.jobmodel.powercap`), reading stamps (``channel``) or GPUs (``sampler``), storing
(``history``). How a job is profiled, and a profile that contradicts itself: docs/profiling.md.
"""

from __future__ import annotations

import enum
import logging
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ecolaunch.clock import Clock
from ecolaunch.errors import ConfigError, PermissionDenied
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.modes import ProfilerSettings
from ecolaunch.profile.channel import iteration_times
from ecolaunch.jobmodel.capchoice import CapChoice, contradicted_cap, contradiction, iteration_stats, job_cap_choice
from ecolaunch.jobmodel.capcurve import NON_BINDING_RATIO, fit_curve
from ecolaunch.jobmodel.powercap import DEFAULT_CAP_STEP_W, cap_grid, profile_caps
from ecolaunch.profile.sampler import GpuSample, WindowStats, cap_seen_s

logger = logging.getLogger(__name__)

#: a cap change not seen in the GPUs' readings after this long ends profiling (a cap agent applies it late)
CAP_APPLY_TIMEOUT_S = 60.0


class Phase(enum.Enum):
    """A profiler's state; each :meth:`Profiler.update` moves as far as its inputs allow::

        WAITING --first step stamp--> WARMUP(cap 0) --warmup_iters--> MEASURE(cap 0) --measured_iters-->
            WARMUP(cap k) --settle_iters--> MEASURE(cap k) --> ... --> DONE (caps restored)
        WAITING --no stamp for uninstrumented_after_s--> WARMUP(window) --window_warmup_s--> MEASURE(window)
            --window_measure_s--> DONE
        any state --budget spent, final update, abort()--> DONE (with whatever was measured)

    Cap 0 is the top of the admin's bounds (the job "uncapped"); a contradicted cap is measured once more, last.
    """

    WAITING = "waiting"
    WARMUP = "warmup"
    MEASURE = "measure"
    DONE = "done"


class Readings(Protocol):
    """What the profiler needs from the sampler."""

    def window(self, uuid: str, start_s: float, end_s: float) -> WindowStats | None: ...

    def latest(self, uuid: str) -> GpuSample | None: ...

    def sample_once(self) -> object: ...


class PowerLimits(Protocol):
    """What the profiler needs of the run's power limits (:class:`~ecolaunch.caps.job.RunCaps`): each GPU's limit
    when the run began, whether limits may be changed, set one, read one, and restore them."""

    found: dict[str, float | None]

    @property
    def can_set(self) -> bool: ...

    def set(self, uuid: str, watts: float) -> float: ...

    def current(self, uuid: str) -> float | None: ...

    def restore(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """What profiling learned. ``choice`` is None without an iteration time (uninstrumented, or nothing
    measured); ``recommended_cap_w`` is the choice's cap, or the non-binding cap of an uninstrumented job."""

    profile: Profile | None
    choice: CapChoice | None
    recommended_cap_w: float | None
    reason: str
    iterations: int
    complete: bool


class Profiler:
    """Profiles one job on ``gpu_uuids``; feed it with :meth:`update`; read :attr:`result` when DONE.

    Args:
        gpu_uuids: the job's GPUs.
        readings: the sampler (windows of power, utilization, memory per GPU).
        clock: the same clock as the step stamps and the sampler.
        bounds_w: ``(min, max)`` caps allowed for the job (:func:`~ecolaunch.caps.limits.job_cap_bounds`);
            None: never set caps.
        caps: the run's caps: each GPU's cap before profiling (``caps.found``, restored on DONE), and the setter
            (none, no privilege: measure at the found caps only).
        allowed_slowdown_pct, eta: for :func:`~ecolaunch.jobmodel.capchoice.choose_cap`.
    """

    def __init__(self, gpu_uuids: Sequence[str], readings: Readings, *, clock: Clock,
                 bounds_w: tuple[float, float] | None, caps: PowerLimits, allowed_slowdown_pct: float | None, eta: float,
                 settings: ProfilerSettings | None = None, cap_step_w: float = DEFAULT_CAP_STEP_W) -> None:
        if not gpu_uuids:
            raise ConfigError("the profiler needs at least one GPU")
        self._uuids = tuple(gpu_uuids)
        self._readings, self._clock, self._bounds, self._run_caps = readings, clock, bounds_w, caps
        self._can_set = caps.can_set and bounds_w is not None
        self.allowed_slowdown_pct, self._eta = allowed_slowdown_pct, eta
        self.settings = settings or ProfilerSettings()
        self._step = cap_step_w
        self.phase = Phase.WAITING
        self.instrumented: bool | None = None
        self.result: ProfileResult | None = None
        self._started: float | None = None
        self._caps: list[float] = []
        self._k = 0
        self._seg: int | None = None  # stamp index where the current segment starts
        self._seg_s = 0.0  # start time of a window segment
        self._need = 0
        self._cap_changed_s = -math.inf  # segments start at stamps after this: when the cap was seen in force
        self._pending: tuple[float, float] | None = None  # (cap, when it was asked for) until seen in force
        self._first_stamp = 0
        self._used = 0
        self._points: list[CapPoint] = []
        self._remeasured = False  # a cap measured a second time (its first window read slower than a lower cap's)
        self._top: list[WindowStats] = []
        self._top_iter_s: float | None = None
        self._budget_from: float | None = None  # the time budget runs from the first step (or window)

    # --- driving -----------------------------------------------------------------------------------
    def update(self, stamps: Sequence[float], *, final: bool = False) -> Phase:
        """Advance on the job's step stamps so far (``final``: the run is over; no more caps are set)."""
        if self.phase is Phase.DONE:
            return self.phase
        now, s = self._clock.now(), self.settings
        if self._started is None:
            self._started = now
            if s.max_iterations == 0 or s.max_time_s == 0:
                self._finish("the admin's profiling budget is 0")
                return self.phase
            self._begin(now)
        while self.phase is not Phase.DONE and self._advance(stamps, now, final):
            pass
        if (self.phase is not Phase.DONE and s.max_time_s is not None and self._budget_from is not None
                and now - self._budget_from >= s.max_time_s):
            self._finish(f"profiling time budget of {s.max_time_s:g} s spent")
        if self.phase is not Phase.DONE and final:
            self._finish("the run ended before profiling completed")
        return self.phase

    def abort(self, why: str = "profiling aborted") -> None:
        """Stop now, restore the caps, keep what was measured."""
        if self.phase is not Phase.DONE:
            self._finish(why)

    # --- the machine -------------------------------------------------------------------------------
    def _begin(self, now: float) -> None:
        top = self._bounds[1] if self._can_set and self.settings.max_caps >= 1 else None
        if top is not None:
            self._caps = [top]
            self._apply(top, now)
        else:
            self._caps = self._found_top()

    def _found_top(self) -> list[float]:
        """Measure where the GPUs are: at the highest cap found on them (or nowhere known)."""
        found = [c for c in self._run_caps.found.values() if c is not None]
        return [max(found)] if found else []

    def _advance(self, stamps: Sequence[float], now: float, final: bool) -> bool:
        s = self.settings
        if self.phase is Phase.WAITING:
            if stamps:
                self.instrumented, self.phase, self._need = True, Phase.WARMUP, s.warmup_iters
                self._first_stamp = self._seg_index(stamps) or 0
                self._budget_from = stamps[0]
                return True
            if now - self._started >= s.uninstrumented_after_s:  # type: ignore[operator]
                self.instrumented, self.phase, self._seg_s, self._budget_from = False, Phase.WARMUP, now, now
                logger.info("no step marks after %.0f s: profiling by time windows of GPU readings", now - self._started)
                return True
            return False
        if not self.instrumented:
            if stamps:  # a slow starter after all: profile its iterations instead
                self.instrumented, self.phase, self._need, self._seg = True, Phase.WARMUP, s.warmup_iters, None
                self._first_stamp = self._seg_index(stamps) or 0
                return True
            return self._advance_window(now)
        if self.phase is Phase.WARMUP:
            if self._seg is None:
                self._seg = self._seg_index(stamps) if self._cap_in_force(now) else None
                if self._seg is None:
                    return False
            if len(stamps) - 1 - self._seg < self._need:
                return False
            self._seg, self.phase = self._seg + self._need, Phase.MEASURE
            return True
        end = self._seg + s.measured_iters  # type: ignore[operator]
        if len(stamps) - 1 < end:
            return False
        t0, t1 = stamps[self._seg], stamps[end]  # type: ignore[index]
        stats = self._windows(t0, t1)
        if stats is None:
            return False  # the sampler has not covered the window yet
        self._used = end - self._first_stamp
        cap = self._caps[self._k] if self._k < len(self._caps) else None
        power = _mean([w.power_w for w in stats])
        # a robust mean of the window's iterations (one stalled iteration must not move it) and their spread,
        # which sets the margin the cap choice keeps for measurement error
        its = iteration_stats(iteration_times(stamps[self._seg:end + 1], 0))
        if cap is not None and power is not None and power > 0 and its is not None:
            point = CapPoint(cap, its.mean_s, power, its.count, its.cv_pct)
            if self._k > 0 and self._k == len(self._caps) - 1 and self._remeasured:  # a cap again: replace it
                self._points = [point if p.power_cap_w == cap else p for p in self._points]
            else:
                self._points.append(point)
        if self._k == 0:
            self._top, self._top_iter_s = stats, its.mean_s if its is not None else (t1 - t0) / s.measured_iters
            self._plan(power)
        self._k += 1
        if (self._k == len(self._caps) and not self._remeasured and self._can_set and len(self._caps) > 1
                and (slow := contradicted_cap(self._points)) is not None):
            # a lower cap ran faster than a higher one: the job was still speeding up (or disturbed) while the
            # higher one was measured; measure that cap once more, last, and keep that
            self._remeasured = True
            self._caps.append(slow if slow in self._caps else self._caps[0])
        more = self._k < len(self._caps)
        if more and s.max_iterations is not None and self._used + s.settle_iters + s.measured_iters > s.max_iterations:
            self._finish(f"profiling iteration budget of {s.max_iterations} spent")
        elif more and not final:
            self._apply(self._caps[self._k], now)
            if self._k < len(self._caps):
                self._seg, self._need, self.phase = None, s.settle_iters, Phase.WARMUP
            else:  # the cap could not be set
                self._finish("profiled at the caps that could be set")
        else:
            self._finish("profiled" if not more else "the run ended before profiling completed")
        return True

    def _advance_window(self, now: float) -> bool:
        s = self.settings
        if self.phase is Phase.WARMUP:
            if now - self._seg_s < s.window_warmup_s:
                return False
            self._seg_s += s.window_warmup_s
            self.phase = Phase.MEASURE
            return True
        end = self._seg_s + s.window_measure_s
        if now < end:
            return False
        stats = self._windows(self._seg_s, end)
        if stats is None:
            return False
        self._top = stats
        self._finish("profiled by a time window (no step marks)")
        return True

    def _plan(self, top_power_w: float | None) -> None:
        """After cap 0: the lower caps worth measuring for this job."""
        if not self._can_set or self._bounds is None or not self._caps or top_power_w is None:
            return
        lo, hi = self._bounds
        lower = [c for c in profile_caps(lo, hi, top_power_w, step_w=self._step) if c < self._caps[0]]
        self._caps += lower[: max(0, self.settings.max_caps - 1)]

    def _seg_index(self, stamps: Sequence[float]) -> int | None:
        for i, t in enumerate(stamps):
            if t > self._cap_changed_s:
                return i
        return None

    def _windows(self, t0: float, t1: float) -> list[WindowStats] | None:
        stats = [self._readings.window(u, t0, t1) for u in self._uuids]
        return None if any(w is None for w in stats) else stats  # type: ignore[return-value]

    def _apply(self, cap_w: float, now: float) -> None:
        # the caps planned here are inside the bounds (profile_caps); the setter (the job's cap owner) clips again,
        # and under a power budget holds the cap under the job's ceiling: the cap measured is the one applied (a
        # first launch admitted below its board's maximum measures its reference at its ceiling, not never)
        applied = []
        for uuid in self._uuids:
            if self._run_caps.current(uuid) == cap_w:
                continue
            try:
                applied.append(self._run_caps.set(uuid, cap_w))
            except Exception as e:  # noqa: BLE001 - an injected setter may fail in any way; caps stay safe
                # PermissionDenied: the job's cap owner has told the user once already (not root, no agent)
                log = logger.info if isinstance(e, PermissionDenied) else logger.warning
                log("cannot set the power cap of GPU %s to %.0f W (%s); profiling at the current cap", uuid, cap_w, e)
                self._can_set = False
                self._caps = self._caps[: self._k] or self._found_top()
                self._run_caps.restore()
                return
        if applied and min(applied) < cap_w - 1e-6:
            cap_w = min(applied)
            logger.info("profiling at %.0f W: the power budget holds the job there", cap_w)
            self._caps[self._k] = cap_w
            if any(c >= cap_w - 1e-6 for c in self._caps[self._k + 1:]):  # a lower cap planned is no lower now
                self._caps = self._caps[: self._k + 1] + [c for c in self._caps[self._k + 1:] if c < cap_w - 1e-6]
        self._pending, self._cap_changed_s = (cap_w, now), math.inf
        self._readings.sample_once()  # a cap set synchronously shows at once; one applied by an agent, later
        self._cap_in_force(now)

    def _cap_in_force(self, now: float) -> bool:
        """Whether the GPUs' readings show the cap last asked for (a cap agent may apply it seconds later)."""
        if self._pending is None:
            return True
        cap, asked = self._pending
        seen = cap_seen_s(self._readings.latest, self._uuids, cap, asked)
        if seen is not None:
            self._pending, self._cap_changed_s = None, seen
            return True
        if now - asked > CAP_APPLY_TIMEOUT_S:
            self._finish(f"the {cap:.0f} W cap was not seen on the GPUs {CAP_APPLY_TIMEOUT_S:.0f} s after it was set")
        return False

    def _finish(self, why: str) -> None:
        self._run_caps.restore()
        self.phase, self.result = Phase.DONE, self._build(why)
        logger.info("profiling done: %s", self.result.reason)

    def _build(self, why: str) -> ProfileResult:
        top = self._top
        if not top:
            return ProfileResult(None, None, None, f"no profile: {why}", self._used, False)
        util, mem_bw, power = (_mean([getattr(w, k) for w in top]) for k in ("util_gpu_pct", "util_mem_pct", "power_w"))
        memory = max((w.memory_mib for w in top if w.memory_mib is not None), default=None)
        if not self._points:  # an uninstrumented job, or iterations measured at no known cap
            profile = Profile(self._top_iter_s, util, mem_bw, memory, power, (), instrumented=bool(self.instrumented))
            if self.instrumented:
                return ProfileResult(profile, None, None, f"{why}: the GPUs' caps are unknown", self._used, False)
            rec = self._non_binding_cap(power)
            advice = f"suggest a non-binding cap of {rec:.0f} W near the measured {power:.0f} W" if rec else "no advice"
            return ProfileResult(profile, None, rec, f"{why}: no iteration time, so no slowdown can be measured; "
                                 + advice, self._used, False)
        model = fit_curve(self._points)
        caps = ", ".join(f"{p.power_cap_w:.0f}" for p in self._points)
        measured = f"{why} at {len(self._points)} cap(s) ({caps} W) in {self._used} iterations"
        disturbed = contradiction(self._points)
        if disturbed is not None:
            # a disturbed window (a stall, contention): a curve read from it would promise caps that cost nothing
            return ProfileResult(None, None, None, f"{measured}, but {disturbed}: the measurement was disturbed "
                                 "(a stall, or a CPU or GPU shared with other work), so it is not kept; the job runs "
                                 "uncapped and its next launch profiles it again", self._used, False)
        top_point = self._points[0]
        t0, p0 = top_point.iter_time_s, top_point.power_w
        choice = None
        if self._bounds is not None:
            lo, hi = self._bounds
            if top_point.power_cap_w < hi:  # measured under a lower cap: the model says what uncapped would be
                pred = model.predict(hi)
                t0, p0 = pred.iter_time_s, pred.power_w
            # the one cap choice, as the placement policy and the closed loop make it (capchoice.job_cap_choice)
            choice = job_cap_choice(self._points, (lo, hi), self.allowed_slowdown_pct, self._eta)
        profile = Profile(t0, util, mem_bw, memory, p0, tuple(self._points), instrumented=True)
        complete = why == "profiled"
        reason = measured + (
            f"; {choice.reason}" if choice else "; no cap bounds known, no cap choice")
        return ProfileResult(profile, choice, None if choice is None else choice.cap_w, reason, self._used, complete)

    def _non_binding_cap(self, power_w: float | None) -> float | None:
        if self._bounds is None or power_w is None:
            return None
        lo, hi = self._bounds
        above = [c for c in cap_grid(lo, hi, self._step) if c >= NON_BINDING_RATIO * power_w]
        return above[0] if above else hi


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


# --- early-stage check of the real run ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SlowdownFinding:
    """A real run measured slower than its bound allows; ``suggested_cap_w`` is the cap to set live (or None)."""

    measured_iter_time_s: float
    solo_iter_time_s: float
    slowdown_pct: float
    allowed_slowdown_pct: float
    cap_w: float | None
    suggested_cap_w: float | None
    message: str


def check_early(profile: Profile | None, iter_times_s: Sequence[float], allowed_slowdown_pct: float, *,
                cap_w: float | None = None, max_cap_w: float | None = None,
                min_iters: int = 5) -> SlowdownFinding | None:
    """Compare the real run's first measured iterations with the job's solo, uncapped profile.

    Returns a finding when the median iteration time is more than ``allowed_slowdown_pct`` above the
    profile's ``iter_time_s``; None when within the bound, or when it cannot tell (no profile iteration time,
    fewer than ``min_iters`` iterations). When the job runs under a cap below ``max_cap_w``, the finding names
    ``max_cap_w`` as what would lift it (the run observer uses the check only where the closed loop cannot run:
    caps may not be changed, or the GPU is shared); otherwise the slowdown comes from sharing the GPU or from
    the job itself.
    """
    if profile is None or profile.iter_time_s is None or len(iter_times_s) < max(1, min_iters):
        return None
    measured = statistics.median(iter_times_s)
    slowdown = 100.0 * (measured / profile.iter_time_s - 1.0)
    if slowdown <= allowed_slowdown_pct:
        return None
    head = (f"job runs {slowdown:.1f} % slower than alone and uncapped ({measured * 1e3:.1f} ms vs "
            f"{profile.iter_time_s * 1e3:.1f} ms per iteration; bound {allowed_slowdown_pct:g} %)")
    if cap_w is not None and max_cap_w is not None and cap_w < max_cap_w:
        return SlowdownFinding(measured, profile.iter_time_s, slowdown, allowed_slowdown_pct, cap_w, max_cap_w,
                               f"{head}: it runs under a {cap_w:.0f} W power cap that ecolaunch may not change "
                               f"here (up to {max_cap_w:.0f} W would lift it)")
    return SlowdownFinding(measured, profile.iter_time_s, slowdown, allowed_slowdown_pct, cap_w, None,
                           f"{head}: no cap to raise; the GPU's other jobs or the job's input slow it")
