"""Bring the state graph in line with reality at the start of every transaction.

Two sources of truth are consulted:

* the process table (:class:`ProcessTable`, psutil): a job whose launcher process is gone — dead, or its pid
  reused by another program (told apart by the process start time) — is released, whatever it was doing;
* the GPU backend's snapshots: the host's GPUs, their links and live readings are refreshed, and memory held by
  processes that belong to no ecolaunch job (a colleague's plain ``python train.py``) is recorded as foreign
  use, so that policies count such GPUs as busy.

Reconciling only touches jobs of the given host; a state directory shared by several hosts (a network file
system) keeps the others' jobs as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import psutil

from ecolaunch.devices.base import GpuSnapshot, LinkKind
from ecolaunch.state.graph import GpuNode, Host, Job, StateGraph

logger = logging.getLogger(__name__)

#: tolerance when comparing a recorded process start time with the live one (psutil rounds to 10 ms)
_START_TIME_TOLERANCE_S = 0.05


class ProcessTable(Protocol):
    """What reconciling needs to know about processes (psutil in production, a fake in unit tests)."""

    def alive(self, pid: int, start_time: float) -> bool:
        """Whether ``pid`` runs and is the same process that started at ``start_time``."""
        ...

    def ancestors(self, pid: int) -> list[int]:
        """The pids of the process's parents, nearest first (empty when it is gone)."""
        ...


class PsutilProcessTable:
    """The real process table."""

    def alive(self, pid: int, start_time: float) -> bool:
        try:
            proc = psutil.Process(pid)
            return abs(proc.create_time() - start_time) <= _START_TIME_TOLERANCE_S and proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, ProcessLookupError):
            return False
        except psutil.AccessDenied:
            # another user's process we may not inspect (hidepid): it exists, so it is not *provably* dead
            return True

    def ancestors(self, pid: int) -> list[int]:
        try:
            return [p.pid for p in psutil.Process(pid).parents()]
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return []


def process_start_time(pid: int) -> float:
    """The start time psutil reports for ``pid`` (what :meth:`PsutilProcessTable.alive` compares)."""
    return psutil.Process(pid).create_time()


@dataclass(slots=True)
class ReconcileReport:
    """What a reconcile changed: the jobs it released (dead launchers) and the GPUs it saw."""

    released: list[Job] = field(default_factory=list)
    foreign_gpus: list[str] = field(default_factory=list)


def reconcile(
    graph: StateGraph,
    host: str,
    processes: ProcessTable,
    gpus: Sequence[GpuSnapshot] | None = None,
    links: dict[tuple[str, str], LinkKind] | None = None,
) -> ReconcileReport:
    """Release dead jobs of ``host`` and, when ``gpus`` are given, refresh the host's GPUs from them."""
    report = ReconcileReport()
    for job in list(graph.jobs.values()):
        if job.host == host and not processes.alive(job.launcher_pid, job.launcher_start_time):
            logger.info("releasing job %s of %s: its launcher (pid %d) is gone", job.id, job.user, job.launcher_pid)
            del graph.jobs[job.id]
            report.released.append(job)
    if gpus is not None:
        report.foreign_gpus = _refresh_host(graph, host, gpus, links or {}, processes)
    return report


def _refresh_host(
    graph: StateGraph,
    host: str,
    gpus: Sequence[GpuSnapshot],
    links: dict[tuple[str, str], LinkKind],
    processes: ProcessTable,
) -> list[str]:
    node = graph.hosts.get(host) or Host(name=host)
    launchers = {j.launcher_pid for j in graph.jobs.values() if j.host == host}
    fresh: dict[str, GpuNode] = {}
    foreign_gpus = []
    for snap in gpus:
        gpu = GpuNode.from_snapshot(snap)
        foreign = [p for p in snap.processes if not _belongs_to(p.pid, launchers, processes)]
        gpu.foreign_pids = sorted(p.pid for p in foreign)
        gpu.foreign_memory_mib = sum(p.memory_mib for p in foreign)
        if foreign:
            foreign_gpus.append(gpu.uuid)
        fresh[gpu.uuid] = gpu
    node.gpus = fresh
    node.links = dict(links)
    graph.hosts[host] = node
    return foreign_gpus


def _belongs_to(pid: int, launchers: Iterable[int], processes: ProcessTable) -> bool:
    launchers = set(launchers)
    if pid in launchers:
        return True
    return any(parent in launchers for parent in processes.ancestors(pid))
