"""The run's pace-matching plug-in: once profiling is done, lower the cap of the rank that waits most for the others.

What lives here: :class:`Pacing` (a :class:`~ecolaunch.run.state.Part`: one decision every window of every rank's
all-reduce waits, and the way back when the workers restart in a new rendezvous round). What does not: the decisions
(:class:`~ecolaunch.profile.pacing.PaceController`), the ranks' waits (``ecolaunch.allreduce_wait_hook``,
:mod:`ecolaunch.profile.ddpwait`). How it paces: docs/profiling.md, "Pace-matching".
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
from collections.abc import Sequence

from ecolaunch.profile import channel
from ecolaunch.profile.modes import ProfileAction
from ecolaunch.profile.pacing import WINDOW_ITERS, PaceController, WaitReader, pace_summary
from ecolaunch.run.state import Part, Run, RunState

logger = logging.getLogger(__name__)


class Pacing(Part):
    """Pace-matching for one run (:mod:`ecolaunch.profile.pacing`); a move of the closed loop (one cap for every
    GPU) starts it afresh from the loop's cap."""

    def __init__(self) -> None:
        #: the ranks' waits, the controller, where its window began
        self._wait_reader: WaitReader | None = None
        self.pace: PaceController | None = None
        self._from = (0, 0)  # (waits, closed-loop moves) at the last decision
        self._fresh = True  # the next window also waits out the warm-up (first iterations, or a new round's)
        self._lock = threading.Lock()  # a new rendezvous round (torch's thread) against the polls

    def step(self, run: Run, stamps: Sequence[float], final: bool) -> None:
        if final:
            return
        with self._lock:
            self._window(run)

    def lines(self) -> tuple[str, ...]:
        """What pacing did, one line each (for the summary)."""
        return tuple(pace_summary(self.pace))

    def new_round(self) -> list[str]:
        """The workers restart in a new rendezvous round (another node joined or left, or a restart): the caps
        pacing moved go back to where pacing found them, and pacing starts afresh once the new round's workers
        have run a window (the lines to print)."""
        with self._lock:
            lines = [] if self.pace is None else [m.reason for m in self.pace.restore()]
            self.pace, self._fresh = None, True
            if self._wait_reader is not None:
                self._wait_reader.skip_existing()
            self._from = (0, self._from[1])
            return lines

    def _window(self, run: Run) -> None:
        """Every window of every rank's all-reduce waits (``ecolaunch.allreduce_wait_hook``), lower the cap of the
        rank that waits most."""
        peers = run.config.peer_waits
        if (not run.config.pace or len(run.uuids) < (1 if peers else 2) or not run.caps.can_set
                or run.mode is ProfileAction.PRE or run.state is RunState.PROFILING or run.shared()):
            return
        if self._wait_reader is None:
            self._wait_reader = WaitReader(run.monitor.hook_dir)
        self._wait_reader.poll()
        waits, loop_moves = self._wait_reader.count(), len(run.loop.controller.moves) if run.loop else 0
        # the first decision also waits out the warm-up (first iterations are slow on every rank)
        window = WINDOW_ITERS + (run.settings.warmup_iters if self._fresh else 0)
        if waits - self._from[0] < window:
            return
        if loop_moves != self._from[1]:  # the closed loop moved every GPU: what pacing measured is gone
            self._from, self.pace = (waits, loop_moves), None
            return
        reader = run.monitor.reader
        _, stamps = reader.since(reader.count() - WINDOW_ITERS - 1)
        if len(stamps) < 2:
            return
        times = channel.iteration_times(stamps, 0)
        if not times:
            return
        iter_time_s = sum(times) / len(times)
        iter_se_s = statistics.stdev(times) / math.sqrt(len(times)) if len(times) > 1 else 0.0
        if self.pace is None:
            caps = {u: run.caps.current(u) or run.max_w.get(u) for u in run.uuids}
            if any(c is None for c in caps.values()) or any(u not in run.max_w for u in run.uuids):
                return
            self.pace = PaceController(run.uuids, caps, run.max_w, run.caps.set)
        self._from, self._fresh = (waits, loop_moves), False
        spans = self._wait_reader.mean_spans(WINDOW_ITERS)
        move = self.pace.decide(spans, iter_time_s, iter_se_s, floor_s=peers(spans) if peers else None)
        if move is not None:
            logger.info("job %s: %s", run.job_id, move.reason)
