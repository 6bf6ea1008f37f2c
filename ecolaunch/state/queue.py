"""A host's queue as people read it: one row per waiting job, with its position and why it waits.

What lives here: :class:`QueueRow` and :func:`queue_rows`, the one view of the queue that ``ecolaunch status`` (and
any other view of the machine) shows; :func:`expected_starts` (the queue played forward on the running jobs' expected
ends, :func:`free_times`: what ``status``, ``--dry-run``, ``--wait-timeout`` and backfill's reservation read);
:func:`find_jobs` and :func:`user_jobs`, how ``ecolaunch cancel`` finds a job
by id or name, and a user's jobs (``--user``). What
does not: the order of the queue (``StateGraph.queued_jobs``), judging why a job waits (``ecolaunch.policy.waiting``,
run by the waiting launcher, which records the reason with its job: ``Job.wait_reason``), printing.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from collections.abc import Sequence
from typing import Any

from ecolaunch.state.graph import Job, JobState, StateGraph, WaitReason


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One waiting job: its 1-based ``position`` in its host's queue, how long it has waited, the reason its launcher
    last recorded (None: not judged yet, the launcher has just queued it), and when it is expected to start."""

    position: int
    job: Job
    waited_s: float
    #: in how many seconds it is expected to start (:func:`expected_starts`), None: unknown
    starts_in_s: float | None = None

    @property
    def reason(self) -> str | None:
        return None if self.job.wait_reason is None else self.job.wait_reason.value

    @property
    def detail(self) -> str | None:
        return self.job.wait_detail

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``ecolaunch status --json``'s ``queue``)."""
        job = self.job
        return {"position": self.position, "id": job.id, "user": job.user, "name": job.name, "state": job.state.value,
                "nproc": job.nproc, "launcher_pid": job.launcher_pid, "age_s": round(self.waited_s, 1),
                "reason": self.reason, "reason_detail": self.detail,
                "starts_in_s": None if self.starts_in_s is None else round(self.starts_in_s, 1)}


def queue_rows(graph: StateGraph, host: str, now: float) -> list[QueueRow]:
    """The waiting jobs of ``host`` in queue order (the FIFO the launchers wait in), each with its reason and when it
    is expected to start (:func:`expected_starts`)."""
    starts = expected_starts(graph, host, now)
    return [QueueRow(pos, job, max(0.0, now - job.submitted_at), None if (at := starts.get(job.id)) is None else
                     max(0.0, at - now))
            for pos, job in enumerate(graph.queued_jobs(host), start=1)]


def _expected_length(job: Job) -> float | None:
    """A queued job's expected length from its request (what its launcher's history or its declaration says)."""
    length = job.request.get("expected_s")
    return float(length) if isinstance(length, (int, float)) and length > 0 else None


#: why a job waits when more free GPUs alone would not start it (``Job.wait_reason``)
NOT_GPUS = frozenset({WaitReason.USER_LIMIT, WaitReason.RESERVATION, WaitReason.MEMORY, WaitReason.POWER_BUDGET})


def waits_beyond_gpus(reason: WaitReason | None, start: float, now: float) -> bool:
    """Whether a job that waits for ``reason`` (None: not judged yet), expected to get enough GPUs at ``start``, waits
    for what :func:`expected_starts` does not play forward: something besides free GPUs (:data:`NOT_GPUS`: a user
    limit, a reservation, memory, the power budget), or, though enough GPUs are expected free now, anything but the
    jobs ahead of it (the policy's bound, say). Its start is then unknown."""
    return reason in NOT_GPUS or (start <= now and reason not in (None, WaitReason.PRIORITY))


def free_times(graph: StateGraph, host: str, now: float) -> tuple[dict[str, float], list[str]]:
    """Each GPU of ``host`` that is expected to free up: when (``now`` for an idle one); and the running jobs whose
    end is unknown (their GPUs, and a GPU with processes outside ecolaunch, never free up here)."""
    node = graph.hosts.get(host)
    times: dict[str, float] = {}
    unknown: list[str] = []
    if node is None:
        return times, unknown
    for uuid, gpu in node.gpus.items():
        if gpu.foreign_pids:
            continue
        end = now
        for job in graph.jobs_on(uuid):
            left = job.remaining_s(now)
            if left is None:
                if job.id not in unknown:
                    unknown.append(job.id)
                end = math.inf
                continue
            end = max(end, now + left)
        if end < math.inf:
            times[uuid] = end
    return times, unknown


def expected_starts(graph: StateGraph, host: str, now: float,
                    then: Sequence[tuple[str, int, float | None]] = ()) -> dict[str, float | None]:
    """When each job queued on ``host`` is expected to start, in queue order, as a strict FIFO would start them: each
    takes the earliest GPUs expected free after the one ahead of it started (every running job's end from
    :meth:`~ecolaunch.state.graph.Job.remaining_s`; each queued job then holds its GPUs for its request's expected
    length). None for a job the ends known never free enough GPUs for, and for every job behind it (a job with no
    expected end never gives its GPUs back). A job that backfills starts earlier than this. ``then``: jobs not queued
    yet (id, GPUs, expected length) as if they joined the queue's end (``--dry-run``).

    A job whose launcher found it waiting for what this does not play forward (:func:`waits_beyond_gpus`, from the
    reason its job file records) has no expected start, and neither has any job behind it."""
    times, _ = free_times(graph, host, now)
    free: list[float] | None = sorted(times.values())
    starts: dict[str, float | None] = {}
    after = now
    queue = [(j.id, j.nproc, _expected_length(j), j.wait_reason) for j in graph.queued_jobs(host)]
    for job_id, nproc, length, why in [*queue, *((*t, None) for t in then)]:
        if free is None or len(free) < nproc or waits_beyond_gpus(why, start := max(after, free[nproc - 1]), now):
            starts[job_id] = free = None
            continue
        starts[job_id] = after = start
        # it takes the earliest GPUs and gives them back at its expected end (never, when that is unknown)
        free = sorted(free[nproc:] + ([after + length] * nproc if length is not None else []))
    return starts



def _active(graph: StateGraph, host: str) -> list[Job]:
    return [j for j in graph.jobs.values() if j.host == host and j.state in (JobState.QUEUED, JobState.RUNNING)]


def user_jobs(graph: StateGraph, host: str, uid: int) -> list[Job]:
    """The jobs of ``host`` (queued or running) of the user ``uid`` (the uid that owns their files), oldest first."""
    return sorted((j for j in _active(graph, host) if j.uid == uid), key=lambda j: (j.submitted_at, j.id))


def find_jobs(graph: StateGraph, host: str, key: str) -> list[Job]:
    """The jobs of ``host`` (queued or running) that ``key`` names: the job whose id it is, else every job of that
    name (``--name``, or the script's name), oldest first."""
    jobs = _active(graph, host)
    by_id = [j for j in jobs if j.id == key]
    if by_id:
        return by_id
    return sorted((j for j in jobs if j.name == key), key=lambda j: (j.submitted_at, j.id))
