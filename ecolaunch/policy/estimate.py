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
- A job alone at a cap, anchored to what was measured (:func:`measured_curve` -> :class:`MeasuredCurve`): the one
  place where the GNN's features, its anchoring and ``ecolaunch predict`` read a job's measured cap points.

**The measured curve.** Points: the job's ``cap_points`` (those at one cap pooled), plus its uncapped
``iter_time_s`` and ``power_w`` as a point at the board's max limit when no point lies there (with its power
unknown, that of its highest measured cap, which then bounds what counts as measured).
At a measured cap the curve *is* the measurement. Between two measured caps it moves monotonically from one
measurement to the other along the shape of the Zeus prior (:data:`~ecolaunch.profile.powercap.DEFAULT_PRIOR`, as
a function of ``u = cap / power at the highest measured cap``): ``t(c) = t_hi + (t_lo - t_hi) * w(c)`` with
``w = (T(c) - T(c_hi)) / (T(c_lo) - T(c_hi))`` in [0, 1] (``T`` the prior's time ratio; linear where the prior is
flat), and likewise for power with the prior's power ratio. So it stays between the two measurements, and is
monotone whenever they are (time never rises with the cap, power never falls). Below the lowest measured cap it
follows the prior's ratios from that point (an extrapolation: :meth:`MeasuredCurve.anchored` says False); above
the highest it stays flat. Unlike the cap choice's :class:`~ecolaunch.profile.powercap.CapModel` it is
monotone between measured caps; no benchmark prints the two readings' held-out errors side by side yet, so none is
quoted here (issue 19 leaves the two readings to be made one).
The cap choice itself keeps ``CapModel`` (its margins are measured for it); the two agree at every
measured cap that binds.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.powercap import DEFAULT_PRIOR, CapModel, fit_cap_model

#: caps within this many watts of a measured cap count as that cap
_CAP_TOLERANCE_W = 1e-6


def shared_speeds(profiles: Sequence[Profile]) -> list[float]:
    """Normalized speed of each job on one GPU by the utilization-sum rule."""
    total = sum(p.demand for p in profiles)
    x = 1.0 / total if total > 1.0 else 1.0
    return [x] * len(profiles)


def cap_model(profile: Profile | None, max_power_w: float) -> CapModel | None:
    """The job's cap curve: its measured cap points, else its uncapped power with the prior (an unknown iteration
    time read as 1 s: only ratios are read); None if unknown."""
    points = profile.curve_points(max_power_w, unknown_time_s=1.0) if profile else ()
    return fit_cap_model(points) if points else None


# --- a job alone at a cap, anchored to its measurements ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MeasuredCurve:
    """A job alone on a board at any cap, from its measured points (see the module docstring).

    ``caps_w`` ascending, each with the measured mean ``iter_time_s`` and board ``power_w`` (points at one cap
    pooled); ``max_w`` the board's max limit, where the job runs "uncapped" (normalized throughput 1.0).
    """

    caps_w: tuple[float, ...]
    times_s: tuple[float, ...]
    powers_w: tuple[float, ...]
    max_w: float
    #: the highest cap measured (below ``caps_w[-1]`` when the top point is the uncapped time with the power of
    #: the highest measured cap: see :func:`measured_curve`)
    measured_top_w: float = 0.0

    def anchored(self, cap_w: float) -> bool:
        """True when ``cap_w`` lies within the measured caps (what :meth:`at` says there is measured or between
        measurements, never extrapolated)."""
        top = self.measured_top_w or self.caps_w[-1]
        return self.caps_w[0] - _CAP_TOLERANCE_W <= min(cap_w, self.max_w) <= top + _CAP_TOLERANCE_W

    def at(self, cap_w: float) -> tuple[float, float]:
        """(iteration time in s, board power in W) alone at ``cap_w`` (a cap above the max limit is the max)."""
        return _curve_at(self.caps_w, self.times_s, self.powers_w, min(cap_w, self.max_w))

    def speed(self, cap_w: float) -> float:
        """Normalized throughput alone at ``cap_w``: time at the max limit / time at ``cap_w`` (<= 1 when the
        measurements are monotone)."""
        return self.at(self.max_w)[0] / self.at(cap_w)[0]


def measured_curve(points: Iterable[Sequence[float]], max_w: float, iter_time_s: float | None = None,
                   power_w: float | None = None) -> MeasuredCurve | None:
    """The job's curve on a board whose max limit is ``max_w``, from ``(power_cap_w, iter_time_s, power_w)``
    triples (those not above 0 skipped) and its uncapped ``iter_time_s`` / ``power_w``; None when nothing was
    measured (no valid point, and not both uncapped values)."""
    by_cap: dict[float, list[tuple[float, float]]] = {}
    for cap, t, p in points:
        if all(v > 0 for v in (cap, t, p)):
            by_cap.setdefault(float(cap), []).append((float(t), float(p)))
    if not max_w > 0:
        return None
    measured_top = max(by_cap, default=0.0)
    if iter_time_s and iter_time_s > 0 and measured_top < max_w - _CAP_TOLERANCE_W:
        if power_w and power_w > 0:
            by_cap[float(max_w)] = [(float(iter_time_s), float(power_w))]
            measured_top = float(max_w)
        elif by_cap:  # uncapped time without its power: that of the highest measured cap (not a measurement)
            by_cap[float(max_w)] = [(float(iter_time_s), _mean([p for _, p in by_cap[measured_top]]))]
    if not by_cap:
        return None
    caps = tuple(sorted(by_cap))
    times = tuple(_mean([t for t, _ in by_cap[c]]) for c in caps)
    powers = tuple(_mean([p for _, p in by_cap[c]]) for c in caps)
    return MeasuredCurve(caps, times, powers, float(max_w), measured_top)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


@functools.lru_cache(maxsize=4096)
def _curve_at(caps: tuple[float, ...], times: tuple[float, ...], powers: tuple[float, ...], cap_w: float
              ) -> tuple[float, float]:
    prior = DEFAULT_PRIOR
    ref_w = powers[-1]  # the prior is indexed by cap / the job's power at its highest measured cap

    def shape(c: float) -> tuple[float, float]:
        return prior.time_at(c / ref_w), prior.power_at(c / ref_w)

    if cap_w >= caps[-1] - _CAP_TOLERANCE_W:
        return times[-1], powers[-1]
    if cap_w <= caps[0] + _CAP_TOLERANCE_W:
        if cap_w >= caps[0] - _CAP_TOLERANCE_W:
            return times[0], powers[0]
        (t_c, p_c), (t_0, p_0) = shape(cap_w), shape(caps[0])
        return times[0] * t_c / t_0, powers[0] * p_c / p_0
    i = bisect.bisect_left(caps, cap_w)
    lo, hi = caps[i - 1], caps[i]
    if cap_w >= hi - _CAP_TOLERANCE_W:
        return times[i], powers[i]
    linear = (cap_w - lo) / (hi - lo)
    (t_c, p_c), (t_lo, p_lo), (t_hi, p_hi) = shape(cap_w), shape(lo), shape(hi)
    w_t = (t_c - t_hi) / (t_lo - t_hi) if t_lo - t_hi > 1e-9 else 1.0 - linear  # 1 at lo, 0 at hi
    w_p = (p_c - p_lo) / (p_hi - p_lo) if p_hi - p_lo > 1e-9 else linear  # 0 at lo, 1 at hi
    w_t, w_p = min(1.0, max(0.0, w_t)), min(1.0, max(0.0, w_p))
    return times[i] + (times[i - 1] - times[i]) * w_t, powers[i - 1] + (powers[i] - powers[i - 1]) * w_p


def profile_curve(profile: Profile | None, max_w: float) -> MeasuredCurve | None:
    """:func:`measured_curve` from a profile (its cap points, uncapped ``iter_time_s`` and ``power_w``)."""
    if profile is None:
        return None
    return measured_curve([(p.power_cap_w, p.iter_time_s, p.power_w) for p in profile.cap_points], max_w,
                          profile.iter_time_s, profile.power_w)
