"""Cancelling a job of this host (``ecolaunch cancel``): who may, and how a job is stopped.

A job is stopped the way SIGTERM stops it, because it *is* SIGTERM, sent to the job's launcher: a queued launcher
leaves the queue and exits 143 (its own line says so), a running one forwards the signal to its workers, releases
its GPUs and restores its caps, as for any SIGTERM (``cli.launch_cmd``, ``launch.pipeline``). Nothing else writes
the job's file, so cancelling needs no right beyond the kernel's: the job's own user may signal their launcher, and
root may signal anyone's. Whoever else asks is refused here, before any signal (:func:`may_cancel`). The launcher
is the process the job file names, checked by its start time and owner (``state.reconcile.launcher_alive``): a pid
that another program reuses is never signalled.

What does not live here: finding the job by id or name (``state.queue.find_jobs``), printing (``cli.cancel_cmd``).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Collection

from ecolaunch.errors import EcolaunchError
from ecolaunch.state.graph import Job, StateGraph
from ecolaunch.state.reconcile import ProcessTable, launcher_alive

__all__ = ["may_cancel", "stop", "wait_gone"]

logger = logging.getLogger(__name__)

#: seconds between two looks at the state while waiting for cancelled jobs to leave it
POLL_S = 0.2


def may_cancel(job: Job, uid: int) -> bool:
    """Whether ``uid`` may cancel ``job``: its own user (the uid that owns its file), or root."""
    return uid in (0, job.uid)


def stop(job: Job, processes: ProcessTable) -> bool:
    """Send SIGTERM to the job's launcher; False when it is gone already (nothing to stop)."""
    if not launcher_alive(processes, job):
        return False
    try:
        os.kill(job.launcher_pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    except PermissionError as e:  # may_cancel said yes, the kernel says no (a launcher that changed its uid)
        raise EcolaunchError(f"cannot signal the launcher of job {job.id} (pid {job.launcher_pid}): {e.strerror}",
                             hint="ask the lab admin to cancel it (sudo ecolaunch cancel " + job.id + ")") from e
    logger.info("sent SIGTERM to the launcher of job %s (pid %d)", job.id, job.launcher_pid)
    return True


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
