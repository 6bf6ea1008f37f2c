"""A job's profile: what profiling or history knows about a job measured alone, and its measured cap points.

What lives here: :class:`CapPoint` (one job measured at one power cap), :class:`Profile` (the one profile type), and
:func:`demand` (how busy a job keeps a GPU alone). Every field carries the bounds a stored profile must keep
(``Annotated`` with :class:`msgspec.Meta`), checked by :mod:`ecolaunch.jobmodel.codec` on read. What does not: the
curve read from the cap points (:mod:`ecolaunch.jobmodel.capcurve`), the JSON form and its versions
(:mod:`ecolaunch.jobmodel.codec`), the files (:mod:`ecolaunch.profile.history`, :mod:`ecolaunch.state.graph`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta

#: what a job whose utilization is unknown is assumed to keep busy: the whole GPU (the cautious choice for sharing)
UNKNOWN_DEMAND = 1.0

#: bounds on what a stored profile may claim (far beyond any real job: what matters is that every value is finite
#: and of its type, so that no policy, cap agent or queue computes with a string, NaN or an overflow)
MAX_TIME_S = 1e9
MAX_POWER_W = 100_000.0
MAX_MEMORY_MIB = 1 << 30  # 1 PiB per GPU
MAX_CAP_POINTS = 256
MAX_CV_PCT = 1e6

Seconds = Annotated[float, Meta(gt=0, le=MAX_TIME_S)]
Watts = Annotated[float, Meta(ge=0, le=MAX_POWER_W)]
Percent = Annotated[float, Meta(ge=0, le=100)]
Measured = Annotated[float, Meta(gt=0, le=MAX_TIME_S)]  # a cap point's cap, time or power: above 0
MiB = Annotated[int, Meta(ge=0, le=MAX_MEMORY_MIB)]
Count = Annotated[int, Meta(ge=0, le=2**53)]
CvPct = Annotated[float, Meta(ge=0, le=MAX_CV_PCT)]


@dataclass(frozen=True, slots=True)
class CapPoint:
    """One job measured at one power cap: mean iteration time and mean board power.

    ``iterations`` and ``iter_time_cv_pct`` say how well it was measured: how many iterations the mean is over
    and their spread (robust coefficient of variation, %); 0 and None when not known (a trace, a simulation).
    ``windows`` is how many separate windows (runs) the mean pools, 0 when not known (one, if it was measured);
    ``run_iterations`` how many of its iterations a closed loop measured inside a run, the rest in profiling windows
    at a run's start, whose error repeats from run to run (docs/profiling.md#pooled-windows-of-repeated-runs).
    """

    power_cap_w: Measured
    iter_time_s: Measured
    power_w: Measured
    iterations: Count = 0
    iter_time_cv_pct: CvPct | None = None
    windows: Count = 0
    run_iterations: Count = 0

    @property
    def se_pct(self) -> float:
        """Standard error of ``iter_time_s`` in % of it (0 when the spread is not known)."""
        if self.iter_time_cv_pct is None or self.iterations <= 0:
            return 0.0
        return self.iter_time_cv_pct / math.sqrt(self.iterations)

    @property
    def window_count(self) -> int:
        """The windows its mean pools: ``windows``, or one when that is not known but iterations were measured."""
        return self.windows or (1 if self.iterations > 0 else 0)

    @property
    def profiled_share(self) -> float:
        """The share of its iterations measured in profiling windows (1 when not known): what repeats."""
        if self.iterations <= 0:
            return 1.0
        return max(0.0, 1.0 - min(self.run_iterations, self.iterations) / self.iterations)


@dataclass(frozen=True, slots=True)
class Profile:
    """What a job is, measured alone. ``None``: not measured.

    ``iter_time_s`` and ``power_w`` are at the highest cap profiled (the admin's maximum: "uncapped");
    ``sm_util_pct``/``mem_bw_util_pct`` are NVML ``utilization.gpu``/``.memory`` means there; ``memory_mib``
    is the peak per GPU; ``cap_points`` the caps measured. ``instrumented`` is False for a job profiled by
    time windows only (no iteration time, no cap points).
    """

    iter_time_s: Seconds | None = None
    sm_util_pct: Percent | None = None
    mem_bw_util_pct: Percent | None = None
    memory_mib: MiB | None = None
    power_w: Watts | None = None
    cap_points: Annotated[tuple[CapPoint, ...], Meta(max_length=MAX_CAP_POINTS)] = ()
    instrumented: bool = True

    @property
    def demand(self) -> float:
        """The fraction of time the job keeps a GPU busy alone (:func:`demand`)."""
        return demand(self.sm_util_pct, self.mem_bw_util_pct)

    @property
    def knows_power(self) -> bool:
        """Whether the job's power is known (measured uncapped, or at caps)."""
        return bool(self.power_w or self.cap_points)

    def curve_points(self, top_cap_w: float, *, unknown_time_s: float | None = None) -> tuple[CapPoint, ...]:
        """The job's measured curve: its cap points, plus its uncapped iteration time and power as a point at
        ``top_cap_w`` when none was measured that high (alone, that one point: the prior's shape then gives the
        rest); empty when its power or its iteration time is not known (an uninstrumented job is never capped
        blind). ``unknown_time_s`` stands in for an unknown iteration time, for a reader of ratios only."""
        if self.cap_points:
            if self.iter_time_s and self.power_w and max(p.power_cap_w for p in self.cap_points) < top_cap_w - 1e-6:
                return (*self.cap_points, CapPoint(top_cap_w, float(self.iter_time_s), float(self.power_w)))
            return self.cap_points
        time_s = self.iter_time_s or unknown_time_s
        if time_s and self.power_w:
            return (CapPoint(top_cap_w, float(time_s), float(self.power_w)),)
        return ()


def demand(sm_util_pct: float | None, mem_bw_util_pct: float | None) -> float:
    """How busy a job keeps a GPU alone: ``max(sm_util_pct, mem_bw_util_pct) / 100`` in [0, 1] (NVML utilization
    is the fraction of time a kernel runs); :data:`UNKNOWN_DEMAND` when neither is known."""
    known = [v for v in (sm_util_pct, mem_bw_util_pct) if v is not None]
    if not known:
        return UNKNOWN_DEMAND
    return min(1.0, max(0.0, max(known) / 100.0))
