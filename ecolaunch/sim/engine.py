"""The discrete-event simulator: hosts, GPUs and jobs on a virtual clock, deciding with the launcher's policies.

What lives here: :class:`TraceJob` / :class:`Trace` (the input), :class:`Simulation` (the event loop) and
:class:`SimResult` (per-job outcomes and the three energy accountings). What does not: building traces
(:mod:`ecolaunch.sim.traces`), summary metrics (:mod:`ecolaunch.sim.metrics`), the models the machine plays
(:mod:`ecolaunch.sim.node`) and the measured world's truth (:mod:`ecolaunch.sim.measured`). What the policies know,
what the machine does and how a budget is played: docs/simulator.md#the-event-loop. The queue backfills as the
launcher's does (:mod:`ecolaunch.policy.backfill`), from what :mod:`ecolaunch.sim.lengths` knows of each job's length.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from dataclasses import dataclass, field, replace

from ecolaunch.caps.limits import asked_caps, budget_ceilings, job_floor_w, wish_under_ceiling
from ecolaunch.admin.rules import Rules
from ecolaunch.caps.control import reaches_top
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.devices.catalogue import lookup
from ecolaunch.devices.spec import MachineSpec
from ecolaunch.jobmodel.capcurve import default_prior
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.policy.backfill import backfill_default, late_by, place_behind
from ecolaunch.policy.base import Decision, JobRequest, Policy
from ecolaunch.policy.candidates import best_link, worst_link
from ecolaunch.policy.place import place
from ecolaunch.jobmodel.powercap import profile_caps
from ecolaunch.sim.lengths import STEP_S, LauncherLengths, TrueLengths, steps_of
from ecolaunch.sim.power import default_power_model
from ecolaunch.sim.node import EnergyMeter, EnergyReport, GpuLoad, reproduce_eaco, shared_gpu
from ecolaunch.state.graph import GpuNode, Host, Job, StateGraph, queue_share

logger = logging.getLogger(__name__)

_EPS_S = 1e-6


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A job of a trace: when it arrives, how many GPUs, its solo profile and its solo, uncapped run time."""

    id: str
    arrival_s: float
    nproc: int
    work_s: float
    profile: Profile
    allowed_slowdown_pct: float = 10.0
    user: str = "sim"
    kind: str = ""


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    jobs: tuple[TraceJob, ...]
    description: str = ""


@dataclass(slots=True)
class JobOutcome:
    id: str
    arrival_s: float
    nproc: int
    work_s: float
    allowed_slowdown_pct: float
    start_s: float | None = None
    end_s: float | None = None
    gpus: tuple[str, ...] = ()
    caps_w: dict[str, float | None] = field(default_factory=dict)
    shared: bool = False
    #: the early-epoch check undid a shared placement of this job
    undone: bool = False
    rejected: str | None = None
    #: the job's solo speed on its GPUs against the speed ``work_s`` is counted at (the measured world's boards)
    reference_speed: float = 1.0
    #: how late it started against the earliest reservation it was promised when jobs backfilled past it (0: on
    #: time; None: nobody backfilled past it), :func:`~ecolaunch.policy.backfill.late_by`
    late_s: float | None = None
    #: it was backfilled: started ahead of the head of the queue
    backfilled: bool = False
    #: placed under the sharing contract (``Simulation(share_if_sooner=True)``): the time by which it promised the
    #: job done (the decision's estimate of waiting x (1 + its bound), :mod:`ecolaunch.policy.contract`)
    contract_deadline_s: float | None = None

    @property
    def contract_violated(self) -> bool:
        """A contract job that finished after its deadline."""
        return self.contract_deadline_s is not None and self.end_s is not None and \
            self.end_s > self.contract_deadline_s + 1e-6

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.arrival_s

    @property
    def slowdown_pct(self) -> float | None:
        """Run time against the solo, uncapped run time on its GPUs (``work_s`` / ``reference_speed``), in percent
        (queueing excluded)."""
        if self.end_s is None or self.start_s is None:
            return None
        return 100.0 * ((self.end_s - self.start_s) * self.reference_speed / self.work_s - 1.0)


@dataclass(frozen=True, slots=True)
class SimResult:
    trace: str
    policy: str
    jobs: tuple[JobOutcome, ...]
    energy: EnergyReport
    makespan_s: float
    gpu_busy_s: float
    gpu_count: int
    decisions: int
    #: placements made, and how many of them the policy's learned part decided (``Decision.predicted["learned"]``)
    placements: int = 0
    learned_decisions: int = 0
    #: the most the machine's GPUs drew together at any instant (W)
    peak_gpu_power_w: float = 0.0
    #: the most the GPUs' power limits added up to at any instant, a GPU without a job at its minimum limit (W): what
    #: a power budget (``[power] max_total_w``) bounds
    peak_limit_sum_w: float = 0.0


class Lengths(Protocol):
    """What the simulator's launchers know of each job's length (:mod:`ecolaunch.sim.lengths`): what a request says,
    what a completed run teaches, and the margin a backfilled job's length gets."""

    def known(self, job: TraceJob, profile: Profile | None) -> dict[str, float | int]:
        """What the job's request says of its length (``expected_s``, ``expected_iterations``, each optional), given
        the profile its request reads; the running job's record carries it (:meth:`Job.remaining_s`)."""
        ...

    def ended(self, job: TraceJob, run_s: float, iterations: int) -> None:
        """A job completed after ``run_s`` seconds of wall time and ``iterations`` steps (what its history records)."""
        ...

    def margin(self) -> float:
        """The margin a backfilled job's predicted length gets (:func:`~ecolaunch.policy.backfill.overrun_margin`)."""
        ...


@dataclass(slots=True)
class _Running:
    job: TraceJob
    outcome: JobOutcome
    host: str
    gpus: tuple[str, ...]
    remaining_s: float
    speed: float = 1.0
    #: the share of its speed its GPUs' links leave it (fixed while it runs; 1.0 in the model world)
    link: float = 1.0


@dataclass(slots=True)
class _BudgetAsk:
    """What a running job asks of a power budget (``JobCaps``' own state): per GPU, the cap it asks (None: none;
    its closed loop's once it settled), its floor, and each GPU's limit when it was placed."""

    asks: dict[str, float | None]
    floor_w: float | None
    found_w: dict[str, float | None]


class Simulation:
    """One policy on one machine.

    Args:
        machine: the hosts and GPUs (``ecolaunch.devices.spec``), e.g. ``parse_spec("8xA100-SXM4-80GB")``.
        policy: any launcher policy.
        rules: the admin policy the decisions run under.
        host_static_w: each host's power besides its GPUs (see :func:`default_host_static_w`).
        lift_caps_waiting: an ablation, not something the launcher does (``benchmarks/energy.py
            --lift-caps-waiting N``): while at least N jobs wait in the queue, every running job runs uncapped, and
            the caps decided for it come back when fewer wait. What caps that weigh the queue could buy in job
            completion time, and what it costs in energy. None (default): off. Ignored under a power budget, whose
            caps are the budget's.
        share_if_sooner: every job asks for the sharing contract (``--share-if-sooner``,
            :mod:`ecolaunch.policy.contract`) and knows its length exactly, as a history of runs just like this one
            would tell (an upper bound on what a launcher knows): the policy reads each running job's time left from
            its expected length and its progress (``Job.remaining_s``), as the launcher does.
        backfill: EASY backfill (:mod:`ecolaunch.policy.backfill`, as the launcher's queue): when the head of the
            queue waits, a job behind it may start if it keeps the head's reservation. None (default): as the
            launcher does under the policy (:func:`~ecolaunch.policy.backfill.backfill_default`); False: the strict
            FIFO.
        lengths: what each job's request knows of its length (:mod:`ecolaunch.sim.lengths`). None (default): the
            oracle's true lengths when ``omniscient``, else what a launcher could know, nothing declared.
        colleague_profiles: a first launch whose job another user has run on its board starts from that user's
            profile, as the launcher's does (:meth:`~ecolaunch.sim.measured.MeasuredWorld.adopt_colleague`): its
            request carries it and nothing is profiled. False (default): a first launch is profiled inline (a policy
            may still be told a colleague's curve, :mod:`ecolaunch.sim.first_curves`).
    """

    def __init__(self, machine: MachineSpec, policy: Policy, rules: Rules | None = None, *,
                 host_static_w: float | None = None, profile_caps: bool = True,
                 early_check_fraction: float = 0.05, world: Any = None, closed_loop: bool = False,
                 omniscient: bool = False, lift_caps_waiting: int | None = None,
                 share_if_sooner: bool = False, backfill: bool | None = None,
                 lengths: Lengths | None = None, colleague_profiles: bool = False) -> None:
        self.machine = machine
        self.profile_caps = profile_caps and world is None
        self.early_check_fraction = early_check_fraction
        self.policy = policy
        self.rules = rules or Rules()
        #: the measured world (:class:`ecolaunch.sim.measured.MeasuredWorld`): the truth the machine plays and
        #: the noisy profiles the policy reads; None = the fitted models of ecolaunch.sim.node (and exact profiles)
        self.world = world
        #: whether the policy's jobs run under ecolaunch's profiler and closed-loop cap control (world only)
        self.closed_loop = closed_loop
        #: whether the policy reads the truth (the hindsight oracle; world only)
        self.omniscient = omniscient
        #: whether a first launch starts from a colleague's profile of the same job, as the launcher's does (world only)
        self.colleague_profiles = colleague_profiles
        if world is not None:
            self.rules = replace(self.rules, max_jobs_per_gpu=min(self.rules.max_jobs_per_gpu, world.max_jobs_per_gpu))
        self.host_static_w = default_host_static_w() if host_static_w is None else host_static_w
        self.models: dict[str, GpuModel] = {}
        self.graph = StateGraph()
        for host_spec in machine.hosts:
            host = Host(name=host_spec.name)
            for index, (uuid, model) in enumerate(zip(host_spec.uuids, host_spec.gpus)):
                node = GpuNode.from_model(model, uuid, index)
                node.power_w, node.util_gpu_pct, node.util_mem_pct = model.idle_power_w, 0.0, 0.0  # read idle
                host.gpus[uuid] = node
                self.models[uuid] = model
            for (i, j), kind in host_spec.links.items():
                a, b = host_spec.uuids[i], host_spec.uuids[j]
                host.links[(a, b) if a < b else (b, a)] = kind
            self.graph.hosts[host.name] = host
        self._host_of = {u: h.name for h in self.graph.hosts.values() for u in h.gpus}
        self._exclusive_only: set[str] = set()
        self._resume: dict[str, float] = {}
        self._oom: set[str] = set()
        #: the machine's one GPU model, None when it mixes models (the measured world's profiles are per model)
        models = {m.name for m in self.models.values()}
        self._board = next(iter(models)) if len(models) == 1 else None
        self.learned_decisions = 0
        self.placements = 0
        if lift_caps_waiting is not None and not (isinstance(lift_caps_waiting, int) and lift_caps_waiting >= 1):
            raise ValueError(f"lift_caps_waiting must be a whole number >= 1, got {lift_caps_waiting!r}")
        self.lift_caps_waiting = lift_caps_waiting
        self._lifted = False  # caps lifted now (lift_caps_waiting)
        self.share_if_sooner = share_if_sooner
        self.backfill = self.rules.backfill and backfill_default(policy.name) if backfill is None else backfill
        self.lengths: Lengths = lengths if lengths is not None else TrueLengths() if omniscient else LauncherLengths()
        #: backfill: the jobs behind the head that could not start since the machine last changed
        self._unplaced: set[str] = set()
        #: backfill: each waiting head's reservations, kept when a job started past it (:func:`late_by`)
        self._promised: dict[str, list[float]] = {}
        self._running: dict[str, _Running] = {}
        #: caps that weigh the queue (``[energy] wait_weight``): each closed-loop job's own cap (None: uncapped) and the
        #: waiting share its cap was last weighed for
        self._own_caps: dict[str, float | None] = {}
        self._weighed: dict[str, float] = {}
        #: under a power budget, what each running job asks of it, as its launcher's JobCaps holds it
        self._asks: dict[str, _BudgetAsk] = {}

    # --- the event loop --------------------------------------------------------------------------
    def run(self, trace: Trace, progress: Callable[[int, int], None] | None = None) -> SimResult:
        arrivals = sorted(trace.jobs, key=lambda j: (j.arrival_s, j.id))
        self._lifted = False
        self._own_caps.clear()
        self._weighed.clear()
        self._asks.clear()
        self._unplaced.clear()
        # the running launchers' curve priors (the measured world's, held out by type; the launcher's otherwise)
        self._priors = self.world.priors({j.id: j.kind for j in trace.jobs}) if self.world else default_prior
        if self.profile_caps:
            arrivals = [_with_cap_points(j, self.machine.hosts[0].gpus[0]) for j in arrivals]
        outcomes = {j.id: JobOutcome(j.id, j.arrival_s, j.nproc, j.work_s, j.allowed_slowdown_pct) for j in arrivals}
        meters = {h: EnergyMeter(self.host_static_w, sum(float(self.models[u].idle_power_w) for u in host.gpus))
                  for h, host in self.graph.hosts.items()}
        queue: deque[TraceJob] = deque()
        running: dict[str, _Running] = {}
        gpu_jobs: dict[str, list[str]] = {u: [] for u in self._host_of}
        loads: dict[str, GpuLoad] = {u: self._idle_load(u) for u in self._host_of}
        caps: dict[str, float | None] = {u: None for u in self._host_of}
        now, nxt, done, decisions, busy_s, peak_w, peak_limits_w = 0.0, 0, 0, 0, 0.0, 0.0, 0.0
        completions: list[tuple[float, str]] = []
        checks: list[tuple[float, str]] = []  # early-epoch checks of shared placements (undo_on_violation)
        undo = bool(getattr(self.policy, "undo_on_violation", False))
        self._gpu_jobs, self._running = gpu_jobs, running
        # a deterministic policy answers the same on the same machine: retry the queue head only after a change
        blocked = False
        while nxt < len(arrivals) or queue or running:
            t_arrival = arrivals[nxt].arrival_s if nxt < len(arrivals) else math.inf
            t_done = self._next_completion(completions, running, now)
            t_check = checks[0][0] if checks else math.inf
            t_held = self._held_until(queue, now)
            t = min(t_arrival, t_done, t_check, t_held)
            if t == math.inf:  # waiting jobs that no policy will ever place
                for job in queue:
                    outcomes[job.id].rejected = "never placed"
                break
            dt = t - now
            if dt > 0:
                busy_s += dt * sum(1 for jobs in gpu_jobs.values() if jobs)
                peak_w = max(peak_w, sum(load.power_w for load in loads.values()))
                peak_limits_w = max(peak_limits_w, self._limit_sum_w(gpu_jobs, caps))
                for host, meter in meters.items():
                    meter.add(dt, [loads[u] for u in self.graph.hosts[host].gpus])
                for r in running.values():
                    r.remaining_s -= dt * r.speed
            now = t
            changed: set[str] = set()
            for jid in [j for j, r in running.items() if r.remaining_s <= _EPS_S + 1e-9 * r.job.work_s]:
                r = running.pop(jid)
                r.outcome.end_s = now
                del self.graph.jobs[jid]
                for u in r.gpus:
                    gpu_jobs[u].remove(jid)
                    changed.add(u)
                done += 1
                # its history learns the run: its wall time and the steps it marked
                self.lengths.ended(r.job, now - r.outcome.start_s, steps_of(r.job.work_s))
            while checks and checks[0][0] <= now:
                _, jid = heapq.heappop(checks)
                r = running.get(jid)
                oom = jid in self._oom
                self._oom.discard(jid)
                if r is not None and (oom or r.speed < 1.0 / (1.0 + r.job.allowed_slowdown_pct / 100.0)):
                    # the early-epoch check: the shared placement breaks the job's bound, so undo it and
                    # queue the job again, at the head, for GPUs of its own (progress is kept)
                    del running[jid], self.graph.jobs[jid]
                    for u in r.gpus:
                        gpu_jobs[u].remove(jid)
                        changed.add(u)
                    remaining = replace(r.job, work_s=max(r.remaining_s if not oom else r.job.work_s, _EPS_S))
                    if oom and self.world is not None:
                        self.world.oom_failures += 1
                    self._exclusive_only.add(jid)
                    self._resume[jid] = r.outcome.start_s
                    queue.appendleft(remaining)
                    r.outcome.undone = True
            if changed:  # jobs left (or failed): a power budget gives their watts back to the running jobs
                self._rebalance(changed)
            while nxt < len(arrivals) and arrivals[nxt].arrival_s <= now:
                queue.append(arrivals[nxt])
                nxt += 1
            if changed or t_held <= now:  # a hold's expected time came: the launcher's next try would see it
                blocked = False
                self._unplaced.clear()
                # the machine answers first (freed GPUs back to their default limit, memory and power): the
                # policy must see the GPUs as they are now, as the launcher does after a reconcile
                self._refresh(changed, gpu_jobs, running, loads, caps)
            while queue:
                if blocked:  # the head waits: a job behind it may start if it keeps the head's reservation
                    head, placed, tries = self._backfill(queue, now)
                    decisions += tries
                    if head is None:
                        break
                else:
                    head = queue[0]
                    placed = self._place(head, now, len(queue) - 1)
                    decisions += 1
                if placed is None:
                    blocked = True
                    if not running:
                        queue.popleft()  # an empty machine (as it is now) cannot take it: it never will
                        outcomes[head.id].rejected = "does not fit the machine"
                        logger.warning("job %s (%d GPUs) can never be placed; dropped", head.id, head.nproc)
                        blocked = False
                    continue
                if head is queue[0]:
                    queue.popleft()
                else:
                    queue.remove(head)
                host, decision = placed
                self.placements += 1
                if (decision.predicted or {}).get("learned"):
                    self.learned_decisions += 1
                out = outcomes[head.id]
                out.start_s = self._resume.pop(head.id, now)
                out.late_s = late_by(self._promised.pop(head.id, []), now)
                out.backfilled = "backfill" in (decision.predicted or {})
                if out.backfilled:
                    self._promised.setdefault(queue[0].id, []).append(decision.predicted["backfill"]["reservation_at"])
                out.gpus, out.caps_w = decision.gpus, dict(decision.power_caps_w)
                out.shared = out.shared or any(gpu_jobs[u] for u in decision.gpus)
                promised = (decision.predicted or {}).get("contract")
                if promised is not None:
                    out.contract_deadline_s = now + promised["deadline_s"]
                running[head.id] = _Running(head, out, host, decision.gpus, head.work_s,
                                            link=self._link_factor(head, host, decision.gpus))
                if undo and any(gpu_jobs[u] for u in decision.gpus):
                    heapq.heappush(checks, (now + self.early_check_fraction * head.work_s, head.id))
                for u in decision.gpus:
                    gpu_jobs[u].append(head.id)
                    changed.add(u)
                self._ask_budget(head.id)
                touched = set(decision.gpus)
                settled_under_budget = False
                if self.world is not None:
                    changed_caps, settled_under_budget = self._world_start(head, out, decision, gpu_jobs, checks, now)
                    touched |= changed_caps
                touched |= self._follow_budget()  # the newcomer's caps, and the running jobs' under new ceilings
                if settled_under_budget:  # its closed loop's cap as the budget holds it
                    held = [self.graph.jobs[head.id].power_caps_w.get(u) for u in decision.gpus]
                    self._record_coverage(head, decision, min((w for w in held if w is not None), default=None))
                changed |= touched
                # later heads of the queue see this placement too (and the caps it changed)
                self._refresh(touched, gpu_jobs, running, loads, caps)
            if self.lift_caps_waiting is not None and self.rules.power_max_total_w is None:
                lifted = len(queue) >= self.lift_caps_waiting  # who waits once the policy has placed what it could
                if lifted != self._lifted:  # every running job's GPUs go uncapped, or back to their caps
                    self._lifted = lifted
                    busy = {u for u, jobs in gpu_jobs.items() if jobs}
                    self._refresh(busy, gpu_jobs, running, loads, caps)
                    changed |= busy
            if self.rules.wait_weight > 0 and self.rules.power_max_total_w is None:
                weighed = self._weigh_queue(len(queue))
                if weighed:
                    self._refresh(weighed, gpu_jobs, running, loads, caps)
                    changed |= weighed
            if changed:
                completions = [(now + r.remaining_s / r.speed, jid) for jid, r in running.items() if r.speed > 0]
                heapq.heapify(completions)
            if progress is not None:
                progress(done, len(arrivals))
        energy = _merge([m.report() for m in meters.values()])
        return SimResult(trace.name, self.policy.name, tuple(outcomes[j.id] for j in arrivals), energy,
                         now, busy_s, len(self._host_of), decisions, self.placements, self.learned_decisions,
                         peak_w, peak_limits_w)

    def _weigh_queue(self, waiting: int) -> set[str]:
        """Caps that weigh the queue (``[energy] wait_weight``): each running job whose closed loop runs (alone on its
        GPUs, in the measured world) moves to the cap its loop chooses with the jobs waiting now counted
        (:meth:`~ecolaunch.sim.measured.MeasuredWorld.loop_cap`, :func:`~ecolaunch.jobmodel.capchoice.queue_eta`), never
        below its own, and back to its own once nobody waits; as the launcher's loop does at its next look. Returns the
        GPUs whose cap changed."""
        changed: set[str] = set()
        if self.world is None or not self.closed_loop or self.omniscient:
            return changed
        for jid, r in self._running.items():
            if jid not in self._own_caps:
                continue  # no closed loop (shared, or no curve to follow)
            host = self.graph.hosts[r.host]
            share = queue_share(waiting, len(r.gpus), len(host.gpus))
            if self._weighed.get(jid) == share:
                continue
            self._weighed[jid] = share
            own = self._own_caps[jid]
            cap = own
            if share > 0:
                board = self.models[r.gpus[0]].name
                lifted = self.world.loop_cap(r.job.user, r.job.kind, self.rules, [host.gpus[u] for u in r.gpus],
                                             r.job.allowed_slowdown_pct, board, waiting=share)
                cap = None if own is None or lifted is None else max(own, lifted)
            rec = self.graph.jobs[jid]
            want = {u: cap for u in r.gpus} if cap is not None else {}
            if rec.power_caps_w != want:
                rec.power_caps_w = want
                changed |= set(r.gpus)
        return changed

    def _held_until(self, queue: deque[TraceJob], now: float) -> float:
        """When the earliest job of the queue that holds out for a best-linked set expects it
        (:class:`~ecolaunch.policy.linkwait.LinkWait`): then the machine is looked at again even if nothing changed,
        as the waiting launcher's next try would (the set's job may have run past its expected end); inf: none."""
        holds = getattr(self.policy, "holds", None)
        if not holds:
            return math.inf
        waiting = {j.id for j in queue}
        return min((h.retry_at for jid, h in holds.items() if jid in waiting and h.retry_at > now), default=math.inf)

    def _backfill(self, queue: deque[TraceJob], now: float) -> tuple[TraceJob | None, tuple[str, Decision] | None,
                                                                       int]:
        """The first job behind the blocked head that starts now by EASY backfill (:func:`place_behind`, as its
        launcher would try), with its host and decision, and the tries it took; (None, None, tries) when none does. A
        job that could not start is not tried again until the machine changes. The running jobs' progress is written
        first, as their launchers' heartbeats would have it."""
        if not self.backfill or len(queue) < 2:
            return None, None, 0
        self._progress(now)
        tries = 0
        for job in list(queue)[1:]:
            if job.id in self._unplaced:
                continue
            tries += 1
            placed = self._place(job, now, len(queue) - 1, head=queue[0])
            if placed is not None:
                return job, placed, tries
            self._unplaced.add(job.id)
        return None, None, tries

    # --- placement -------------------------------------------------------------------------------
    def _place(self, job: TraceJob, now: float, behind: int = 0, head: TraceJob | None = None
               ) -> tuple[str, Decision] | None:
        """Place the queue head as its launcher would (:func:`~ecolaunch.policy.place.place`), queued on each host in
        turn, the one with the most idle GPUs first; the host and the decision booked, or None (the job leaves the
        graph). ``behind``: the jobs waiting behind it (caps that weigh the queue count them); ``head``: the job is
        not the head but waits behind ``head``, and starts only by backfill (:func:`place_behind`)."""
        hosts = sorted(self.graph.hosts.values(),
                       key=lambda h: (-sum(1 for u in h.gpus if not self._gpu_jobs[u]), h.name))
        rules = self.rules
        if job.id in self._exclusive_only:
            rules = replace(rules, allow_colocation=False)
        profile = self._request_profile(job)
        known: dict = {}
        if self.share_if_sooner:
            self._progress(now)
            known = {"expected_s": job.work_s, "expected_iterations": steps_of(job.work_s)}
        else:  # what the job's request knows of its length, as its launcher's history or its declaration says
            known = dict(self.lengths.known(job, profile))
        for host in hosts:
            request = JobRequest(
                id=job.id, user=job.user, host=host.name, nproc=job.nproc,
                memory_mib=profile.memory_mib if profile else None, allowed_slowdown_pct=job.allowed_slowdown_pct,
                profile=profile, share_if_sooner=self.share_if_sooner, decided_at=now,
                expected_s=known.get("expected_s"),
                waiting_share=queue_share(behind, job.nproc, len(host.gpus)),
            )
            self.graph.jobs[job.id] = Job.queued(
                job.id, user=job.user, host=host.name, nproc=job.nproc, seq=0, submitted_at=job.arrival_s,
                request={"allowed_slowdown_pct": job.allowed_slowdown_pct, "memory_mib": job.profile.memory_mib,
                         **known},
                name=job.kind or job.id,
            )
            if head is None:
                decision = place(self.graph, request, self.policy, rules, now)
            else:
                decision, _ = place_behind(self.graph, request, self.policy, rules, now, head.id, head.nproc,
                                           self.lengths.margin())
            if decision is not None:
                return host.name, decision
        del self.graph.jobs[job.id]
        return None

    def _progress(self, now: float) -> None:
        """Each running job's progress as its launcher's heartbeat would write it (``Job.progress``): its work in
        steps of a millisecond alone, the steps done and the time one takes at its speed now."""
        for jid, r in self._running.items():
            job = self.graph.jobs.get(jid)
            if job is not None and r.speed > 0:
                done = steps_of(max(0.0, r.job.work_s - r.remaining_s))
                job.progress = JobProgress(at=now, iterations=done, iter_time_s=STEP_S / r.speed)

    # --- the measured world: what policies read, profiling and the closed loop, budgets ------------------
    def _request_profile(self, job: TraceJob) -> Profile | None:
        if self.world is None:
            return job.profile
        if self.omniscient:
            return self.world.true_profile(job.kind, self._board)
        if self._board is None:  # mixed GPU models: the launcher knows no profile before it knows the model
            return None
        own = self.world.request_profile(job.user, job.kind, self._board)
        if own is None and self.colleague_profiles:  # the launcher's first launch: a colleague's, as its own
            return self.world.machine_history_profile(job.user, job.kind, self._board)
        return own

    def _world_start(self, job: TraceJob, out: JobOutcome, decision: Decision, gpu_jobs: dict[str, list[str]],
                     checks: list[tuple[float, str]], now: float) -> tuple[set[str], bool]:
        """A job starts in the measured world: a pair Gavel could not run fails (out of memory) after
        the world's ``oom_after_s``; a first launch is profiled inline; under ecolaunch a job alone on its GPUs ends at the cap
        its profiler and closed loop settle on. Returns the GPUs whose cap changed, and whether its loop settled
        under a power budget (its cap is then the budget's rule's, set by the caller's follow, which records its
        coverage)."""
        world = self.world
        for u in decision.gpus:
            if not world.feasible([self.graph.jobs[j].name for j in gpu_jobs[u]], self.models[u].name):
                self._oom.add(job.id)
                heapq.heappush(checks, (now + world.oom_after_s, job.id))
                break
        board = self.models[decision.gpus[0]].name  # the model its profile is of (a job's GPUs: one model, or not)
        out.reference_speed = min(world.speed_factor(job.kind, self.models[u].name) for u in decision.gpus)
        if self.omniscient:
            return set(), False
        first = world.is_first(job.user, job.kind, board)
        adopted = first and self.colleague_profiles and world.adopt_colleague(job.user, job.kind, board)
        if adopted:
            first = False  # started from a colleague's profile (the job's request already carried it)
        elif first:
            self.graph.jobs[job.id].profile = world.profile_inline(job.user, job.kind, board)
        else:
            world.note_repeat(job.user, job.kind, board)
        if not self.closed_loop or any(len(gpu_jobs[u]) > 1 for u in decision.gpus):
            return set(), False
        host = self.graph.hosts[self._host_of[decision.gpus[0]]]
        gpus = [host.gpus[u] for u in decision.gpus]
        caps = [decision.power_caps_w.get(u) for u in decision.gpus]
        cap = world.settle_cap(job.user, job.kind, caps[0], self.rules, gpus, job.allowed_slowdown_pct, board,
                               first=first, reference=self._reference_allowed(job.id, gpus), borrowed=adopted)
        self._own_caps[job.id] = cap
        self._weighed.pop(job.id, None)
        ask = self._asks.get(job.id)
        if ask is not None:
            # under a power budget the loop's own cap is the job's ask, held under its ceilings by the budget's rule
            ask.asks.update({u: cap for u in decision.gpus})
            return set(), True
        self._record_coverage(job, decision, cap)
        if cap == caps[0]:
            return set(), False
        self.graph.jobs[job.id].power_caps_w = {u: cap for u in decision.gpus} if cap is not None else {}
        return set(decision.gpus), False

    def _reference_allowed(self, jid: str, gpus: Sequence[GpuNode]) -> bool:
        """Whether the job's closed loop may take its cap to the top for a reference window, as the launcher's
        :class:`~ecolaunch.caps.control.ClosedLoop` decides it: no power budget's ceiling (the lowest of its GPUs',
        :func:`~ecolaunch.caps.limits.budget_ceilings`, read once at its start: the world plays the loop as one
        settle) holds the cap below the job's top cap."""
        if jid not in self._asks:
            return True
        bounds = job_cap_bounds(self.rules, gpus)
        ceilings = budget_ceilings(self.graph, self.rules, priors=self._priors)
        held = min((ceilings[g.uuid] for g in gpus if g.uuid in ceilings), default=None)
        return bounds is None or reaches_top(held, bounds[1])

    def _record_coverage(self, job: TraceJob, decision: Decision, cap: float | None) -> None:
        """Was the job's curve right at the cap its closed loop runs at, margin included? (the world's coverage)"""
        host = self.graph.hosts[self._host_of[decision.gpus[0]]]
        bounds = job_cap_bounds(self.rules, [host.gpus[u] for u in decision.gpus])
        if cap is not None and bounds is not None:
            self.world.record_coverage(job.user, job.kind, cap, bounds, self.models[decision.gpus[0]].name)

    def _ask_budget(self, jid: str) -> None:
        """Under a power budget, what a job just placed asks of it, read as its launcher's
        :class:`~ecolaunch.caps.job.JobCaps` reads it from the placement: its asks, its floor, each GPU's limit
        as found."""
        if self.rules.power_max_total_w is None:
            return
        rec = self.graph.jobs[jid]
        nodes = self.graph.hosts[rec.host].gpus
        self._asks[jid] = _BudgetAsk(asked_caps(rec), job_floor_w(rec, [nodes[u] for u in rec.gpus], self.rules),
                                     {u: nodes[u].power_limit_w for u in rec.gpus})

    def _rebalance(self, changed: set[str]) -> None:
        """After departures, a budget's caps go back up (the policy's ``rebalance``, recorded as the launcher's
        release records it) and every running job follows its new ceilings."""
        if self.rules.power_max_total_w is None:
            return
        rebalance = getattr(self.policy, "rebalance", None)
        if rebalance is not None:
            self.graph.budget_caps_w = dict(rebalance(self.graph, self.rules) or {})
        changed |= self._follow_budget()

    def _follow_budget(self) -> set[str]:
        """Every running job's caps under the power budget, by the launcher's own rule
        (:func:`~ecolaunch.caps.limits.wish_under_ceiling`, as ``JobCaps`` follows it at each look): the lower of
        what the job asks (its closed loop's own cap once it settled) and its GPUs' ceilings now, so a ceiling that
        rises gives a job back at most what it asked. Returns the GPUs whose cap changed."""
        if self.rules.power_max_total_w is None:
            return set()
        ceilings = budget_ceilings(self.graph, self.rules, priors=self._priors)
        changed: set[str] = set()
        for jid, ask in list(self._asks.items()):
            rec = self.graph.jobs.get(jid)
            if rec is None:
                del self._asks[jid]  # left, or undone (asked again when placed again)
                continue
            nodes = self.graph.hosts[rec.host].gpus
            want: dict[str, float] = {}
            for u in rec.gpus:
                wish = wish_under_ceiling(ask.asks.get(u), ceilings.get(u), floor_w=ask.floor_w,
                                          found_w=ask.found_w.get(u), rules=self.rules, gpu=nodes[u])
                if wish is not None:
                    want[u] = float(wish)
            if rec.power_caps_w != want:
                rec.power_caps_w = want
                changed |= set(rec.gpus)
        return changed

    # --- the machine's response ------------------------------------------------------------------
    def _refresh(self, changed: set[str], gpu_jobs: dict[str, list[str]], running: dict[str, _Running],
                 loads: dict[str, GpuLoad], caps: dict[str, float | None]) -> None:
        touched_jobs: set[str] = set()
        speeds: dict[tuple[str, str], float] = {}
        for u in changed:
            jobs = gpu_jobs[u]
            node = self.graph.hosts[self._host_of[u]].gpus[u]
            model = self.models[u]
            # a job without a cap has no preference; among those that want one, the least restrictive wins
            wanted = [w for w in (self.graph.jobs[j].power_caps_w.get(u) for j in jobs) if w is not None]
            cap = max(wanted) if wanted and not self._lifted else None
            caps[u] = cap
            node.power_limit_w = cap if cap is not None else model.power_limit_default_w
            if not jobs:
                loads[u] = self._idle_load(u)
                node.memory_used_mib, node.util_gpu_pct, node.util_mem_pct = 0, 0.0, 0.0
                node.power_w = loads[u].power_w
                continue
            if self.world is not None:
                throughputs, power_w, floor_w, dyn = self.world.gpu_load([running[j].job.kind for j in jobs], cap,
                                                                         model.name)
                # work is counted at the reference board's solo speed: a board's own speed scales it
                throughputs = [x * self.world.speed_factor(running[j].job.kind, model.name)
                               for j, x in zip(jobs, throughputs)]
                loads[u] = GpuLoad(power_w, floor_w, dict(zip(jobs, dyn)))
                node.power_w = power_w
                seen = [self.graph.jobs[j].profile or Profile() for j in jobs]
                node.memory_used_mib = sum(int(p.memory_mib or 0) for p in seen)
                node.util_gpu_pct = min(100.0, sum(float(p.sm_util_pct or 100.0) for p in seen))
                node.util_mem_pct = 0.0
                for j, x in zip(jobs, throughputs):
                    speeds[(u, j)] = x
                    touched_jobs.add(j)
                continue
            profiles = [running[j].job.profile for j in jobs]
            sg = shared_gpu(profiles, model, cap)
            loads[u] = GpuLoad(sg.power_w, sg.floor_power_w, dict(zip(jobs, sg.job_dynamic_w)))
            node.power_w = sg.power_w
            node.memory_used_mib = sum(p.memory_mib or 0 for p in profiles)
            node.util_gpu_pct = min(100.0, sum(p.sm_util_pct or 100.0 for p in profiles))
            node.util_mem_pct = min(100.0, sum(p.mem_bw_util_pct or 0.0 for p in profiles))
            for j, x in zip(jobs, sg.throughputs):
                speeds[(u, j)] = x
                touched_jobs.add(j)
        for j in touched_jobs:
            r = running[j]
            per_gpu = [speeds.get((u, j)) for u in r.gpus]
            if any(s is None for s in per_gpu):  # a GPU of the job did not change: recompute it too
                per_gpu = [speeds.get((u, j)) or self._speed_on(u, j, gpu_jobs, running, caps) for u in r.gpus]
            r.speed = max(min(per_gpu) * r.link, 1e-9)

    def _limit_sum_w(self, gpu_jobs: dict[str, list[str]], caps: dict[str, float | None]) -> float:
        """The GPUs' power limits added up, a GPU without a job at its minimum limit (a power budget's count)."""
        total = 0.0
        for u, jobs in gpu_jobs.items():
            m = self.models[u]
            total += (caps[u] if caps[u] is not None else m.power_limit_default_w) if jobs else m.power_limit_min_w
        return total

    def _link_factor(self, job: TraceJob, host: str, gpus: Sequence[str]) -> float:
        """The measured world's share of speed a multi-GPU job keeps on ``gpus``: less than 1 when they are linked
        worse than the best set of their size on the host (1.0 in the model world)."""
        if self.world is None or len(gpus) < 2:
            return 1.0

        h = self.graph.hosts[host]
        return self.world.link_factor(job.kind, len(gpus), worst_link(h, list(gpus)) <= best_link(h, len(gpus)))

    def _speed_on(self, u: str, job_id: str, gpu_jobs, running, caps) -> float:
        jobs = gpu_jobs[u]
        if self.world is not None:
            kind = running[job_id].job.kind
            x = self.world.gpu_load([running[j].job.kind for j in jobs], caps[u], self.models[u].name)[0]
            return x[jobs.index(job_id)] * self.world.speed_factor(kind, self.models[u].name)
        sg = shared_gpu([running[j].job.profile for j in jobs], self.models[u], caps[u])
        return sg.throughputs[jobs.index(job_id)]

    def _idle_load(self, uuid: str) -> GpuLoad:
        model = self.models[uuid]
        return GpuLoad(float(model.idle_power_w), float(model.idle_power_w), {})

    @staticmethod
    def _next_completion(completions: list[tuple[float, str]], running: dict[str, _Running], now: float) -> float:
        while completions and completions[0][1] not in running:
            heapq.heappop(completions)
        return max(now, completions[0][0]) if completions else math.inf


def _with_cap_points(job: TraceJob, gpu: GpuModel) -> TraceJob:
    """The job with the cap points ecolaunch's profiler would measure on ``gpu`` (the simulator's true model)."""
    p = job.profile
    if p.cap_points:
        return job
    model = default_power_model()
    power_w = p.power_w
    if power_w is None:
        floor_w, _ = model.active_idle_power_w(gpu)
        power_w = floor_w + p.demand * (gpu.power_limit_max_w - floor_w)
    t0 = p.iter_time_s or 1.0
    points = []
    for cap in profile_caps(gpu.power_limit_min_w, gpu.power_limit_max_w, power_w):
        pred = model.predict(power_w, cap, gpu)
        points.append(CapPoint(cap, t0 * pred.time_ratio, pred.power_w))
    # profiling measures the uncapped power too (the point at the maximum cap)
    return replace(job, profile=replace(p, cap_points=tuple(points), power_w=p.power_w or points[0].power_w))


def _merge(reports: Sequence[EnergyReport]) -> EnergyReport:
    jobs: dict[str, float] = {}
    for r in reports:
        for j, e in r.job_energy_j.items():
            jobs[j] = jobs.get(j, 0.0) + e
    return EnergyReport(
        node_energy_j=sum(r.node_energy_j for r in reports),
        gpu_energy_j=sum(r.gpu_energy_j for r in reports),
        job_energy_j=jobs,
        unattributed_energy_j=sum(r.unattributed_energy_j for r in reports),
        duration_s=max((r.duration_s for r in reports), default=0.0),
        gpu_idle_energy_j=sum(r.gpu_idle_energy_j for r in reports),
    )


def default_host_static_w() -> float:
    """A host's power besides its GPUs, from EaCO's server: the fitted node static power (host + 8 idle V100s,
    :func:`ecolaunch.sim.node.reproduce_eaco`) minus the 8 GPUs' idle power from the catalogue (an assumption,
    see ``ecolaunch/devices/catalogue.py``). Applied to every simulated host, workstations included: an
    assumption that they carry the same class of CPUs (2x Xeon Gold 6240). Fitted with the one-GPU prior
    (``sync_wait_s=0``), the prior the simulator predicts with (it does not pass job GPU counts)."""
    return reproduce_eaco(sync_wait_s=0.0).static_power_w - 8 * lookup("V100-SXM2-32GB").idle_power_w


__all__ = ["JobOutcome", "Lengths", "SimResult", "Simulation", "Trace", "TraceJob", "default_host_static_w"]
