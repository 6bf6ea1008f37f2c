"""A job's cap curve: the one reading of its measured caps, "time and power at cap c", with the prior between them.

What lives here: :class:`CapPrior` (the normalized shape of cap curves learned from the Zeus traces) and
:data:`DEFAULT_PRIOR`; :data:`Priors` (which prior each job's curve is read with; :func:`default_prior`);
:class:`CapCurve`, one job alone on a board at any cap, fitted by :func:`fit_curve` from its measured cap points
(:func:`profile_curve` from a profile);
:func:`merge_points` (points at one cap pooled). What does not: which caps to measure and the cap grid
(:mod:`ecolaunch.jobmodel.powercap`), the cap choice on a curve (:mod:`ecolaunch.jobmodel.capchoice`), the simulator's
truth (:class:`ecolaunch.sim.truth.TruthCurve`). The model, its data and why this reading:
docs/profiling.md#the-cap-curve.
"""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.validate import is_number

# A cap at least this many times the job's uncapped power does not bind it. Zeus traces: at cap/power >= 1.3
# the median board-power ratio is >= 0.99 on all four GPUs and the time ratio is 1.00 within noise.
NON_BINDING_RATIO = 1.3

_MIN_EXCESS = 0.02  # prior time excess below which a measured point says nothing about the time scale
_EPS = 1e-9
#: caps within this many watts of a measured cap count as that cap
_CAP_TOLERANCE_W = 1e-6


@dataclass(frozen=True, slots=True)
class CapPrior:
    """Normalized cap-curve shape: at ``u = cap / uncapped power``, time and power relative to uncapped.

    ``time_ratio`` is non-increasing in ``u`` and >= 1; ``power_ratio`` is non-decreasing. Outside the grid
    the end values hold.
    """

    u_grid: tuple[float, ...]
    time_ratio: tuple[float, ...]
    power_ratio: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.u_grid)
        if n < 2 or len(self.time_ratio) != n or len(self.power_ratio) != n:
            raise ConfigError(f"cap prior needs >= 2 grid points and equal lengths, got {n}, "
                              f"{len(self.time_ratio)}, {len(self.power_ratio)}")
        if any(b <= a for a, b in zip(self.u_grid, self.u_grid[1:])):
            raise ConfigError("cap prior grid must be strictly increasing", hint="sort u_grid")

    def time_at(self, u: float) -> float:
        return _interp(self.u_grid, self.time_ratio, u)

    def power_at(self, u: float) -> float:
        return _interp(self.u_grid, self.power_ratio, u)

    @classmethod
    def fit(cls, curves: Iterable[Sequence[CapPoint]], *, u_min: float = 0.30, u_max: float = 1.50,
            u_step: float = 0.05, min_curves: int = 3, source: str = "") -> CapPrior:
        """Medians over measured curves (each with >= 2 caps) of ``t/t0`` and ``P/P0`` on a grid of ``u``."""
        grid = tuple(round(u_min + i * u_step, 6) for i in range(int(round((u_max - u_min) / u_step)) + 1))
        times: list[list[float]] = [[] for _ in grid]
        powers: list[list[float]] = [[] for _ in grid]
        used = 0
        for curve in curves:
            pts = _clean(curve)
            if len(pts) < 2:
                continue
            used += 1
            top = pts[-1]
            us = [p.power_cap_w / top.power_w for p in pts]
            ts = [p.iter_time_s / top.iter_time_s for p in pts]
            ps = [p.power_w / top.power_w for p in pts]
            for i, u in enumerate(grid):
                if us[0] - _EPS <= u <= us[-1] + _EPS:
                    times[i].append(_interp(us, ts, u))
                    powers[i].append(_interp(us, ps, u))
        if used == 0:
            raise ConfigError("cannot fit a cap prior from no curves", hint="pass curves with >= 2 caps each")
        t = _fill([statistics.median(v) if len(v) >= min_curves else None for v in times])
        p = _fill([statistics.median(v) if len(v) >= min_curves else None for v in powers])
        for i in range(len(t) - 2, -1, -1):  # slower at lower caps, never faster than uncapped
            t[i] = max(t[i], t[i + 1])
        t = [max(1.0, x) for x in t]
        for i in range(1, len(p)):  # more power allowed never means less power drawn
            p[i] = max(p[i], p[i - 1])
        return cls(grid, tuple(round(x, 4) for x in t), tuple(round(x, 4) for x in p),
                   source or f"fitted on {used} curves")


# Fitted with CapPrior.fit on every (GPU, workload, batch size) of the Zeus summary_power_{v100,a40,p100,
# rtx6000}.csv traces (208 curves; see zeus_data.load_power_traces). tests/profile/test_powercap.py refits
# it from the data and checks these numbers. The accuracy benchmark never uses it: it refits without the
# evaluated workload (or GPU).
DEFAULT_PRIOR = CapPrior(
    u_grid=(0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9,
            0.95, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4, 1.45, 1.5),
    time_ratio=(3.6094, 3.6094, 3.6094, 2.2607, 1.8003, 1.5086, 1.3816, 1.2628, 1.1982, 1.137, 1.0994, 1.0721,
                1.0541, 1.0387, 1.0259, 1.0148, 1.0088, 1.0088, 1.0072, 1.006, 1.006, 1.006, 1.0036, 1.0034, 1.0034),
    power_ratio=(0.4108, 0.4108, 0.4108, 0.4477, 0.4933, 0.5362, 0.5788, 0.619, 0.6581, 0.699, 0.7392, 0.7783,
                 0.8162, 0.8509, 0.8857, 0.9179, 0.9385, 0.948, 0.9667, 0.9778, 0.9851, 0.9851, 0.9903, 0.9948,
                 0.9949),
    source="zeus-nsdi23 summary_power_{v100,a40,p100,rtx6000}.csv, 208 curves",
)

#: the prior each job's curve is read with, by job id (what a policy, the budget and the closed loop take)
Priors = Callable[[str], CapPrior]


def default_prior(job_id: str) -> CapPrior:
    """:data:`DEFAULT_PRIOR`, whatever the job (the launcher's :data:`Priors`)."""
    return DEFAULT_PRIOR


@dataclass(frozen=True, slots=True)
class CapCurve:
    """One job alone on a board at any cap: its measured points plus the prior, corrected at every measured cap.

    ``reference_*`` is the job at its highest measured cap: its time there, and its power averaged with the
    non-binding replicates'.
    ``knots_w`` are the caps carrying a correction: ``time_scale`` multiplies the prior's time excess,
    ``time_offset`` is what that scale leaves unexplained at a knot (so measured caps are reproduced), and
    ``power_scale`` multiplies the prior's power ratio. All three are interpolated linearly in cap.
    """

    points: tuple[CapPoint, ...]
    prior: CapPrior
    reference_cap_w: float
    reference_iter_time_s: float
    reference_power_w: float
    knots_w: tuple[float, ...]
    time_scale: tuple[float, ...]
    time_offset: tuple[float, ...]
    power_scale: tuple[float, ...]

    @property
    def is_flat(self) -> bool:
        """True when no measured cap could bind the job by the prior (every cap at least :data:`NON_BINDING_RATIO`
        times its power); what a non-binding cap measured still counts (:meth:`predict` reproduces it)."""
        return all(p.power_cap_w >= NON_BINDING_RATIO * self.reference_power_w for p in self.points[:-1])

    def predict(self, cap_w: float) -> CapPoint:
        """Predicted mean iteration time and board power at ``cap_w``. Below the lowest measured cap the power is
        at most the cap (the prior's end values hold below its grid, which would let a board draw more than its
        limit; measured boards overshoot theirs by a few percent at most, and a measured cap keeps what it read).
        At or below the reference cap the time is never below the reference time: a lower cap never makes a job
        faster, so a measurement saying so (noise, or a disturbed reference) reads as no slowdown, never as a
        negative one."""
        if not (cap_w > 0 and math.isfinite(cap_w)):
            raise ConfigError(f"power cap must be a positive number of watts, got {cap_w!r}")
        u = cap_w / self.reference_power_w
        u_ref = self.reference_cap_w / self.reference_power_w
        excess = self.prior.time_at(u) / self.prior.time_at(u_ref) - 1.0
        ratio = (1.0 + _interp(self.knots_w, self.time_scale, cap_w) * excess
                 + _interp(self.knots_w, self.time_offset, cap_w))
        power = _interp(self.knots_w, self.power_scale, cap_w) * self.prior.power_at(u) / self.prior.power_at(u_ref)
        if cap_w <= self.reference_cap_w + _CAP_TOLERANCE_W:
            ratio = max(1.0, ratio)
        power_w = self.reference_power_w * power
        if cap_w < self.points[0].power_cap_w:
            power_w = min(power_w, cap_w)
        return CapPoint(cap_w, self.reference_iter_time_s * ratio, power_w)

    def at(self, cap_w: float) -> CapPoint:
        """What the job does at ``cap_w``: the measurement where one was made (those at one cap pooled), else
        :meth:`predict`. They differ only at caps that cannot bind the job, whose measurements :meth:`predict` pools
        into the reference (the cap choice reads the pooled one: it is the better estimate; a reader promising "at a
        measured cap, the measurement", as ``ecolaunch predict`` does, reads this)."""
        for p in self.points:
            if abs(p.power_cap_w - cap_w) <= _CAP_TOLERANCE_W:
                return p
        return self.predict(cap_w)

    def anchored(self, cap_w: float) -> bool:
        """True when ``cap_w`` lies within the measured caps (what :meth:`predict` says there is measured or
        between measurements, never extrapolated)."""
        return self.points[0].power_cap_w - _CAP_TOLERANCE_W <= cap_w <= self.points[-1].power_cap_w + _CAP_TOLERANCE_W

    def speed(self, cap_w: float, max_w: float) -> float:
        """Normalized throughput alone at ``cap_w`` on a board whose max limit is ``max_w`` (where the job runs
        "uncapped"): time at ``max_w`` / time at ``cap_w`` (a cap above ``max_w`` is ``max_w``)."""
        return self.at(max_w).iter_time_s / self.at(min(cap_w, max_w)).iter_time_s


def fit_curve(points: Sequence[CapPoint], prior: CapPrior = DEFAULT_PRIOR) -> CapCurve:
    """Fit one job's curve from its measured caps (at least one; the highest should be the GPU's max)."""
    pts = _clean(points, strict=True)
    top = pts[-1]
    t0, p0 = top.iter_time_s, top.power_w  # the reference time: the top's own (docs/profiling.md#the-cap-curve)
    for _ in range(2):  # the replicate set depends on P0, which depends on the replicates
        replicates = [p for p in pts if p is top or p.power_cap_w >= NON_BINDING_RATIO * p0]
        p0 = statistics.fmean(p.power_w for p in replicates)
    u_ref = top.power_cap_w / p0
    t_ref, p_ref = prior.time_at(u_ref), prior.power_at(u_ref)
    knots: list[float] = []
    excesses: list[float] = []
    slowdowns: list[float] = []
    t_scales: list[float | None] = []
    p_scales: list[float] = []
    for p in pts:
        y, r = (1.0, 1.0) if p is top else (p.iter_time_s / t0, p.power_w / p0)
        u = p.power_cap_w / p0
        excess = prior.time_at(u) / t_ref - 1.0
        knots.append(p.power_cap_w)
        excesses.append(excess)
        slowdowns.append(y - 1.0)
        # Where the prior expects (almost) no slowdown, a measured one says nothing about the scale.
        t_scales.append(max(0.0, (y - 1.0) / excess) if excess > _MIN_EXCESS else None)
        p_scales.append(r / (prior.power_at(u) / p_ref))
    scales = _fill_scales(t_scales)
    offsets = [d - s * e for d, s, e in zip(slowdowns, scales, excesses)]
    return CapCurve(tuple(pts), prior, top.power_cap_w, t0, p0, tuple(knots), tuple(scales), tuple(offsets),
                    tuple(p_scales))


def profile_curve(profile: Profile | None, top_cap_w: float, *, unknown_time_s: float | None = None,
                  prior: CapPrior = DEFAULT_PRIOR) -> CapCurve | None:
    """The curve of a job known by its profile on a board whose max limit is ``top_cap_w``: its cap points, else its
    uncapped iteration time and power as one point at the top cap (:meth:`Profile.curve_points`, whose
    ``unknown_time_s`` stands in for an unknown time when only ratios are read); None when nothing was measured.
    Cached by the points and the prior: the GNN's features read the same jobs' curves for every candidate."""
    points = profile.curve_points(top_cap_w, unknown_time_s=unknown_time_s) if profile else ()
    return _fit_cached(points, prior) if points else None


@functools.lru_cache(maxsize=4096)
def _fit_cached(points: tuple[CapPoint, ...], prior: CapPrior) -> CapCurve:
    return fit_curve(points, prior)


def merge_points(points: Sequence[CapPoint]) -> tuple[CapPoint, ...]:
    """Points as one curve: validated, those at the same cap pooled (by iterations where known), ascending."""
    return tuple(_clean(points))


# --- helpers ------------------------------------------------------------------------------------------------


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear interpolation; the end values hold outside ``xs`` (ascending)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _fill(values: list[float | None]) -> list[float]:
    """Replace missing grid values by the nearest present one."""
    present = [i for i, v in enumerate(values) if v is not None]
    if not present:
        raise ConfigError("cap prior has no grid point with enough curves", hint="pass more curves")
    return [v if v is not None else values[min(present, key=lambda j: abs(j - i))]  # type: ignore[misc]
            for i, v in enumerate(values)]


def _fill_scales(scales: list[float | None]) -> list[float]:
    """A knot without time information takes the nearest lower-cap knot's scale, else the nearest higher, else 1."""
    out: list[float] = []
    for i, s in enumerate(scales):
        if s is None:
            lower = [x for x in scales[:i] if x is not None]
            higher = [x for x in scales[i + 1:] if x is not None]
            s = lower[-1] if lower else (higher[0] if higher else 1.0)
        out.append(s)
    return out


def _clean(points: Sequence[CapPoint], strict: bool = False) -> list[CapPoint]:
    """Validate, average duplicate caps, sort by cap ascending."""
    if strict and not points:
        raise ConfigError("a cap model needs at least one measured cap", hint="profile the job at its max cap")
    by_cap: dict[float, list[CapPoint]] = {}
    for p in points:
        for name in ("power_cap_w", "iter_time_s", "power_w"):
            v = getattr(p, name)
            if not (is_number(v) and v > 0):
                raise ConfigError(f"cap point {name} must be a positive finite number, got {v!r}",
                                  hint="drop failed or empty measurements before fitting")
        by_cap.setdefault(float(p.power_cap_w), []).append(p)
    return [_pool(c, ps) for c, ps in sorted(by_cap.items())]


def _pool(cap_w: float, points: Sequence[CapPoint]) -> CapPoint:
    """Points measured at the same cap as one: means weighted by their iterations when every point knows its
    count (equal weights otherwise); the spread pooled the same way; their windows and in-run iterations added."""
    if len(points) == 1:
        return points[0]
    counts = [p.iterations for p in points]
    weights = counts if all(n > 0 for n in counts) else [1] * len(points)
    total = sum(weights)
    t = sum(w * p.iter_time_s for w, p in zip(weights, points)) / total
    power = sum(w * p.power_w for w, p in zip(weights, points)) / total
    cvs = [p.iter_time_cv_pct for p in points]
    cv = None if any(c is None for c in cvs) else math.sqrt(sum(w * c * c for w, c in zip(weights, cvs)) / total)  # type: ignore[operator]
    return CapPoint(cap_w, t, power, sum(counts), cv, sum(p.window_count for p in points),
                    sum(p.run_iterations for p in points))
