"""What the baseline policies believe about a job: simple estimates from its solo profile.

These are the *policies'* estimators, deliberately simpler than the simulator's measured models
(``ecolaunch.sim``), which play the machine: a policy that predicted with the simulator's own model would be
judged by its own beliefs.

- GPU demand: ``max(sm_util_pct, mem_bw_util_pct) / 100`` (NVML utilization is the fraction of time a kernel
  runs); a job without a profile is assumed to keep the GPU busy (demand 1.0), the cautious choice for sharing.
- Co-located speed (utilization-sum rule): while the summed demand ``D`` of a GPU's jobs is at most 1 every job
  runs at full speed; above 1 each runs at ``1 / D`` (processor sharing). No switching cost: that is what the
  simple rule misses and what the simulator (and the GNN) capture.
- Power caps: :mod:`ecolaunch.profile.powercap` (a prior learned from the Zeus traces, corrected by the job's
  measured cap points when it has any).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ecolaunch.profile.powercap import CapModel, CapPoint, as_cap_points, fit_cap_model

UNKNOWN_DEMAND = 1.0


def demand(profile: Mapping[str, Any] | None) -> float:
    if not profile:
        return UNKNOWN_DEMAND
    values = [v for v in (profile.get("sm_util_pct"), profile.get("mem_bw_util_pct")) if v is not None]
    return min(1.0, max(values) / 100.0) if values else UNKNOWN_DEMAND


def shared_speeds(profiles: Sequence[Mapping[str, Any] | None]) -> list[float]:
    """Normalized speed of each job on one GPU by the utilization-sum rule."""
    total = sum(demand(p) for p in profiles)
    x = 1.0 / total if total > 1.0 else 1.0
    return [x] * len(profiles)


def cap_model(profile: Mapping[str, Any] | None, max_power_w: float) -> CapModel | None:
    """The job's cap curve: its measured cap points, else its uncapped power with the prior; None if unknown."""
    if not profile:
        return None
    points = as_cap_points(profile.get("cap_points"))
    if not points and profile.get("power_w"):
        points = [CapPoint(max_power_w, float(profile.get("iter_time_s") or 1.0), float(profile["power_w"]))]
    return fit_cap_model(points) if points else None
