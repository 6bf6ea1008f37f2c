"""What ``ecolaunch status`` and ``ecolaunch top`` show: one read of this host's GPUs, jobs and queue, as a document.

What lives here: :class:`HostView` (opens what a read needs once; :meth:`HostView.read` takes one reconciling
transaction, privileged when run as root without a cap agent, and returns the document ``status --json`` prints) and
the cells both commands render (``N/A``, the set and enforced limit, escaped text). What does not: drawing
(``cli.topview``, ``cli.status_cmd``). What the document holds: docs/top.md and docs/queue.md#why-a-job-waits.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ecolaunch.config import Environment
from ecolaunch.state.graph import Job, StateGraph
from ecolaunch.state.queue import queue_rows

if TYPE_CHECKING:  # the annotations only: these load when a viewer opens (HostView.open)
    from ecolaunch.admin.rules import Rules
    from ecolaunch.devices.backend import GpuBackend
    from ecolaunch.launch.session import Session

#: a limit in force further than this from the set one is shown beside it (NVML reports whole mW; 0.5 W is noise)
ENFORCED_SHOWN_ABOVE_W = 0.5


class HostView:
    """This host's state for a viewer: opened once (:meth:`open`), read at will (:meth:`read`)."""

    def __init__(self, environment: Environment, rules: Rules, backend: GpuBackend, session: Session) -> None:
        self.environment, self.rules, self.backend, self.session = environment, rules, backend, session

    @classmethod
    def open(cls) -> HostView:
        """The environment and policy as the launcher resolves them, their GPUs, and a session on the state store."""
        # lazy: the store, session and caps load when a viewer runs, not when the subcommands are registered
        from ecolaunch.runtime import open_gpus, resolve
        from ecolaunch.caps.job import orphan_keeper  # lazy: as above
        from ecolaunch.launch.session import Session  # lazy: as above
        from ecolaunch.policy.baselines import ExclusivePolicy  # lazy: as above
        from ecolaunch.state.store import StateStore  # lazy: as above

        environment, rules = resolve()
        backend = open_gpus(environment)
        session = Session(StateStore(environment.state_dir, group=rules.state_group), backend, ExclusivePolicy(),
                          rules, cap_keeper=orphan_keeper(backend, rules, environment.state_dir))
        return cls(environment, rules, backend, session)

    def read(self) -> dict:
        """One reconciling read of the state: the document ``status --json`` prints."""
        from ecolaunch.caps.job import orphaned_caps  # lazy: as in open()

        session = self.session
        graph = session.snapshot()
        left = orphaned_caps(graph, session.host, self.rules, self.environment.state_dir, session.processes)
        doc = status_doc(graph, session.host, self.backend.kind, self.environment)
        doc["caps_left"] = [{"uuid": u, "index": graph.hosts[session.host].gpus[u].index, "power_limit_w": now,
                             "original_w": original} for u, (now, original) in left.items()]
        return doc


def status_doc(graph: StateGraph, host: str, kind: str, environment: Environment) -> dict:
    """The document of ``graph`` as seen from ``host`` (without ``caps_left``, which :meth:`HostView.read` adds)."""
    node = graph.hosts.get(host)
    gpus = sorted(node.gpus.values(), key=lambda g: g.index) if node else []
    now = time.time()
    return {
        "host": host,
        "backend": kind,
        "simulate": environment.simulate,
        "state_dir": str(environment.state_dir),
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "memory_used_mib": g.memory_used_mib,
                "memory_total_mib": g.memory_total_mib,
                "util_gpu_pct": g.util_gpu_pct,
                "util_mem_pct": g.util_mem_pct,
                "power_w": g.power_w,
                "power_limit_w": g.power_limit_w,
                "power_limit_enforced_w": g.power_limit_enforced_w,
                "power_limit_max_w": g.power_limit_max_w,
                "jobs": [j.id for j in graph.jobs_on(g.uuid)],
                "foreign_pids": list(g.foreign_pids),
                "foreign_memory_mib": g.foreign_memory_mib,
            }
            for g in gpus
        ],
        "jobs": [job_doc(j, now) for j in graph.running_jobs() if j.host == host],
        # the queue's rows, in the order the launchers wait in, each with why it waits
        "queue": [row.to_dict() for row in queue_rows(graph, host, now)],
        "ignored": [{"id": i.id, "reason": i.reason, "user": i.job.user if i.job else None,
                     "host": i.job.host if i.job else None} for _, i in sorted(graph.ignored.items())],
    }


def job_doc(job: Job, now: float) -> dict:
    """One job's row. Its progress (None until its launcher's first heartbeat, and for a queued job): ``iterations``,
    ``total_iterations`` (what the script declared of its length), ``iter_time_s``, ``energy_j`` (its share of its
    GPUs' energy), ``saving_j`` (an estimate against running uncapped, ``JobProgress``), as of ``progress_age_s``
    seconds ago; ``remaining_s``, how long it is expected to run still (:meth:`~ecolaunch.state.graph.Job.remaining_s`:
    from its declared length or its completed runs, and its progress; None when unknown)."""
    p = job.progress
    left = job.remaining_s(now)
    return {
        "id": job.id,
        "user": job.user,
        "name": job.name,
        "state": job.state.value,
        "nproc": job.nproc,
        "gpus": list(job.gpus),
        "power_caps_w": dict(job.power_caps_w),
        "launcher_pid": job.launcher_pid,
        "age_s": round(now - (job.started_at or job.submitted_at), 1),
        "iterations": p.iterations if p else None,
        "total_iterations": p.total_iterations if p else None,
        "iter_time_s": p.iter_time_s if p else None,
        "energy_j": p.energy_j if p else None,
        "saving_j": p.saving_j if p else None,
        "progress_age_s": round(max(0.0, now - p.at), 1) if p else None,
        "remaining_s": round(left, 1) if left is not None else None,
    }


# --- the cells status and top render -----------------------------------------------------------------------
def na(value, fmt: str = "{:.0f}") -> str:
    """``value`` formatted, or ``N/A`` for None (not available)."""
    return "N/A" if value is None else fmt.format(value)


def cap_text(gpu: dict) -> str:
    """The set power limit, and the limit in force beside it when the driver has not (yet) enforced the set one."""
    limit, enforced = gpu["power_limit_w"], gpu.get("power_limit_enforced_w")
    if limit is not None and enforced is not None and abs(enforced - limit) > ENFORCED_SHOWN_ABOVE_W:
        return f"{limit:.0f} (enforced {enforced:.0f})"
    return na(limit)
