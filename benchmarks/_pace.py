"""Pace-matching caps for one synchronous job over unequal GPUs: no rank waits at full power for a slower one.

In a synchronous data-parallel job every rank waits at the all-reduce for the slowest one, so the slowest rank sets
the iteration time of all. A rank on a faster board (a V100 beside a P100) finishes its compute early and waits,
drawing power for nothing: Perseus (Chung et al., SOSP '24; ml-energy/zeus) calls it *energy bloat* and removes it
by slowing whatever is not on the critical path down to exactly its pace. Here that is done with power caps.

What lives here: :class:`RankCurve` (one rank as this module takes it: its board's curve, its cap bounds, the cap the
job's own choice gives it and its board's idle power), :class:`WaitPower` (what a waiting GPU is taken to draw),
:func:`rank_energy_j` (a rank's energy per iteration, computing then waiting), :func:`pace_caps` ->
:class:`PacePlan` of :class:`RankCap` (per-rank caps, the predicted iteration time, each rank's energy per iteration
and a one-line reason). Pure: no torch, no I/O, no clock.

What does not: the job's curve (:class:`ecolaunch.jobmodel.capcurve.CapCurve`, fitted from each board's profile), the
job's own cap choice (:func:`ecolaunch.jobmodel.capchoice.job_cap_choice`: this module starts from it), the cap grid
(:func:`ecolaunch.jobmodel.powercap.cap_grid`), applying caps (the launcher paces by feedback instead,
:mod:`ecolaunch.profile.pacing`: it does not call this), and the figures (``pace_matching.py`` beside this module and
``docs/pace-matching.md``). It lives beside the benchmark because only the benchmark runs it.

**The rule.** The pace is the slowest predicted compute time over the ranks, each at its own starting cap (the
job's choice, within its bounds). A rank is given the cap on the grid (:data:`~ecolaunch.jobmodel.capchoice.
CHOICE_STEP_W` steps within its bounds, never above its starting cap) with the least predicted energy per iteration
whose predicted compute time *plus the margin the cap choice keeps back there*
(:func:`~ecolaunch.jobmodel.capchoice.cap_margin_pct`, in points of the rank's uncapped time) stays at or under the
pace. The margin is the project's one margin of "what a curve does not know" (its measurement noise, the model's
held-out error, more below the lowest measured cap); with it a capped rank stays off the critical path within what
was measured, so the job's iteration time does not move within noise. A rank where no lower cap keeps the pace
with its margin (the slowest rank, every rank of equal GPUs) keeps its starting cap. With
:attr:`WaitPower.AT_CAP` the least energy is the lowest such cap (energy per iteration is then the power at the cap
times the iteration time); with :attr:`WaitPower.IDLE` a higher cap can cost less (waiting is cheap, and below the
energy-optimal cap computing slower costs more energy).

**What a waiting GPU draws** is not measured in any data ecolaunch ships or cites (Zeus's and the H200 sweeps
record power while computing only), so it is an assumption, with two bounds: :attr:`WaitPower.IDLE`, the board's
idle power (the catalogue's figure, itself an assumption: :mod:`ecolaunch.devices.catalogue`), and
:attr:`WaitPower.AT_CAP`, the power the rank draws computing at its cap (a rank spinning in a collective kernel runs
less work than its training kernels and cannot draw more than its cap). Results should be reported at both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel.capcurve import CapCurve
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, MARGIN_Z, cap_margin_pct
from ecolaunch.jobmodel.powercap import cap_grid

__all__ = ["PacePlan", "RankCap", "RankCurve", "WaitPower", "pace_caps", "rank_energy_j"]

_EPS = 1e-9


class WaitPower(Enum):
    """What a rank draws while it waits for the slowest one (module docstring: an assumption with two bounds).

    ``IDLE``: its board's idle power (the low bound). ``AT_CAP``: what it draws computing at its cap (the high bound).
    """

    IDLE = "idle"
    AT_CAP = "at-cap"

    def power_w(self, idle_power_w: float, power_at_cap_w: float) -> float:
        """The waiting power (W) under this assumption, given the board's idle power and the rank's power at its cap."""
        return idle_power_w if self is WaitPower.IDLE else power_at_cap_w


@dataclass(frozen=True, slots=True)
class RankCurve:
    """One rank of a synchronous job as :func:`pace_caps` takes it.

    ``name`` identifies the rank (the GPU's UUID, or a label); ``curve`` is the job's curve on this rank's board
    (absolute iteration times there: a faster board's curve is faster); ``bounds_w`` the caps the admin allows on
    that GPU ``(min, max)``; ``cap_w`` the cap the job's own choice gives it (the start; never raised);
    ``idle_power_w`` its board's idle power (what :attr:`WaitPower.IDLE` reads).
    """

    name: str
    curve: CapCurve
    bounds_w: tuple[float, float]
    cap_w: float
    idle_power_w: float


@dataclass(frozen=True, slots=True)
class RankCap:
    """What :func:`pace_caps` gives one rank: its cap, and at it the predicted compute time, power while computing,
    time spent waiting and energy per iteration (computing plus waiting); ``reason`` is one line for logs."""

    name: str
    cap_w: float
    start_cap_w: float
    compute_time_s: float
    power_w: float
    wait_s: float
    energy_j_per_iter: float
    reason: str

    @property
    def lowered(self) -> bool:
        return self.cap_w < self.start_cap_w - _EPS


@dataclass(frozen=True, slots=True)
class PacePlan:
    """Per-rank caps (in the order given), the predicted iteration time (the pace: the slowest rank's compute time),
    the job's predicted energy per iteration (all ranks) and the same at the starting caps, under ``wait_power``."""

    ranks: tuple[RankCap, ...]
    iter_time_s: float
    energy_j_per_iter: float
    start_energy_j_per_iter: float
    wait_power: WaitPower

    @property
    def caps_w(self) -> tuple[float, ...]:
        return tuple(r.cap_w for r in self.ranks)

    @property
    def saving_pct(self) -> float:
        """Predicted energy per iteration saved against the starting caps (%)."""
        return 100.0 * (1.0 - self.energy_j_per_iter / self.start_energy_j_per_iter)


def rank_energy_j(compute_time_s: float, power_w: float, iter_time_s: float, wait_power_w: float) -> float:
    """A rank's energy per iteration: ``power_w`` while it computes for ``compute_time_s``, then ``wait_power_w``
    for the rest of the job's ``iter_time_s`` (none when it is the slowest)."""
    return power_w * compute_time_s + wait_power_w * max(0.0, iter_time_s - compute_time_s)


def pace_caps(ranks: Sequence[RankCurve], *, wait_power: WaitPower = WaitPower.AT_CAP,
              step_w: float = CHOICE_STEP_W, z: float = MARGIN_Z) -> PacePlan:
    """Per-rank caps that slow every rank that would wait to the slowest rank's pace, and no further (module
    docstring: the rule, its margin with ``z``, and ``wait_power``). The job's iteration time is predicted unchanged.

    Raises:
        ConfigError: no ranks, two ranks with one name, bounds that are not ``0 < min <= max`` finite watts, a
            starting cap outside its rank's bounds, a negative or non-finite idle power, a bad ``step_w`` or ``z``.
    """
    _check(ranks, step_w, z)
    start = [r.curve.predict(r.cap_w) for r in ranks]
    pace = max(p.iter_time_s for p in start)
    slowest = max(range(len(ranks)), key=lambda i: start[i].iter_time_s)
    out: list[RankCap] = []
    for r, s in zip(ranks, start):
        ref_s = r.curve.reference_iter_time_s
        best_cap, best_e, pred = r.cap_w, _energy(r, s.iter_time_s, s.power_w, pace, wait_power), s
        for cap in cap_grid(r.bounds_w[0], r.bounds_w[1], step_w):
            if cap >= r.cap_w - _EPS:
                break
            p = r.curve.predict(cap)
            keeps = p.iter_time_s + ref_s * cap_margin_pct(r.curve, cap, z) / 100.0 <= pace * (1.0 + _EPS)
            e = _energy(r, p.iter_time_s, p.power_w, pace, wait_power)
            if keeps and e < best_e * (1.0 - 1e-9):
                best_cap, best_e, pred = cap, e, p
        wait_s = max(0.0, pace - pred.iter_time_s)
        if best_cap < r.cap_w - _EPS:
            why = (f"cap {best_cap:.0f} W (from {r.cap_w:.0f} W): computes {pred.iter_time_s * 1e3:.4g} ms of the "
                   f"{pace * 1e3:.4g} ms pace set by {ranks[slowest].name} (margin kept), "
                   f"{100.0 * (1.0 - best_e / _energy(r, s.iter_time_s, s.power_w, pace, wait_power)):.1f} % less "
                   f"energy per iteration, waiting at {wait_power.value} power")
        elif r is ranks[slowest]:
            why = f"cap {r.cap_w:.0f} W kept: this rank sets the pace ({pace * 1e3:.4g} ms per iteration)"
        else:
            why = (f"cap {r.cap_w:.0f} W kept: no lower cap keeps it within the {pace * 1e3:.4g} ms pace with its "
                   f"margin" + ("" if wait_s <= _EPS else f" and saves energy (waits {wait_s * 1e3:.3g} ms)"))
        out.append(RankCap(r.name, best_cap, r.cap_w, pred.iter_time_s, pred.power_w, wait_s, best_e, why))
    start_e = sum(_energy(r, s.iter_time_s, s.power_w, pace, wait_power) for r, s in zip(ranks, start))
    return PacePlan(tuple(out), pace, sum(rc.energy_j_per_iter for rc in out), start_e, wait_power)


def _energy(r: RankCurve, compute_s: float, power_w: float, pace_s: float, wait_power: WaitPower) -> float:
    return rank_energy_j(compute_s, power_w, pace_s, wait_power.power_w(r.idle_power_w, power_w))


def _check(ranks: Sequence[RankCurve], step_w: float, z: float) -> None:
    if not ranks:
        raise ConfigError("pace-matching needs at least one rank", hint="pass one RankCurve per GPU of the job")
    names = [r.name for r in ranks]
    if len(set(names)) != len(names):
        raise ConfigError(f"rank names must be unique, got {names!r}", hint="name each rank by its GPU's UUID")
    if not (step_w > 0 and math.isfinite(step_w)):
        raise ConfigError(f"cap step must be a positive number of watts, got {step_w!r}")
    if not (z >= 0 and math.isfinite(z)):
        raise ConfigError(f"margin quantile z must be >= 0, got {z!r}", hint="0 keeps no margin")
    for r in ranks:
        if not isinstance(r.curve, CapCurve):
            raise ConfigError(f"rank {r.name!r}: curve must be a CapCurve, got {type(r.curve).__name__}",
                              hint="fit it from the rank's board's profile: ecolaunch.jobmodel.capcurve.fit_curve")
        lo, hi = r.bounds_w
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise ConfigError(f"rank {r.name!r}: cap bounds must be 0 < min <= max finite watts, got {r.bounds_w!r}",
                              hint="pass the GPU's bounds under the admin policy (admin.rules.cap_bounds_w)")
        if not (math.isfinite(r.cap_w) and lo - _EPS <= r.cap_w <= hi + _EPS):
            raise ConfigError(f"rank {r.name!r}: starting cap {r.cap_w!r} W lies outside its bounds {lo:g}-{hi:g} W",
                              hint="clip the job's cap to each rank's bounds")
        if not (math.isfinite(r.idle_power_w) and r.idle_power_w >= 0):
            raise ConfigError(f"rank {r.name!r}: idle power must be >= 0 W, got {r.idle_power_w!r}")
