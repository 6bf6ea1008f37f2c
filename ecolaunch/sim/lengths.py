"""What the simulator's launchers know of a job's length: :class:`LauncherLengths` (what a launcher could know: a
declared length, else the median of its job key's completed runs, else nothing) and :class:`TrueLengths` (every job's
true solo run time: the omniscient oracle's, and backfill's upper bound in ``benchmarks/backfill_headroom.py``).

Each goes into a job's request (``expected_s``, ``expected_iterations``), as the launcher's history puts it there
(``launch/pipeline.py``), so that the running jobs' records carry it (:meth:`~ecolaunch.state.graph.Job.remaining_s`),
and learns the margin a backfilled job's length gets from how its predictions ran over
(:func:`~ecolaunch.policy.backfill.overrun_margin`), as the launcher learns it from the history. What does not live
here: the backfill rule (``policy.backfill``), the queue (``sim.engine``). How lengths are known: docs/queue.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ecolaunch.jobmodel.profile import Profile
from ecolaunch.policy.backfill import overrun_margin
from ecolaunch.profile.history import KEPT_RUNS, ProfileEntry, RunLength


class TraceJob(Protocol):
    """What a length source reads of a trace's job (``sim.engine.TraceJob``, which imports this module)."""

    id: str
    user: str
    kind: str
    work_s: float

__all__ = ["Declared", "LauncherLengths", "TrueLengths"]

#: the latest predictions a margin is learned from (``History.length_predictions``' default)
KEPT_PREDICTIONS = 100
#: the simulator's step of progress (``sim.engine`` counts a job's progress in it): a job's length in steps is its
#: solo run time in ms
STEP_S = 1e-3


def steps_of(work_s: float) -> int:
    """A solo run time in the simulator's steps of progress (what ``Job.progress`` counts)."""
    return int(round(work_s / STEP_S))


@dataclass(frozen=True, slots=True)
class Declared:
    """What a job declares of its length: its total ``iterations`` (of its own training loop) and the same length in
    the simulator's steps of progress (``steps``: a millisecond of its run alone)."""

    iterations: float
    steps: int


class _Learned:
    """The predictions made at each job's start and how its runs ended: the margin (``overrun_margin``)."""

    def __init__(self) -> None:
        self._said: dict[str, float] = {}
        self._pairs: list[tuple[float, float]] = []

    def _note(self, job: TraceJob, known: Mapping[str, float | int]) -> dict[str, float | int]:
        if known.get("expected_s"):
            self._said[job.id] = float(known["expected_s"])
        else:
            self._said.pop(job.id, None)
        return dict(known)

    def _learn(self, job: TraceJob, run_s: float) -> None:
        said = self._said.pop(job.id, None)
        if said is not None:
            self._pairs = [*self._pairs, (said, run_s)][-KEPT_PREDICTIONS:]

    def margin(self) -> float:
        return overrun_margin(self._pairs)


class TrueLengths(_Learned):
    """Every job's true solo run time (``work_s``) and steps."""

    name = "true"

    def known(self, job: TraceJob, profile: Profile | None) -> dict[str, float | int]:
        return self._note(job, {"expected_s": job.work_s, "expected_iterations": steps_of(job.work_s)})

    def ended(self, job: TraceJob, run_s: float, iterations: int) -> None:
        self._learn(job, run_s)


class LauncherLengths(_Learned):
    """What a launcher could know of a job's length: a job that declares its length (``declared``, by job id: a share
    of jobs the caller chooses) declares its total iterations; before it starts its length is those iterations at
    the iteration time its request's profile measured (none for a first launch: unknown until it runs), once it runs
    the steps left at its measured pace. Any other job: the medians of the latest
    :data:`~ecolaunch.profile.history.KEPT_RUNS` completed runs of its job key (user and job type, the measured world's
    key of a job's history), as :meth:`ProfileEntry.expected_run` takes them; none completed: unknown. Nothing here
    reads a job's true run time."""

    name = "launcher"

    def __init__(self, declared: Mapping[str, Declared] | None = None) -> None:
        super().__init__()
        self.declared = dict(declared or {})
        self._runs: dict[tuple[str, str], tuple[RunLength, ...]] = {}

    def known(self, job: TraceJob, profile: Profile | None) -> dict[str, float | int]:
        out: dict[str, float | int] = {}
        runs = self._runs.get((job.user, job.kind))
        if runs:
            expected = ProfileEntry(fingerprint=job.kind, profile=None, runs=runs).expected_run()
            if expected is not None:
                out["expected_s"] = expected.duration_s
                if expected.iterations:
                    out["expected_iterations"] = expected.iterations
        said = self.declared.get(job.id)
        if said is not None:
            out = {"expected_iterations": said.steps}
            if profile is not None and profile.iter_time_s:
                out["expected_s"] = said.iterations * profile.iter_time_s
        return self._note(job, out)

    def ended(self, job: TraceJob, run_s: float, iterations: int) -> None:
        self._learn(job, run_s)
        key = (job.user, job.kind)
        self._runs[key] = (*self._runs.get(key, ()), RunLength(max(0.0, run_s), iterations))[-KEPT_RUNS:]
