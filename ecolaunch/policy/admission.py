"""The admin rules, enforced once, after any policy has decided: :func:`admit`.

What lives here: :func:`admit` (a decision that breaks a rule is refused, its caps clipped) and
:func:`unadmitted_bookings` (the running bookings the same rules would refuse, judged under the name and groups of
the uid that owns the file: ``state.reconcile.account_name``; ``StateGraph.set_aside`` sets them aside). The user
and groups come from ``runtime.current_user``, never from the environment. What does not: how a policy chooses
(``policy.*``), the cap agent's own checks at apply time (``caps.keeper``), the sharing contract's lift
(``policy.contract``). The rules: docs/queue.md#the-admin-rules-after-every-policy.
"""

from __future__ import annotations

import dataclasses
import logging

from collections.abc import Collection

from ecolaunch.caps.keeper import has_cap_range
from ecolaunch.caps.limits import clip_cap_w
from ecolaunch.admin.rules import Rules, may_use_gpu, user_gpu_limit
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.candidates import user_quota_left
from ecolaunch.state.graph import StateGraph
from ecolaunch.state.reconcile import account_groups
from ecolaunch.validate import is_number

__all__ = ["admit", "refusal", "unadmitted_bookings"]

logger = logging.getLogger(__name__)


def admit(state: StateGraph, job: JobRequest, rules: Rules, decision: Decision | None) -> Decision | None:
    """``decision`` with its caps clipped to the admin rules, or None (the job waits) when it breaks one."""
    if decision is None:
        return None
    why = refusal(state, job, rules, decision)
    if why is not None:
        # INFO, not WARNING: a waiting launcher asks every 0.2 s, and waiting for a per-user limit is normal
        logger.info("policy %s chose GPUs the admin rules forbid for job %s (%s); the job waits", decision.policy,
                    job.id, why)
        return None
    caps = _clipped_caps(state, job, rules, decision)
    return decision if caps == decision.power_caps_w else dataclasses.replace(decision, power_caps_w=caps)


def refusal(state: StateGraph, job: JobRequest, rules: Rules, decision: Decision) -> str | None:
    """The first admin rule ``decision`` breaks, in words, or None."""
    host = state.hosts.get(job.host)
    gpus = list(decision.gpus)
    if host is None:
        return f"host {job.host!r} is not in the state"
    if len(set(gpus)) != len(gpus) or (len(gpus) < job.nproc) or (not job.elastic and len(gpus) != job.nproc):
        return f"{len(gpus)} GPU(s) for a job of {job.nproc}"
    missing = [u for u in gpus if u not in host.gpus]
    if missing:
        return f"{missing[0]} is not a GPU of host {job.host}"
    if job.allowed_gpus is not None:
        outside = [u for u in gpus if u not in job.allowed_gpus]
        if outside:
            return f"GPU {host.gpus[outside[0]].index} is outside the job's allocation"
    for u in gpus:
        gpu = host.gpus[u]
        if not may_use_gpu(rules, job.user, job.groups, u, gpu.index):
            return f"GPU {gpu.index} is reserved and user {job.user} may not use it"
    quota = user_quota_left(state, job, rules)
    if quota is not None and len(gpus) > quota:
        return f"user {job.user} may hold {quota} more GPU(s) ([users] max_gpus), not {len(gpus)}"
    for u in gpus:
        gpu, others = host.gpus[u], state.jobs_on(u)
        if not others:
            continue
        if not rules.allow_colocation:
            return f"GPU {gpu.index} is in use and co-location is disabled"
        if len(others) >= rules.max_jobs_per_gpu:
            return f"GPU {gpu.index} already runs {len(others)} job(s) (max_jobs_per_gpu {rules.max_jobs_per_gpu})"
        if gpu.foreign_pids:
            return f"GPU {gpu.index} runs a process outside ecolaunch"
        if job.memory_mib is not None and gpu.memory_free_mib < job.memory_mib + rules.memory_margin_mib:
            return (f"GPU {gpu.index} has {gpu.memory_free_mib} MiB free, not {job.memory_mib} MiB plus the "
                    f"{rules.memory_margin_mib} MiB margin")
    return None


def unadmitted_bookings(state: StateGraph, host: str, rules: Rules, *, exempt: Collection[str] = ()) -> dict[str, str]:
    """The running jobs of ``host`` that the admin rules would never have admitted (job id -> why), but those in
    ``exempt`` (the caller's own) and root's (a root-written file is the admin's word).

    A booking is refused when it holds a GPU reserved for others, or when it takes its uid past ``[users]
    max_gpus`` (a uid's jobs counted in the order they started; the later ones are refused). The user is the job's
    ``user`` as the store loaded it: the account name of the file's owner.
    """
    node = state.hosts.get(host)
    if node is None:
        return {}
    jobs = sorted((j for j in state.running_jobs() if j.host == host and j.uid != 0 and j.id not in exempt),
                  key=lambda j: (j.started_at or 0.0, j.seq, j.id))
    refused: dict[str, str] = {}
    held: dict[int, int] = {}
    for job in jobs:
        reserved = [node.gpus[u].index for u in job.gpus if u in node.gpus and not may_use_gpu(
            rules, job.user, account_groups(job.uid), u, node.gpus[u].index)]
        if reserved:
            refused[job.id] = f"books GPU {reserved[0]}, which is reserved and user {job.user} may not use"
            continue
        limit = user_gpu_limit(rules, job.user)
        total = held.get(job.uid, 0) + len(job.gpus)
        if limit is not None and total > limit:
            refused[job.id] = f"books {len(job.gpus)} GPU(s), past user {job.user}'s limit of {limit} ([users] max_gpus)"
            continue
        held[job.uid] = total
    return refused


def _clipped_caps(state: StateGraph, job: JobRequest, rules: Rules, decision: Decision) -> dict[str, float | None]:
    host = state.hosts[job.host]
    caps: dict[str, float | None] = {}
    for u in decision.gpus:
        watts = decision.power_caps_w.get(u)
        gpu = host.gpus[u]
        if watts is None or (state.jobs_on(u) and not (is_number(watts) and gpu.power_limit_w is not None
                                                       and watts > gpu.power_limit_w)):
            caps[u] = None  # no cap, or a newcomer's on a GPU someone else already uses that would not lift it
            continue
        if not is_number(watts) or watts <= 0:
            caps[u] = None
            continue
        if not has_cap_range(gpu):
            caps[u] = None  # the board reports no usable range: nothing can be checked, nothing is capped
            continue
        caps[u] = clip_cap_w(rules, gpu, watts)[0]
    return caps
