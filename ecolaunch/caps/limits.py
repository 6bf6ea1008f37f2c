"""The host's power budget (``[power] max_total_w``): the arithmetic that chooses the caps of new and running jobs
together to meet it.

What lives here: :class:`GpuDemand` (one GPU as the budget sees it), :func:`allocate` (caps whose sum fits the
budget), :func:`host_demands`, :func:`rebalance` and :func:`budget_ceilings` (what the state graph records, and
what a running launcher may raise its cap to), :func:`trusted_budget_caps`, :func:`job_floor_w` and
:func:`no_curve_floor_w` (the lowest cap a job may get), :func:`least_total_w` (the least a request can ever count).
Here, below the policies, because the cap keepers (:mod:`ecolaunch.caps.keeper`) hold caps to the budget too.
What does not: the wrapper around every placement policy and the booking of a decision
(``ecolaunch.policy.budgeted``), validating the budget against the host (:func:`ecolaunch.admin.lint.check_power_budget`),
applying caps (``ecolaunch.caps.job``). How the budget works: docs/admin.md#a-power-budget-for-the-whole-machine
and #how-the-budget-chooses-the-caps; the no-curve floor's share and its data: docs/threat-model.md.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ecolaunch.admin.rules import Rules, cap_bounds_w, may_manage_gpu
from ecolaunch.errors import EcolaunchError
from ecolaunch.jobmodel.gpu import clip_w
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, cap_margin_pct
from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR, CapPrior, Priors, default_prior, fit_curve
from ecolaunch.jobmodel.powercap import cap_grid
from ecolaunch.state.graph import GpuNode, Host, Job, StateGraph
from ecolaunch.validate import is_number, number_or_none

__all__ = ["AT_CEILING_W", "EPS_W", "GRID_W", "NO_CURVE_FLOOR_SHARE", "GpuDemand", "Newcomer", "allocate", "asked_caps",
           "bounds_or_none", "budget_ceilings", "budgeted_gpus", "budgeted_on_host", "clip_cap_w", "curve_at",
           "held_ceiling_w", "host_demands", "job_cap_bounds", "job_floor_w", "least_total_w", "may_cap", "no_curve_floor_w", "rebalance",
           "trusted_budget_caps", "wish_under_ceiling"]

logger = logging.getLogger(__name__)

#: the grid caps move on under the budget: the cap choice's (NVML takes any whole watt; 5 W is finer than a curve)
GRID_W = CHOICE_STEP_W
#: the lowest share of its board's default power limit a job without a curve is ever capped to (docs/threat-model.md, round two)
NO_CURVE_FLOOR_SHARE = 0.8
EPS_W = 1e-6
#: a limit within this many watts of a ceiling is taken as at it (drivers round to whole watts or milliwatts)
AT_CEILING_W = 0.5


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """One GPU as the budget sees it.

    ``wanted_w``: the cap it runs at without the budget (a GPU without a job: its minimum limit); ``floor_w``: the
    lowest cap it may get (equal to ``wanted_w`` when it cannot be lowered); ``group``: GPUs of one group take one
    cap (a multi-GPU job's; None: alone); ``curve``: predicted ``(cap_w, slowdown_pct, energy_j_per_iter)`` of its
    job on the grid, ascending by cap; ``job_id``: the job it runs (None: none, or several).
    """

    uuid: str
    wanted_w: float
    floor_w: float
    group: str | None = None
    curve: tuple[tuple[float, float, float], ...] = ()
    job_id: str | None = None

    @property
    def fixed(self) -> bool:
        return self.floor_w >= self.wanted_w - EPS_W


# --- allocation ------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Unit:
    key: str
    gpus: list[GpuDemand]
    cap_w: float
    floor_w: float
    curve: tuple[tuple[float, float, float], ...]



def clip_cap_w(rules: Rules, gpu: Any, watts: float) -> tuple[float, tuple[float, float]]:
    """``watts`` inside what the admin policy allows on ``gpu`` (a GpuNode or a snapshot with a power-limit range),
    and those bounds. The one place a cap is clipped on one GPU: admission, the agent, root launchers, the guard,
    :class:`~ecolaunch.caps.job.JobCaps` (the profiler, the closed loop, calibration) and the advice of an
    unprivileged launcher all go through it (:func:`~ecolaunch.jobmodel.gpu.clip_w`, the clamp itself)."""
    bounds = cap_bounds_w(rules, gpu.name, gpu.index, gpu.power_limit_min_w, gpu.power_limit_max_w)
    return clip_w(watts, bounds), bounds


def job_cap_bounds(rules: Rules, gpus: Sequence[Any]) -> tuple[float, float] | None:
    """The caps (W) every one of the job's GPUs may run at under the admin policy; None if there are none.

    One cap for the whole job (data-parallel ranks wait for the slowest GPU), so the bounds intersect.
    """
    lo, hi = 0.0, math.inf
    for g in gpus:
        if g.power_limit_min_w is None or g.power_limit_max_w is None:
            return None
        a, b = cap_bounds_w(rules, g.name, g.index, g.power_limit_min_w, g.power_limit_max_w)
        lo, hi = max(lo, a), min(hi, b)
    return (lo, hi) if gpus and lo <= hi else None


def allocate(gpus: Sequence[GpuDemand], budget_w: float, *, step_w: float = GRID_W) -> dict[str, float] | None:
    """A cap for every GPU (uuid -> W) whose sum is at most ``budget_w``, each between its floor and its wanted cap,
    lowered where a watt costs its job the least slowdown (docs/admin.md#how-the-budget-chooses-the-caps); None when the floors alone
    exceed the budget. Pure and deterministic (ties break by group, then uuid)."""
    units: dict[str, _Unit] = {}
    for g in gpus:
        key = f"g:{g.group}" if g.group is not None else f"u:{g.uuid}"
        unit = units.get(key)
        if unit is None:
            units[key] = _Unit(key, [g], g.wanted_w, g.floor_w, g.curve)
        else:  # one cap for the group: the highest wish, the highest floor
            unit.gpus.append(g)
            unit.cap_w, unit.floor_w = max(unit.cap_w, g.wanted_w), max(unit.floor_w, g.floor_w)
    for unit in units.values():
        unit.floor_w = min(unit.floor_w, unit.cap_w)
    if sum(u.floor_w * len(u.gpus) for u in units.values()) > budget_w + EPS_W:
        return None
    total = sum(u.cap_w * len(u.gpus) for u in units.values())
    heap: list[tuple[float, float, str, float]] = []
    for unit in units.values():
        _push(heap, unit, step_w)
    while total > budget_w + EPS_W and heap:
        _, _, key, below = heapq.heappop(heap)
        unit = units[key]
        total -= (unit.cap_w - below) * len(unit.gpus)
        unit.cap_w = below
        _push(heap, unit, step_w)
    return {g.uuid: u.cap_w for u in units.values() for g in u.gpus}


def _push(heap: list, unit: _Unit, step_w: float) -> None:
    """Queue the unit's next step down, keyed by predicted slowdown (points) per watt saved, then energy per watt."""
    if unit.cap_w <= unit.floor_w + EPS_W:
        return
    below = max(unit.floor_w, step_w * (math.ceil(unit.cap_w / step_w - 1e-9) - 1))
    saved_w = (unit.cap_w - below) * len(unit.gpus)
    slow_now, energy_now = curve_at(unit.curve, unit.cap_w)
    slow_below, energy_below = curve_at(unit.curve, below)
    cost = (slow_below - slow_now) / saved_w if unit.curve else 1.0
    gain = (energy_below - energy_now) / saved_w if unit.curve and energy_now > 0 else 0.0
    heapq.heappush(heap, (round(cost, 9), round(gain / max(energy_now, 1e-12), 12), unit.key, below))


def curve_at(curve: Sequence[tuple[float, float, float]], cap_w: float) -> tuple[float, float]:
    """Slowdown (%) and energy per iteration at ``cap_w``, linear between the curve's caps."""
    if not curve:
        return 0.0, 0.0
    caps = [c for c, _, _ in curve]
    i = bisect.bisect_left(caps, cap_w)
    if i <= 0:
        return curve[0][1], curve[0][2]
    if i >= len(curve):
        return curve[-1][1], curve[-1][2]
    (c0, s0, e0), (c1, s1, e1) = curve[i - 1], curve[i]
    f = (cap_w - c0) / (c1 - c0) if c1 > c0 else 1.0
    return s0 + f * (s1 - s0), e0 + f * (e1 - e0)


# --- one job's curve, tabled on the grid under its bound --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CapTable:
    """The floor of one job (lowest grid cap within its bound, margin included) and its curve read on the grid:
    rows of (cap, predicted slowdown %, predicted energy per iteration)."""

    floor_w: float
    rows: tuple[tuple[float, float, float], ...]


@functools.lru_cache(maxsize=4096)
def cap_table(points: tuple[CapPoint, ...], bounds_w: tuple[float, float],
              allowed_slowdown_pct: float, prior: CapPrior = DEFAULT_PRIOR) -> CapTable | None:
    """The job's floor and its curve (:class:`~ecolaunch.jobmodel.capcurve.CapCurve`, read with ``prior``) on the
    :data:`GRID_W` grid within ``bounds_w``; None without points. Cached (the prior is part of the key): the
    simulator asks for every running job at every arrival and departure."""
    if not points:
        return None
    lo, hi = bounds_w
    try:
        model = fit_curve(points, prior)
        grid = cap_grid(lo, hi, GRID_W)
        ref = model.predict(hi).iter_time_s
        rows = []
        for cap in grid:
            pred = model.predict(cap)
            slow = 100.0 * (pred.iter_time_s / ref - 1.0)
            margin = cap_margin_pct(model, cap) if cap < hi - EPS_W else 0.0
            rows.append((cap, slow, slow + margin, pred.iter_time_s * pred.power_w))
    except EcolaunchError:
        return None
    floor = hi
    for cap, _, kept, _ in reversed(rows):  # the caps from the top down that keep the bound, margin included
        if kept > allowed_slowdown_pct + 1e-6:
            break
        floor = cap
    return CapTable(floor, tuple((c, s, e) for c, s, _, e in rows))



def job_floor_w(job: Job, nodes: Sequence[GpuNode], rules: Rules) -> float | None:
    """The lowest cap at which running ``job`` stays within its bound: by its own curve (margin included), else, without
    a curve, :func:`no_curve_floor_w`; None without cap bounds (the GPU cannot be capped)."""
    return profile_floor_w(job.profile, _bound_pct(job, rules), nodes, rules)


def profile_floor_w(profile: Profile | None, allowed_slowdown_pct: float, nodes: Sequence[Any],
                    rules: Rules, prior: CapPrior = DEFAULT_PRIOR) -> float | None:
    """:func:`job_floor_w` for a job known by its profile and bound (a newcomer not booked yet)."""
    bounds = bounds_or_none(rules, nodes)
    if bounds is None:
        return None
    curve = cap_table(profile.curve_points(bounds[1]) if profile else (), bounds, float(allowed_slowdown_pct), prior)
    return no_curve_floor_w(rules, nodes) if curve is None else curve.floor_w


def no_curve_floor_w(rules: Rules, nodes: Sequence[Any]) -> float | None:
    """The lowest cap a job without a curve may get on ``nodes``: the admin's minimum for them (``[caps]``), and no
    lower than :data:`NO_CURVE_FLOOR_SHARE` of the highest board default limit (the board maximum where the driver
    reports no default), on the :data:`GRID_W` grid, within the policy's bounds; None without cap bounds."""
    bounds = bounds_or_none(rules, nodes)
    if bounds is None:
        return None
    defaults = [g.power_limit_default_w if number_or_none(g.power_limit_default_w, positive=True) is not None
                else g.power_limit_max_w
                for g in nodes]
    share = NO_CURVE_FLOOR_SHARE * max(float(w) for w in defaults)
    return clip_w(GRID_W * math.ceil(share / GRID_W - 1e-9), bounds)


# --- the GPUs of one host ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Newcomer:
    """The job being placed: its id, GPUs, the cap its placement wants (W), its profile and its bound (%)."""

    job_id: str
    gpus: tuple[str, ...]
    wanted_w: float | None
    profile: Profile | None
    allowed_slowdown_pct: float


def host_demands(state: StateGraph, host: Host, rules: Rules, newcomer: Newcomer | None = None,
                 priors: Priors = default_prior) -> list[GpuDemand]:
    """Every GPU of ``host`` as the budget sees it (docs/admin.md#how-the-budget-chooses-the-caps), with ``newcomer`` placed as it asks; each job's
    curve read with its prior (``priors``, by job id)."""
    holders: dict[str, list[str]] = {}
    units: dict[str, tuple[tuple[str, ...], float | None, Profile | None, float, Job | None]] = {}
    for job in state.running_jobs():
        if job.host != host.name:
            continue
        gpus = tuple(u for u in job.gpus if u in host.gpus)
        for u in gpus:
            holders.setdefault(u, []).append(job.id)
        units[job.id] = (gpus, None, job.profile, _bound_pct(job, rules), job)
    if newcomer is not None:
        gpus = tuple(u for u in newcomer.gpus if u in host.gpus)
        for u in gpus:
            holders.setdefault(u, []).append(newcomer.job_id)
        units[newcomer.job_id] = (gpus, newcomer.wanted_w, newcomer.profile, newcomer.allowed_slowdown_pct, None)
    out: dict[str, GpuDemand] = {}
    for job_id, (gpus, wanted, profile, bound, job) in units.items():
        nodes = [host.gpus[u] for u in gpus]
        if not nodes or any(len(holders[u]) > 1 for u in gpus) or not all(may_cap(rules, g) for g in nodes):
            continue  # shared or not ecolaunch's to cap: fixed below
        bounds = bounds_or_none(rules, nodes)
        if bounds is None:
            continue
        hi = bounds[1]
        if job is not None:
            wanted = max(_wanted_w(job, u, hi) for u in gpus)
        elif wanted is None:
            limits = [g.power_limit_w for g in nodes if g.power_limit_w is not None]
            wanted = min(hi, max(limits)) if limits else hi
        wanted = clip_w(wanted, bounds)
        curve = cap_table(profile.curve_points(hi) if profile else (), bounds, float(bound), priors(job_id))
        floor = min(curve.floor_w, wanted) if curve is not None else wanted
        for u in gpus:
            out[u] = GpuDemand(u, wanted, floor, job_id, curve.rows if curve is not None else (), job_id)
    for u, gpu in host.gpus.items():
        if u not in out:
            on = holders.get(u, [])
            count = _fixed_count_w(state, rules, gpu, on, units, priors)
            out[u] = GpuDemand(u, count, count, job_id=on[0] if len(on) == 1 else None)
    return [out[u] for u in sorted(out)]


def _fixed_count_w(state: StateGraph, rules: Rules, gpu: GpuNode, holders: list[str], units: dict,
                   priors: Priors) -> float:
    """What a GPU that the budget cannot move counts: idle, its minimum limit; shared, its budget cap; else its
    limit as found (or what its job wants)."""
    limit = gpu.power_limit_w if gpu.power_limit_w is not None else gpu.power_limit_max_w
    if not holders:
        if gpu.foreign_pids:
            return float(limit or 0.0)  # a process outside ecolaunch: it runs at the limit it has
        return float(gpu.power_limit_min_w if gpu.power_limit_min_w is not None else (limit or 0.0))
    bounds = bounds_or_none(rules, [gpu]) if may_cap(rules, gpu) else None
    if bounds is None:
        return float(limit or 0.0)
    wants, floors = [], []
    for job_id in holders:
        _, wanted, profile, bound, job = units[job_id]
        wants.append(_wanted_w(job, gpu.uuid, bounds[1]) if job is not None else
                     (wanted if wanted is not None else min(bounds[1], limit or bounds[1])))
        floors.append(profile_floor_w(profile, bound, [gpu], rules, priors(job_id)) or bounds[0])
    top = clip_w(max(wants), bounds)
    booked = number_or_none(state.budget_caps_w.get(gpu.uuid), positive=True)
    if booked is not None and len(holders) > 1:
        # a shared GPU keeps the budget cap it was booked at, as the file says; the file is every member's to
        # write, so the value counts only between the highest floor of the jobs on it and the most they want
        return clip_w(max(booked, max(floors)), (bounds[0], top))
    return top


def _wanted_w(job: Job, uuid: str, top_w: float) -> float:
    """The cap a running job wants on ``uuid`` without the budget: its decision's record of it, else the cap its
    decision set (placed before any budget), else its wish; uncapped: ``top_w``."""
    decision = job.decision if isinstance(job.decision, dict) else {}
    predicted = decision.get("predicted")
    budget = predicted.get("budget") if isinstance(predicted, dict) else None
    recorded = budget.get("wanted_w") if isinstance(budget, dict) else None
    for source in (recorded, decision.get("power_caps_w"), job.power_caps_w):
        watts = number_or_none(source.get(uuid), positive=True) if isinstance(source, dict) else None
        if watts is not None:
            return watts
    return top_w


def _booked_w(state: StateGraph, demand: GpuDemand) -> float:
    """The budget cap the job on ``demand``'s GPU was booked at (its decision's record, from its validated job
    file), else its floor: a job may be held there, never lower (a forged record harms only its own job)."""
    job = state.jobs.get(demand.job_id or "")
    decision = job.decision if job is not None and isinstance(job.decision, dict) else {}
    predicted = decision.get("predicted")
    budget = predicted.get("budget") if isinstance(predicted, dict) else None
    caps = budget.get("caps_w") if isinstance(budget, dict) else None
    watts = number_or_none(caps.get(demand.uuid), positive=True) if isinstance(caps, dict) else None
    return demand.floor_w if watts is None else watts


def bounds_or_none(rules: Rules, nodes: Sequence[GpuNode]) -> tuple[float, float] | None:
    try:
        return job_cap_bounds(rules, nodes)  # type: ignore[arg-type]
    except EcolaunchError:
        return None  # a driver reporting a broken range: the GPU is fixed at its limit


def may_cap(rules: Rules, gpu: GpuNode) -> bool:
    return may_manage_gpu(rules, gpu.uuid, gpu.index) and gpu.power_limit_min_w is not None \
        and gpu.power_limit_max_w is not None


def _bound_pct(job: Job, rules: Rules) -> float:
    """A running job's slowdown bound: its request's (0 included), else the policy's default."""
    value = job.request.get("allowed_slowdown_pct")
    if not is_number(value) or value < 0:
        return rules.default_slowdown_pct
    return float(value)


def budgeted_on_host(state: StateGraph, host: Host, rules: Rules) -> set[str]:
    """The GPUs of ``host`` that hold a budget cap: those of running jobs that ecolaunch may cap."""
    return {u for job in state.running_jobs() if job.host == host.name for u in job.gpus
            if u in host.gpus and may_cap(rules, host.gpus[u]) and bounds_or_none(rules, [host.gpus[u]]) is not None}


def budgeted_gpus(state: StateGraph, rules: Rules) -> set[str]:
    """The GPUs that hold a budget cap now (of every host): what :func:`rebalance` returns caps for."""
    return set().union(*(budgeted_on_host(state, h, rules) for h in state.hosts.values()))


def least_total_w(rules: Rules, gpus: Sequence[GpuNode], usable: Sequence[GpuNode], nproc: int) -> float | None:
    """The least the budget can count on a host of ``gpus`` with a job running on ``nproc`` of ``usable``: the job's
    GPUs at the lowest cap the admin allows on them (``[caps]``; their limit as found where ecolaunch may not cap
    them), chosen where that costs least, every other GPU at its minimum limit (docs/admin.md#how-the-budget-chooses-the-caps). A request above
    the budget by this count can never fit, however long it waits. None when ``usable`` has fewer than ``nproc``
    GPUs."""
    if len(usable) < nproc:
        return None

    def count(gpu: GpuNode) -> float:
        return float(gpu.power_limit_min_w if gpu.power_limit_min_w is not None else gpu.power_limit_w or 0.0)

    def lowest(gpu: GpuNode) -> float:
        bounds = bounds_or_none(rules, [gpu]) if may_cap(rules, gpu) else None
        if bounds is not None:
            return bounds[0]
        return float(gpu.power_limit_w if gpu.power_limit_w is not None else gpu.power_limit_max_w or 0.0)

    extra = sorted(lowest(g) - count(g) for g in usable)[:nproc]
    return sum(count(g) for g in gpus) + sum(extra)


# --- a running job under its ceiling: the one rule the launcher and the simulator follow -----------------------
def asked_caps(job: Job) -> dict[str, float | None]:
    """What a job asks per GPU before any budget, read when it is placed (``job.power_caps_w`` then holds its
    decision's caps): no cap where its decision set none (the budget's ceiling alone then holds the GPU), else the
    cap its placement wanted before the budget (``predicted.budget.wanted_w``), else the one it set. A running
    launcher's closed loop replaces a GPU's ask with its own cap (``JobCaps.set_cap``)."""
    decision = job.decision if isinstance(job.decision, dict) else {}
    predicted = decision.get("predicted")
    budget = predicted.get("budget") if isinstance(predicted, dict) else None
    wanted = budget.get("wanted_w") if isinstance(budget, dict) else None
    wanted = wanted if isinstance(wanted, dict) else {}
    asks: dict[str, float | None] = {}
    for uuid in job.gpus:
        decided = job.power_caps_w.get(uuid)
        asked = number_or_none(wanted.get(uuid), positive=True)
        asks[uuid] = None if decided is None else float(asked) if asked is not None else float(decided)
    return asks


def held_ceiling_w(ceiling_w: float, floor_w: float | None, rules: Rules, gpu: Any) -> float:
    """A GPU's budget ceiling as its job follows it: never below the job's own floor (:func:`job_floor_w`, fixed
    when the job was placed), within the policy's bounds on ``gpu``."""
    if floor_w is not None:
        ceiling_w = max(ceiling_w, floor_w)
    return clip_cap_w(rules, gpu, ceiling_w)[0]


def wish_under_ceiling(ask_w: float | None, ceiling_w: float | None, *, floor_w: float | None,
                       found_w: float | None, rules: Rules, gpu: Any) -> float | None:
    """The cap a running job wishes on ``gpu`` under the power budget (None: no wish, the GPU keeps its limit):
    the lower of what it asks (:func:`asked_caps`, or its closed loop's own cap) and the GPU's ceiling
    (:func:`budget_ceilings`, held by :func:`held_ceiling_w`). A job that asks no cap gets the ceiling only when
    the limit the GPU had when the job was placed (``found_w``) is above it. Never above the job's own ask: a
    budget's room raises a job back to what it asked, not past it.

    The one rule for a running job under a budget: the launcher's :class:`~ecolaunch.caps.job.JobCaps` at
    every look and cap change, and the simulator (:class:`~ecolaunch.sim.engine.Simulation`) at every arrival,
    departure and closed-loop settling, both call it."""
    if ceiling_w is None:
        return ask_w
    ceiling_w = held_ceiling_w(ceiling_w, floor_w, rules, gpu)
    if ask_w is None:
        return ceiling_w if found_w is None or found_w > ceiling_w + AT_CEILING_W else None
    return min(ask_w, ceiling_w)


# --- what the state graph records -------------------------------------------------------------------------------
#: (host, budget) pairs whose "floors need more than the budget" warning this process has printed, since the host's
#: caps last fitted its budget
_OVER_BUDGET_SAID: set[tuple[str, float]] = set()


def rebalance(state: StateGraph, rules: Rules, priors: Priors = default_prior) -> dict[str, float]:
    """The budget cap of every GPU of a running job that ecolaunch may cap (uuid -> W), allocated afresh: after a
    departure, caps lowered for others come back up toward what their jobs want. ``{}`` without a budget. When the
    running jobs' floors do not fit, a job whose floor rose since it was booked (measured after it was admitted from
    a supplied curve) may be held at its booked cap; when even that does not fit (the admin lowered the budget under
    them), every job gets its floor."""
    budget = rules.power_max_total_w
    if budget is None:
        return {}
    out: dict[str, float] = {}
    for host in state.hosts.values():
        demands = host_demands(state, host, rules, priors=priors)
        caps = allocate(demands, budget)
        if caps is None:
            # a job measured since it was admitted (a first launch placed from a supplied curve) may find its floor
            # above the cap it was admitted at: it keeps that cap rather than break the budget
            held = [dataclasses.replace(d, floor_w=min(d.floor_w, _booked_w(state, d)))
                    if d.job_id is not None and d.curve else d for d in demands]
            caps = allocate(held, budget)
        if caps is not None:  # it fits again: a later time it does not is said again (a long-running agent)
            _OVER_BUDGET_SAID.difference_update({k for k in _OVER_BUDGET_SAID if k[0] == host.name})
        else:
            # said once per process and host while it lasts; with no job running, the budget is below the idle GPUs'
            # floors, which admission refuses with its own error ("no job can run under it")
            running = any(j.host == host.name for j in state.running_jobs())
            if running and (host.name, budget) not in _OVER_BUDGET_SAID:
                _OVER_BUDGET_SAID.add((host.name, budget))
                logger.warning("the running jobs' floors on host %s need more than the %g W power budget; each job "
                               "is held at its floor", host.name, budget)
            caps = {d.uuid: d.floor_w for d in demands}
        out.update({u: caps[u] for u in budgeted_on_host(state, host, rules)})
    return out


def trusted_budget_caps(state: StateGraph, rules: Rules, priors: Priors = default_prior) -> dict[str, float]:
    """The budget caps as whoever applies or follows them must take them: computed afresh from the validated job
    files (:func:`rebalance`), never read from ``state.json`` (every member's to write: docs/admin.md#how-the-budget-chooses-the-caps)."""
    return rebalance(state, rules, priors)


def budget_ceilings(state: StateGraph, rules: Rules, caps_w: Mapping[str, float] | None = None,
                    priors: Priors = default_prior) -> dict[str, float]:
    """The most each GPU with a budget cap may run at now (uuid -> W): its budget cap plus an equal share of what the
    budget leaves over (on the grid, at most its ``[caps]`` maximum), so a running job's closed loop may raise its
    cap where the budget has room. The sum, with every other GPU counted as :func:`host_demands` counts it, stays
    within the budget. ``caps_w``: the budget caps (default: :func:`trusted_budget_caps`, never the file's own);
    ``priors``: each job's curve prior, by job id.
    ``{}`` without a budget."""
    budget = rules.power_max_total_w
    if budget is None:
        return {}
    caps_w = trusted_budget_caps(state, rules, priors) if caps_w is None else caps_w
    out: dict[str, float] = {}
    for host in state.hosts.values():
        booked = {u: w for u in budgeted_on_host(state, host, rules)
                  if (w := number_or_none(caps_w.get(u), positive=True)) is not None}
        total = sum(booked.get(d.uuid, d.wanted_w) for d in host_demands(state, host, rules, priors=priors))
        share = GRID_W * math.floor(max(0.0, budget - total) / max(1, len(booked)) / GRID_W + 1e-9)
        for u, w in booked.items():
            lo, hi = bounds_or_none(rules, [host.gpus[u]]) or (w, w)
            out[u] = clip_w(w + share, (lo, max(hi, w)))
    return out
