"""The measured truth of a replayed job: its power-cap curve, interpolated, and the hindsight oracle.

What lives here: :class:`TruthCurve` and its loaders :func:`h200_truths` (ecolaunch's own H200 sweep),
:func:`zeus_truths` (Zeus's summary sweeps) and :func:`zeus_window_truths` (Zeus's profiling windows); the
hindsight oracle :func:`oracle_cap`, with :func:`true_slowdown_pct` and :func:`true_energy_per_iter`. What does
not: the GPU and job that play a truth (``benchmarks/_replay.py``). Only scoring code may import it. The
interpolation, units and data caveats: docs/simulator.md#measured-curves-as-truth.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.profile import zeus_data
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.jobmodel.powercap import cap_grid
from ecolaunch.sim.models import DATA_DIR, read_data_csv, zeus_rows

__all__ = ["OracleChoice", "TruthCurve", "h200_truths", "oracle_cap", "true_energy_per_iter", "true_slowdown_pct",
           "vendored_zeus_curves", "zeus_truths", "zeus_window_truths"]

H200_SWEEP_CSV = "h200_cap_sweep.csv"
H200_MODEL = "H200-SXM-141GB"
H200_WORKLOADS = ("mm", "bw")
#: the catalogue row of each Zeus board: the row whose power-limit range is the grid Zeus swept
ZEUS_MODELS = {"V100": "V100-PCIE-32GB", "A40": "A40", "P100": "P100-PCIE-16GB", "RTX6000": "RTX6000"}


@dataclass(frozen=True, slots=True)
class TruthCurve:
    """One job's measured cap curve (``points`` ascending by cap, as measured) and the board's cap range.

    ``monotone`` holds the points after the running max/min of docs/simulator.md#measured-curves-as-truth; the
    methods interpolate those.
    ``sm_util_pct``/``mem_util_pct``: utilization at the uncapped point, None when not measured. ``noisy`` marks a
    curve known to be noise rather than shape (H200 ``mlp``).
    """

    name: str
    gpu_model: str  # catalogue name, e.g. "H200-SXM-141GB"
    min_cap_w: float
    max_cap_w: float
    default_cap_w: float
    points: tuple[CapPoint, ...]
    time_unit: str = "iteration"  # or "epoch" (Zeus summary traces)
    sm_util_pct: float | None = None
    mem_util_pct: float | None = None
    noisy: bool = False
    monotone: tuple[CapPoint, ...] = field(init=False, repr=False, compare=False)
    _caps: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = [v for p in self.points for v in (p.power_cap_w, p.iter_time_s, p.power_w)]
        caps = [p.power_cap_w for p in self.points]
        if not self.points or not all(math.isfinite(v) and v > 0 for v in values) \
                or any(a >= b for a, b in zip(caps, caps[1:])):
            raise ConfigError(f"truth curve {self.name!r}: points must be positive, finite and strictly ascending "
                              f"by cap, got {self.points!r}", hint="pass the measured (cap, time, power) points")
        if not 0 < self.min_cap_w <= self.default_cap_w <= self.max_cap_w:
            raise ConfigError(f"truth curve {self.name!r}: caps must satisfy 0 < min <= default <= max, got "
                              f"{self.min_cap_w}/{self.default_cap_w}/{self.max_cap_w} W",
                              hint="use the board's power-limit range")
        t_max, p_min, out = 0.0, math.inf, []
        for p in reversed(self.points):  # from the highest cap down: see docs/simulator.md#measured-curves-as-truth
            t_max, p_min = max(t_max, p.iter_time_s), min(p_min, p.power_w)
            out.append(CapPoint(p.power_cap_w, t_max, p_min))
        object.__setattr__(self, "monotone", tuple(reversed(out)))
        object.__setattr__(self, "_caps", tuple(caps))

    @property
    def uncapped_cap_w(self) -> float:
        """The reference of every slowdown and saving: the highest cap (every vendored board's default)."""
        return self.max_cap_w

    def iter_time_s(self, cap_w: float) -> float:
        """True time per iteration (per epoch when ``time_unit == "epoch"``) at ``cap_w``."""
        return self._at(cap_w, time=True)

    def power_w(self, cap_w: float) -> float:
        """True mean board power (W) at ``cap_w`` while the job computes."""
        return self._at(cap_w, time=False)

    def _at(self, cap_w: float, *, time: bool) -> float:
        if not (math.isfinite(cap_w) and cap_w > 0):
            raise ConfigError(f"truth curve {self.name!r}: cap {cap_w!r} W must be positive")
        pts, caps = self.monotone, self._caps
        if cap_w >= caps[-1]:
            lo = hi = pts[-1]
        elif cap_w < caps[0]:  # power-bound below the lowest point: constant energy per iteration
            p = pts[0]
            return p.iter_time_s * p.power_cap_w / cap_w if time else p.power_w * cap_w / p.power_cap_w
        else:
            i = bisect.bisect_right(caps, cap_w)
            lo, hi = pts[i - 1], pts[i]
        a, b = (lo.iter_time_s, hi.iter_time_s) if time else (lo.power_w, hi.power_w)
        if hi is lo:
            return a
        return a + (b - a) * (cap_w - lo.power_cap_w) / (hi.power_cap_w - lo.power_cap_w)


# --- loaders ---------------------------------------------------------------------------------------------

def h200_truths(*, include_mlp: bool = False) -> list[TruthCurve]:
    """The H200 ``mm`` and ``bw`` sweeps (and ``mlp``, labelled noisy, only when asked); range 200-700 W as measured."""
    by_workload: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in read_data_csv(H200_SWEEP_CSV):
        by_workload[row["workload"]].append(row)
    out = []
    for workload in H200_WORKLOADS + (("mlp",) if include_mlp else ()):
        try:
            rows = sorted(by_workload[workload], key=lambda r: float(r["power_cap_w"]))
            points = tuple(CapPoint(float(r["power_cap_w"]), float(r["iter_time_s"]), float(r["power_w"]))
                           for r in rows)
            top = (float(rows[-1]["sm_util_pct"]), float(rows[-1]["mem_util_pct"]))
        except (KeyError, ValueError, IndexError) as e:
            raise ConfigError(f"{H200_SWEEP_CSV}: bad or missing rows for workload {workload!r}",
                              hint="restore the vendored file from the repository") from e
        noisy = workload == "mlp"
        out.append(TruthCurve(f"H200 {workload}" + (" (noisy)" if noisy else ""), H200_MODEL, points[0].power_cap_w,
                              points[-1].power_cap_w, points[-1].power_cap_w, points, "iteration", *top, noisy=noisy))
    return out


def vendored_zeus_curves() -> list[zeus_data.ZeusSweep]:
    """:func:`ecolaunch.profile.zeus_data.load_power_traces` on the vendored copies, in the same order.

    That loader pairs each workload with the optimizer of ``summary_train.csv``, which is not vendored; here the
    pairing is the optimizer every swept GPU has for the workload (alphabetically first if several), which drops
    the same rows (V100's extra ``adam`` runs of cifar100). A test checks both give the same curves.
    """
    rows = {gpu: zeus_rows(gpu) for gpu in zeus_data.POWER_TRACE_GPUS}
    shared: dict[str, set[str]] = {}
    for gpu_rows in rows.values():
        seen: dict[str, set[str]] = defaultdict(set)
        for r in gpu_rows:
            seen[r.workload].add(r.optimizer)
        for workload, opts in seen.items():
            shared[workload] = shared.get(workload, opts) & opts
    chosen = {workload: min(opts) for workload, opts in shared.items() if opts}
    curves = []
    for gpu, gpu_rows in rows.items():
        groups: dict[tuple[str, int, str], dict[float, CapPoint]] = defaultdict(dict)
        for r in gpu_rows:
            if chosen.get(r.workload, r.optimizer) == r.optimizer:
                groups[(r.workload, r.batch_size, r.optimizer)][r.power_limit_w] = CapPoint(
                    r.power_limit_w, r.time_per_epoch_s, r.power_w)
        for (workload, bs, opt), pts in sorted(groups.items()):
            curves.append(zeus_data.ZeusSweep(gpu.upper(), workload, bs, opt, "epoch",
                                              tuple(pts[c] for c in sorted(pts))))
    return curves


def zeus_truths(data_dir: Path | None = None, *, min_points: int = 3) -> list[TruthCurve]:
    """Every Zeus summary curve with at least ``min_points`` caps (the default drops RTX 6000's one 250-260 W curve).

    ``data_dir=None`` reads the vendored copies (a clean clone works); a folder reads the full Zeus data there with
    :func:`~ecolaunch.profile.zeus_data.load_power_traces`. A curve's cap range is its measured span, which for
    every curve kept by default is its catalogue board's whole range (tested); default = max.
    """
    curves = vendored_zeus_curves() if data_dir is None else zeus_data.load_power_traces(Path(data_dir))
    out = []
    for c in curves:
        if len(c.points) < min_points:
            continue
        lo, hi = c.points[0].power_cap_w, c.points[-1].power_cap_w
        out.append(TruthCurve(c.key, lookup(ZEUS_MODELS[c.gpu]).name, lo, hi, hi, c.points, c.time_unit))
    return out


def zeus_window_truths() -> list[TruthCurve]:
    """The vendored Zeus profiling windows (``data/profile_windows/``: V100 ResNet-18, one GPU) as truth curves named
    by :attr:`~ecolaunch.profile.zeus_data.ZeusSweep.key` (``"V100 resnet18"``); cap range = the measured span,
    default = max."""
    out = []
    for c in zeus_data.load_profile_windows(DATA_DIR):
        lo, hi = c.points[0].power_cap_w, c.points[-1].power_cap_w
        out.append(TruthCurve(c.key, lookup(ZEUS_MODELS[c.gpu]).name, lo, hi, hi, c.points, c.time_unit))
    return out


# --- the hindsight oracle --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OracleChoice:
    """The hindsight-best fixed cap: true slowdown and energy saving against uncapped there (%)."""

    cap_w: float
    slowdown_pct: float
    saving_pct: float


def true_slowdown_pct(truth: TruthCurve, cap_w: float) -> float:
    """True slowdown at ``cap_w`` against the uncapped cap (%)."""
    return 100.0 * (truth.iter_time_s(cap_w) / truth.iter_time_s(truth.uncapped_cap_w) - 1.0)


def true_energy_per_iter(truth: TruthCurve, cap_w: float) -> float:
    """True board energy per iteration at ``cap_w`` (J; per epoch for ``time_unit == "epoch"``)."""
    return truth.power_w(cap_w) * truth.iter_time_s(cap_w)


def oracle_cap(truth: TruthCurve, bound_pct: float, step_w: float = 5.0) -> OracleChoice:
    """The fixed cap (range bounds and multiples of ``step_w``) with the least true energy per iteration whose true
    slowdown is within ``bound_pct``; ties go to the higher cap. The uncapped cap always qualifies.

    With per-iteration noise and no stalls a fixed cap's whole-run slowdown and saving equal these exactly (every
    iteration's noise factor multiplies both runs); stalls only dilute them.
    """
    if not (math.isfinite(bound_pct) and bound_pct >= 0):
        raise ConfigError(f"slowdown bound must be >= 0 %, got {bound_pct!r}")
    base = true_energy_per_iter(truth, truth.uncapped_cap_w)
    best = OracleChoice(truth.uncapped_cap_w, 0.0, 0.0)
    for cap in reversed(cap_grid(truth.min_cap_w, truth.max_cap_w, step_w)):  # high to low: ties keep the higher
        slowdown = true_slowdown_pct(truth, cap)
        saving = 100.0 * (1.0 - true_energy_per_iter(truth, cap) / base)
        if slowdown <= bound_pct + 1e-9 and saving > best.saving_pct + 1e-12:
            best = OracleChoice(cap, slowdown, saving)
    return best
