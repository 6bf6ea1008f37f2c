"""Per-job energy: attributing the energy of shared GPUs to the jobs on them.

What lives here: :class:`Interval` (one GPU over a stretch of time with a fixed set of resident jobs),
:func:`attribute` (the attribution rule, a pure function), :func:`intervals_from_samples` (cuts a sampled
series at the moments residency changed) and :func:`demand_weight`. What does not: sampling (``sampler``), knowing
who shares a GPU (the state graph, passed in by the caller). The rule, and why: docs/accounting.md, "A shared GPU's
energy, split among its jobs".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ecolaunch.errors import ConfigError
from ecolaunch.profile.sampler import GpuSample


@dataclass(frozen=True, slots=True)
class Interval:
    """One GPU over ``duration_s`` seconds: its energy and the resident jobs with their demand weights.

    A weight is the job's dynamic power demand in watts (see :func:`demand_weight`), or None when unknown.
    """

    duration_s: float
    energy_j: float
    residents: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attribution:
    """Energy per job (J), and what no resident job could be charged with."""

    energy_j: dict[str, float]
    unattributed_j: float = 0.0


def demand_weight(profile_power_w: float | None, idle_power_w: float | None) -> float | None:
    """A job's dynamic power demand: its solo power above idle (>= 0), or None when its power is unknown."""
    if profile_power_w is None:
        return None
    return max(0.0, profile_power_w - (idle_power_w or 0.0))


def attribute(intervals: Sequence[Interval], idle_power_w: float | None) -> Attribution:
    """Split the energy of one GPU's ``intervals`` among their resident jobs by the module's rule."""
    if idle_power_w is not None and not (idle_power_w >= 0 and math.isfinite(idle_power_w)):
        raise ConfigError(f"idle power must be a finite number of watts >= 0, got {idle_power_w!r}")
    out: dict[str, float] = {}
    unattributed = 0.0
    for iv in intervals:
        if not (iv.duration_s >= 0 and iv.energy_j >= 0 and math.isfinite(iv.duration_s) and math.isfinite(iv.energy_j)):
            raise ConfigError(f"interval needs a duration and energy >= 0, got {iv.duration_s!r} s, {iv.energy_j!r} J")
        jobs = list(iv.residents)
        if not jobs:
            unattributed += iv.energy_j
            continue
        idle = min(iv.energy_j, (idle_power_w or 0.0) * iv.duration_s)
        active = iv.energy_j - idle
        weights = _weights(iv.residents)
        total = sum(weights.values())
        for job in jobs:
            share = weights[job] / total if total > 0 else 1.0 / len(jobs)
            out[job] = out.get(job, 0.0) + idle / len(jobs) + active * share
    return Attribution(out, unattributed)


def _weights(residents: Mapping[str, float | None]) -> dict[str, float]:
    for job, w in residents.items():
        if w is not None and not (w >= 0 and math.isfinite(w)):
            raise ConfigError(f"demand weight of job {job} must be >= 0 W, got {w!r}")
    known = [w for w in residents.values() if w is not None]
    fallback = sum(known) / len(known) if known else 1.0
    return {job: fallback if w is None else w for job, w in residents.items()}


def intervals_from_samples(samples: Sequence[GpuSample],
                           residency: Sequence[tuple[float, Mapping[str, float | None]]]) -> list[Interval]:
    """Cut one GPU's samples into intervals of constant residency.

    ``residency`` lists ``(since_s, residents)`` changes in time order; the residents in force at a time are
    those of the latest change at or before it (before the first change: the first entry's). Each interval
    between consecutive samples is split at the changes inside it, its energy shared in proportion to time.
    """
    if not residency:
        raise ConfigError("residency needs at least one entry", hint="pass [(start time, {job id: weight})]")
    changes = sorted(residency, key=lambda c: c[0])
    out: list[Interval] = []
    for a, b in zip(samples, samples[1:]):
        span = b.t_s - a.t_s
        if span <= 0:
            continue
        energy = max(0.0, b.energy_j - a.energy_j)
        cuts = [a.t_s] + [t for t, _ in changes if a.t_s < t < b.t_s] + [b.t_s]
        for lo, hi in zip(cuts, cuts[1:]):
            out.append(Interval(hi - lo, energy * (hi - lo) / span, dict(_residents_at(changes, lo))))
    return out


def _residents_at(changes: Sequence[tuple[float, Mapping[str, float | None]]], t: float) -> Mapping[str, float | None]:
    current = changes[0][1]
    for since, residents in changes:
        if since <= t:
            current = residents
        else:
            break
    return current
