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


def policy_names() -> list[str]:
    return sorted(_registry())


def policy_summaries() -> dict[str, str]:
    """Every registered policy's one-line description, in the order the README's table lists them."""
    return dict(_SUMMARIES)


#: what each registered policy does, one line each (the README's policy table is generated from it)
_SUMMARIES = {
    "curve": "energy-aware placement from the job's own measurements: the best-linked GPUs nobody uses, each capped "
             "where the job's measured curve says it spends the least energy within its bound (the profiler's and "
             "the closed loop's one cap choice, with its margin); never shares a GPU; imports neither torch nor the "
             "GNN (`ecolaunch/policy/curve.py`)",
    "gnn": "the same, plus sharing a GPU where the GNN predicts, sure enough, that every job stays within its bound "
           "([docs/gnn.md](docs/gnn.md)). Not the default: [docs/benchmarks.md](docs/benchmarks.md) says when it "
           "shares",
    "exclusive": "what a careful person does by hand: GPUs nobody else uses (no ecolaunch job, no foreign process), "
                 "least loaded first; a multi-GPU job gets the set with the fastest links (an NVLink island before "
                 "PCIe pairs); default power",
    "first-fit": "shares a GPU whenever memory fits (with the admin's margin), lowest index first",
    "lucid": "shares only when every job on the GPU keeps a predicted speed ≥ 0.95 (Lucid, ASPLOS '23)",
    "eaco": "the busiest GPU under a utilization (summed demand ≤ 100 %) and memory (≤ 90 %) threshold, within every "
            "job's bound (EaCO, arXiv 2412.08294; the paper does not publish thresholds, these are ours); in the "
            "simulator its early-epoch check undoes a shared placement that breaks a job's bound",
    "zeus": "exclusive, plus each job's energy-optimal power cap under its slowdown bound (Zeus, NSDI '23), from the "
            "job's profile",
}


def get_policy(name: str, *, gnn_weights=None):
    """A new policy registered under ``name``, under the host's power budget when the admin policy sets one
    (:class:`~ecolaunch.policy.budget.BudgetedPolicy`: the inner policy itself without a budget); ConfigError
    listing the known names otherwise. ``gnn_weights``: the weight file of the ``gnn`` policy (None: the shipped
    weights)."""
    from ecolaunch.errors import ConfigError
    from ecolaunch.policy.budget import BudgetedPolicy

    registry = _registry()
    try:
        factory = registry[name]
    except KeyError:
        raise ConfigError(
            f"unknown placement policy {name!r}", hint=f"choose one of: {', '.join(sorted(registry))}"
        ) from None
    return BudgetedPolicy(factory(weights=gnn_weights) if name == "gnn" else factory())


def _registry() -> dict:
    # imported here: the packing and zeus modules import this one
    from ecolaunch.policy.curve import curve_policy
    from ecolaunch.policy.gnn import gnn_policy
    from ecolaunch.policy.packing import EacoPolicy, FirstFitPolicy, LucidPolicy
    from ecolaunch.policy.zeus import ZeusPolicy

    registry = {p.name: p for p in (ExclusivePolicy, FirstFitPolicy, LucidPolicy, EacoPolicy, ZeusPolicy)}
    registry["gnn"] = gnn_policy
    registry["curve"] = curve_policy
    return registry
