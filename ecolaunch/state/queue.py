"""A host's queue as people read it: one row per waiting job, with its position and why it waits.

What lives here: :class:`QueueRow` and :func:`queue_rows`, the one view of the queue that ``ecolaunch status`` (and
any other view of the machine) shows; :func:`find_jobs` and :func:`user_jobs`, how ``ecolaunch cancel`` finds a job
by id or name, and a user's jobs (``--user``). What
does not: the order of the queue (``StateGraph.queued_jobs``), judging why a job waits (``ecolaunch.policy.waiting``,
run by the waiting launcher, which records the reason with its job: ``Job.wait_reason``), printing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ecolaunch.state.graph import Job, JobState, StateGraph


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One waiting job: its 1-based ``position`` in its host's queue, how long it has waited, and the reason its
    launcher last recorded (None: not judged yet, the launcher has just queued it)."""

    position: int
    job: Job
    waited_s: float

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
                "reason": self.reason, "reason_detail": self.detail}


def queue_rows(graph: StateGraph, host: str, now: float) -> list[QueueRow]:
    """The waiting jobs of ``host`` in queue order (the FIFO the launchers wait in), each with its reason."""
    return [QueueRow(pos, job, max(0.0, now - job.submitted_at))
            for pos, job in enumerate(graph.queued_jobs(host), start=1)]


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
