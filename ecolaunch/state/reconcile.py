"""Bring the state graph in line with reality at the start of every transaction.

What lives here: releasing jobs whose launcher is gone or runs under another uid than the job names
(:class:`ProcessTable`, :func:`launcher_alive`, :func:`account_name`), refreshing this host's GPUs, links and
readings from the backend (memory of processes outside ecolaunch recorded as foreign use), and setting aside a job
of another host that names this host's GPUs. Only jobs of the given host are released. What does not: the records
(:mod:`ecolaunch.state.graph`) and their files (:mod:`ecolaunch.state.store`). Why each rule:
docs/threat-model.md#what-a-lab-member-can-and-cannot-do.
"""

from __future__ import annotations

import functools
import grp
import logging
import os
import pwd
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import psutil

from ecolaunch.devices.backend import GpuSnapshot, LinkKind
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

    def holds_open(self, pid: int, path: str | os.PathLike[str]) -> bool | None:
        """Whether the kernel says ``pid`` has the file at ``path`` open (``/proc/<pid>/fd``; a file replaced since
        it was opened counts: the kernel still names it, with `` (deleted)``); None when it cannot be told (another
        user's process, or no ``/proc``)."""
        want = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except FileNotFoundError:
            return False if os.path.isdir("/proc/self/fd") else None
        except OSError:
            return None
        for name in names:
            try:
                target = os.readlink(f"{fds}/{name}")
            except OSError:
                continue
            if target.removesuffix(" (deleted)") == want:
                return True
        return False

    def owner_uids(self, pid: int) -> tuple[int, ...] | None:
        """The process's real and effective uids, from the kernel; None when they cannot be read."""
        try:
            uids = psutil.Process(pid).uids()
            return (uids.real, uids.effective)
        except (psutil.NoSuchProcess, ProcessLookupError):
            return None
        except psutil.AccessDenied:
            # hidepid=1 hides /proc/<pid>/status but not the directory, which belongs to the process's uid
            try:
                return (os.stat(f"/proc/{pid}").st_uid,)
            except OSError:
                return None


def launcher_alive(processes: ProcessTable, job: Job) -> bool:
    """Whether the job's launcher runs (same pid, same start time) as the uid the job names.

    A job file is its owner's word: anyone may write one naming a pid of theirs, or pid 1. Only a process the
    kernel says belongs to the job's uid (real or effective) holds the job's booking and its caps. A process
    table that cannot tell owners (a test fake without ``owner_uids``), or an owner hidden from this user, is
    taken at its word, as a hidden process is taken to be alive.
    """
    if not processes.alive(job.launcher_pid, job.launcher_start_time):
        return False
    owner_uids = getattr(processes, "owner_uids", None)
    if owner_uids is None:
        return True
    uids = owner_uids(job.launcher_pid)
    return uids is None or job.uid in uids


@functools.lru_cache(maxsize=1024)
def account_name(uid: int) -> str:
    """The account name of ``uid``, as ``runtime.current_user`` names a launcher: its number without an account.
    A job counts as this name, never as the one its file claims (``state.store``)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@functools.lru_cache(maxsize=1024)
def account_groups(uid: int) -> tuple[str, ...]:
    """The names of the groups ``uid``'s account belongs to (its primary group first); none without an account."""
    try:
        account = pwd.getpwuid(uid)
    except KeyError:
        return ()
    names = []
    with_primary = [account.pw_gid, *os.getgrouplist(account.pw_name, account.pw_gid)]
    for gid in dict.fromkeys(with_primary):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return tuple(names)


def process_start_time(pid: int) -> float:
    """The start time psutil reports for ``pid`` (what :meth:`PsutilProcessTable.alive` compares)."""
    return psutil.Process(pid).create_time()


@dataclass(slots=True)
class ReconcileReport:
    """What a reconcile changed: the jobs it released (dead launchers) and the GPUs it saw."""

    released: list[Job] = field(default_factory=list)
    foreign_gpus: list[str] = field(default_factory=list)
    #: jobs of another host that name this host's GPUs, set aside
    ghosts: list[Job] = field(default_factory=list)


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
        if job.host == host and not launcher_alive(processes, job):
            logger.info("releasing job %s of %s: its launcher (pid %d, uid %d) is gone", job.id, job.user,
                        job.launcher_pid, job.uid)
            del graph.jobs[job.id]
            report.released.append(job)
    if gpus is not None:
        report.foreign_gpus = _refresh_host(graph, host, gpus, links or {}, processes)
    report.ghosts = _set_aside_ghosts(graph, host)
    return report


def _set_aside_ghosts(graph: StateGraph, host: str) -> list[Job]:
    """Set aside every job of another host that names a GPU of ``host`` (UUIDs are unique: such a job is a ghost, whatever its pid)."""
    node = graph.hosts.get(host)
    mine = set(node.gpus) if node is not None else set()
    if not mine:
        return []
    for other in graph.hosts.values():
        if other.name != host:
            for uuid in mine & set(other.gpus):
                del other.gpus[uuid]
    ghosts = [j for j in graph.jobs.values() if j.host != host and mine.intersection(j.gpus)]
    for job in ghosts:
        claimed = sorted(mine.intersection(job.gpus), key=lambda u: node.gpus[u].index)
        indices = ", ".join(str(node.gpus[u].index) for u in claimed)
        logger.info("ignoring job %s of %s (uid %d): it claims host %r but names GPU %s of this host %s", job.id,
                       job.user, job.uid, job.host, indices, host)
        graph.set_aside(job.id, f"claims host {job.host!r} but names GPU {indices} of {host}")
    return ghosts


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
