"""GPU power cap -> iteration time and board power, fitted to the Zeus power-limit sweeps.

What lives here: :class:`BoardShape` (one GPU's fitted, normalized curve), :class:`BoardPowerModel` (the per-GPU
shapes, active-idle power, :meth:`~BoardPowerModel.predict`), :func:`default_power_model` and
:func:`energy_optimal_cap`. What does not: co-location and node power (:mod:`ecolaunch.sim.interference`,
:mod:`ecolaunch.sim.node`). The data, the model, the boards Zeus did not sweep and idle power:
docs/simulator.md#the-power-cap-model.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ecolaunch.errors import ConfigError
from ecolaunch.sim import fitted
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.sim.models import ZEUS_GPUS, least_squares, zeus_rows

logger = logging.getLogger(__name__)

_EPS = 1e-3
#: Parameter bounds of the fit: floor fraction, power peak ratio, time peak ratio, gamma, softness.
_LOWER = np.array([0.0, 0.8, 0.5, 0.3, 1.0])
_UPPER = np.array([0.6, 2.0, 3.0, 8.0, 40.0])
_START = np.array([0.1, 1.05, 1.0, 2.0, 6.0])
_ARCH_FAMILY = {"volta": "v100", "pascal": "p100", "maxwell": "p100", "kepler": "p100", "turing": "rtx6000"}


@functools.lru_cache(maxsize=256)
def shape_family(name: str, architecture: str | None = None, power_limit_max_w: float | None = None
                 ) -> tuple[str, bool]:
    """The Zeus-swept GPU whose shape applies to this board, and whether that is an extrapolation.

    Not extrapolated only for the boards Zeus swept: same chip *and* same maximum power limit.
    """
    up = name.upper()
    family = None
    if "V100" in up:
        family = "v100"
    elif "P100" in up:
        family = "p100"
    elif re.search(r"(?<![A-Z0-9])A40(?![0-9])", up):
        family = "a40"
    elif re.search(r"RTX\s*6000", up) and "ADA" not in up:
        family = "rtx6000"
    if family is not None:
        same_board = power_limit_max_w is None or abs(power_limit_max_w - ZEUS_GPUS[family]) < 1.0
        return family, not same_board
    arch = (architecture or "").strip().lower()
    return _ARCH_FAMILY.get(arch, "a40"), True


@dataclass(frozen=True, slots=True)
class BoardShape:
    """One GPU's fitted cap curve, in units of the board's maximum power limit."""

    gpu: str
    floor_frac: float
    power_peak_ratio: float
    time_peak_ratio: float
    gamma: float
    softness: float
    #: lowest cap / P_max in the sweep the shape was fitted on; below it see :meth:`ratios`
    min_cap_frac: float = 0.0

    def ratios(self, u: float, c: float) -> tuple[float, float]:
        """``(time / uncapped time, power / P_max)`` for uncapped power ``u`` and cap ``c`` (both / P_max).

        Below the swept range (``c < min_cap_frac``) the fitted curve is not trusted (its floor would make the
        slowdown explode): energy per iteration is held at its value at ``min_cap_frac``, i.e. power scales
        with the cap and time inversely (an assumption; monotone and continuous).
        """
        if c < self.min_cap_frac:
            t_lo, p_lo = self.ratios(u, self.min_cap_frac)
            scale = self.min_cap_frac / max(c, _EPS)
            return t_lo * scale, p_lo / scale
        c = min(c, 1.0)
        f = self.floor_frac
        kap_t = self.time_peak_ratio
        time_ratio = (self._w(u, 1.0, kap_t) / self._w(u, c, kap_t)) ** (1.0 / self.gamma)
        if u <= f:
            return time_ratio, u
        w, w1 = self._w(u, c, self.power_peak_ratio), self._w(u, 1.0, self.power_peak_ratio)
        return time_ratio, u * (f + (u - f) * w) / (f + (u - f) * w1)

    def _w(self, u: float, c: float, kappa: float) -> float:
        z = max(c - self.floor_frac, _EPS) / (kappa * max(u - self.floor_frac, _EPS))
        k = self.softness
        return (1.0 + z ** (-k)) ** (-1.0 / k)

    def ratios_array(self, u: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized :meth:`ratios` within the swept range (used by the fit and its error report)."""
        params = np.array([self.floor_frac, self.power_peak_ratio, self.time_peak_ratio, self.gamma, self.softness])
        return _ratios_array(params, u, c)


def _ratios_array(p: np.ndarray, u: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    f, kap_p, kap_t, gam, k = p
    c = np.minimum(c, 1.0)
    one = np.ones_like(c)

    def w_of(cc: np.ndarray, kap: float) -> np.ndarray:
        z = np.maximum(cc - f, _EPS) / (kap * np.maximum(u - f, _EPS))
        return (1.0 + z ** (-k)) ** (-1.0 / k)

    time_ratio = (w_of(one, kap_t) / w_of(c, kap_t)) ** (1.0 / gam)
    dyn = np.maximum(u - f, 0.0)
    power = u * (f + dyn * w_of(c, kap_p)) / np.maximum(f + dyn * w_of(one, kap_p), _EPS)
    return time_ratio, np.where(u > f, power, u)


@dataclass(frozen=True, slots=True)
class BoardPrediction:
    """A job's iteration time and board power at one power cap."""

    power_cap_w: float
    #: iteration time at this cap / uncapped iteration time (>= 1 up to fit noise)
    time_ratio: float
    power_w: float
    #: uncapped ``iter_time_s`` x ``time_ratio`` when the uncapped time is known, else None
    iter_time_s: float | None
    #: True when the board was not swept by Zeus (the shape of ``shape_gpu`` is borrowed) or the cap lies
    #: below the swept range
    extrapolated: bool
    shape_gpu: str


@dataclass(frozen=True, slots=True)
class ZeusRows:
    """The Zeus rows of one GPU as arrays: uncapped power and cap (both / P_max), measured ratios."""

    gpu: str
    workload: tuple[str, ...]
    u: np.ndarray
    c: np.ndarray
    time_ratio: np.ndarray
    power_frac: np.ndarray


@functools.lru_cache(maxsize=None)
def zeus_curves(gpu: str) -> ZeusRows:
    """Zeus rows of ``gpu`` normalized: each (workload, batch, optimizer) curve relative to its highest cap."""
    p_max = ZEUS_GPUS[gpu]
    groups: dict[tuple[str, int, str], list] = defaultdict(list)
    for row in zeus_rows(gpu):
        groups[(row.workload, row.batch_size, row.optimizer)].append(row)
    wl, u, c, t, p = [], [], [], [], []
    for key in sorted(groups):
        rows = groups[key]
        ref = max(rows, key=lambda r: r.power_limit_w)
        for r in rows:
            wl.append(key[0])
            u.append(ref.power_w / p_max)
            c.append(r.power_limit_w / p_max)
            t.append(r.time_per_epoch_s / ref.time_per_epoch_s)
            p.append(r.power_w / p_max)
    return ZeusRows(gpu, tuple(wl), np.array(u), np.array(c), np.array(t), np.array(p))


def fit_shape(curves: Sequence[ZeusRows], keep: Sequence[np.ndarray] | None = None, name: str = "") -> BoardShape:
    """Fit one :class:`BoardShape` to the rows of ``curves`` (only rows where ``keep`` is True, when given),
    minimizing the squared relative errors of time and power."""
    keep = keep or [np.ones(cs.u.size, dtype=bool) for cs in curves]
    u, c, t, p = (np.concatenate([getattr(cs, f)[k] for cs, k in zip(curves, keep)])
                  for f in ("u", "c", "time_ratio", "power_frac"))

    def residuals(x: np.ndarray) -> np.ndarray:
        tm, pm = _ratios_array(x, u, c)
        return np.concatenate([(tm - t) / t, (pm - p) / p])

    x = least_squares(residuals, _START, _LOWER, _UPPER)
    return BoardShape(name or curves[0].gpu, *map(float, x), min_cap_frac=float(c.min()))


class BoardPowerModel:
    """Per-GPU fitted cap shapes plus active-idle power fractions; see docs/simulator.md#the-power-cap-model."""

    def __init__(self, shapes: Mapping[str, BoardShape], active_idle_frac: Mapping[str, float]) -> None:
        self.shapes = dict(shapes)
        self.active_idle_frac = dict(active_idle_frac)

    def __repr__(self) -> str:
        return f"BoardPowerModel(shapes={sorted(self.shapes)})"

    @classmethod
    def fit(cls, gpus: Sequence[str] = tuple(ZEUS_GPUS), exclude_workload: str | None = None) -> BoardPowerModel:
        """Fit every GPU's shape; ``exclude_workload`` ("dataset/network") leaves one workload out."""
        shapes, idle = {}, {}
        for gpu in gpus:
            cs = zeus_curves(gpu)
            keep = None if exclude_workload is None else [np.array([w != exclude_workload for w in cs.workload])]
            shapes[gpu] = fit_shape([cs], keep)
            idle[gpu] = min(r.power_w for r in zeus_rows(gpu)) / ZEUS_GPUS[gpu]
        return cls(shapes, idle)

    def shape_for(self, gpu: GpuModel) -> tuple[BoardShape, bool]:
        """The shape used for ``gpu`` and whether it is extrapolated."""
        family, extrapolated = shape_family(gpu.name, gpu.architecture, gpu.power_limit_max_w)
        return self.shapes[family], extrapolated

    def predict(self, power_w: float, power_cap_w: float, gpu: GpuModel, iter_time_s: float | None = None
                ) -> BoardPrediction:
        """Time ratio and board power of a job whose uncapped board power is ``power_w`` at ``power_cap_w``."""
        shape, extrapolated = self.shape_for(gpu)
        if power_w <= 0 or power_cap_w <= 0:
            raise ConfigError(f"power_w={power_w} and power_cap_w={power_cap_w} must be > 0",
                              hint="pass the job's measured uncapped power and a cap in watts")
        p_max = gpu.power_limit_max_w
        ratio, power = shape.ratios(power_w / p_max, power_cap_w / p_max)
        extrapolated = extrapolated or power_cap_w / p_max < shape.min_cap_frac - 1e-9
        return BoardPrediction(
            power_cap_w=float(power_cap_w), time_ratio=ratio, power_w=power * p_max,
            iter_time_s=None if iter_time_s is None else iter_time_s * ratio,
            extrapolated=extrapolated, shape_gpu=shape.gpu,
        )

    def active_idle_power_w(self, gpu: GpuModel) -> tuple[float, bool]:
        """Board power of a GPU held by a process with almost no work (never below its idle power), and whether it
        is extrapolated."""
        family, extrapolated = shape_family(gpu.name, gpu.architecture, gpu.power_limit_max_w)
        return max(self.active_idle_frac[family] * gpu.power_limit_max_w, gpu.idle_power_w), extrapolated


@functools.lru_cache(maxsize=1)
def default_power_model() -> BoardPowerModel:
    """The model fitted on all Zeus sweeps: the shipped fit (:mod:`ecolaunch.sim.fitted`), else fitted now."""
    shipped = fitted.load()
    if shipped is not None:
        p = shipped["power"]
        return BoardPowerModel({g: BoardShape(**s) for g, s in p["shapes"].items()}, p["active_idle_frac"])
    model = BoardPowerModel.fit()
    logger.debug("fitted power-cap shapes: %s", model.shapes)
    return model


def energy_optimal_cap(power_w: float, gpu: GpuModel, *, allowed_slowdown_pct: float | None = None,
                       static_power_w: float = 0.0, step_w: float = 25.0,
                       model: BoardPowerModel | None = None) -> BoardPrediction:
    """The cap on a ``step_w`` grid from the board's max down to its min that minimizes energy per iteration
    ``(board power + static_power_w) x time``, among caps whose slowdown is within ``allowed_slowdown_pct``.

    ``static_power_w`` is the job's share of power that does not depend on the cap (host, other idle parts);
    with 0 this is GPU-only energy, which favours low caps (docs/simulator.md, "Energy accounting").
    """
    model = model or default_power_model()
    caps, cap = [], gpu.power_limit_max_w
    while cap >= gpu.power_limit_min_w - 1e-9:
        caps.append(cap)
        cap -= step_w
    best: BoardPrediction | None = None
    best_cost = float("inf")
    for cap in caps:
        pred = model.predict(power_w, cap, gpu)
        if allowed_slowdown_pct is not None and pred.time_ratio > 1.0 + allowed_slowdown_pct / 100.0:
            continue
        cost = (pred.power_w + static_power_w) * pred.time_ratio
        if cost < best_cost - 1e-12:
            best, best_cost = pred, cost
    # the max cap has a time ratio of exactly 1, so it qualifies unless the bound is negative
    return best if best is not None else model.predict(power_w, gpu.power_limit_max_w, gpu)
