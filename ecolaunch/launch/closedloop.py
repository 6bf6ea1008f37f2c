"""The closed loop's plumbing in a run: step marks and GPU readings in, cap moves out.

:class:`ClosedLoop` feeds a :class:`~ecolaunch.profile.control.CapController` (the decisions) with the run's
iteration times (:class:`~ecolaunch.profile.channel.StepReader`) and the board power over the same iterations
(:class:`~ecolaunch.profile.sampler.Sampler`), and applies each move through the run observer's cap setter. A
move counts as made once the GPUs' readings show the new limit (a cap agent may apply it a second later):
iterations before that ran under the old cap and are not counted for either. The run observer
(``ecolaunch.launch.observe``) owns one per run; nothing here prints.
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


class ClosedLoop:
    """Follows one run from stamp ``from_index`` on.

    Args:
        controller: the decisions.
        reader, sampler: the run's step marks and GPU readings.
        gpu_uuids: the job's GPUs (one cap for all of them).
        clock: the clock of the stamps and the readings.
        apply: ``apply(cap_w, why) -> bool`` sets the cap on every GPU of the job; False when it could not.
        from_index: the first stamp that belongs to the controller's current cap.
    """

    def __init__(self, controller: CapController, reader: StepReader, sampler: Sampler, gpu_uuids: Sequence[str],
                 clock: Clock, apply: Callable[[float, str], bool], from_index: int) -> None:
        self.controller = controller
        self._reader, self._sampler, self._uuids, self._clock = reader, sampler, tuple(gpu_uuids), clock
        self._apply = apply
        self._from = max(0, from_index)
        self._pending: tuple[float, float] | None = None  # (cap, when asked) until the readings show it
        self.stopped = False

    def step(self) -> CapMove | None:
        """Feed what the run did since the last step; make the controller's move if it asks for one."""
        if self.stopped:
            return None
        n = self._reader.count()
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
        if self._apply(move.cap_w, move.reason):
            self._pending = (move.cap_w, self._clock.now())
        else:
            logger.warning("cap control stops: the cap could not be set")
            self.stopped = True
        return move

    def _seen(self, cap_w: float, asked_s: float) -> bool:
        return (self._clock.now() - asked_s > MOVE_SEEN_TIMEOUT_S
                or cap_seen_s(self._sampler.latest, self._uuids, cap_w, asked_s) is not None)
