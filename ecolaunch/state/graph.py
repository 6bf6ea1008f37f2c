"""The state graph: hosts → GPUs (with links) → jobs, as plain data.

This module holds the records and their JSON form, and nothing that touches a file, a lock or a device:
``ecolaunch.state.store`` persists a :class:`StateGraph`, ``ecolaunch.state.reconcile`` refreshes it
from a GPU backend and the process table, and policies read it.

Job states and their legal transitions::

    QUEUED ──(placement granted)──► RUNNING ──(job ends, fails, or its launcher dies)──► removed
      └──(wait timeout, Ctrl-C, launcher died)──► removed

A removed job leaves the graph (its outcome goes to the job history). The document is versioned:
``SCHEMA`` and ``VERSION`` must match, else the store treats the file as foreign.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields
from typing import Any

from ecolaunch.devices.base import GpuSnapshot, LinkKind, pair_key

SCHEMA = "ecolaunch.state"
VERSION = 1


class JobState(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"


@dataclass(slots=True)
class GpuNode:
    """A GPU as the state graph knows it: identity, limits, and the last live reading."""

    uuid: str
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int = 0
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    power_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_default_w: float | None = None
    power_limit_max_w: float | None = None
    power_limit_w: float | None = None
    #: memory held by processes that belong to no ecolaunch job (a colleague's plain ``python train.py``)
    foreign_memory_mib: int = 0
    foreign_pids: list[int] = field(default_factory=list)

    @property
    def memory_free_mib(self) -> int:
        return max(0, self.memory_total_mib - self.memory_used_mib)

    @classmethod
    def from_snapshot(cls, snap: GpuSnapshot) -> GpuNode:
        return cls(
            uuid=snap.uuid,
            index=snap.index,
            name=snap.name,
            memory_total_mib=snap.memory_total_mib,
            memory_used_mib=snap.memory_used_mib,
            util_gpu_pct=snap.util_gpu_pct,
            util_mem_pct=snap.util_mem_pct,
            power_w=snap.power_w,
            power_limit_min_w=snap.power_limit_min_w,
            power_limit_default_w=snap.power_limit_default_w,
            power_limit_max_w=snap.power_limit_max_w,
            power_limit_w=snap.power_limit_w,
        )


@dataclass(slots=True)
class Host:
    name: str
    gpus: dict[str, GpuNode] = field(default_factory=dict)
    #: link kind per unordered GPU pair (see ``ecolaunch.devices.base.pair_key``)
    links: dict[tuple[str, str], LinkKind] = field(default_factory=dict)

    def link(self, a: str, b: str) -> LinkKind:
        return self.links.get(pair_key(a, b), LinkKind.SYSTEM)


@dataclass(slots=True)
class Job:
    """One launch. ``request`` is what the user asked; ``decision`` what the policy granted."""

    id: str
    uid: int
    user: str
    host: str
    launcher_pid: int
    launcher_start_time: float
    nproc: int
    name: str
    seq: int
    submitted_at: float
    state: JobState = JobState.QUEUED
    gpus: list[str] = field(default_factory=list)
    power_caps_w: dict[str, float] = field(default_factory=dict)
    started_at: float | None = None
    heartbeat_at: float | None = None
    request: dict[str, Any] = field(default_factory=dict)
    decision: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None

    @property
    def memory_mib(self) -> int:
        """Memory the job needs per GPU: its profile's peak, else the request's estimate, else 0."""
        if self.profile and self.profile.get("memory_mib") is not None:
            return int(self.profile["memory_mib"])
        return int(self.request.get("memory_mib") or 0)


@dataclass(slots=True)
class StateGraph:
    hosts: dict[str, Host] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    next_seq: int = 0
    generation: int = 0

    # --- queries ---------------------------------------------------------------------------------
    def running_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state is JobState.RUNNING]

    def queued_jobs(self) -> list[Job]:
        """Queued jobs in arrival order (the FIFO the launchers wait in)."""
        return sorted((j for j in self.jobs.values() if j.state is JobState.QUEUED), key=lambda j: j.seq)

    def jobs_on(self, gpu_uuid: str) -> list[Job]:
        return [j for j in self.running_jobs() if gpu_uuid in j.gpus]

    def queue_position(self, job_id: str) -> int | None:
        """1-based position of a queued job, or None when it is not queued."""
        for pos, job in enumerate(self.queued_jobs(), start=1):
            if job.id == job_id:
                return pos
        return None

    # --- JSON form -------------------------------------------------------------------------------
    def to_dict(self, *, include_jobs: bool = True) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "generation": self.generation,
            "next_seq": self.next_seq,
            "hosts": {
                name: {
                    "gpus": {u: gpu_to_dict(g) for u, g in host.gpus.items()},
                    "links": [[a, b, kind.name.lower()] for (a, b), kind in sorted(host.links.items())],
                }
                for name, host in self.hosts.items()
            },
            "jobs": {jid: job_to_dict(j) for jid, j in self.jobs.items()} if include_jobs else {},
        }

    @classmethod
    def from_dict(cls, doc: Any) -> StateGraph:
        """Validate and load a state document; raises ValueError naming the first bad field.

        Every field is type-checked here, so a hand-edited or hostile document is rejected as a whole rather
        than reaching a policy or the cap agent with a string where a number belongs.
        """
        _expect(isinstance(doc, dict), "document", "an object")
        _expect(doc.get("schema") == SCHEMA, "schema", repr(SCHEMA))
        _expect(doc.get("version") == VERSION, "version", str(VERSION))
        graph = cls(next_seq=_int(doc, "next_seq"), generation=_int(doc, "generation"))
        hosts = doc.get("hosts")
        _expect(isinstance(hosts, dict), "hosts", "an object")
        for name, raw in hosts.items():
            _expect(isinstance(raw, dict) and isinstance(raw.get("gpus"), dict), f"hosts.{name}", "an object with gpus")
            host = Host(name=str(name))
            for uuid, g in raw["gpus"].items():
                host.gpus[uuid] = _gpu_from_dict(f"hosts.{name}.gpus.{uuid}", uuid, g)
            links = raw.get("links", [])
            _expect(isinstance(links, list), f"hosts.{name}.links", "a list")
            for link in links:
                _expect(isinstance(link, list) and len(link) == 3 and all(isinstance(x, str) for x in link),
                        f"hosts.{name}.links", "[uuid, uuid, kind] triples")
                try:
                    host.links[pair_key(link[0], link[1])] = LinkKind[link[2].upper()]
                except KeyError as e:
                    raise ValueError(f"hosts.{name}.links: unknown link kind {link[2]!r}") from e
            graph.hosts[host.name] = host
        jobs = doc.get("jobs")
        _expect(isinstance(jobs, dict), "jobs", "an object")
        for jid, raw in jobs.items():
            graph.jobs[jid] = job_from_dict(jid, raw)
        return graph


_GPU_FIELDS = tuple(f.name for f in fields(GpuNode))
_JOB_FIELDS = tuple(f.name for f in fields(Job))


def gpu_to_dict(gpu: GpuNode) -> dict[str, Any]:
    """A GPU's JSON form. Built field by field: ``dataclasses.asdict`` deep-copies and dominated transactions."""
    d = {name: getattr(gpu, name) for name in _GPU_FIELDS}
    d["foreign_pids"] = list(gpu.foreign_pids)
    return d


def job_to_dict(job: Job) -> dict[str, Any]:
    """A job's JSON form (what the per-user job files hold). Nested values are shared with the job, not copied:
    serialize it (``json.dumps``) before changing the job if a snapshot is needed."""
    d = {name: getattr(job, name) for name in _JOB_FIELDS}
    d["state"] = job.state.value
    d["gpus"] = list(job.gpus)
    d["power_caps_w"] = dict(job.power_caps_w)
    return d


_job_to_dict = job_to_dict  # the former private name

_JOB_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "uid": (int,),
    "user": (str,),
    "host": (str,),
    "launcher_pid": (int,),
    "launcher_start_time": (int, float),
    "nproc": (int,),
    "name": (str,),
    "seq": (int,),
    "submitted_at": (int, float),
    "gpus": (list,),
    "power_caps_w": (dict,),
    "request": (dict,),
    "decision": (dict,),
}

_GPU_INTS = ("index", "memory_total_mib", "memory_used_mib", "foreign_memory_mib")
_GPU_OPTIONAL_FLOATS = ("util_gpu_pct", "util_mem_pct", "power_w", "power_limit_min_w", "power_limit_default_w",
                        "power_limit_max_w", "power_limit_w")


def job_from_dict(jid: str, raw: Any) -> Job:
    """Validate one job record (the value under ``jobs.<jid>``); raises ValueError naming the bad field."""
    _expect(isinstance(raw, dict), f"jobs.{jid}", "an object")
    for key, types in _JOB_TYPES.items():
        value = raw.get(key)
        _expect(isinstance(value, types) and not isinstance(value, bool), f"jobs.{jid}.{key}", "/".join(t.__name__ for t in types))
    _expect(raw["id"] == jid, f"jobs.{jid}.id", repr(jid))
    _expect(raw["uid"] >= 0 and raw["launcher_pid"] > 0 and raw["nproc"] >= 0, f"jobs.{jid}", "uid >= 0, launcher_pid > 0, nproc >= 0")
    for key in ("launcher_start_time", "submitted_at"):
        _expect(math.isfinite(raw[key]), f"jobs.{jid}.{key}", "a finite number")
    _expect(all(isinstance(u, str) for u in raw["gpus"]), f"jobs.{jid}.gpus", "a list of UUIDs")
    try:
        state = JobState(raw.get("state"))
    except ValueError as e:
        raise ValueError(f"jobs.{jid}.state: {raw.get('state')!r} is not a job state") from e
    fields = {k: raw[k] for k in _JOB_TYPES}
    for u, w in raw["power_caps_w"].items():
        _expect(_is_number(w) and math.isfinite(w) and w > 0, f"jobs.{jid}.power_caps_w.{u}", "a finite power in watts above 0")
    caps = {str(u): float(w) for u, w in raw["power_caps_w"].items()}
    for key in ("started_at", "heartbeat_at"):
        value = raw.get(key)
        _expect(value is None or (_is_number(value) and math.isfinite(value)), f"jobs.{jid}.{key}", "a finite number or null")
    profile = raw.get("profile")
    _expect(profile is None or isinstance(profile, dict), f"jobs.{jid}.profile", "an object or null")
    fields.update(
        state=state,
        power_caps_w=caps,
        started_at=raw.get("started_at"),
        heartbeat_at=raw.get("heartbeat_at"),
        profile=profile,
    )
    return Job(**fields)


_job_from_dict = job_from_dict  # the former private name


def _gpu_from_dict(where: str, uuid: str, g: Any) -> GpuNode:
    _expect(isinstance(g, dict), where, "an object")
    try:
        node = GpuNode(**g)
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from e
    _expect(isinstance(node.uuid, str) and node.uuid == uuid and isinstance(node.name, str), where, "a GPU record")
    for key in _GPU_INTS:
        value = getattr(node, key)
        _expect(isinstance(value, int) and not isinstance(value, bool) and value >= 0, f"{where}.{key}", "a whole number >= 0")
    for key in _GPU_OPTIONAL_FLOATS:
        value = getattr(node, key)
        _expect(value is None or (_is_number(value) and math.isfinite(value)), f"{where}.{key}", "a finite number or null")
    _expect(isinstance(node.foreign_pids, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in node.foreign_pids),
            f"{where}.foreign_pids", "a list of pids")
    return node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    _expect(isinstance(value, int) and not isinstance(value, bool) and value >= 0, key, "a non-negative integer")
    return value


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise ValueError(f"{where}: expected {what}")
