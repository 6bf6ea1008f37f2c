"""Cancelling a job of this host (``ecolaunch cancel``): who may, and how a job is stopped.

What lives here: :func:`may_cancel` (the job's own user, or root), :func:`not_its_launcher` (whether the kernel
agrees that the pid a job file names is its launcher), :func:`stop` (SIGTERM to that launcher) and :func:`wait_gone`.
What does not: finding the job by id or name (``state.queue.find_jobs``), printing (``cli.cancel_cmd``), what the
stopped launcher does (``cli.launch_cmd``, ``launch.pipeline``). What cancelling does: docs/queue.md#cancelling-a-job;
whom it never signals, and why: docs/threat-model.md (round three, cancel's signal).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Collection
from pathlib import Path

from ecolaunch.errors import EcolaunchError
from ecolaunch.state.graph import Job, StateGraph
from ecolaunch.state.reconcile import ProcessTable, launcher_alive

__all__ = ["may_cancel", "not_its_launcher", "stop", "wait_gone"]

logger = logging.getLogger(__name__)

#: seconds between two looks at the state while waiting for cancelled jobs to leave it
POLL_S = 0.2


def may_cancel(job: Job, uid: int) -> bool:
    """Whether ``uid`` may cancel ``job``: its own user (the uid that owns its file), or root."""
    return uid in (0, job.uid)


def not_its_launcher(job: Job, processes: ProcessTable, job_file: Path) -> str | None:
    """Why the process the job names is not one to signal for it (None: it is the job's launcher, by the kernel's
    word). ``job_file``: where the job's file lives."""
    pid = job.launcher_pid
    if pid <= 1:
        return f"its file names pid {pid}, which no launcher has"
    owner_uids = getattr(processes, "owner_uids", None)
    uids = owner_uids(pid) if owner_uids is not None else None
    if uids is None or set(uids) != {job.uid}:
        seen = "cannot be read" if uids is None else "are " + "/".join(str(u) for u in dict.fromkeys(uids))
        return f"the kernel's uids of pid {pid} {seen}, not the job's uid {job.uid}"
    holds_open = getattr(processes, "holds_open", None)
    if holds_open is None or holds_open(pid, job_file) is not True:
        return f"pid {pid} does not hold the job's file open, as its launcher does"
    return None


def stop(job: Job, processes: ProcessTable, job_file: Path) -> bool:
    """Send SIGTERM to the job's launcher; False when it is gone already (nothing to stop). Raises EcolaunchError
    when the process the job names is not its launcher (:func:`not_its_launcher`): nothing is signalled."""
    if not launcher_alive(processes, job):
        return False
    why = not_its_launcher(job, processes, job_file)
    if why is not None:
        logger.info("not signalling pid %d for job %s: %s", job.launcher_pid, job.id, why)
        raise NotItsLauncher(job, why, job_file)
    try:
        os.kill(job.launcher_pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    except PermissionError as e:  # may_cancel said yes, the kernel says no (a launcher that changed its uid)
        raise EcolaunchError(f"cannot signal the launcher of job {job.id} (pid {job.launcher_pid}): {e.strerror}",
                             hint="ask the lab admin to cancel it (sudo ecolaunch cancel " + job.id + ")") from e
    logger.info("sent SIGTERM to the launcher of job %s (pid %d)", job.id, job.launcher_pid)
    return True


class NotItsLauncher(EcolaunchError):
    """The pid a job file names is not that job's launcher (see :func:`not_its_launcher`); nothing was signalled."""

    def __init__(self, job: Job, why: str, job_file: Path) -> None:
        super().__init__(f"job {job.id} was not cancelled: {why}; nothing was signalled",
                         hint=f"the job's file may be forged or stale: the lab admin can remove it (sudo rm {job_file})")
        self.job = job
        self.why = why


def wait_gone(read: Callable[[], StateGraph], ids: Collection[str], timeout_s: float,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> set[str]:
    """Wait until none of ``ids`` is in the state (``read()``, a reconciled snapshot) or ``timeout_s`` passed;
    returns the ids still there."""
    deadline = clock() + timeout_s
    while True:
        left = set(ids) & set(read().jobs)
        if not left or clock() >= deadline:
            return left
        sleep(POLL_S)
