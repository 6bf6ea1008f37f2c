"""Baseline placement policies.

``exclusive``: what a careful person does with torchrun and ``CUDA_VISIBLE_DEVICES`` by hand — each job gets
GPUs nobody else uses (no ecolaunch job, no foreign process), the least loaded first, and a multi-GPU job gets
the set with the fastest links (an NVLink island before PCIe); power limits stay as they are.
"""

from __future__ import annotations

from ecolaunch.admin.rules import Rules
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.candidates import best_set, eligible_gpus, is_idle, user_quota_left, worst_link
from ecolaunch.state.graph import GpuNode, StateGraph


def _load(gpu: GpuNode) -> tuple:
    return (gpu.util_gpu_pct or 0.0, gpu.memory_used_mib)


class ExclusivePolicy:
    """One job per GPU; least-loaded, best-linked GPUs first; default power."""

    name = "exclusive"

    def __repr__(self) -> str:
        return "ExclusivePolicy()"

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        host = state.hosts.get(job.host)
        if host is None:
            return None
        need = job.memory_mib or 0
        free = [g for g in eligible_gpus(state, job, rules) if is_idle(state, g) and g.memory_free_mib >= need]
        n = max(job.nproc, len(free)) if job.elastic else job.nproc
        quota = user_quota_left(state, job, rules)
        if quota is not None:
            n = min(n, quota)
        chosen = best_set(host, free, n, _load) if n >= job.nproc else None
        if chosen is None:
            return None
        uuids = tuple(g.uuid for g in chosen)
        link = worst_link(host, uuids).name.replace("_", " ").lower()
        indices = ",".join(str(g.index) for g in chosen)
        reason = f"GPU {indices} {'is' if len(chosen) == 1 else 'are'} free"
        if len(chosen) > 1:
            reason += f", linked by {link}"
        reason += f"; {len(free) - len(chosen)} other free GPU(s) left for others"
        return Decision(
            policy=self.name,
            gpus=uuids,
            power_caps_w={u: None for u in uuids},
            colocated_with={u: [] for u in uuids},
            reasons=[reason],
        )
