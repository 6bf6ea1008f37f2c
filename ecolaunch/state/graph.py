"""The state graph: hosts → GPUs (with links) → jobs, as plain data.

What lives here: the records (:class:`StateGraph`, :class:`Job`, :class:`JobState`, :class:`WaitReason`, ...) and
their versioned JSON form (``SCHEMA``, ``VERSION``). What does not: anything that touches a file, a lock or a device
(``ecolaunch.state.store`` persists a graph, ``ecolaunch.state.reconcile`` refreshes it from a GPU backend and the
process table; policies read it). Who may write which part, and why nothing in ``state.json`` is trusted:
docs/threat-model.md#who-can-write-what.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ecolaunch.devices.backend import GpuSnapshot, LinkKind, pair_key
from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.codec import profile_from_json, profile_to_json, progress_from_json, progress_to_json
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.validate import is_integer, is_number

SCHEMA = "ecolaunch.state"
VERSION = 1


#: the largest ``seq`` and ``next_seq`` accepted: 2**40 launches is one a microsecond for twelve days, far beyond
#: any real machine, and well inside a float's exact integers (2**53), so no JSON reader rounds two seqs together
MAX_SEQ = 2**40

#: the one GPU of a what-if graph (``ecolaunch predict``, training samples), which no host reports
WHATIF_UUID = "GPU-whatif"


class JobState(str, enum.Enum):
    """A job's state, and its legal transitions::

        QUEUED ──(placement granted)──► RUNNING ──(job ends, fails, or its launcher dies)──► removed
          └──(wait timeout, Ctrl-C, launcher died)──► removed

    A removed job leaves the graph (its outcome goes to the job history).
    """

    QUEUED = "queued"
    RUNNING = "running"


class WaitReason(str, enum.Enum):
    """Why a queued job waits, in the words of Slurm's reason codes (``squeue``'s REASON column).

    The waiting launcher judges it at each try (``ecolaunch.policy.waiting``) and records it with its job, so that
    ``ecolaunch status`` shows it; the first that applies wins, in this order::

        Priority     other jobs are ahead of it in this host's queue (a FIFO: a job behind the head starts only by
                     backfill, ``ecolaunch.policy.backfill``)
        UserLimit    the user's running jobs already hold their ``[users] max_gpus``
        Reservation  enough GPUs are free, but some are reserved for others (``[reserve.*]``)
        Resources    not enough free GPUs (busy with jobs or processes outside ecolaunch), or no placement the
                     policy finds keeps every job within its bound
        Memory       enough GPUs are free, but not with the memory per GPU the job needs
        PowerBudget  a placement fits, but not under the host's power budget (``[power] max_total_w``)
    """

    PRIORITY = "Priority"
    USER_LIMIT = "UserLimit"
    RESERVATION = "Reservation"
    RESOURCES = "Resources"
    MEMORY = "Memory"
    POWER_BUDGET = "PowerBudget"


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
    #: the limit that was set (NVML's management limit): what caps are compared and restored against
    power_limit_w: float | None = None
    #: the limit in force (NVML's enforced limit), which may lag a change on an idle GPU
    power_limit_enforced_w: float | None = None
    #: memory held by processes that belong to no ecolaunch job (a colleague's plain ``python train.py``)
    foreign_memory_mib: int = 0
    foreign_pids: list[int] = field(default_factory=list)

    @property
    def memory_free_mib(self) -> int:
        return max(0, self.memory_total_mib - self.memory_used_mib)

    @classmethod
    def from_snapshot(cls, snap: GpuSnapshot) -> GpuNode:
        """The GPU as the backend read it (the one way a live GPU enters the graph, ``state.reconcile``)."""
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
            power_limit_enforced_w=snap.power_limit_enforced_w,
        )

    @classmethod
    def from_model(cls, model: GpuModel, uuid: str = WHATIF_UUID, index: int = 0, *,
                   power_limit_w: float | None = None) -> GpuNode:
        """A GPU of the static ``model`` with no reading yet (a simulated machine, a what-if or training graph): named
        as NVML names the board (``full_name``), with its memory and limits, set at ``power_limit_w`` (default: the
        board's default limit). Agrees with :meth:`from_snapshot` of a backend's idle GPU of that model on all but
        the reading."""
        return cls(
            uuid=uuid,
            index=index,
            name=model.full_name,
            memory_total_mib=model.memory_mib,
            power_limit_min_w=model.power_limit_min_w,
            power_limit_default_w=model.power_limit_default_w,
            power_limit_max_w=model.power_limit_max_w,
            power_limit_w=model.power_limit_default_w if power_limit_w is None else power_limit_w,
        )


@dataclass(slots=True)
class Host:
    name: str
    gpus: dict[str, GpuNode] = field(default_factory=dict)
    #: link kind per unordered GPU pair (see ``ecolaunch.devices.backend.pair_key``)
    links: dict[tuple[str, str], LinkKind] = field(default_factory=dict)

    def link(self, a: str, b: str) -> LinkKind:
        return self.links.get(pair_key(a, b), LinkKind.SYSTEM)


@dataclass(slots=True)
class Job:
    """One launch. ``request`` is what the user asked; ``decision`` what the policy granted; ``progress`` what its
    launcher last measured of the run (set at each heartbeat; None before the first, and for a job without a
    launcher process)."""

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
    profile: Profile | None = None
    progress: JobProgress | None = None
    #: why a queued job waits (None: running, or not judged yet) and the particulars in words (see WaitReason)
    wait_reason: WaitReason | None = None
    wait_detail: str | None = None

    @classmethod
    def queued(cls, id: str, *, user: str, host: str, nproc: int, seq: int, submitted_at: float,
               request: Mapping[str, Any], name: str | None = None, uid: int = 0, launcher_pid: int = 1,
               launcher_start_time: float = 0.0) -> Job:
        """A new job in the queue of ``host``, holding nothing (no GPUs, caps, start time, decision or profile) until
        :meth:`StateGraph.book` places it: the one way a job record is made. ``request`` is copied; ``name``
        defaults to the id. A job without a launcher process (the simulator's, a what-if or training graph's) is
        root's, and its launcher is pid 1 started at time 0, which never dies."""
        return cls(id=id, uid=uid, user=user, host=host, launcher_pid=launcher_pid,
                   launcher_start_time=launcher_start_time, nproc=nproc, name=id if name is None else name, seq=seq,
                   submitted_at=submitted_at, request=dict(request))

    def remaining_s(self, now: float) -> float | None:
        """Seconds this running job is expected to run still, from what was expected before it started (the
        request's ``expected_iterations`` and ``expected_s``: its declared length, else its latest completed runs)
        and its progress: the steps still to mark (of the total the running script declared,
        :attr:`JobProgress.total_iterations`, else of the request's) at its measured pace, else the expected length
        less the time it has run. None when neither is known, or the job has run past what was expected (then
        nothing says when it ends)."""
        if self.state is not JobState.RUNNING or self.started_at is None:
            return None
        length, p = self.request.get("expected_s"), self.progress
        steps = p.total_iterations if p is not None and p.total_iterations else self.request.get("expected_iterations")
        if steps and p is not None and p.iter_time_s and p.iterations:
            left = (steps - p.iterations) * p.iter_time_s - max(0.0, now - p.at)
        elif length is not None:
            left = self.started_at + length - now
        else:
            return None
        return left if left > 0 else None

    @property
    def memory_mib(self) -> int:
        """Memory the job needs per GPU: its profile's peak, else the request's estimate, else 0."""
        if self.profile is not None and self.profile.memory_mib is not None:
            return int(self.profile.memory_mib)
        return int(self.request.get("memory_mib") or 0)


@dataclass(frozen=True, slots=True)
class IgnoredJob:
    """A job file the graph leaves out: its id (or file name), why, and the job when its fields were valid."""

    id: str
    reason: str
    job: Job | None = None


def queue_share(waiting: int, job_gpus: int, host_gpus: int) -> float:
    """``waiting`` jobs counted by the share of the host's ``host_gpus`` a job on ``job_gpus`` of them frees
    (:meth:`StateGraph.waiting_share`; the simulator's queue, which is not in its graph, counts the same way)."""
    return waiting * min(1.0, job_gpus / host_gpus)


@dataclass(slots=True)
class StateGraph:
    """The whole graph of one state directory. The document is versioned: ``SCHEMA`` and ``VERSION`` must match, else
    the store treats the file as foreign.

    ``budget_caps_w`` (under a power budget: each busy GPU's budget cap, uuid -> W) is set by the booking that chose
    it and by each release (``ecolaunch.policy.budgeted``) and read by the running launchers; it lives in the shared
    part of the state (another user's job file is not anyone else's to change), and a graph written before budgets
    existed reads as having none. A queued job's ``wait_reason`` and ``wait_detail`` are written by its own launcher
    and cleared by :meth:`book`; a file written before reasons existed reads as not judged yet. ``ignored`` holds the
    job files left out (refused by the store, or set aside by a transaction: a job of another host naming this host's
    GPUs, a booking the admin rules would never have admitted), never written, for ``ecolaunch status`` to flag; every
    query sees only ``jobs``, and the store neither rewrites nor removes an ignored job's file. The queue counter
    ``next_seq`` hands out 0, 1, 2, ... and saturates at :data:`MAX_SEQ` (every new job then gets ``MAX_SEQ``, ordered
    by submission time); why: docs/threat-model.md, round two, item 4.
    """

    hosts: dict[str, Host] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    next_seq: int = 0
    generation: int = 0
    #: the power budget's cap of each busy GPU (uuid -> W); empty without a budget (see the class docstring)
    budget_caps_w: dict[str, float] = field(default_factory=dict)
    #: job files left out of ``jobs`` (see the class docstring); not part of the document
    ignored: dict[str, IgnoredJob] = field(default_factory=dict)

    # --- queries ---------------------------------------------------------------------------------
    def running_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.state is JobState.RUNNING]

    def queued_jobs(self, host: str | None = None) -> list[Job]:
        """Queued jobs in arrival order (the FIFO the launchers wait in), of ``host`` only when given: each host
        of a shared state directory has its own queue.

        A queued job that can never be placed on its host (more GPUs, or more memory per GPU, than the host has) is
        left out: no honest launcher queues one (it fails at once), so it is a forgery, and it must not hold the
        head of the queue. Equal ``seq`` values (another forgery) are ordered by submission time, then id.
        """
        queued = [j for j in self.jobs.values() if j.state is JobState.QUEUED and self._may_ever_fit(j)
                  and (host is None or j.host == host)]
        return sorted(queued, key=lambda j: (j.seq, j.submitted_at, j.id))

    def waiting_share(self, job: Job) -> float:
        """The waiting jobs a slowdown of ``job`` delays, as a cap that weighs the queue counts them
        (:func:`~ecolaunch.jobmodel.capchoice.queue_eta`): the jobs queued on its host other than itself, times its
        share of the host's GPUs (a job on 1 of 4 GPUs frees a quarter of what the queue waits for). 0.0 when nobody
        waits or the host's GPUs are not known."""
        host = self.hosts.get(job.host)
        if host is None or not host.gpus:
            return 0.0
        waiting = sum(1 for j in self.queued_jobs(job.host) if j.id != job.id)
        return queue_share(waiting, len(job.gpus) or job.nproc, len(host.gpus))

    def _may_ever_fit(self, job: Job) -> bool:
        host = self.hosts.get(job.host)
        if host is None or not host.gpus:
            return True  # another host's job, or GPUs not read yet: nothing to judge by
        return job.nproc <= len(host.gpus) and job.memory_mib <= max(g.memory_total_mib for g in host.gpus.values())

    def jobs_on(self, gpu_uuid: str) -> list[Job]:
        return [j for j in self.running_jobs() if gpu_uuid in j.gpus]

    def set_aside(self, job_id: str, reason: str) -> None:
        """Leave a job out of the graph without removing its file (see the class docstring)."""
        job = self.jobs.pop(job_id)
        self.ignored[job_id] = IgnoredJob(job_id, reason, job)

    def take_seq(self) -> int:
        """The next queue number (saturating at :data:`MAX_SEQ`, see the class docstring)."""
        seq = min(self.next_seq, MAX_SEQ)
        self.next_seq = min(seq + 1, MAX_SEQ)
        return seq

    def book(self, job_id: str, gpus: list[str], power_caps_w: dict[str, float | None], decision: dict[str, Any],
             profile: Profile | None, now: float) -> Job:
        """Grant a queued job its placement: RUNNING on ``gpus`` with the decided caps (None: the GPU's current
        limit, not recorded) and what is known of it (``profile``), so that every later decision sees the jobs
        already on a GPU as what they are. The one way a job starts running, for the launcher and the simulator
        alike. Raises KeyError when the job is not in the graph."""
        job = self.jobs[job_id]
        job.state = JobState.RUNNING
        job.gpus = list(gpus)
        job.power_caps_w = {u: float(w) for u, w in power_caps_w.items() if w is not None}
        job.decision = dict(decision)
        job.profile = profile
        job.started_at = job.heartbeat_at = now
        job.wait_reason = job.wait_detail = None
        return job

    def queue_position(self, job_id: str) -> int | None:
        """1-based position of a queued job in its host's queue, or None when it is not queued."""
        me = self.jobs.get(job_id)
        if me is None:
            return None
        for pos, job in enumerate(self.queued_jobs(me.host), start=1):
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
            "budget_caps_w": dict(sorted(self.budget_caps_w.items())),
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
        next_seq = _int(doc, "next_seq")
        _expect(next_seq <= MAX_SEQ, "next_seq", f"a queue counter of at most {MAX_SEQ}")
        graph = cls(next_seq=next_seq, generation=_int(doc, "generation"))
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
        budget = doc.get("budget_caps_w", {})
        _expect(isinstance(budget, dict) and len(budget) <= MAX_NPROC, "budget_caps_w",
                f"an object of at most {MAX_NPROC} caps")
        for u, w in budget.items():
            _expect(len(u) <= MAX_NAME_CHARS and is_number(w) and 0 < w <= MAX_POWER_W,
                    f"budget_caps_w.{u}", f"a finite power in watts above 0 and at most {MAX_POWER_W:g}")
        graph.budget_caps_w = {str(u): float(w) for u, w in budget.items()}
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
    d["wait_reason"] = None if job.wait_reason is None else job.wait_reason.value
    d["gpus"] = list(job.gpus)
    d["power_caps_w"] = dict(job.power_caps_w)
    d["profile"] = None if job.profile is None else profile_to_json(job.profile)
    d["progress"] = None if job.progress is None else progress_to_json(job.progress)
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
                        "power_limit_max_w", "power_limit_w", "power_limit_enforced_w")


def job_from_dict(jid: str, raw: Any) -> Job:
    """Validate one job record (the value under ``jobs.<jid>``); raises ValueError naming the bad field.

    A job file is another user's word, read by every launcher and by the root cap agent: every field a policy,
    the queue or the agent reads is checked for type, range and finiteness here, so that a bad file is skipped
    with a warning instead of crashing, blocking or reordering anyone else's launch (bounds: ``MAX_*`` below).
    """
    _expect(isinstance(raw, dict), f"jobs.{jid}", "an object")
    for key, types in _JOB_TYPES.items():
        value = raw.get(key)
        _expect(isinstance(value, types) and not isinstance(value, bool), f"jobs.{jid}.{key}", "/".join(t.__name__ for t in types))
    _expect(raw["id"] == jid, f"jobs.{jid}.id", repr(jid))
    for key, (lo, hi) in _JOB_INT_RANGES.items():
        _expect(lo <= raw[key] <= hi, f"jobs.{jid}.{key}", f"a whole number from {lo} to {hi}")
    for key in ("user", "host", "name"):
        _expect(len(raw[key]) <= MAX_NAME_CHARS, f"jobs.{jid}.{key}", f"at most {MAX_NAME_CHARS} characters")
    for key in ("launcher_start_time", "submitted_at"):
        _expect(math.isfinite(raw[key]), f"jobs.{jid}.{key}", "a finite number")
    gpus = raw["gpus"]
    _expect(len(gpus) <= MAX_NPROC and all(isinstance(u, str) and len(u) <= MAX_NAME_CHARS for u in gpus)
            and len(set(gpus)) == len(gpus), f"jobs.{jid}.gpus", f"a list of at most {MAX_NPROC} distinct UUIDs")
    try:
        state = JobState(raw.get("state"))
    except ValueError as e:
        raise ValueError(f"jobs.{jid}.state: {raw.get('state')!r} is not a job state") from e
    fields = {k: raw[k] for k in _JOB_TYPES}
    _expect(len(raw["power_caps_w"]) <= MAX_NPROC, f"jobs.{jid}.power_caps_w", f"at most {MAX_NPROC} caps")
    for u, w in raw["power_caps_w"].items():
        _expect(is_number(w) and 0 < w <= MAX_POWER_W, f"jobs.{jid}.power_caps_w.{u}",
                f"a finite power in watts above 0 and at most {MAX_POWER_W:g}")
    caps = {str(u): float(w) for u, w in raw["power_caps_w"].items()}
    for key in ("started_at", "heartbeat_at"):
        value = raw.get(key)
        _expect(value is None or is_number(value), f"jobs.{jid}.{key}", "a finite number or null")
    if state is JobState.QUEUED:
        # a queued job holds nothing yet: GPUs, caps or a start time in a queued job are a forgery or a bug
        _expect(not gpus and not caps and raw.get("started_at") is None and raw.get("progress") is None,
                f"jobs.{jid}", "a queued job without GPUs, caps, a start time or progress")
    _check_request(f"jobs.{jid}.request", raw["request"])
    wait_reason, wait_detail = _wait_fields(jid, raw, state)
    profile = raw.get("profile")
    if profile is not None:
        try:
            profile = profile_from_json(profile, where=f"jobs.{jid}.profile")
        except ConfigError as e:
            raise ValueError(str(e)) from None
    progress = raw.get("progress")
    if progress is not None:
        try:
            progress = progress_from_json(progress, where=f"jobs.{jid}.progress")
        except ConfigError as e:
            raise ValueError(str(e)) from None
    fields.update(
        state=state,
        power_caps_w=caps,
        started_at=raw.get("started_at"),
        heartbeat_at=raw.get("heartbeat_at"),
        profile=profile,
        progress=progress,
        wait_reason=wait_reason,
        wait_detail=wait_detail,
    )
    return Job(**fields)


_job_from_dict = job_from_dict  # the former private name

#: bounds on what a job file may claim (far beyond any real job; what matters is that every value is finite,
#: of its type, and cannot overflow a computation or sort ahead of the honest queue)
MAX_NPROC = 4096
MAX_MEMORY_MIB = 1 << 30  # 1 PiB per GPU
MAX_POWER_W = 100_000.0
MAX_SLOWDOWN_PCT = 1000.0
#: a job's expected length: a year, and a step count no run reaches
MAX_EXPECTED_S, MAX_EXPECTED_ITERATIONS = 366 * 86400.0, 10 ** 12
MAX_NAME_CHARS = 256
MAX_DETAIL_CHARS = 1024
_JOB_INT_RANGES = {
    "uid": (0, 2**32 - 2),
    "launcher_pid": (1, 2**31 - 1),
    "nproc": (1, MAX_NPROC),
    # the queue counter hands out 0, 1, 2, ...: a negative seq would sort ahead of every honest job
    "seq": (0, MAX_SEQ),
}


def _wait_fields(jid: str, raw: dict[str, Any], state: JobState) -> tuple[WaitReason | None, str | None]:
    """A queued job's wait reason and its words (absent in files written before reasons were recorded)."""
    reason, detail = raw.get("wait_reason"), raw.get("wait_detail")
    try:
        reason = None if reason is None else WaitReason(reason)
    except ValueError:
        raise ValueError(f"jobs.{jid}.wait_reason: {reason!r} is not a wait reason") from None
    _expect(detail is None or (isinstance(detail, str) and len(detail) <= MAX_DETAIL_CHARS), f"jobs.{jid}.wait_detail",
            f"null or at most {MAX_DETAIL_CHARS} characters")
    _expect(state is JobState.QUEUED or reason is None, f"jobs.{jid}.wait_reason", "null for a running job")
    return reason, detail


def _check_request(where: str, request: dict[str, Any]) -> None:
    """The request fields that policies and readers use: the memory estimate, the slowdown bound, the expected
    length."""
    for key, most, unit in (("memory_mib", MAX_MEMORY_MIB, "MiB"), ("expected_iterations", MAX_EXPECTED_ITERATIONS,
                                                                     "steps")):
        value = request.get(key)
        _expect(value is None or (is_integer(value) and 0 <= value <= most),
                f"{where}.{key}", f"null or a whole number of {unit} from 0 to {most}")
    _check_number(f"{where}.allowed_slowdown_pct", request.get("allowed_slowdown_pct"), 0.0, MAX_SLOWDOWN_PCT)
    _check_number(f"{where}.expected_s", request.get("expected_s"), 0.0, MAX_EXPECTED_S)


def _check_number(where: str, value: Any, lo: float, hi: float, *, positive: bool = False) -> None:
    _expect(value is None or (is_number(value) and lo <= value <= hi and (value > 0 or not positive)),
            where, f"null or a finite number from {lo:g} to {hi:g}" + (" above 0" if positive else ""))


def _gpu_from_dict(where: str, uuid: str, g: Any) -> GpuNode:
    _expect(isinstance(g, dict), where, "an object")
    try:
        node = GpuNode(**g)
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from e
    _expect(isinstance(node.uuid, str) and node.uuid == uuid and isinstance(node.name, str), where, "a GPU record")
    for key in _GPU_INTS:
        value = getattr(node, key)
        _expect(is_integer(value) and value >= 0, f"{where}.{key}", "a whole number >= 0")
    for key in _GPU_OPTIONAL_FLOATS:
        value = getattr(node, key)
        _expect(value is None or is_number(value), f"{where}.{key}", "a finite number or null")
    _expect(isinstance(node.foreign_pids, list) and all(is_integer(p) for p in node.foreign_pids),
            f"{where}.foreign_pids", "a list of pids")
    return node


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    _expect(is_integer(value) and value >= 0, key, "a non-negative integer")
    return value


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise ValueError(f"{where}: expected {what}")
