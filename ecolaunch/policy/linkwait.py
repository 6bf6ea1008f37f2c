"""Waiting for a best-linked GPU set: a multi-GPU job whose best free set is linked worse than the best set of its
size on the host waits for a best-linked one when that set is expected free soon enough.

A synchronous job runs at the pace of its slowest link, and no predictor here knows by how much a workstation's
slower link costs (Gavel measured jobs spread across servers losing anything from nothing to most of their speed), so
a split set can break a job's bound that nothing predicted. When the running jobs' expected ends (``state.queue.free_times``) free a
best-linked set within a share of the job's own expected length (:data:`LINK_WAIT_SHARE`), counted from its first
try that refused a split set, the job waits for that set (a set a running job of unknown end holds: until that wait
is over); otherwise (no set expected in time, its own length unknown, the wait over) it takes the split set now.

What lives here: :class:`LinkHold` and :func:`link_hold` (the rule), :class:`LinkWait` (any policy with the rule),
which the launcher (``launch.session.Session``, through ``policy.place``) and the simulator (``sim.engine``) both run,
and which ``policy.waiting`` asks why a job waits. What does not: choosing the GPUs (the inner policy), the order of
the queue. The rule and what it buys: docs/queue.md#waiting-for-a-best-linked-set.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from ecolaunch.admin.rules import Rules
from ecolaunch.policy.base import Decision, JobRequest, Policy
from ecolaunch.policy.candidates import eligible_gpus, worst_link
from ecolaunch.state.graph import StateGraph
from ecolaunch.state.queue import free_times

__all__ = ["LINK_WAIT_SHARE", "LinkHold", "LinkWait", "link_hold"]

#: the longest a job holds out for a best-linked set, as a share of its expected length (None: its slowdown bound's
#: share): about what the worst split Gavel measured of a 2-GPU job costs that job itself, rounded up (the data:
#: ``benchmarks/link_wait.py --split-speeds``; the waits swept: docs/benchmarks.md#waiting-for-a-best-linked-set-issue-39)
LINK_WAIT_SHARE: float | None = 4.0
#: the longest a job whose length is unknown holds out (seconds): it never waits blind
LINK_WAIT_UNKNOWN_S = 0.0
#: above this many GPU sets of the job's size the rule does not look for a best-linked one (it never waits)
MAX_SETS = 2000


@dataclass(frozen=True, slots=True)
class LinkHold:
    """A job that holds out for a best-linked set: the set, when it is expected free (unix seconds; None: a GPU of
    it has no expected end), until when the job holds out at most, and why, in words."""

    gpus: tuple[str, ...]
    at: float | None
    until: float
    why: str
    #: when the job first held out (its wait is counted from then)
    since: float = 0.0

    @property
    def retry_at(self) -> float:
        """When the verdict may change with nothing else changing: the set's expected time (its job may run past
        it, and then nothing says when it ends) or the end of the wait, whichever comes first."""
        return self.until if self.at is None else min(self.at, self.until)


def link_hold(state: StateGraph, job: JobRequest, rules: Rules, decision: Decision | None,
              share: float | None = LINK_WAIT_SHARE, unknown_s: float = LINK_WAIT_UNKNOWN_S,
              since: float | None = None) -> LinkHold | None:
    """Whether ``job``, offered ``decision`` (its best free set as the policy chose it), waits for a better-linked set
    instead: the best-linked set of its size among the GPUs it may use that the running jobs' expected ends free
    earliest (a GPU whose end is unknown: last), as long as the job has held out, since ``since`` (None: now), less
    than its wait (``share`` of its expected length, None: its slowdown bound's share; ``unknown_s`` when its length
    is unknown) and the set is not expected free only after that. None: it takes ``decision`` (one GPU, elastic,
    already best-linked, no wait left)."""
    if decision is None or job.elastic or len(decision.gpus) < 2 or job.decided_at is None:
        return None
    host = state.hosts.get(job.host)
    if host is None:
        return None
    now, n = job.decided_at, len(decision.gpus)
    since = now if since is None else since
    wait_s = unknown_s if job.expected_s is None else job.expected_s * (
        job.allowed_slowdown_pct / 100.0 if share is None else share)
    until = since + wait_s
    if until <= now:
        return None
    times, _ = free_times(state, job.host, now)  # a GPU with no expected end (or a foreign process) is absent
    need = job.memory_mib or 0
    gpus = [g for g in eligible_gpus(state, job, rules) if g.memory_total_mib >= need and not g.foreign_pids]
    if len(gpus) < n or math.comb(len(gpus), n) > MAX_SETS:
        return None
    offered = worst_link(host, decision.gpus)
    sets = [(worst_link(host, [g.uuid for g in c]), max(times.get(g.uuid, math.inf) for g in c),
             [g.index for g in c], c) for c in itertools.combinations(gpus, n)]
    best = min(s[0] for s in sets)
    if best >= offered:
        return None
    _, at, indexes, chosen = min((s for s in sets if s[0] == best), key=lambda s: (s[1], s[2]))
    if at <= now or (at < math.inf and at > until):  # free now yet not offered (the policy's reasons), or too late
        return None
    link, split = best.name.replace("_", " ").lower(), offered.name.replace("_", " ").lower()
    expected = ("a running job's end is unknown" if at == math.inf else f"expected free in {at - now:.0f} s")
    limit = (f"{job.allowed_slowdown_pct / 100.0 if share is None else share:.0%} of its expected {job.expected_s:.0f} "
             "s" if job.expected_s is not None else "its length is unknown")
    return LinkHold(tuple(g.uuid for g in chosen), None if at == math.inf else at, until,
                    f"waits for GPU {','.join(map(str, indexes))} (linked by {link}) rather than take GPUs linked by "
                    f"{split}: {expected}; it waits at most {wait_s:.0f} s for it ({limit}), {until - now:.0f} s more",
                    since)


class LinkWait:
    """``inner`` with the link rule (:func:`link_hold`): its decision, or None while the job holds out for a
    best-linked set. ``holds``: the latest hold of each job id (its wait counts from the first; the simulator retries
    at its :attr:`~LinkHold.retry_at`, as the launcher's tries every 0.2 s do by themselves); other attributes are the
    inner policy's. A job's wait ends once a try places it or finds no split set to refuse."""

    def __init__(self, inner: Policy, share: float | None = LINK_WAIT_SHARE,
                 unknown_s: float = LINK_WAIT_UNKNOWN_S) -> None:
        self.inner = inner
        self.name = inner.name
        self.share, self.unknown_s = share, unknown_s
        self.holds: dict[str, LinkHold] = {}

    def __repr__(self) -> str:
        return f"LinkWait({self.inner!r}, share={self.share}, unknown_s={self.unknown_s})"

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.inner, name)

    def hold(self, state: StateGraph, job: JobRequest, rules: Rules) -> tuple[Decision | None, LinkHold | None]:
        """The inner policy's decision and, when the job holds out for a best-linked set instead, the hold."""
        decision = self.inner.decide(state, job, rules)
        before = self.holds.get(job.id)
        return decision, link_hold(state, job, rules, decision, self.share, self.unknown_s,
                                   None if before is None else before.since)

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        decision, held = self.hold(state, job, rules)
        if held is None:
            self.holds.pop(job.id, None)
            return decision
        self.holds[job.id] = held
        return None
