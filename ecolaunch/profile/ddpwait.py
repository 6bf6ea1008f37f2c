"""How long each rank waits at DDP's all-reduce for the others: ``ecolaunch.allreduce_wait_hook``.

What lives here: the hook (it reduces every gradient bucket exactly as DDP's default ``allreduce_hook`` does, and
times the last bucket of each backward pass) and :func:`rank_waits` (each rank's waste, for the launcher's report).
What does not: the file the waits go to (:mod:`ecolaunch.profile.channel`), acting on them
(:mod:`ecolaunch.profile.pacing`). What is measured, and how well with gloo and NCCL:
docs/pace-matching.md#measuring-what-the-fast-ranks-waste.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ecolaunch.profile import channel

logger = logging.getLogger(__name__)

#: a rank's waste below this share of the step, or below REPORT_MIN_S, is noise (scheduling, the reduction's
#: own jitter), not a slow rank: the summary says nothing
REPORT_MIN_SHARE = 0.05
REPORT_MIN_S = 0.002


class _Timer:
    """The process's wait writer: opened on first use from the environment (None: not under ecolaunch); and the
    CUDA event pairs of NCCL spans not yet read."""

    def __init__(self) -> None:
        self.writer: channel.WaitWriter | None = None
        self.ready = False
        self.pending: list = []

    def flush(self) -> None:
        """Record the CUDA spans whose second event has passed, in order (never blocks)."""
        while self.pending and self.pending[0][1].query():
            start, end = self.pending.pop(0)
            self.record(start.elapsed_time(end) / 1e3)

    def get(self) -> channel.WaitWriter | None:
        if not self.ready:
            self.ready = True
            directory = os.environ.get(channel.ENV_HOOK_DIR)
            if directory:
                self.writer = channel.WaitWriter(directory, int(os.environ.get(channel.ENV_RANK, "0") or 0))
        return self.writer

    def record(self, seconds: float) -> None:
        writer = self.get()
        if writer is None:
            return
        try:
            writer.append(seconds)
        except OSError as e:
            logger.warning("ecolaunch: all-reduce waits are no longer recorded: %s", e)
            self.writer = None


_TIMER = _Timer()


def allreduce_wait_hook(state, bucket):
    """A DDP communication hook: DDP's default all-reduce, timing this rank's wait on the last bucket of each
    backward pass (docs/pace-matching.md#measuring-what-the-fast-ranks-waste). ``state`` is unused (pass None), or a process group to reduce over."""
    import torch.distributed as dist  # lazy: the hook runs in a DDP worker, which has torch loaded already

    group = state if state is not None else dist.group.WORLD
    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(group))
    future = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    if not bucket.is_last() or _TIMER.get() is None:
        return future.then(lambda fut: fut.value()[0])
    if tensor.is_cuda:
        import torch  # lazy: as above

        _TIMER.flush()
        start = torch.cuda.Event(enable_timing=True)
        start.record()  # on the compute stream: passed when this rank's backward pass is done on the GPU

        def done_on_gpu(fut):
            end = torch.cuda.Event(enable_timing=True)
            end.record()  # on the callback's stream, which torch orders after the reduction
            _TIMER.pending.append((start, end))
            return fut.value()[0]

        return future.then(done_on_gpu)
    handed_over = time.monotonic()

    def done(fut):
        _TIMER.record(time.monotonic() - handed_over)
        return fut.value()[0]

    return future.then(done)


@dataclass(frozen=True, slots=True)
class RankWaits:
    """What the ranks of one node waited at the all-reduce: each rank's mean span (s), the slowest rank (the one
    with the shortest span) and each rank's waste as a share of the step."""

    mean_span_s: Mapping[int, float]
    slowest: int
    waste_share: Mapping[int, float]

    def line(self) -> str | None:
        """One summary line naming the ranks that waste at least :data:`REPORT_MIN_SHARE` of the step (and
        :data:`REPORT_MIN_S`), else None."""
        floor = self.mean_span_s[self.slowest]
        waiting = [(r, w) for r, w in sorted(self.waste_share.items())
                   if r != self.slowest and w >= REPORT_MIN_SHARE and self.mean_span_s[r] - floor >= REPORT_MIN_S]
        if not waiting:
            return None
        shares = ", ".join(f"rank {r} {100 * w:.0f} %" for r, w in waiting)
        return (f"all-reduce: the faster ranks waited for rank {self.slowest}, the slowest, this share of each step: "
                f"{shares}; a waiting GPU draws power for nothing (pace-matching: docs/pace-matching.md)")


def rank_waits(waits: Mapping[int, Sequence[float]], iter_time_s: float | None, warmup: int = 0) -> RankWaits | None:
    """The ranks' waits (``waits``: by rank, seconds per iteration, from :func:`~ecolaunch.profile.channel.read_waits`)
    against the mean iteration time; the first ``warmup`` iterations are left out. None without two ranks' waits or
    an iteration time."""
    spans = {r: sum(w[warmup:]) / len(w[warmup:]) for r, w in waits.items() if len(w) > warmup}
    if len(spans) < 2 or not iter_time_s or iter_time_s <= 0:
        return None
    return RankWaits(spans, *waste_shares(spans, iter_time_s))


def waste_shares(spans_s: Mapping[int, float], iter_time_s: float,
                 floor_s: float | None = None) -> tuple[int | None, dict[int, float]]:
    """The slowest rank (the shortest mean span) and each rank's waste, its span beyond the slowest rank's, as a
    share of the step (``iter_time_s`` > 0; two or more ranks, or one and ``floor_s``).

    ``floor_s``: the shortest mean span of the job's ranks on other nodes (a job over several nodes); when it is
    shorter than every span here, the slowest rank is on another node and is returned as None."""
    slowest: int | None = min(spans_s, key=spans_s.get)
    floor = spans_s[slowest]
    if floor_s is not None and floor_s < floor:
        slowest, floor = None, floor_s
    return slowest, {r: max(0.0, s - floor) / iter_time_s for r, s in spans_s.items()}
