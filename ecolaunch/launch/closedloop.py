"""The closed loop's plumbing in a run: step marks and GPU readings in, cap moves out.

:class:`ClosedLoop` feeds a :class:`~ecolaunch.profile.control.CapController` (the decisions) with the run's
iteration times (:class:`~ecolaunch.profile.channel.StepReader`) and the board power over the same iterations
(:class:`~ecolaunch.profile.sampler.Sampler`), and applies each move through the run observer's cap setter. A
move counts as made once the GPUs' readings show the new limit (a cap agent may apply it a second later):
iterations before that ran under the old cap and are not counted for either. The run observer
(``ecolaunch.launch.observe``) owns one per run; nothing here prints.

**A cap held lower by someone else** — a power budget's ceiling (``[power] max_total_w``: a job arrived, and the
budget lowered this one, see :mod:`ecolaunch.admin.budget`), or an admin: while the ceiling (``ceiling_w()``, the
job's :meth:`~ecolaunch.launch.caps.JobCaps.ceiling_w`), or else the GPUs' readings, show a limit below the
controller's cap, the loop pauses: those iterations ran under a cap it did not choose, and counting them for its
own cap would corrupt the curve it learns. It resumes once the limit is back at its cap (the budget raised the
ceiling again). A move up past the ceiling is made only up to the ceiling, and the loop then pauses the same way:
its moves never exceed the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ecolaunch.clock import Clock
from ecolaunch.profile.channel import StepReader, iteration_times
from ecolaunch.profile.control import CapController, CapMove
from ecolaunch.profile.sampler import Sampler, cap_seen_s

logger = logging.getLogger(__name__)

#: a move not seen in the GPUs' readings after this long is taken as made (a device that lags in reporting)
MOVE_SEEN_TIMEOUT_S = 60.0
#: a limit this many watts below the controller's cap is someone else's (drivers round to whole watts or milliwatts)
HELD_TOLERANCE_W = 1.0


class ClosedLoop:
    """Follows one run from stamp ``from_index`` on.

    Args:
        controller: the decisions.
        reader, sampler: the run's step marks and GPU readings.
        gpu_uuids: the job's GPUs (one cap for all of them).
        clock: the clock of the stamps and the readings.
        apply: ``apply(cap_w, why) -> bool`` sets the cap on every GPU of the job; False when it could not.
        from_index: the first stamp that belongs to the controller's current cap.
        ceiling_w: the most the job's cap may be now (a power budget's ceiling), None for no ceiling; without it
            the loop still pauses when the GPUs' readings show a limit below its cap.
    """

    def __init__(self, controller: CapController, reader: StepReader, sampler: Sampler, gpu_uuids: Sequence[str],
                 clock: Clock, apply: Callable[[float, str], bool], from_index: int, *,
                 ceiling_w: Callable[[], float | None] | None = None) -> None:
        self.controller = controller
        self._reader, self._sampler, self._uuids, self._clock = reader, sampler, tuple(gpu_uuids), clock
        self._apply = apply
        self._ceiling = ceiling_w
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
        move = self.controller.observe(iteration_times(stamps, 0), power)
        if move is None:
            return None
        ceiling = self._ceiling() if self._ceiling is not None else None
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
