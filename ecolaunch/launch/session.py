"""One launch's conversation with the state graph: queue, placement, heartbeat, release.

What lives here: :class:`Session` (each step one transaction of the file-locked store, starting with a reconcile),
:class:`Launcher`, :class:`Placement` and :class:`Beat`. What does not: deciding (the policy, through
:func:`ecolaunch.policy.place.place`, the simulator's too; why a job waits:
:func:`~ecolaunch.policy.waiting.why_waiting`), the budget's arithmetic (:mod:`ecolaunch.caps.limits`), applying
caps (``ecolaunch.caps.job.JobCaps``), printing (the CLI, through ``on_wait``). The queue's rules, a request
that can never fit and why a job waits: docs/queue.md; the budget's caps at placement and release:
docs/admin.md#a-power-budget-for-the-whole-machine.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ecolaunch.caps.limits import least_total_w, rebalance
from ecolaunch.caps.keeper import CapKeeper
from ecolaunch.admin.rules import Rules, budget_range_w, user_gpu_limit
from ecolaunch.clock import Clock, SystemClock
from ecolaunch.devices.backend import GpuBackend
from ecolaunch.errors import NeverFits, NoPlacement, PermissionDenied, StateError, WaitTimeout
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.policy.admission import unadmitted_bookings
from ecolaunch.policy.backfill import late_by, may_backfill, place_behind, reservation
from ecolaunch.policy.base import Decision, JobRequest, Policy
from ecolaunch.policy.candidates import eligible_gpus, user_quota_left
from ecolaunch.policy.place import admitted_decision, place
from ecolaunch.policy.waiting import Waiting, bounded, why_waiting
from ecolaunch.state.graph import Job, JobState, StateGraph, WaitReason
from ecolaunch.state.reconcile import ProcessTable, PsutilProcessTable, reconcile
from ecolaunch.state.store import StateStore
from ecolaunch.text import gist

logger = logging.getLogger(__name__)

#: seconds between two placement attempts of a waiting launcher (plus up to half of it as random jitter)
POLL_INTERVAL_S = 0.2


@dataclass(frozen=True, slots=True)
class Launcher:
    """Who is launching: the process whose life the booking is tied to."""

    pid: int
    start_time: float
    uid: int
    user: str


@dataclass(frozen=True, slots=True)
class Placement:
    job: Job
    decision: Decision
    gpus: dict = field(default_factory=dict)  # uuid -> GpuNode at placement time
    waited_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Beat:
    """What a heartbeat tells a running launcher: per GPU of its job, the other jobs on it now (job id -> its
    profile's ``power_w``), and the waiting jobs its slowdown delays
    (:meth:`~ecolaunch.state.graph.StateGraph.waiting_share`), which its closed loop weighs under
    ``[energy] wait_weight``."""

    residents: dict[str, dict[str, float | None]]
    waiting_share: float = 0.0


class Session:
    """Queue, place, keep alive and release jobs of one host.

    Args:
        store: the state store.
        backend: the GPU backend of this host.
        policy: the placement policy.
        rules: the effective admin policy.
        processes: the process table (psutil by default).
        clock: time source for waiting.
        cap_keeper: makes every transaction restore caps left by dead launchers (root, no cap agent).
        backfill_margin: the job may start ahead of the waiting head of the queue when that keeps the head's
            reservation (:mod:`ecolaunch.policy.backfill`), with this margin on its predicted length; None: it waits
            its turn (a strict FIFO).
    """

    def __init__(
        self,
        store: StateStore,
        backend: GpuBackend,
        policy: Policy,
        rules: Rules,
        *,
        processes: ProcessTable | None = None,
        clock: Clock | None = None,
        cap_keeper: CapKeeper | None = None,
        backfill_margin: float | None = None,
    ) -> None:
        self.store = store
        self.backend = backend
        self.policy = policy
        self.rules = rules
        self.processes = processes or PsutilProcessTable()
        self.clock = clock or SystemClock()
        self.host = backend.hostname()
        self._topology = None
        self._requests: dict[str, JobRequest] = {}
        #: job id -> the descriptor of its file this launcher holds open (``StateStore.hold_job_file``)
        self._held: dict[str, int] = {}
        self.cap_keeper = cap_keeper
        self.backfill_margin = backfill_margin
        #: per job, the latest backfill verdict said (one line each time it changes, not one a try)
        self._verdicts: dict[str, str] = {}
        #: per job at the head of the queue, the reservations the jobs that backfilled past it were promised
        self._promised: dict[str, set[float]] = {}

    # --- transactions ----------------------------------------------------------------------------
    def refresh(self, graph: StateGraph, *, job_left: bool = False) -> list[Job]:
        """Reconcile ``graph`` with the live GPUs and processes; returns the jobs released as dead.

        With a ``cap_keeper`` (a root process and no cap agent) the transaction is privileged: it also restores the
        caps a dead launcher left lowered (:meth:`~ecolaunch.caps.keeper.CapKeeper.restore_orphans`). Under a power
        budget, the budget is allocated afresh when a job left (``job_left``, or a dead launcher's job released).
        """
        if self._topology is None:
            self._topology = self.backend.topology()
        snapshots = self.backend.gpus()
        report = reconcile(graph, self.host, self.processes, snapshots, self._topology)
        for job_id, why in unadmitted_bookings(graph, self.host, self.rules, exempt=self._requests).items():
            logger.info("ignoring job %s of %s: it %s", job_id, graph.jobs[job_id].user, why)
            graph.set_aside(job_id, f"{why}: never admitted")
        if self.cap_keeper is not None:
            try:
                self.cap_keeper.restore_orphans(graph, snapshots)
            except PermissionDenied:
                self.cap_keeper = None
        self._keep_budget(graph, force=job_left or bool(report.released))
        return report.released

    def look(self) -> StateGraph:
        """A lock-free snapshot for a look (a running job's budget ceilings): the job files as they are, this host's
        GPUs and links from the driver, never from ``state.json``, which any member may write; dead launchers' and
        never-admitted bookings left out. Writes nothing."""
        graph = self.store.read_unlocked()
        if self._topology is None:
            self._topology = self.backend.topology()
        reconcile(graph, self.host, self.processes, self.backend.gpus(), self._topology)
        for job_id, why in unadmitted_bookings(graph, self.host, self.rules, exempt=self._requests).items():
            graph.set_aside(job_id, f"{why}: never admitted")
        return graph

    def snapshot(self) -> StateGraph:
        with self.store.transaction() as graph:
            self.refresh(graph)
            return graph

    def preview(self, request: JobRequest) -> tuple[Decision | None, Waiting | None, StateGraph]:
        """What the policy would decide now (``--dry-run``), and why the job would wait first and when it would start
        (None: it would not: no queue ahead of it, or it would start ahead of the queue by backfill, and a
        placement); books nothing."""
        with self.store.transaction() as graph:
            self.refresh(graph)
            self._check_feasible(graph, request)
            now = time.time()
            request = dataclasses.replace(request, decided_at=now)
            decision = admitted_decision(graph, request, self.policy, self.rules)
            waiting, queue = None, graph.queued_jobs(self.host)
            if decision is None or queue:
                waiting = why_waiting(graph, request, self.policy, self.rules)
            if decision is not None and queue and self.backfill_margin is not None:
                head = queue[0]
                verdict = may_backfill(reservation(graph, self.host, head.id, head.nproc, now), request.nproc,
                                       request.expected_s, self.backfill_margin, now)
                if verdict.yes:  # it would start now, ahead of the queue
                    waiting = None
                    decision = dataclasses.replace(decision, reasons=[
                        *decision.reasons, f"would start ahead of job {head.id} by backfill: {verdict.why}"])
            return decision, waiting, graph

    def submit(self, request: JobRequest, launcher: Launcher, name: str, info: dict) -> Job:
        """Enter the queue. Raises NeverFits when the request can never fit this host."""
        with self.store.transaction() as graph:
            self.refresh(graph)
            self._check_feasible(graph, request)
            job = Job.queued(request.id, user=launcher.user, host=self.host, nproc=request.nproc, seq=graph.take_seq(),
                             submitted_at=time.time(), request=info, name=name, uid=launcher.uid,
                             launcher_pid=launcher.pid, launcher_start_time=launcher.start_time)
            graph.jobs[job.id] = job
        self._requests[job.id] = request
        if launcher.pid == os.getpid() and (fd := self.store.hold_job_file(job.id)) is not None:
            self._held[job.id] = fd  # the kernel's word that this process launches the job (``launch.cancel``)
        return job

    def try_place(self, job_id: str) -> Placement | Waiting:
        """Place the job if it heads the queue and the policy finds GPUs, or (with a ``backfill_margin``) if it may
        start ahead of the head (:func:`~ecolaunch.policy.backfill.place_behind`); else its queue position and why it
        waits, which the job's file records as they change (``Job.wait_reason``: ``ecolaunch status`` shows them).
        A head that started later than a reservation kept for it says so in its decision."""
        request = self._requests[job_id]
        with self.store.transaction() as graph:
            self.refresh(graph)
            job = _queued(graph, job_id)
            decision, verdict, now = None, None, time.time()
            # what running jobs' times left count from, and who would wait behind it (caps that weigh the queue)
            request = dataclasses.replace(request, decided_at=now, waiting_share=graph.waiting_share(job))
            if graph.queue_position(job_id) == 1:
                # the reservations kept for it (the jobs that backfilled past it may end before it starts)
                promised = self._promised.setdefault(job_id, set())
                promised |= _promises(graph, job_id)
                decision = place(graph, request, self.policy, self.rules, now,
                                 note=lambda d: _kept(d, promised, now))
            elif self.backfill_margin is not None:
                head = graph.queued_jobs(self.host)[0]
                decision, verdict = place_behind(graph, request, self.policy, self.rules, now, head.id, head.nproc,
                                                 self.backfill_margin)
                if decision is None and self._verdicts.get(job_id) != (said := gist(verdict.why)):
                    self._verdicts[job_id] = said
                    logger.info("job %s does not start ahead of the queue: %s", job_id, verdict.why)
            if decision is None:
                waiting = why_waiting(graph, request, self.policy, self.rules)
                if verdict is not None:
                    waiting = dataclasses.replace(waiting, detail=bounded(f"{waiting.detail}; backfill: {verdict.why}"))
                return _waits(job, waiting)
            return self._placed(graph, job, request, decision)

    def node_sibling(self, job_id: str, rendezvous: str) -> Job | None:
        """The job of the launcher that came first to this host with the same multi-node job (the same
        ``rendezvous``, recorded in its request), still queued or running, of the same uid; None when this launcher
        is the host's first. The reconcile that starts the transaction has released every job whose launcher the
        kernel does not say runs as the job's uid (:func:`~ecolaunch.state.reconcile.launcher_alive`)."""
        with self.store.transaction() as graph:
            self.refresh(graph)
            me = _queued(graph, job_id)
            earlier = [j for j in graph.jobs.values()
                       if j.id != job_id and j.host == self.host and j.seq < me.seq and j.uid == me.uid
                       and j.state in (JobState.QUEUED, JobState.RUNNING) and j.request.get("rendezvous") == rendezvous]
        return min(earlier, key=lambda j: j.seq, default=None)

    def try_join(self, job_id: str, sibling_id: str) -> Placement | Waiting:
        """Place the job on the GPUs of ``sibling_id``, another node of the same job on this host, once that runs:
        its first ``nproc`` GPUs in order (local rank i on the sibling's GPU i, as torchrun's workers of two nodes on
        one host share its GPUs), with no caps of its own, wherever it stands in the queue (it takes no GPU another
        job could have). While the sibling waits, why. Raises StateError when the sibling ended first, NeverFits
        when this node needs more GPUs than the sibling has or sharing them takes the user past ``[users]
        max_gpus``."""
        request = self._requests[job_id]
        with self.store.transaction() as graph:
            self.refresh(graph)
            job, sibling = _queued(graph, job_id), graph.jobs.get(sibling_id)
            if sibling is None or sibling.state not in (JobState.QUEUED, JobState.RUNNING):
                raise StateError(f"job {sibling_id}, another node of this job on this host, ended before this node "
                                 "could share its GPUs", hint="launch the job's nodes again")
            if sibling.state is JobState.QUEUED:
                return _waits(job, Waiting(graph.queue_position(job_id) or 1, WaitReason.PRIORITY,
                                           f"shares the GPUs of job {sibling.id} (another node of this job on this "
                                           "host) once that is placed"))
            gpus = list(sibling.gpus) if request.elastic else list(sibling.gpus[:request.nproc])
            if len(gpus) < request.nproc:
                raise NeverFits(f"this node's {request.nproc} workers need {request.nproc} GPUs, but job {sibling.id}, "
                                f"another node of this job on this host, has {len(sibling.gpus)}: two nodes on one "
                                "host share its GPUs by local rank",
                                hint="give every node of the job the same --nproc-per-node")
            left = user_quota_left(graph, request, self.rules)
            if left is not None and len(gpus) > left:
                raise NeverFits(f"sharing job {sibling.id}'s {len(gpus)} GPU(s) would take user {job.user} past "
                                f"[users] max_gpus: {left} more GPU(s) on this host, each node's GPUs counted",
                                hint="run the job as one node (--nnodes 1 with every worker), or its nodes on "
                                     "different hosts")
            decision = Decision(policy="same-job", gpus=tuple(gpus), power_caps_w=dict.fromkeys(gpus),
                                colocated_with={u: [sibling.id] for u in gpus},
                                reasons=[f"another node of this job runs on this host (job {sibling.id}): its workers "
                                         "share that node's GPUs, as torchrun's would"])
            graph.book(job_id, gpus, {}, decision.to_dict(), request.profile, time.time())
            return self._placed(graph, job, request, decision)

    def _placed(self, graph: StateGraph, job: Job, request: JobRequest, decision: Decision) -> Placement:
        """The placement of ``job``, booked in ``graph`` by ``decision``: its GPUs attached (simulated GPUs) and
        said in the log."""
        self._attach(job, request)
        gpus = {u: graph.hosts[self.host].gpus[u] for u in decision.gpus}
        logger.info("job %s placed on %s by %s: %s", job.id, ",".join(str(g.index) for g in gpus.values()),
                    decision.policy, "; ".join(decision.reasons))
        return Placement(job=job, decision=decision, gpus=gpus)

    def wait_for_placement(
        self,
        job_id: str,
        timeout_s: float | None,
        on_wait: Callable[[Waiting, float], None] | None = None,
        attempt: Callable[[], Placement | Waiting] | None = None,
    ) -> Placement:
        """Poll until the job is placed. ``timeout_s`` None waits forever, 0 fails at once, and a job expected to start
        later than it allows fails at once too (its :attr:`Waiting.starts_at`); ``on_wait(waiting, waited_s)`` after
        each try that leaves it waiting; ``attempt()``: one try (default :meth:`try_place`).

        Raises WaitTimeout (0: NoPlacement) after removing the job from the queue.
        """
        start = self.clock.now()
        while True:
            try:
                outcome = self.try_place(job_id) if attempt is None else attempt()
            except BaseException:
                # whatever stops the wait (a vanished job, a state error, Ctrl-C): no job file is left behind
                try:
                    self.release(job_id)
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    logger.warning("could not release job %s after a failed wait", job_id, exc_info=True)
                raise
            waited = self.clock.now() - start
            if isinstance(outcome, Placement):
                return Placement(outcome.job, outcome.decision, outcome.gpus, waited)
            if timeout_s is not None and waited >= timeout_s:
                self.release(job_id)
                if timeout_s == 0:
                    raise NoPlacement(
                        f"no GPUs fit job {job_id} now (queue position {outcome.position}): {outcome.text()}",
                        hint="wait for GPUs (drop --wait-timeout 0), or see 'ecolaunch status' for who uses them",
                    )
                raise WaitTimeout(
                    f"job {job_id} waited {waited:.0f} s (--wait-timeout {timeout_s:g}) without getting GPUs: "
                    f"{outcome.text()}",
                    hint="raise --wait-timeout, or see 'ecolaunch status' for who uses the GPUs",
                )
            if timeout_s is not None and (expected := outcome.starts_in(time.time())) is not None \
                    and expected > timeout_s - waited:
                self.release(job_id)
                raise WaitTimeout(
                    f"job {job_id} is expected to start in {expected:.0f} s, later than --wait-timeout {timeout_s:g} "
                    f"allows (after {waited:.0f} s waited): {outcome.text()}",
                    hint="raise --wait-timeout (or leave it out to wait as long as it takes); 'ecolaunch status' shows "
                         "each waiting job's expected start",
                )
            if on_wait is not None:
                on_wait(outcome, waited)
            self.clock.sleep(POLL_INTERVAL_S * (1.0 + 0.5 * random.random()))

    def heartbeat(self, job: Job, progress: JobProgress | None = None, measured: Profile | None = None) -> Beat:
        """Refresh the job's heartbeat, with what its launcher measured of the run so far (``progress``, kept when
        None); re-register it if the state was rebuilt under it. ``measured``: the profile this run measured of a
        job that was booked without one (a first launch, profiled as it runs), booked on the job from now on, so
        that every later decision (a power budget's above all) reads the job's curve, as the simulator's jobs are
        read once profiled. Returns what the launcher follows (:class:`Beat`): per GPU of the job, the other jobs on it
        now, and the waiting jobs its slowdown delays."""
        with self.store.transaction() as graph:
            self.refresh(graph)
            current = graph.jobs.get(job.id)
            if current is None:
                logger.warning("job %s was missing from the state graph (rebuilt?); registering it again", job.id)
                graph.jobs[job.id] = current = job
            if measured is not None and measured.knows_power and not (current.profile and current.profile.knows_power):
                # read by the next decision and the next refresh of the budget (the next beat at the latest)
                memory = current.profile.memory_mib if current.profile else None
                current.profile = dataclasses.replace(measured, memory_mib=memory or measured.memory_mib)
            current.heartbeat_at = time.time()
            if progress is not None:
                current.progress = progress
            return Beat({u: {j.id: j.profile.power_w if j.profile else None for j in graph.jobs_on(u)
                             if j.id != job.id} for u in job.gpus}, graph.waiting_share(current))

    def release(self, job_id: str) -> Job | None:
        """Remove the job from the graph and free its GPUs."""
        with self.store.transaction() as graph:
            job = graph.jobs.pop(job_id, None)
            self._detach(job)
            # a running job's watts go back to the jobs left
            self.refresh(graph, job_left=job is not None and job.state is JobState.RUNNING)
        if job is None and self.store.discard_job_file(job_id):
            # not in the graph (its file refused, or set aside): the file is still ours to remove
            logger.info("removed the file of job %s, which the state graph no longer listed", job_id)
        self._requests.pop(job_id, None)
        self._verdicts.pop(job_id, None)
        self._promised.pop(job_id, None)
        if (fd := self._held.pop(job_id, None)) is not None:
            os.close(fd)
        return job

    # --- helpers ---------------------------------------------------------------------------------
    def _keep_budget(self, graph: StateGraph, *, force: bool) -> None:
        """Allocate the power budget afresh from the validated job files in every transaction, so the caps this lock
        holder writes are never a member's edit of ``state.json`` passed on (``force``: a job left, kept for the
        callers' sake); drop them when the policy sets no budget."""
        if self.rules.power_max_total_w is None:
            if graph.budget_caps_w:
                graph.budget_caps_w = {}
            return
        caps = rebalance(graph, self.rules)
        if force or caps != graph.budget_caps_w:
            graph.budget_caps_w = caps

    def _check_feasible(self, graph: StateGraph, request: JobRequest) -> None:
        usable = eligible_gpus(graph, request, self.rules)
        host = graph.hosts.get(self.host)
        total = len(host.gpus) if host else 0
        budget = self.rules.power_max_total_w
        floor_w = budget_range_w(host.gpus.values())[0] if host else 0.0
        if budget is not None and budget < floor_w - 1e-6:
            raise NeverFits(
                f"the admin policy's power budget of {budget:g} W is below the {floor_w:g} W this host's GPUs count at "
                "their minimum power limits: no job can run under it",
                hint="ask the lab admin to fix [power] max_total_w (ecolaunch policy check names the problem)",
            )
        allocated = [g for g in host.gpus.values() if g.uuid in request.allowed_gpus] if (
            host and request.allowed_gpus is not None) else None
        if allocated is not None and len(allocated) < request.nproc:
            # an allocation (CUDA_VISIBLE_DEVICES, a Slurm allocation) is what limits the job, not the admin's rules
            shown = ",".join(str(g.index) for g in sorted(allocated, key=lambda g: g.index)) or "none"
            slurm = request.allowed_by != "CUDA_VISIBLE_DEVICES"
            raise NeverFits(
                f"job asks for {request.nproc} GPU(s) and can never fit: {request.allowed_by} allows "
                f"{len(allocated)} of this host's {total} GPU(s) (GPU {shown})",
                hint="lower --nproc-per-node, or ask Slurm for more GPUs (--gres=gpu:N)" if slurm else
                "lower --nproc-per-node, list more GPUs in CUDA_VISIBLE_DEVICES, or unset it to place on any GPU",
            )
        if len(usable) < request.nproc:
            mine = "" if len(usable) == total else f", {len(usable)} of them usable by user {request.user!r}"
            raise NeverFits(
                f"job asks for {request.nproc} GPU(s) and can never fit: the host has {total} GPU(s){mine}",
                hint="lower --nproc-per-node" + ("" if len(usable) == total else
                                                 ", or ask the lab admin about reserved GPUs and per-user limits"),
            )
        least = least_total_w(self.rules, list(host.gpus.values()) if host else [], usable, request.nproc)
        if budget is not None and least is not None and least > budget + 1e-6:
            raise NeverFits(
                f"job asks for {request.nproc} GPU(s) and can never fit under the admin policy's power budget of "
                f"{budget:g} W: even with its GPUs at the lowest cap the policy allows and every other GPU at its "
                f"minimum power limit, this host's GPUs count {least:.0f} W",
                hint="lower --nproc-per-node, or ask the lab admin to raise [power] max_total_w (or the [caps] "
                     "minimum of these GPUs)",
            )
        limit = user_gpu_limit(self.rules, request.user)
        if limit is not None and request.nproc > limit:
            raise NeverFits(
                f"job asks for {request.nproc} GPU(s) and can never fit: your limit is {limit} GPU"
                + ("" if limit == 1 else "s") + f" ([users] max_gpus for user {request.user!r})",
                hint=f"lower --nproc-per-node to {limit} or fewer, or ask the lab admin to raise [users] max_gpus"
                if limit else "ask the lab admin for a [users] max_gpus above 0",
            )
        need = request.memory_mib or 0
        if need and all(g.memory_total_mib < need for g in usable):
            raise NeverFits(
                f"job needs {need} MiB per GPU and can never fit: the largest GPU it may use has "
                f"{max(g.memory_total_mib for g in usable)} MiB",
                hint="lower --memory-mib or the job's memory use",
            )

    def _attach(self, job: Job, request: JobRequest) -> None:
        # A simulated backend has no real processes to see: tell it the launcher now uses these GPUs.
        profile = request.profile or Profile()
        if not (profile.sm_util_pct or profile.mem_bw_util_pct):
            # measured to use nothing of the GPU (a CPU job on simulated GPUs): it holds memory and adds no load, so
            # the GPUs read as they did when it was profiled (an "active" floor would read twice the idle power)
            profile = Profile()
        for uuid in job.gpus:
            self.backend.attach(
                uuid,
                job.launcher_pid,
                int(request.memory_mib or 0),
                util_gpu_pct=profile.sm_util_pct,
                util_mem_pct=profile.mem_bw_util_pct,
                power_w=profile.power_w,
            )

    def _detach(self, job: Job | None) -> None:
        if job is not None and job.state is JobState.RUNNING:
            self.backend.detach(job.launcher_pid)



def _promises(graph: StateGraph, head: str) -> set[float]:
    """The reservations the running jobs that backfilled past ``head`` were promised (their decisions say)."""
    out = set()
    for job in graph.running_jobs():
        said = (job.decision.get("predicted") or {}).get("backfill")
        if isinstance(said, dict) and said.get("head") == head and isinstance(said.get("reservation_at"), (int, float)):
            out.add(float(said["reservation_at"]))
    return out


def _kept(decision: Decision, promised: set[float], now: float) -> Decision:
    """The head's decision, saying how late it started against the earliest reservation the jobs that backfilled past
    it were promised (``predicted["reservation_late_s"]``), when any did."""
    late = late_by(sorted(promised), now)
    if late is None:
        return decision
    said = (f"{len(promised)} job(s) started ahead of it by backfill; it starts {late:.0f} s after its reservation"
            if late > 0.5 else f"{len(promised)} job(s) started ahead of it by backfill, keeping its reservation")
    return dataclasses.replace(decision, reasons=[*decision.reasons, said],
                               predicted={**decision.predicted, "reservation_late_s": round(late, 1)})


def _queued(graph: StateGraph, job_id: str) -> Job:
    """The launcher's own job in ``graph``; StateError when it vanished while queued."""
    job = graph.jobs.get(job_id)
    if job is None:
        raise StateError(f"job {job_id} vanished from the state graph while queued", hint="launch it again")
    return job


def _waits(job: Job, waiting: Waiting) -> Waiting:
    """``waiting``, recorded in the job's file when its reason or detail changed (``ecolaunch status`` shows it)."""
    if (job.wait_reason, job.wait_detail) != (waiting.reason, waiting.detail):
        job.wait_reason, job.wait_detail = waiting.reason, waiting.detail
        logger.info("job %s waits: %s", job.id, waiting.text())
    return waiting
