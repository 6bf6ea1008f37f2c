"""Closed-loop power-cap control for the whole run: the cap follows the job along its measured curve.

What lives here: the decisions, :class:`ControlSettings`, :class:`CapMove` and :class:`CapController`; and their
plumbing in a run, :class:`Feeds` (what a loop follows and moves), :class:`ClosedLoop` (step marks and GPU readings
in, cap moves out; nothing here prints) and :func:`start_loop` (one from a job's profile, the admin policy and bounds). What does not: when a run has a loop (the run observer,
``ecolaunch.run.observer``), setting caps (the run's :class:`~ecolaunch.caps.job.RunCaps` over the job's
cap owner), the curve itself (:mod:`ecolaunch.jobmodel.powercap`), the cap choice
(:mod:`ecolaunch.jobmodel.capchoice`). Why a loop, and its rules: docs/profiling.md#the-closed-loop.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import Clock
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.gpu import clip_w
from ecolaunch.jobmodel.capchoice import (CHOICE_STEP_W, MARGIN_Z, MIN_MARGIN_PP, MIN_SAVING_PCT, REFERENCE_RUN_ITERS,
                                         WINDOW_ERROR_PCT, IterationStats, iteration_stats, model_cap_choice,
                                         off_profile, pooled_at, queue_eta, reference_se_pct, reference_window_due)
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.channel import StepReader, iteration_times
from ecolaunch.jobmodel.capcurve import CapPrior, fit_curve
from ecolaunch.profile.sampler import Sampler, cap_seen_s
from ecolaunch.validate import integer

logger = logging.getLogger(__name__)

_EPS_W = 1e-6


@dataclass(frozen=True, slots=True)
class ControlSettings:
    """How the loop looks and moves (iterations; percentage points; watts)."""

    settle_iters: int = 5
    window_iters: int = 30
    recent_iters: int = 600
    max_down_moves: int = 3
    deadband_pp: float = 1.0
    step_w: float = CHOICE_STEP_W
    z: float = MARGIN_Z
    #: measure the uncapped reference for a window inside the run while the job's history holds too little of it
    #: measured inside runs (:func:`~ecolaunch.jobmodel.capchoice.reference_window_due`)
    reference_window: bool = True

    def __post_init__(self) -> None:
        for name in ("settle_iters", "window_iters", "recent_iters", "max_down_moves"):
            integer(getattr(self, name), what=f"cap control {name}", lo=0)
        if self.window_iters < 5 or self.recent_iters < self.window_iters:
            raise ConfigError(f"cap control needs window_iters >= 5 and recent_iters >= window_iters, got "
                              f"{self.window_iters} and {self.recent_iters}")
        if not (self.step_w > 0 and self.deadband_pp >= 0 and self.z >= 0):
            raise ConfigError("cap control step_w must be > 0, deadband_pp and z >= 0")


@dataclass(frozen=True, slots=True)
class CapMove:
    """One change of the cap: where from and to, what was measured, and one line saying why."""

    from_w: float
    cap_w: float
    measured_slowdown_pct: float
    reason: str

    @property
    def up(self) -> bool:
        return self.cap_w > self.from_w


class CapController:
    """Moves one job's cap along its measured curve for the whole run (docs/profiling.md#the-closed-loop).

    Args:
        points: the job's measured cap points (its profile's; the highest is its uncapped reference).
        bounds_w: the caps the job may run at under the admin policy; the max is "uncapped".
        allowed_slowdown_pct: the job's bound (against alone and uncapped).
        cap_w: the cap the job runs at now (the decision's, or the profiler's choice).
        rules: the admin policy: its objective weight (``eta``, 1 = energy only) and how much the delay of a waiting
            job weighs (``wait_weight``; 0: the queue is not counted); the waiting jobs come in through
            :meth:`set_waiting`.
        settings: loop parameters.
        prior: the curve prior (default: the one fitted on the Zeus traces).
        borrowed: ``points`` are another user's profile of the job (a first launch that started from a colleague's,
            docs/profiling.md#a-colleagues-profile-of-the-same-job): the run measures its own uncapped reference (its
            first window at the top cap: the one it starts at, else one taken for it whatever the points hold), and
            when it differs from theirs by more than the errors of both (:meth:`_test_borrowed`) the loop drops them
            and follows its own measurements (:attr:`disowned`).
    """

    def __init__(self, points: Sequence[CapPoint], bounds_w: tuple[float, float], allowed_slowdown_pct: float,
                 cap_w: float, *, rules: Rules = Rules(), settings: ControlSettings | None = None,
                 prior: CapPrior | None = None, borrowed: bool = False) -> None:
        if not points:
            raise ConfigError("cap control needs the job's measured cap points", hint="profile the job first")
        if not (allowed_slowdown_pct >= 0 and math.isfinite(allowed_slowdown_pct)):
            raise ConfigError(f"allowed slowdown must be >= 0 %, got {allowed_slowdown_pct!r}")
        self._profiled = tuple(points)
        self._prior = prior
        self._profile_curve = self._fit(self._profiled)
        #: why this run's iterations cannot be its profile's job undisturbed (:func:`off_profile`), first seen;
        #: None while they can
        self.off_profile: str | None = None
        self._bounds = (float(bounds_w[0]), float(bounds_w[1]))
        self.allowed_slowdown_pct = float(allowed_slowdown_pct)
        self._eta, self._wait_weight = rules.eta, rules.wait_weight
        queue_eta(self._eta, self._wait_weight, 0.0)  # checks both
        self.waiting = 0.0  # the waiting jobs this job's slowdown delays (set_waiting)
        self._queue_lifted = False  # the cap is where the queue raised it: the way back down is not a down move
        self.settings = settings or ControlSettings()
        self.cap_w = float(cap_w)
        self.moves: list[CapMove] = []
        self.measured_slowdown_pct: float | None = None  # at the current cap, latest look
        #: the error of that reading (percentage points, ``MARGIN_Z`` standard errors of it and of the uncapped
        #: reference, its window error included): a slowdown within it is no finding (issue 41)
        self.measured_error_pp: float | None = None
        self._floors: list[float] = []  # caps found too slow: never go back down to them
        self._observed: dict[float, CapPoint] = {}
        self._buf: collections.deque[float] = collections.deque(maxlen=self.settings.recent_iters)
        self._energy_j = self._power_s = 0.0  # power readings at the current cap, time-weighted
        self._skip = self.settings.settle_iters
        self._since_look = 0
        self._down_moves = 0
        #: why the borrowed points were dropped (the run's own reference contradicts them), None while they stand
        self.disowned: str | None = None
        #: the points are borrowed and the run has not measured its own reference (a window at the top cap) yet
        self._borrowed_untested = borrowed
        #: a window at the top cap is due to measure the reference inside this run (once a run): always when the
        #: points are borrowed, whatever runs they claim to have measured it in
        self._reference_due = self.settings.reference_window and (
            borrowed or reference_window_due(self._profiled, self._bounds[1]))
        #: while that window runs: the cap the run was at before it
        self._reference_back: float | None = None
        #: whether the cap may go to the top now for that window (False: a power budget's ceiling holds it lower)
        self.reference_allowed = True

    # --- feeding -------------------------------------------------------------------------------------
    def observe(self, iter_times_s: Sequence[float], power_w: float | None = None) -> CapMove | None:
        """Iteration times that ended since the last call, all under the current cap, and the mean board power
        over them (None: not read). Returns the move to make now (set ``move.cap_w``), or None."""
        times = [t for t in iter_times_s if t > 0 and math.isfinite(t)]
        skip = min(self._skip, len(times))
        self._skip -= skip
        times = times[skip:]
        if not times:
            return None
        if power_w is not None and power_w > 0 and math.isfinite(power_w):
            span = sum(times)
            self._energy_j += power_w * span
            self._power_s += span
        self._buf.extend(times)
        self._since_look += len(times)
        if self._since_look < self.settings.window_iters:
            return None
        self._since_look = 0
        return self._look()

    def learned(self) -> tuple[CapPoint, ...]:
        """One point per cap the run measured (robust mean time, mean power, iterations, spread), ascending."""
        return tuple(self._observed[c] for c in sorted(self._observed))

    def points(self) -> tuple[CapPoint, ...]:
        """The job's curve as the run now knows it: profiled points and what it measured."""
        return (*self._profiled, *self.learned())

    @property
    def top_w(self) -> float:
        """The job's top cap: "uncapped", where its reference is measured."""
        return self._bounds[1]

    def set_waiting(self, share: float) -> None:
        """From now on ``share`` waiting jobs are delayed by this job's slowdown
        (:meth:`~ecolaunch.state.graph.StateGraph.waiting_share`); the next look weighs them."""
        if not (share >= 0 and math.isfinite(share)):
            raise ConfigError(f"waiting jobs must be a number >= 0, got {share!r}")
        self.waiting = float(share)

    # --- the decision ---------------------------------------------------------------------------------
    def _look(self) -> CapMove | None:
        stats = iteration_stats(list(self._buf))
        if stats is None or self._power_s <= 0:
            return None
        cap = self.cap_w
        if self._borrowed_untested and cap >= self._bounds[1] - _EPS_W:
            self._borrowed_untested, self._reference_due = False, False  # the run's own reference: measured now
            self._test_borrowed(stats)
        off = off_profile(self._profile_curve, cap, stats)
        if off is None:  # one window inside a run: no error that repeats from run to run
            self._observed[cap] = self._window_point(cap, stats)
        else:  # disturbed (or another job): what these iterations measured teaches the curve nothing
            self._observed.pop(cap, None)
            if self.off_profile is None:
                logger.info("cap control: %s: not learned from", off)
                self.off_profile = off
        points = self.points()
        lo, hi = self._bounds
        model = self._fit(points)
        ref = model.predict(hi).iter_time_s
        slow = 100.0 * (stats.mean_s / ref - 1.0)
        self.measured_slowdown_pct = slow
        self.measured_error_pp = max(MIN_MARGIN_PP, MARGIN_Z * math.hypot(reference_se_pct(model), stats.se_pct))
        se = math.sqrt(reference_se_pct(model, window=False) ** 2 + stats.se_pct ** 2)
        bound = self.allowed_slowdown_pct
        limit = bound - max(MIN_MARGIN_PP if self.settings.z > 0 else 0.0, self.settings.z * se)
        eta = queue_eta(self._eta, self._wait_weight, self.waiting)
        choice = model_cap_choice(model, self._bounds, bound, eta, step_w=self.settings.step_w, z=self.settings.z)
        floor = max(self._floors, default=-math.inf)
        if self._reference_back is not None:  # this window measured the reference: back below it
            back, self._reference_back = self._reference_back, None
            target = choice.cap_w if choice.cap_w > floor else back
            if target >= hi - _EPS_W:
                return None
            why = (f"measured the uncapped reference inside the run, {stats.mean_s * 1e3:.4g} ms per iteration at "
                   f"{hi:.0f} W: back to {target:.0f} W, predicted "
                   f"{100.0 * (model.predict(target).iter_time_s / ref - 1.0):.1f} % slower")
            return self._move(target, slow, why)
        if slow > limit + 1e-9 and cap < hi:
            self._floors.append(cap)
            target = max(choice.cap_w, min(hi, cap + self.settings.step_w))
            where = "uncapped" if target >= hi else "the lowest cap the corrected curve keeps within it"
            why = (f"measured {slow:.1f} % slower at {cap:.0f} W (bound {bound:g} %, {bound - limit:.1f} points kept "
                   f"back for measurement error): raising the cap to {target:.0f} W, {where}")
            self._queue_lifted = False
            return self._move(target, slow, why)
        if eta < self._eta and choice.cap_w > cap + self.settings.step_w / 2:
            self._queue_lifted = True
            why = (f"{self.waiting:.3g} waiting job(s) delayed by this job's slowdown (wait_weight "
                   f"{self._wait_weight:g}): raising the cap to {choice.cap_w:.0f} W, "
                   + ("uncapped" if choice.cap_w >= hi else f"predicted {choice.slowdown_pct:.1f} % slower"))
            return self._move(choice.cap_w, slow, why)
        if self._reference_due and self.reference_allowed and cap < hi:
            self._reference_due = False
            self._reference_back = cap
            top = pooled_at(points, hi)
            done = top.run_iterations if top is not None else 0
            why = (f"measuring the uncapped reference for a window inside the run (runs measured {done} of its "
                   f"iterations, {REFERENCE_RUN_ITERS} wanted): the cap to {hi:.0f} W, then back")
            return self._move(hi, slow, why)
        back = self._queue_lifted and eta >= self._eta  # nobody waits now: back to the energy's choice
        if (off is None and choice.cap_w < cap - self.settings.step_w / 2 and choice.cap_w > floor and cap > lo
                and (back or self._down_moves < self.settings.max_down_moves)
                and slow + self.settings.deadband_pp <= limit):
            here = model.predict(cap)
            gain = 100.0 * (1.0 - choice.predicted_energy_j_per_iter / (here.iter_time_s * here.power_w))
            if gain >= MIN_SAVING_PCT:
                self._down_moves += 0 if back else 1
                self._queue_lifted = False
                why = (f"measured {slow:.1f} % slower at {cap:.0f} W (bound {bound:g} %): lowering the cap to "
                       f"{choice.cap_w:.0f} W, predicted {choice.slowdown_pct:.1f} % slower and {gain:.1f} % less "
                       "energy per iteration")
                return self._move(choice.cap_w, slow, why)
        return None

    def _test_borrowed(self, stats: IterationStats) -> None:
        """The window just measured at the top cap against the borrowed profile's uncapped time there: beyond
        ``MARGIN_Z`` standard errors of the two (this window's, :data:`WINDOW_ERROR_PCT` included, and the profile's
        reference, :func:`reference_se_pct`), the borrowed points go and the run's own measurements are the curve. A
        forged uncapped time, the one figure the loop's later looks are ratios to, then holds for one window."""
        hi = self._bounds[1]
        theirs = pooled_at(self._profiled, hi)
        if theirs is None:
            return
        diff = 100.0 * (stats.mean_s / theirs.iter_time_s - 1.0)
        tolerance = MARGIN_Z * math.hypot(stats.se_pct, WINDOW_ERROR_PCT, reference_se_pct(self._profile_curve))
        if abs(diff) <= tolerance:
            return
        self.disowned = (f"the run's own uncapped reference, {stats.mean_s * 1e3:.4g} ms per iteration at {hi:.0f} W, "
                         f"is {diff:+.1f} % from the borrowed profile's {theirs.iter_time_s * 1e3:.4g} ms (the errors "
                         f"of both allow {tolerance:.1f} %): following the run's own measurements")
        logger.info("cap control: %s", self.disowned)
        self._profiled = ()  # what the run measured itself (its windows below the top, this one) stays
        self._profile_curve = self._fit((self._window_point(hi, stats),))

    def _window_point(self, cap_w: float, stats: IterationStats) -> CapPoint:
        """What the window just measured at ``cap_w`` is as a point: one window inside a run (no error that repeats
        from run to run), its power the readings' time-weighted mean."""
        return CapPoint(cap_w, stats.mean_s, self._energy_j / self._power_s, stats.count, stats.cv_pct, 1, stats.count)

    def _fit(self, points: Sequence[CapPoint]):
        """The curve of ``points`` read with the loop's prior (the default one without)."""
        return fit_curve(points, self._prior) if self._prior else fit_curve(points)

    def _move(self, cap_w: float, slow: float, why: str) -> CapMove:
        move = CapMove(self.cap_w, cap_w, slow, why)
        self.moves.append(move)
        logger.info("cap control: %s", why)
        self.cap_w = cap_w
        self._buf.clear()
        self._energy_j = self._power_s = 0.0
        self._skip = self.settings.settle_iters
        self._since_look = 0
        return move

    def __repr__(self) -> str:
        return (f"CapController(cap_w={self.cap_w:g}, bound={self.allowed_slowdown_pct:g}, moves={len(self.moves)}, "
                f"settings={self.settings})")


#: a move not seen in the GPUs' readings after this long is taken as made (a device that lags in reporting)
MOVE_SEEN_TIMEOUT_S = 60.0
#: a limit this many watts below the controller's cap is someone else's (drivers round to whole watts or milliwatts)
HELD_TOLERANCE_W = 1.0


def reaches_top(ceiling_w: float | None, top_w: float) -> bool:
    """Whether a power budget's ceiling on a job's cap (None: no ceiling) lets the cap go to the job's top cap
    ``top_w``, where a run measures its uncapped reference: the launcher's :class:`ClosedLoop` and the simulator
    both ask it."""
    return ceiling_w is None or ceiling_w >= top_w - HELD_TOLERANCE_W


@dataclass(frozen=True, slots=True)
class Feeds:
    """What a closed loop follows and moves in one run.

    Args:
        reader, sampler: the run's step marks and its GPUs' readings.
        gpu_uuids: the job's GPUs (one cap for all of them).
        clock: the clock of the stamps and the readings.
        apply: ``apply(cap_w, why) -> bool`` sets the cap on every GPU of the job
            (:meth:`~ecolaunch.caps.job.RunCaps.apply`); False when it could not.
        ceiling_w: the most the job's cap may be now (a power budget's ceiling,
            :meth:`~ecolaunch.caps.job.JobCaps.ceiling_w`), None for no ceiling; without it the loop still pauses
            when the GPUs' readings show a limit below its cap.
    """

    reader: StepReader
    sampler: Sampler
    gpu_uuids: tuple[str, ...]
    clock: Clock
    apply: Callable[[float, str], bool]
    ceiling_w: Callable[[], float | None] | None = None


class ClosedLoop:
    """Follows one run (``feeds``) from stamp ``from_index`` on, with ``controller``'s decisions; ``from_index``: the
    first stamp that belongs to the controller's current cap."""

    def __init__(self, controller: CapController, feeds: Feeds, from_index: int) -> None:
        self.controller = controller
        self._reader, self._sampler, self._uuids, self._clock = feeds.reader, feeds.sampler, feeds.gpu_uuids, feeds.clock
        self._apply = feeds.apply
        self._ceiling = feeds.ceiling_w
        self._from = max(0, from_index)
        self._pending: tuple[float, float] | None = None  # (cap, when asked) until the readings show it
        self.stopped = False
        #: the limit someone else holds the job's cap at, below the controller's (None: not held)
        self.held_w: float | None = None

    def step(self) -> CapMove | None:
        """Feed what the run did since the last step; make the controller's move if it asks for one."""
        if self.stopped:
            return None
        n = self._reader.count()
        held = self._held_at()
        if held is not None:
            if self.held_w is None:
                logger.info("cap control pauses: the cap is held at %.0f W, below its %.0f W (a power budget)", held,
                            self.controller.cap_w)
            self.held_w = held
            self._from = max(self._from, n - 1)  # these iterations ran under a cap the loop did not choose
            return None
        if self.held_w is not None:
            logger.info("cap control resumes at %.0f W", self.controller.cap_w)
            self.held_w = None
            self._pending = (self.controller.cap_w, self._clock.now())  # count from when the readings show it
        if self._pending is not None:
            if not self._seen(*self._pending):
                self._from = max(self._from, n - 1)  # these iterations ran under the old cap
                return None
            self._pending = None
            self._from = max(self._from, n - 1)
        first, stamps = self._reader.since(self._from)
        if len(stamps) < 2:
            return None
        self._from = first + len(stamps) - 1
        windows = [self._sampler.window(u, stamps[0], stamps[-1]) for u in self._uuids]
        powers = [w.power_w for w in windows if w is not None and w.power_w is not None]
        power = sum(powers) / len(powers) if len(powers) == len(self._uuids) else None
        ceiling = self._ceiling() if self._ceiling is not None else None
        self.controller.reference_allowed = reaches_top(ceiling, self.controller.top_w)
        move = self.controller.observe(iteration_times(stamps, 0), power)
        if move is None:
            return None
        cap = move.cap_w if ceiling is None else min(move.cap_w, ceiling)  # never past the budget's ceiling
        if self._apply(cap, move.reason):
            self._pending = (cap, self._clock.now())
        else:
            logger.warning("cap control stops: the cap could not be set")
            self.stopped = True
        return move

    def _held_at(self) -> float | None:
        """The limit the job's cap is held at below the controller's: the ceiling, else (no move pending) what every
        GPU's latest reading shows; None when it is not held."""
        cap = self.controller.cap_w
        ceiling = self._ceiling() if self._ceiling is not None else None
        if ceiling is not None:
            return ceiling if ceiling < cap - HELD_TOLERANCE_W else None
        if self._pending is not None:
            return None  # a move on its way: the readings show the old cap until it is applied
        limits = []
        for uuid in self._uuids:
            sample = self._sampler.latest(uuid)
            if sample is None or sample.power_limit_w is None:
                return None
            limits.append(sample.power_limit_w)
        return max(limits) if limits and max(limits) < cap - HELD_TOLERANCE_W else None

    def _seen(self, cap_w: float, asked_s: float) -> bool:
        return (self._clock.now() - asked_s > MOVE_SEEN_TIMEOUT_S
                or cap_seen_s(self._sampler.latest, self._uuids, cap_w, asked_s) is not None)


def start_loop(profile: Profile, rules: Rules, bounds_w: tuple[float, float], allowed_slowdown_pct: float,
               cap_w: float | None, feeds: Feeds, from_index: int, *, waiting: float = 0.0,
               control: ControlSettings | None = None, borrowed: bool = False) -> ClosedLoop | None:
    """A closed loop over ``feeds`` that starts at ``cap_w`` (None: the top of ``bounds_w``) from stamp ``from_index``
    on, with the curve of ``profile`` and the admin policy ``rules`` (``waiting``: the jobs its slowdown delays now,
    :meth:`CapController.set_waiting`; ``borrowed``: the profile is a colleague's, :class:`CapController`); None when
    the profile has no curve to follow."""
    hi = bounds_w[1]
    points = profile.curve_points(hi)  # uncapped only: one point, the prior's shape
    if not points:
        return None
    cap = hi if cap_w is None else clip_w(cap_w, bounds_w)
    controller = CapController(points, bounds_w, allowed_slowdown_pct, cap, rules=rules, settings=control,
                               borrowed=borrowed)
    controller.set_waiting(waiting)
    return ClosedLoop(controller, feeds, from_index)
