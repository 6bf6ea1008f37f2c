"""What the baseline policies believe about jobs sharing a GPU: the utilization-sum rule on their solo profiles.

This is the *policies'* estimator, deliberately simpler than the simulator's measured models (``ecolaunch.sim``),
which play the machine: a policy that predicted with the simulator's own model would be judged by its own beliefs.

- GPU demand: :attr:`ecolaunch.jobmodel.profile.Profile.demand` (``max(sm_util_pct, mem_bw_util_pct) / 100``); a
  job without a profile is assumed to keep the GPU busy (demand 1.0), the cautious choice for sharing.
- Co-located speed (utilization-sum rule): while the summed demand ``D`` of a GPU's jobs is at most 1 every job
  runs at full speed; above 1 each runs at ``1 / D`` (processor sharing). No switching cost: that is what the
  simple rule misses and what the simulator (and the GNN) capture.

A job alone at a cap is read off its one curve, :class:`ecolaunch.jobmodel.capcurve.CapCurve`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecolaunch.jobmodel.profile import Profile


def shared_speeds(profiles: Sequence[Profile]) -> list[float]:
    """Normalized speed of each job on one GPU by the utilization-sum rule."""
    total = sum(p.demand for p in profiles)
    x = 1.0 / total if total > 1.0 else 1.0
    return [x] * len(profiles)
