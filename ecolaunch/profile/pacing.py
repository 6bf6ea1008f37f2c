"""Pace-matching while a job runs: lower the cap of a GPU whose rank waits at the all-reduce, one step at a time,
while the job's iteration time does not move.

What lives here: :class:`PaceController` (the decisions, from what the ranks waited and how long the steps took)
and :class:`WaitReader` (the ranks' waits as the workers append them). What does not: measuring the waits
(:mod:`ecolaunch.profile.ddpwait`), setting a cap (the run's :class:`~ecolaunch.caps.job.RunCaps`, through the
job's one cap owner), sharing the waits across nodes (:meth:`ecolaunch.launch.nodes.Meeting.share_waits`), the
model-based rule the pace-matching benchmark scores (``benchmarks/_pace.py``). Why feedback, and the rule:
docs/pace-matching.md#in-the-launcher-feedback-from-the-measured-waits.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ecolaunch.profile import channel
from ecolaunch.jobmodel.capchoice import MARGIN_Z
from ecolaunch.profile.ddpwait import waste_shares

logger = logging.getLogger(__name__)

#: iterations of every rank a decision reads (and waits for after a move, before judging it)
WINDOW_ITERS = 20
#: the least share of the step a rank must waste to have its cap lowered
MIN_WASTE_SHARE = 0.10
#: how far the job's mean iteration time may rise over the time before any move before a move is undone
TIME_TOLERANCE = 0.01
#: one move: this share of the GPU's board maximum
STEP_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class PaceMove:
    """One change of one GPU's cap: which, to what, and why."""

    gpu: str
    cap_w: float
    reason: str


@dataclass
class PaceController:
    """The decisions for one job's GPUs (``gpus``: by local rank; ``max_w``: each GPU's board maximum;
    ``set_cap(uuid, watts) -> watts applied``, the node's cap owner, which clips to the admin policy)."""

    gpus: Sequence[str]
    caps_w: dict[str, float]
    max_w: Mapping[str, float]
    set_cap: Callable[[str, float], float]
    window: int = WINDOW_ITERS
    baseline_s: float | None = None
    baseline_se_s: float = 0.0
    frozen: set[str] = field(default_factory=set)
    moves: list[PaceMove] = field(default_factory=list)
    _last: tuple[str, float] | None = None  # (gpu, cap before the move) until judged
    _start_w: dict[str, float] = field(default_factory=dict)  # each GPU's cap when pacing began

    def __post_init__(self) -> None:
        self._start_w = dict(self.caps_w)

    def decide(self, spans_s: Mapping[int, float], iter_time_s: float, iter_se_s: float = 0.0,
               floor_s: float | None = None) -> PaceMove | None:
        """One window: each local rank's mean all-reduce span (s), the job's mean iteration time (s) and its
        standard error (s); ``floor_s``, for a job over several nodes, the shortest mean span of its ranks on the
        other nodes (s), so that a rank here is measured against the job's slowest wherever it runs."""
        if len(spans_s) < (1 if floor_s is not None else 2) or iter_time_s <= 0:
            return None
        if self.baseline_s is None:
            self.baseline_s, self.baseline_se_s = iter_time_s, iter_se_s
        if self._last is not None:
            gpu, before = self._last
            self._last = None
            noise = MARGIN_Z * math.hypot(self.baseline_se_s, iter_se_s)
            if iter_time_s - self.baseline_s > max(TIME_TOLERANCE * self.baseline_s, noise):
                self.frozen.add(gpu)
                applied = self.set_cap(gpu, before)
                self.caps_w[gpu] = applied
                move = PaceMove(gpu, applied, f"pace: GPU {self._index(gpu)} back to {applied:.0f} W: at the lower cap "
                                f"the job's step took {100 * (iter_time_s / self.baseline_s - 1):.1f} % longer")
                self.moves.append(move)
                return move
        slowest, shares = waste_shares(spans_s, iter_time_s, floor_s)
        whom = f"rank {slowest}, the slowest" if slowest is not None else "the slowest rank, on another node"
        waste = {r: w for r, w in shares.items() if r != slowest and r < len(self.gpus)}
        for rank, share in sorted(waste.items(), key=lambda kv: -kv[1]):
            gpu = self.gpus[rank]
            if share < MIN_WASTE_SHARE:
                break
            if gpu in self.frozen:
                continue
            before = self.caps_w[gpu]
            applied = self.set_cap(gpu, before - STEP_SHARE * self.max_w[gpu])
            if applied >= before - 0.5:  # at its lowest allowed cap already
                self.frozen.add(gpu)
                continue
            self.caps_w[gpu] = applied
            self._last = (gpu, before)
            move = PaceMove(gpu, applied, f"pace: GPU {self._index(gpu)} (rank {rank}) to {applied:.0f} W: it waited "
                            f"{100 * share:.0f} % of each step for {whom}")
            self.moves.append(move)
            return move
        return None

    def restore(self) -> list[PaceMove]:
        """Put every GPU this controller moved back to its cap before pacing, e.g. when the job's workers restart in
        a new rendezvous round and what was measured no longer holds; the moves made."""
        moved = []
        for gpu in dict.fromkeys(m.gpu for m in self.moves):
            if abs(self.caps_w[gpu] - self._start_w[gpu]) > 0.5:
                self.caps_w[gpu] = self.set_cap(gpu, self._start_w[gpu])
                moved.append(PaceMove(gpu, self.caps_w[gpu], f"pace: GPU {self._index(gpu)} back to "
                                      f"{self.caps_w[gpu]:.0f} W: the workers restarted in a new rendezvous round"))
        self.moves.extend(moved)
        return moved

    def _index(self, gpu: str) -> int:
        return list(self.gpus).index(gpu)


class WaitReader:
    """The ranks' all-reduce waits as the workers append them (``waits-<rank>.bin``), the latest ones kept."""

    def __init__(self, directory: Path | str, keep: int = 4096) -> None:
        self._dir = Path(directory)
        self._offsets: dict[int, int] = {}
        self._tail: dict[int, collections.deque[float]] = {}
        self._counts: dict[int, int] = {}
        self._keep = keep

    def poll(self) -> None:
        for rank, (offset, values) in channel.read_new_waits(self._dir, self._offsets).items():
            self._offsets[rank] = offset
            self._tail.setdefault(rank, collections.deque(maxlen=self._keep)).extend(values)
            self._counts[rank] = self._counts.get(rank, 0) + len(values)

    def skip_existing(self) -> None:
        """Forget every wait recorded so far (read past them): a new rendezvous round's workers, whose global
        ranks may differ, are counted from their first wait on."""
        self.poll()
        self._tail.clear()
        self._counts.clear()

    def count(self) -> int:
        """Waits every rank has recorded (the fewest)."""
        return min(self._counts.values()) if self._counts else 0

    def mean_spans(self, last: int) -> dict[int, float]:
        """Each rank's mean span over its ``last`` waits, by local rank (the lowest rank of the node is 0)."""
        base = min(self._tail) if self._tail else 0
        recent = {r: list(t)[-last:] for r, t in self._tail.items() if t}
        return {r - base: sum(w) / len(w) for r, w in recent.items()}


def pace_summary(controller: PaceController | None) -> list[str]:
    """One line per GPU pacing moved: where its cap ended, in how many moves, and the first move's reason."""
    if controller is None:
        return []
    by_gpu: dict[str, list[PaceMove]] = {}
    for move in controller.moves:
        by_gpu.setdefault(move.gpu, []).append(move)
    lines = []
    for gpu, moves in by_gpu.items():
        first = moves[0].reason.split(": ", 2)[-1]
        undone = " (its last step undone: the job's step grew)" if "back to" in moves[-1].reason else ""
        lines.append(f"pace: GPU {controller._index(gpu)} ended at {moves[-1].cap_w:.0f} W after {len(moves)} "
                     f"move(s){undone}; at the first, {first}")
    return lines
