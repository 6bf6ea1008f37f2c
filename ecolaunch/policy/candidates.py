"""Candidate GPUs and GPU sets for a job: who may use which GPU, which are free, which sets link well.

Shared by every policy so that the admin rules (reservations, per-user limits, memory margins) are applied in
one place.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from ecolaunch.admin.rules import Rules, may_use_gpu, user_gpu_limit
from ecolaunch.devices.backend import LinkKind
from ecolaunch.policy.base import JobRequest
from ecolaunch.state.graph import GpuNode, Host, StateGraph

#: above this many free GPUs, multi-GPU sets are grown greedily instead of enumerated exhaustively
_EXHAUSTIVE_LIMIT = 12


def eligible_gpus(state: StateGraph, job: JobRequest, rules: Rules) -> list[GpuNode]:
    """The GPUs of the job's host that this job may ever use (reservations and allocation applied)."""
    host = state.hosts.get(job.host)
    if host is None:
        return []
    allowed = set(job.allowed_gpus) if job.allowed_gpus is not None else None
    return [
        g
        for g in sorted(host.gpus.values(), key=lambda g: g.index)
        if (allowed is None or g.uuid in allowed) and may_use_gpu(rules, job.user, job.groups, g.uuid, g.index)
    ]


def gpus_held_by(state: StateGraph, user: str, host: str | None = None) -> int:
    """How many GPUs the user's running jobs (on ``host`` when given) hold (a shared GPU counts once per job)."""
    return sum(len(j.gpus) for j in state.running_jobs() if j.user == user and (host is None or j.host == host))


def user_quota_left(state: StateGraph, job: JobRequest, rules: Rules) -> int | None:
    """GPUs the user may still take under the admin's per-user limit (None: no limit)."""
    limit = user_gpu_limit(rules, job.user)
    if limit is None:
        return None
    return max(0, limit - gpus_held_by(state, job.user, job.host))  # each host's policy bounds its own GPUs


def is_idle(state: StateGraph, gpu: GpuNode) -> bool:
    """No ecolaunch job and no foreign process on the GPU."""
    return not state.jobs_on(gpu.uuid) and not gpu.foreign_pids


def best_link(host: Host, n: int) -> LinkKind:
    """The best :func:`worst_link` any ``n`` GPUs of ``host`` have: what a job of that size gets at best there."""
    return min((worst_link(host, c) for c in itertools.combinations(sorted(host.gpus), n)), default=LinkKind.NVLINK)


def worst_link(host: Host, uuids: Sequence[str]) -> LinkKind:
    """The slowest link between any two GPUs of the set (NVLINK for a single GPU)."""
    return max((host.link(a, b) for a, b in itertools.combinations(uuids, 2)), default=LinkKind.NVLINK)


def best_set(
    host: Host,
    gpus: Sequence[GpuNode],
    n: int,
    load: Callable[[GpuNode], tuple],
) -> list[GpuNode] | None:
    """The best ``n`` GPUs out of ``gpus``: fastest worst link first, then least total load, then lowest indices."""
    if n > len(gpus) or n <= 0:
        return None
    if n == 1:
        return [min(gpus, key=lambda g: (load(g), g.index))]
    if len(gpus) <= _EXHAUSTIVE_LIMIT:
        combos = itertools.combinations(gpus, n)
        return list(min(combos, key=lambda c: _set_key(host, c, load)))
    return _greedy_set(host, gpus, n, load)


def _set_key(host: Host, combo: Sequence[GpuNode], load: Callable[[GpuNode], tuple]) -> tuple:
    loads = [load(g) for g in combo]
    total = tuple(sum(v) for v in zip(*loads)) if loads else ()
    return (worst_link(host, [g.uuid for g in combo]), total, [g.index for g in combo])


def _greedy_set(host: Host, gpus: Sequence[GpuNode], n: int, load: Callable[[GpuNode], tuple]) -> list[GpuNode]:
    # grow from each seed by adding the GPU that keeps the worst link fastest; keep the best grown set
    best: list[GpuNode] | None = None
    for seed in gpus:
        chosen = [seed]
        rest = [g for g in gpus if g is not seed]
        while len(chosen) < n:
            nxt = min(rest, key=lambda g: (max(host.link(g.uuid, c.uuid) for c in chosen), load(g), g.index))
            chosen.append(nxt)
            rest.remove(nxt)
        if best is None or _set_key(host, chosen, load) < _set_key(host, best, load):
            best = chosen
    return sorted(best or [], key=lambda g: g.index)
