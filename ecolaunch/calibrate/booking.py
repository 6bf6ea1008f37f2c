"""Who uses a GPU, and the calibration's own booking of it in the state graph.

What lives here: :class:`Occupant` and :func:`occupants` (an ecolaunch job of another launcher, or a process the
driver shows that no ecolaunch job owns), :class:`GpuBusy`, :func:`book` (one running job named ``calibrate``, with
a heavy profile). Nothing here prints. Why a calibration books its GPU like a launch:
docs/admin.md#how-a-calibration-runs.
"""

from __future__ import annotations

import os
import time
import uuid as uuidlib
from collections.abc import Collection
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


def book(session: Session, gpu_uuid: str, launcher: Launcher, *, force: bool) -> tuple[Placement, list[Occupant]]:
    """Book ``gpu_uuid`` for the calibration, in one transaction with the check of who uses it.

    Returns the placement and the occupants found (empty unless ``force``). Raises GpuBusy when someone uses the
    GPU and not ``force``, and EcolaunchError when the GPU is not one of the host's.
    """
    with session.store.transaction() as graph:
        session.refresh(graph)
        host = graph.hosts.get(session.host)
        gpu = host.gpus.get(gpu_uuid) if host is not None else None
        if gpu is None:
            raise EcolaunchError(f"GPU {gpu_uuid} is not a GPU of host {session.host}", hint="this is an ecolaunch bug")
        found = occupants(graph, gpu)
        if found and not force:
            raise GpuBusy(gpu, found)
        job = Job.queued(uuidlib.uuid4().hex[:8], user=launcher.user, host=session.host, nproc=1, seq=graph.take_seq(),
                         submitted_at=time.time(),
                         request={"calibrate": True, "memory_mib": gpu.memory_total_mib, "allowed_slowdown_pct": None},
                         name=JOB_NAME, uid=launcher.uid, launcher_pid=launcher.pid,
                         launcher_start_time=launcher.start_time)
        graph.jobs[job.id] = job
        # every unit and all memory busy: what the policies see, so that nothing is packed beside a calibration
        profile = Profile(sm_util_pct=100.0, mem_bw_util_pct=100.0, memory_mib=gpu.memory_total_mib,
                          power_w=gpu.power_limit_max_w)
        decision_doc = {"policy": JOB_NAME, "gpus": [gpu_uuid]}
        graph.book(job.id, [gpu_uuid], {}, decision_doc, profile, time.time())
        decision = Decision(policy=JOB_NAME, gpus=(gpu_uuid,), power_caps_w={}, colocated_with={},
                            reasons=["ecolaunch calibrate"])
        return Placement(job=job, decision=decision, gpus={gpu_uuid: gpu}), found


def still_alone(session: Session, job: Job, *, ignore_names: Collection[str] = ()) -> list[Occupant]:
    """Refresh the calibration's lease and return who else is on its GPU now (empty: nobody)."""
    with session.store.transaction() as graph:
        session.refresh(graph)
        current = graph.jobs.get(job.id)
        if current is None or current.state is not JobState.RUNNING:
            graph.jobs[job.id] = current = job  # the state was rebuilt under it: register it again
        current.heartbeat_at = time.time()
        host = graph.hosts.get(session.host)
        gpu = host.gpus.get(job.gpus[0]) if host is not None else None
        return [] if gpu is None else occupants(graph, gpu, own_job=job.id, ignore_names=ignore_names)
