"""The placement policies by name: :func:`get_policy`, :func:`policy_names` and :func:`policy_summaries`.

What lives here: the one registry of the placement policies (``--policy``, ``ecolaunch simulate``, the launcher).
What does not: the policies themselves (:mod:`.baselines`, :mod:`.packing`, :mod:`.zeus`, :mod:`.curve`,
:mod:`.gnn`), none of which imports this module, and the budget wrapper every one of them is put in
(:class:`~ecolaunch.policy.budgeted.BudgetedPolicy`).
"""

from __future__ import annotations

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.capcurve import Priors, default_prior
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.policy.budgeted import BudgetedPolicy
from ecolaunch.policy.curve import curve_policy
from ecolaunch.policy.firstcurve import FirstLaunchCurves
from ecolaunch.policy.gnn import FIRST_CURVE_Z, GnnFirstCurve, gnn_policy
from ecolaunch.policy.linkwait import LinkWait
from ecolaunch.policy.packing import EacoPolicy, FirstFitPolicy, LucidPolicy
from ecolaunch.policy.zeus import ZeusPolicy

__all__ = ["get_policy", "policy_names", "policy_summaries"]


def _registry() -> dict:
    registry = {p.name: p for p in (ExclusivePolicy, FirstFitPolicy, LucidPolicy, EacoPolicy, ZeusPolicy)}
    registry["gnn"] = gnn_policy
    registry["curve"] = curve_policy
    registry["curve-link"] = curve_link_policy
    return registry


def curve_link_policy(**kwargs) -> LinkWait:
    """``curve`` with the link rule (:class:`~ecolaunch.policy.linkwait.LinkWait`): ``--policy curve-link``."""
    return LinkWait(curve_policy(name="curve-link", **kwargs))


def policy_names() -> list[str]:
    return sorted(_registry())


def policy_summaries() -> dict[str, str]:
    """Every registered policy's one-line description, in the order the README's table lists them."""
    return dict(_SUMMARIES)


#: what each registered policy does, one line each (the README's policy table is generated from it)
_SUMMARIES = {
    "curve": "energy-aware placement from the job's own measurements: the best-linked GPUs nobody uses, each capped "
             "where the job's measured curve says it spends the least energy within its bound (the profiler's and "
             "the closed loop's one cap choice, with its margin); never shares a GPU",
    "curve-link": "`curve`, and a multi-GPU job may wait for a best-linked set "
                  "([queue.md](docs/queue.md#waiting-for-a-best-linked-set))",
    "gnn": "the same, plus sharing a GPU where the GNN predicts, sure enough, that every job stays within its bound, "
           "and capping a first launch nobody has measured from the GNN's predicted curve, its uncertainty kept back "
           "([docs/gnn.md](docs/gnn.md)). Not the default: [docs/benchmarks.md](docs/benchmarks.md) says why",
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


#: the registered policies that read a job's cap curve (they take ``priors``; the budget wrapper always does)
CURVE_READERS = ("curve", "curve-link", "gnn", "zeus")


def get_policy(name: str, *, gnn_weights=None, priors: Priors = default_prior):
    """A new policy registered under ``name``, under the host's power budget when the admin policy sets one
    (:class:`~ecolaunch.policy.budgeted.BudgetedPolicy`: the inner policy itself without a budget); ConfigError
    listing the known names otherwise. ``gnn_weights``: the weight file of the ``gnn`` policy (None: the shipped
    weights); ``priors``: the prior each job's curve is read with, by job id (the launcher's default: one for
    all)."""
    registry = _registry()
    try:
        factory = registry[name]
    except KeyError:
        raise ConfigError(
            f"unknown placement policy {name!r}", hint=f"choose one of: {', '.join(sorted(registry))}"
        ) from None
    if name == "gnn":
        return gnn_with_first_curve(BudgetedPolicy(factory(weights=gnn_weights, priors=priors), priors), gnn_weights)
    if name in CURVE_READERS:
        inner = factory(priors=priors)
    else:
        inner = factory()
    return BudgetedPolicy(inner, priors)


#: the first reason of a first launch the GNN's curve decided
GNN_FIRST_CURVE_WHY = ("first launch: capped from the GNN's predicted curve (nothing of the job is measured yet; its "
                       "uncertainty kept back); its own curve is measured as it runs")


def gnn_with_first_curve(policy, gnn_weights=None, *, first_z: float = FIRST_CURVE_Z,
                         name: str = "gnn") -> FirstLaunchCurves:
    """``policy`` (a budgeted ``gnn`` policy, or a simulator row built like one) deciding a first launch with the
    GNN's predicted curve (:class:`~ecolaunch.policy.gnn.GnnFirstCurve` of the same weights, keeping back ``first_z``
    standard deviations), under the name ``name``."""
    return FirstLaunchCurves(policy, GnnFirstCurve(gnn_weights, z=first_z), name, why=GNN_FIRST_CURVE_WHY)
