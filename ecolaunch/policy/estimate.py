"""What the baseline policies believe about jobs sharing a GPU: the utilization-sum rule on their solo profiles.

This is the *policies'* estimator, deliberately simpler than the simulator's measured models (``ecolaunch.sim``),
which play the machine. Demand is :attr:`ecolaunch.jobmodel.profile.Profile.demand`; a job alone at a cap is read off
:class:`ecolaunch.jobmodel.capcurve.CapCurve`. The rule and why: docs/simulator.md#what-the-baselines-believe.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecolaunch.jobmodel.profile import Profile


def shared_speeds(profiles: Sequence[Profile]) -> list[float]:
    """Normalized speed of each job on one GPU by the utilization-sum rule."""
    total = sum(p.demand for p in profiles)
    x = 1.0 / total if total > 1.0 else 1.0
    return [x] * len(profiles)
