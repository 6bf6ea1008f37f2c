"""Who uses a GPU, and the calibration's own booking of it in the state graph.

What lives here: :class:`Occupant` and :func:`occupants` (an ecolaunch job of another launcher, or a process the
driver shows that no ecolaunch job owns), :class:`GpuBusy`, :func:`book` (one running job named ``calibrate`` on
one GPU or a link probe's pair, with a heavy profile). Nothing here prints. Why a calibration books its GPU like a
launch: docs/admin.md#how-a-calibration-runs.
"""

from __future__ import annotations

import os
import time
import uuid as uuidlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import psutil

from ecolaunch.errors import EcolaunchError
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import Decision
from ecolaunch.state.graph import GpuNode, Job, JobState, StateGraph
from ecolaunch.state.userdirs import account_name

__all__ = ["JOB_NAME", "GpuBusy", "Occupant", "book", "occupants", "still_alone"]

JOB_NAME = "calibrate"


@dataclass(frozen=True, slots=True)
class Occupant:
    """Someone on a GPU: an ecolaunch job (``job_id``, its user and name) or a foreign process (``pid``, its user
    and command name; the user is None when the process table does not say)."""

    user: str | None
    job_id: str | None = None
    name: str | None = None
    pid: int | None = None

    def describe(self) -> str:
        who = f"user {self.user}" if self.user else "an unknown user"
        if self.job_id is not None:
            return f"job {self.job_id} of {who}" + (f" ({self.name})" if self.name else "")
        what = f" ({self.name})" if self.name else ""
        return f"process {self.pid}{what} of {who}, not started by ecolaunch"

    def to_dict(self) -> dict[str, object]:
        return {"user": self.user, "job_id": self.job_id, "name": self.name, "pid": self.pid}


class GpuBusy(EcolaunchError):
    """The GPU runs someone's work; ``occupants`` says whose (the CLI exits 75: try again later)."""

    def __init__(self, gpu: GpuNode, found: list[Occupant], *, started: bool = False) -> None:
        who = "; ".join(o.describe() for o in found)
        if started:
            message = (f"GPU {gpu.index} ({gpu.name}) was taken during the calibration by {who}: stopped, "
                       "nothing written")
        else:
            message = f"GPU {gpu.index} ({gpu.name}) is in use by {who}"
        super().__init__(message, hint="calibrate when it is free (`ecolaunch status` shows who uses which GPU), "
                                       "another GPU of the model (--gpu), or add --force to measure beside it")
        self.gpu = gpu
        self.occupants = found


def occupants(graph: StateGraph, gpu: GpuNode, *, own_job: str | None = None,
              ignore_names: Collection[str] = ()) -> list[Occupant]:
    """Everyone on ``gpu`` but the job ``own_job``: running ecolaunch jobs (from the reconciled graph) and the
    processes the driver shows there that no ecolaunch job owns (``gpu.foreign_pids``; processes whose command name
    starts with one of ``ignore_names`` are left out, e.g. the calibration's own MPS server)."""
    found = [Occupant(job.user, job_id=job.id, name=job.name) for job in graph.jobs_on(gpu.uuid) if job.id != own_job]
    for pid in gpu.foreign_pids:
        user, name = _process_owner(pid)
        if name and any(name.startswith(prefix) for prefix in ignore_names):
            continue
        found.append(Occupant(user, pid=pid, name=name))
    return found


def _process_owner(pid: int) -> tuple[str | None, str | None]:
    """The user and command name of ``pid`` as the process table gives them (None where it does not)."""
    try:
        proc = psutil.Process(pid)
    except (psutil.Error, ProcessLookupError):
        return None, None
    try:
        name = proc.name()
    except psutil.Error:
        name = None
    try:
        return proc.username(), name
    except (psutil.Error, KeyError):
        pass
    try:  # hidepid: the /proc directory still belongs to the process's uid

        return account_name(os.stat(f"/proc/{pid}").st_uid), name
    except OSError:
        return None, name


def book(session: Session, gpu_uuids: str | Sequence[str], launcher: Launcher, *,
         force: bool) -> tuple[Placement, list[Occupant]]:
    """Book ``gpu_uuids`` (one GPU, or the pair of a link probe) for the calibration, in one transaction with the
    check of who uses them.

    Returns the placement and the occupants found (empty unless ``force``). Raises GpuBusy when someone uses a GPU
    and not ``force``, and EcolaunchError when a GPU is not one of the host's.
    """
    uuids = [gpu_uuids] if isinstance(gpu_uuids, str) else list(gpu_uuids)
    with session.store.transaction() as graph:
        session.refresh(graph)
        host = graph.hosts.get(session.host)
        gpus: dict[str, GpuNode] = {}
        found: list[Occupant] = []
        for uuid in uuids:
            gpu = host.gpus.get(uuid) if host is not None else None
            if gpu is None:
                raise EcolaunchError(f"GPU {uuid} is not a GPU of host {session.host}",
                                     hint="this is an ecolaunch bug")
            on_it = occupants(graph, gpu)
            if on_it and not force:
                raise GpuBusy(gpu, on_it)
            gpus[uuid] = gpu
            found += [o for o in on_it if o not in found]
        job = Job.queued(uuidlib.uuid4().hex[:8], user=launcher.user, host=session.host, nproc=len(uuids),
                         seq=graph.take_seq(), submitted_at=time.time(),
                         request={"calibrate": True, "memory_mib": min(g.memory_total_mib for g in gpus.values()),
                                  "allowed_slowdown_pct": None},
                         name=JOB_NAME, uid=launcher.uid, launcher_pid=launcher.pid,
                         launcher_start_time=launcher.start_time)
        graph.jobs[job.id] = job
        # every unit and all memory busy: what the policies see, so that nothing is packed beside a calibration
        first = gpus[uuids[0]]
        profile = Profile(sm_util_pct=100.0, mem_bw_util_pct=100.0, memory_mib=first.memory_total_mib,
                          power_w=first.power_limit_max_w)
        decision_doc = {"policy": JOB_NAME, "gpus": uuids}
        graph.book(job.id, uuids, {}, decision_doc, profile, time.time())
        decision = Decision(policy=JOB_NAME, gpus=tuple(uuids), power_caps_w={}, colocated_with={},
                            reasons=["ecolaunch calibrate"])
        return Placement(job=job, decision=decision, gpus=gpus), found


def still_alone(session: Session, job: Job, *, ignore_names: Collection[str] = ()) -> list[Occupant]:
    """Refresh the calibration's lease and return who else is on its GPUs now (empty: nobody)."""
    with session.store.transaction() as graph:
        session.refresh(graph)
        current = graph.jobs.get(job.id)
        if current is None or current.state is not JobState.RUNNING:
            graph.jobs[job.id] = current = job  # the state was rebuilt under it: register it again
        current.heartbeat_at = time.time()
        host = graph.hosts.get(session.host)
        found: list[Occupant] = []
        for uuid in job.gpus:
            gpu = host.gpus.get(uuid) if host is not None else None
            if gpu is not None:
                found += [o for o in occupants(graph, gpu, own_job=job.id, ignore_names=ignore_names)
                          if o not in found]
        return found
