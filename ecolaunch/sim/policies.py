"""Policies the simulator can run: every launcher policy plus the oracle (which needs the simulator's model)."""

from __future__ import annotations

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.capcurve import Priors, default_prior
from ecolaunch.policy.budgeted import BudgetedPolicy
from ecolaunch.policy.curve import CurvePolicy
from ecolaunch.policy.gnn import FIRST_CURVE_Z, prior_share_policy
from ecolaunch.policy.registry import get_policy, gnn_with_first_curve, policy_names

#: the ablations the simulator runs besides the policies (``no-gnn``: the gnn policy without its learned part, which
#: is the curve policy under another name; ``analytic-share`` and ``util-share``: the gnn policy with its pairs
#: predicted by the GNN's physics prior alone, or by the utilization-sum rule, :func:`prior_share`)
ABLATIONS = ("no-gnn", "analytic-share", "util-share")


def sim_policy_names() -> list[str]:
    """Every launcher policy and the oracle (not the :data:`ABLATIONS`)."""
    return sorted([*policy_names(), "oracle"])


def get_sim_policy(name: str, *, gnn_weights=None, priors: Priors = default_prior):
    """A policy by name: every launcher policy, ``oracle`` (the model world's) and the ablation ``no-gnn``;
    ``priors``: the prior each job's curve is read with, by job id (the measured world's
    :class:`~ecolaunch.sim.measured.HeldOutPriors`; the model world's oracle reads its own truth)."""
    if name == "oracle":
        # lazy: `ecolaunch simulate --help` lists these names without loading the oracle and the catalogue
        from ecolaunch.sim.oracle import oracle_policy

        return oracle_policy()
    if name == "no-gnn":  # the gnn policy without its learned part: the curve policy
        return BudgetedPolicy(CurvePolicy(name="no-gnn", priors=priors), priors)
    if name in ("analytic-share", "util-share"):
        return prior_share(name, gnn_weights, priors=priors)
    try:
        return get_policy(name, gnn_weights=gnn_weights, priors=priors)
    except ConfigError:
        raise ConfigError(f"unknown policy {name!r}",
                          hint=f"choose from: {', '.join([*sim_policy_names(), *ABLATIONS])}") from None


def prior_share(name: str, gnn_weights=None, *, priors: Priors = default_prior, first_z: float | None = None):
    """``analytic-share`` or ``util-share`` built as the ``gnn`` policy is (a power budget, a first launch's curve
    from the GNN of ``gnn_weights``), with the pairs a shared GPU would make predicted by the GNN's physics prior
    alone or by the utilization-sum rule (:func:`~ecolaunch.policy.gnn.prior_share_policy`): under the sharing
    contract, what differs from ``gnn`` is only which pairs are predicted to keep every job in its bound."""
    inner = BudgetedPolicy(prior_share_policy(name, gnn_weights, priors=priors), priors)
    return gnn_with_first_curve(inner, gnn_weights, first_z=FIRST_CURVE_Z if first_z is None else first_z, name=name)


class WithMargin:
    """An ablation: ``policy`` deciding every job against ``keep`` x its slowdown bound (``zeus-5w-margin``: Zeus's
    cap rule on the 5 W grid with 5 % of the bound kept back, the margin the energy-aware policies keep)."""

    def __init__(self, policy, name: str, keep: float = 0.95) -> None:
        self.policy, self.name, self.keep = policy, name, keep

    def __repr__(self) -> str:
        return f"WithMargin({self.policy!r}, keep={self.keep})"

    def __getattr__(self, name: str):
        return getattr(self.__dict__["policy"], name)

    def decide(self, state, job, rules):
        from dataclasses import replace

        decision = self.policy.decide(state, replace(job, allowed_slowdown_pct=job.allowed_slowdown_pct * self.keep),
                                      rules)
        return None if decision is None else replace(decision, policy=self.name)


class FoldedPolicy:
    """k-fold evaluation: each job decided by the policy of its fold (a GNN trained without its job type).

    ``policies``: fold -> policy; ``fold_of``: job id -> fold. A decision scores the new job with the fold model
    that never saw its type, so every pair it predicts (the new job with each job already on a GPU) is held out."""

    def __init__(self, policies, fold_of, name: str) -> None:
        self.policies, self.fold_of, self.name = dict(policies), dict(fold_of), name

    def __repr__(self) -> str:
        return f"FoldedPolicy({len(self.policies)} folds)"

    def __getattr__(self, name: str):  # what does not depend on the model (a power budget's ``rebalance``)
        return getattr(next(iter(self.__dict__["policies"].values())), name)

    def decide(self, state, job, rules):
        return self.policies[self.fold_of[job.id]].decide(state, job, rules)
