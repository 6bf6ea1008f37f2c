"""Policies the simulator can run: every launcher policy plus the oracle (which needs the simulator's model)."""

from __future__ import annotations

from ecolaunch.errors import ConfigError
from ecolaunch.policy.baselines import get_policy, policy_names


def sim_policy_names() -> list[str]:
    return sorted([*policy_names(), "oracle"])


def get_sim_policy(name: str, *, gnn_weights=None):
    if name == "oracle":
        from ecolaunch.sim.oracle import oracle_policy

        return oracle_policy()
    try:
        return get_policy(name, gnn_weights=gnn_weights)
    except ConfigError:
        raise ConfigError(f"unknown policy {name!r}", hint=f"choose from: {', '.join(sim_policy_names())}") from None
