"""Closed-loop power-cap control for the whole run: the cap follows the job along its measured curve.

What lives here: :class:`ControlSettings`, :class:`CapMove` and :class:`CapController`. What does not: reading
step marks or GPUs (the run observer, ``ecolaunch.launch.observe``, feeds the controller), setting caps (the
observer's cap owner), the curve itself (:mod:`ecolaunch.profile.powercap`).

**Why a loop.** A cap chosen before the run rests on a few measured caps and a curve model between them; on a
real H200 a cap predicted 9.3 % slower ran 10.5 % slower, and the one-shot early check could only jump back to
uncapped, losing the saving. The controller keeps measuring instead.

**How.** Iteration times at the current cap (after ``settle_iters`` following a change) go into a rolling
buffer of at most ``recent_iters``; every ``window_iters`` the buffer's robust mean
(:func:`~ecolaunch.profile.capchoice.iteration_stats`: a trimmed mean, so data-loader stalls and checkpoints do
not move it) becomes a measured point of the job's curve at that cap, with the mean board power the sampler
saw over the same iterations. The job's curve is refitted through its profiled points and everything the run
measured, and the one cap choice (:func:`~ecolaunch.profile.capchoice.job_cap_choice`: least energy per unit of
work whose slowdown plus margin stays within the bound) is asked again:

- **too slow**: the measured slowdown at the current cap exceeds the bound less ``z`` standard errors of what
  is measured (the reference's and this cap's): the cap moves up to the choice, the smallest cap the corrected
  curve says keeps the bound (uncapped only when the curve says so). The cap it left becomes a floor: the run
  never goes back down to it (hysteresis).
- **slack**: the choice is lower than the current cap, above every floor, saves at least
  :data:`~ecolaunch.profile.capchoice.MIN_SAVING_PCT` more, and the measured slowdown is at least
  ``deadband_pp`` below the bound's limit: the cap moves down to it, at most ``max_down_moves`` times a run.
- otherwise it stays.

:meth:`CapController.learned` is what the run measured, one point per cap it ran at; the run observer stores
them with the job's profile, so the next launch starts from the corrected curve.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ecolaunch.errors import ConfigError
from ecolaunch.profile.capchoice import (CHOICE_STEP_W, MARGIN_Z, MIN_MARGIN_PP, MIN_SAVING_PCT, iteration_stats,
                                         model_cap_choice, reference_se_pct)
from ecolaunch.job.profile import CapPoint
from ecolaunch.profile.powercap import CapPrior, fit_cap_model

logger = logging.getLogger(__name__)


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

    def __post_init__(self) -> None:
        for name in ("settle_iters", "window_iters", "recent_iters", "max_down_moves"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"cap control {name} must be an integer >= 0, got {v!r}")
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
    """Moves one job's cap along its measured curve for the whole run (see the module docstring).

    Args:
        points: the job's measured cap points (its profile's; the highest is its uncapped reference).
        bounds_w: the caps the job may run at under the admin policy; the max is "uncapped".
        allowed_slowdown_pct: the job's bound (against alone and uncapped).
        cap_w: the cap the job runs at now (the decision's, or the profiler's choice).
        eta: the admin's objective weight (1 = energy only).
        settings: loop parameters.
        prior: the curve prior (default: the one fitted on the Zeus traces).
    """

    def __init__(self, points: Sequence[CapPoint], bounds_w: tuple[float, float], allowed_slowdown_pct: float,
                 cap_w: float, *, eta: float = 1.0, settings: ControlSettings | None = None,
                 prior: CapPrior | None = None) -> None:
        if not points:
            raise ConfigError("cap control needs the job's measured cap points", hint="profile the job first")
        if not (allowed_slowdown_pct >= 0 and math.isfinite(allowed_slowdown_pct)):
            raise ConfigError(f"allowed slowdown must be >= 0 %, got {allowed_slowdown_pct!r}")
        self._profiled = tuple(points)
        self._bounds = (float(bounds_w[0]), float(bounds_w[1]))
        self.allowed_slowdown_pct = float(allowed_slowdown_pct)
        self._eta = eta
        self.settings = settings or ControlSettings()
        self._prior = prior
        self.cap_w = float(cap_w)
        self.moves: list[CapMove] = []
        self.measured_slowdown_pct: float | None = None  # at the current cap, latest look
        self._floors: list[float] = []  # caps found too slow: never go back down to them
        self._observed: dict[float, CapPoint] = {}
        self._buf: collections.deque[float] = collections.deque(maxlen=self.settings.recent_iters)
        self._energy_j = self._power_s = 0.0  # power readings at the current cap, time-weighted
        self._skip = self.settings.settle_iters
        self._since_look = 0
        self._down_moves = 0

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

    # --- the decision ---------------------------------------------------------------------------------
    def _look(self) -> CapMove | None:
        stats = iteration_stats(list(self._buf))
        if stats is None or self._power_s <= 0:
            return None
        cap = self.cap_w
        self._observed[cap] = CapPoint(cap, stats.mean_s, self._energy_j / self._power_s, stats.count,
                                       stats.cv_pct)
        points = self.points()
        lo, hi = self._bounds
        model = fit_cap_model(points, self._prior) if self._prior else fit_cap_model(points)
        ref = model.predict(hi).iter_time_s
        slow = 100.0 * (stats.mean_s / ref - 1.0)
        self.measured_slowdown_pct = slow
        se = math.sqrt(reference_se_pct(model) ** 2 + stats.se_pct ** 2)
        bound = self.allowed_slowdown_pct
        limit = bound - max(MIN_MARGIN_PP if self.settings.z > 0 else 0.0, self.settings.z * se)
        choice = model_cap_choice(model, self._bounds, bound, self._eta, step_w=self.settings.step_w,
                                  z=self.settings.z)
        if slow > limit + 1e-9 and cap < hi:
            self._floors.append(cap)
            target = max(choice.cap_w, min(hi, cap + self.settings.step_w))
            where = "uncapped" if target >= hi else "the lowest cap the corrected curve keeps within it"
            why = (f"measured {slow:.1f} % slower at {cap:.0f} W (bound {bound:g} %, {bound - limit:.1f} points kept "
                   f"back for measurement error): raising the cap to {target:.0f} W, {where}")
            return self._move(target, slow, why)
        floor = max(self._floors, default=-math.inf)
        if (choice.cap_w < cap - self.settings.step_w / 2 and choice.cap_w > floor and cap > lo
                and self._down_moves < self.settings.max_down_moves and slow + self.settings.deadband_pp <= limit):
            here = model.predict(cap)
            gain = 100.0 * (1.0 - choice.predicted_energy_j_per_iter / (here.iter_time_s * here.power_w))
            if gain >= MIN_SAVING_PCT:
                self._down_moves += 1
                why = (f"measured {slow:.1f} % slower at {cap:.0f} W (bound {bound:g} %): lowering the cap to "
                       f"{choice.cap_w:.0f} W, predicted {choice.slowdown_pct:.1f} % slower and {gain:.1f} % less "
                       "energy per iteration")
                return self._move(choice.cap_w, slow, why)
        return None

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
