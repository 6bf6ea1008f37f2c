"""Why a job is not placed now: :func:`why_waiting`, a reason code (``state.graph.WaitReason``, Slurm's words) and
the particulars in words.

The waiting launcher asks at each try that leaves its job queued (``launch.session.Session.try_place``);
``--dry-run --explain`` asks for a job that would wait. What does not live here: the decision (``policy.place``),
the order of the queue (``StateGraph.queued_jobs``), a request that can never fit (``launch.session``). The reasons
and their order: docs/queue.md#why-a-job-waits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ecolaunch.admin.rules import Rules, user_gpu_limit
from ecolaunch.jobmodel.capcurve import default_prior
from ecolaunch.policy import contract
from ecolaunch.policy.admission import refusal
from ecolaunch.policy.backfill import expected_starts
from ecolaunch.policy.base import JobRequest, Policy
from ecolaunch.policy.budgeted import over_budget
from ecolaunch.policy.candidates import eligible_gpus, gpus_held_by, is_idle
from ecolaunch.state.graph import MAX_DETAIL_CHARS, GpuNode, StateGraph, WaitReason
from ecolaunch.state.queue import waits_beyond_gpus

__all__ = ["Waiting", "bounded", "why_waiting"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job that waits: its 1-based position in its host's queue (where it would join, for a job not queued),
    why (:class:`~ecolaunch.state.graph.WaitReason`) and the particulars in words."""

    position: int
    reason: WaitReason
    detail: str
    #: when it is expected to start (unix seconds; :func:`~ecolaunch.policy.backfill.expected_starts`), None: unknown
    starts_at: float | None = None

    def text(self) -> str:
        return f"{self.reason.value} ({self.detail})"

    def starts_in(self, now: float) -> float | None:
        """Seconds from ``now`` until it is expected to start (0 when that is past), None when unknown."""
        return None if self.starts_at is None else max(0.0, self.starts_at - now)


def why_waiting(state: StateGraph, request: JobRequest, policy: Policy, rules: Rules) -> Waiting:
    """Why ``request``'s job (queued in ``state`` under ``request.id``, or not queued yet) is not placed now, and when
    it is expected to start."""
    queue = state.queued_jobs(request.host)
    ids = [j.id for j in queue]
    ahead = queue[: ids.index(request.id)] if request.id in ids else queue
    position = len(ahead) + 1
    now = request.decided_at if request.decided_at is not None else time.time()
    then = [] if request.id in ids else [(request.id, request.nproc, request.expected_s)]
    starts_at = expected_starts(state, request.host, now, then).get(request.id)
    if ahead:
        head = ahead[0]
        waits = f", which waits for {head.wait_reason.value}" if head.wait_reason is not None else ""
        return Waiting(position, WaitReason.PRIORITY,
                       bounded(f"{len(ahead)} job(s) ahead in this host's queue; the first is {head.id} "
                               f"({head.user}: {head.name}){waits}"), starts_at)
    reason, detail, held_until = _unplaced(state, request, policy, rules)
    if held_until is not None:  # it holds out for a best-linked set (policy.linkwait): it starts by then
        starts_at = held_until
    elif starts_at is not None and waits_beyond_gpus(reason, starts_at, now):
        starts_at = None
    return Waiting(position, reason, bounded(detail), starts_at)


def _unplaced(state: StateGraph, request: JobRequest, policy: Policy,
              rules: Rules) -> tuple[WaitReason, str, float | None]:
    """Why the job waits, the particulars, and by when a job that holds out for a best-linked set starts (None: it
    does not hold out; :attr:`~ecolaunch.policy.linkwait.LinkHold.retry_at`)."""
    early = _before_policy(state, request, rules)
    return (*early, None) if early is not None else _refused(state, request, policy, rules)


def _before_policy(state: StateGraph, request: JobRequest, rules: Rules) -> tuple[WaitReason, str] | None:
    host = state.hosts.get(request.host)
    if host is None:
        return WaitReason.RESOURCES, f"host {request.host!r} has no GPUs in the state yet"
    limit = user_gpu_limit(rules, request.user)
    held = gpus_held_by(state, request.user, request.host)
    if limit is not None and held + request.nproc > limit:
        return WaitReason.USER_LIMIT, (f"user {request.user} holds {held} of the {limit} GPU(s) [users] max_gpus "
                                       f"allows; the job needs {request.nproc}")
    eligible = eligible_gpus(state, request, rules)
    free = [g for g in eligible if is_idle(state, g)]
    if len(free) < request.nproc:
        mine = {g.uuid for g in eligible}
        allocation = set(request.allowed_gpus) if request.allowed_gpus is not None else None
        reserved = [g for g in sorted(host.gpus.values(), key=lambda g: g.index) if g.uuid not in mine
                    and is_idle(state, g) and (allocation is None or g.uuid in allocation)]
        if len(free) + len(reserved) >= request.nproc:
            return WaitReason.RESERVATION, (f"GPU {_indexes(reserved)} free but reserved for others ([reserve]); "
                                            f"{len(free)} of the {request.nproc} GPU(s) the job needs are free to "
                                            f"user {request.user}")
        return WaitReason.RESOURCES, (f"{len(free)} of the {request.nproc} GPU(s) the job needs are free; "
                                      + _busy(state, [g for g in eligible if not is_idle(state, g)])
                                      + _contract_note(state, request, rules))
    need = request.memory_mib or 0
    roomy = [g for g in free if g.memory_free_mib >= need]
    if len(roomy) < request.nproc:
        short = ", ".join(f"GPU {g.index} {g.memory_free_mib}" for g in free if g.memory_free_mib < need)
        return WaitReason.MEMORY, (f"the job needs {need} MiB per GPU; free MiB on the free GPUs too small for it: "
                                   f"{short}")
    return None


def _refused(state: StateGraph, request: JobRequest, policy: Policy,
             rules: Rules) -> tuple[WaitReason, str, float | None]:
    """Enough free GPUs: what the policy, the power budget or the admin rules said."""
    inner = getattr(policy, "inner", policy)  # the budget's wrapper (policy.budgeted) is judged on its own below
    hold = getattr(inner, "hold", None)  # the link rule (policy.linkwait.LinkWait) says whether the job holds out
    decision, held = hold(state, request, rules) if hold is not None else (inner.decide(state, request, rules), None)
    if held is not None:
        return WaitReason.RESOURCES, held.why, held.retry_at
    if decision is None:
        return WaitReason.RESOURCES, (f"policy {policy.name} finds no placement on the free GPUs that keeps every "
                                      "job within its slowdown bound"), None
    budget = over_budget(state, request, rules, decision, getattr(policy, "priors", default_prior))
    if budget is not None:
        return WaitReason.POWER_BUDGET, budget, None
    why = refusal(state, request, rules, decision)
    if why is not None:
        return WaitReason.RESOURCES, f"the admin rules refuse policy {policy.name}'s choice: {why}", None
    return WaitReason.RESOURCES, "the GPUs were taken by another launch meanwhile; trying again", None


def _contract_note(state: StateGraph, request: JobRequest, rules: Rules) -> str:
    """What the sharing contract (``--share-if-sooner``) said, for a job that asked for it: why it cannot judge, or
    that no shared GPU finishes the job sooner than waiting."""
    if not request.share_if_sooner:
        return ""
    terms = contract.terms(state, request, rules)
    if not terms.known:
        return "; " + terms.why
    return (f"; no shared GPU finishes it sooner than waiting (about {terms.waiting_done_s:.0f} s) with every running "
            "job within its bound")


def bounded(detail: str) -> str:
    """At most what a job file may hold (``MAX_DETAIL_CHARS``: names come from other users' files, GPUs may be many)."""
    return detail if len(detail) <= MAX_DETAIL_CHARS else detail[: MAX_DETAIL_CHARS - 3] + "..."


def _busy(state: StateGraph, gpus: list[GpuNode]) -> str:
    """``GPU 0,1 run job 3f2a9c1e (alice: train.py); GPU 2 runs processes outside ecolaunch (pid 4242)``"""
    holders: dict[str, list[GpuNode]] = {}
    for gpu in gpus:
        who = [f"job {j.id} ({j.user}: {j.name})" for j in state.jobs_on(gpu.uuid)]
        if gpu.foreign_pids:
            who.append("processes outside ecolaunch (pid " + ", ".join(map(str, gpu.foreign_pids)) + ")")
        holders.setdefault(" and ".join(who), []).append(gpu)
    return "; ".join(f"GPU {_indexes(on)} run{'s' if len(on) == 1 else ''} {who}" for who, on in holders.items())


def _indexes(gpus: list[GpuNode]) -> str:
    return ",".join(str(g.index) for g in gpus)
