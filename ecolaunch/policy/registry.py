"""The placement policies by name: :func:`get_policy` and :func:`policy_names`.

What lives here: the one registry of the placement policies (``--policy``, ``ecolaunch simulate``, the launcher).
What does not: the policies themselves (:mod:`.baselines`, :mod:`.packing`, :mod:`.zeus`, :mod:`.curve`,
:mod:`.gnn`), none of which imports this module, and the budget wrapper every one of them is put in
(:class:`~ecolaunch.policy.budget.BudgetedPolicy`).
"""

from __future__ import annotations

from ecolaunch.errors import ConfigError
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.policy.budget import BudgetedPolicy
from ecolaunch.policy.curve import curve_policy
from ecolaunch.policy.gnn import gnn_policy
from ecolaunch.policy.packing import EacoPolicy, FirstFitPolicy, LucidPolicy
from ecolaunch.policy.zeus import ZeusPolicy

__all__ = ["get_policy", "policy_names"]


def _registry() -> dict:
    registry = {p.name: p for p in (ExclusivePolicy, FirstFitPolicy, LucidPolicy, EacoPolicy, ZeusPolicy)}
    registry["gnn"] = gnn_policy
    registry["curve"] = curve_policy
    return registry


def policy_names() -> list[str]:
    return sorted(_registry())


def get_policy(name: str, *, gnn_weights=None):
    """A new policy registered under ``name``, under the host's power budget when the admin policy sets one
    (:class:`~ecolaunch.policy.budget.BudgetedPolicy`: the inner policy itself without a budget); ConfigError
    listing the known names otherwise. ``gnn_weights``: the weight file of the ``gnn`` policy (None: the shipped
    weights)."""
    registry = _registry()
    try:
        factory = registry[name]
    except KeyError:
        raise ConfigError(
            f"unknown placement policy {name!r}", hint=f"choose one of: {', '.join(sorted(registry))}"
        ) from None
    return BudgetedPolicy(factory(weights=gnn_weights) if name == "gnn" else factory())
