"""EASY backfill for the simulator's queue, and what a row knows of each job's length (issue 40, item 2).

What lives here: :class:`EasyBackfill` (the simulator's :class:`~ecolaunch.sim.engine.Backfill` plug-in) and the two
sources of a job's length it is built with: :class:`TrueLengths` (the trace's true run times: the upper bound) and
:class:`LauncherLengths` (what a launcher could know: a declared length, else the median of the job key's completed
runs, else nothing). What does not: the trace knobs and the table (``backfill_headroom.py``). The launcher's queue
is a strict FIFO (docs/queue.md); this is an ablation that measures what backfill could buy, so it lives beside the
benchmark, not in the package.

**The rule** (Slurm's EASY backfill, on one host): when the head of the queue cannot be placed, it is promised the
earliest time enough GPUs are free for it (its *shadow time*), counting each running job's end from its time left
(:meth:`~ecolaunch.state.graph.Job.remaining_s`: the steps its request expects less the steps done, at its measured
pace, else its expected length less the time it has run); a running job whose end is unknown (no expected length, or
it ran past it) is counted as never ending. A job behind the head may start now, in queue order, when enough GPUs
are free and either it is expected to end by the shadow time, or it takes only GPUs the head will not need then (the
*extra* GPUs). No shadow time (the ends known do not free enough GPUs): nothing starts past the head. The policy
still places every job (its GPUs and caps), so a job it cannot place is not started.

**What is known of a job's length** goes into its request (``expected_s``, ``expected_iterations``), as the launcher's
history puts it there (``launch/pipeline.py``), and the rule reads it back from the running jobs' records:

- :class:`TrueLengths`: every job's true solo run time and its steps.
- :class:`LauncherLengths`: a job that declares its length (a share of jobs chosen by the benchmark's knob) declares
  its total iterations; before it starts its length is those iterations at the iteration time its request's profile
  measured (none for a first launch: unknown until it runs), once it runs the steps left at its measured pace. Any
  other job: the medians of the latest :data:`~ecolaunch.profile.history.KEPT_RUNS` completed runs of its job key
  (user and job type, the measured world's key of a job's history), as :meth:`ProfileEntry.expected_run` takes them;
  none completed: unknown. Nothing here reads a job's true run time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.history import KEPT_RUNS, ProfileEntry, RunLength
from ecolaunch.sim.engine import TraceJob, _work_steps
from ecolaunch.state.graph import Job, StateGraph


@dataclass(frozen=True, slots=True)
class Declared:
    """What a job declares of its length: its total ``iterations`` (of its own training loop) and the same length in
    the simulator's steps of progress (``steps``: a millisecond of its run alone, ``Simulation._progress``)."""

    iterations: float
    steps: int


def steps_of(work_s: float) -> int:
    """A solo run time in the simulator's steps of progress (what ``Job.progress`` counts)."""
    return _work_steps(work_s)


class TrueLengths:
    """Every job's true solo run time (``work_s``) and steps: backfill's upper bound."""

    name = "true"

    def known(self, job: TraceJob, profile: Profile | None) -> dict[str, float | int]:
        return {"expected_s": job.work_s, "expected_iterations": steps_of(job.work_s)}

    def ended(self, job: TraceJob, run_s: float, iterations: int) -> None:
        pass


class LauncherLengths:
    """What a launcher could know of a job's length (the module docstring): ``declared`` by job id, else the job key's
    completed runs, else nothing."""

    name = "launcher"

    def __init__(self, declared: Mapping[str, Declared]) -> None:
        self.declared = dict(declared)
        self._runs: dict[tuple[str, str], tuple[RunLength, ...]] = {}

    def known(self, job: TraceJob, profile: Profile | None) -> dict[str, float | int]:
        out: dict[str, float | int] = {}
        runs = self._runs.get((job.user, job.kind))
        if runs:
            expected = ProfileEntry(fingerprint=job.kind, profile=None, runs=runs).expected_run()
            out["expected_s"] = expected.duration_s
            if expected.iterations:
                out["expected_iterations"] = expected.iterations
        said = self.declared.get(job.id)
        if said is not None:
            out["expected_iterations"] = said.steps
            if profile is not None and profile.iter_time_s:
                out["expected_s"] = said.iterations * profile.iter_time_s
        return out

    def ended(self, job: TraceJob, run_s: float, iterations: int) -> None:
        key = (job.user, job.kind)
        self._runs[key] = (*self._runs.get(key, ()), RunLength(max(0.0, run_s), iterations))[-KEPT_RUNS:]


def shadow(need: int, free: int, running: Sequence[Job], now: float) -> tuple[float, int] | None:
    """The head's promise: the earliest time ``need`` GPUs are free (``free`` are now; each running job frees its GPUs
    at its expected end), and how many GPUs beyond ``need`` are free then; None when the ends known never free enough."""
    if free >= need:
        return now, free - need
    ends = sorted((left, len(job.gpus)) for job in running if (left := job.remaining_s(now)) is not None)
    avail = free
    for left, gpus in ends:
        avail += gpus
        if avail >= need:
            return now + left, avail - need
    return None


class EasyBackfill:
    """Slurm's EASY backfill on one host (the module docstring), with a job's length from ``lengths``."""

    def __init__(self, lengths: TrueLengths | LauncherLengths) -> None:
        self.lengths = lengths

    def known(self, job: TraceJob, profile: Profile | None) -> dict[str, float | int]:
        return self.lengths.known(job, profile)

    def ended(self, job: TraceJob, run_s: float, iterations: int) -> None:
        self.lengths.ended(job, run_s, iterations)

    def pick(self, head: TraceJob, behind: Sequence[TraceJob], graph: StateGraph, now: float,
             profile: Callable[[TraceJob], Profile | None]) -> TraceJob | None:
        if len(graph.hosts) != 1:
            raise ConfigError(f"EASY backfill here plays one host, the machine has {len(graph.hosts)}",
                              hint="run a single-host trace")
        host = next(iter(graph.hosts.values()))
        running = [j for j in graph.running_jobs() if j.host == host.name]
        busy = {u for j in running for u in j.gpus}
        free = sum(1 for u in host.gpus if u not in busy)
        promise = shadow(head.nproc, free, running, now)
        if promise is None:
            return None
        shadow_s, extra = promise
        for job in behind:
            if job.nproc > free:
                continue
            if job.nproc <= extra:
                return job
            length = self.lengths.known(job, profile(job)).get("expected_s")
            if length is not None and now + length <= shadow_s:
                return job
        return None


__all__ = ["Declared", "EasyBackfill", "LauncherLengths", "TrueLengths", "shadow", "steps_of"]
