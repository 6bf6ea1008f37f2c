"""Node power and energy accounting, a shared GPU's power, and the reproduction of EaCO's Tables 1-4.

What lives here: :func:`shared_gpu` (jobs on one GPU under an optional cap -> throughputs and board power),
:class:`GpuLoad` / :class:`EnergyMeter` / :class:`EnergyReport` (the three energy accountings) and
:func:`reproduce_eaco`. What does not: the per-job models (:mod:`ecolaunch.sim.power`,
:mod:`ecolaunch.sim.interference`), the event loop that calls these (:mod:`ecolaunch.sim.engine`). The accountings:
docs/simulator.md#energy-accounting; a shared GPU's power and the EaCO reproduction's assumptions:
docs/simulator.md#a-shared-gpus-power, docs/simulator.md#eacos-tables-reproduced.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.interference import InterferenceModel, default_interference_model
from ecolaunch.sim.models import eaco_tables, least_squares
from ecolaunch.sim.power import BoardPowerModel, default_power_model

logger = logging.getLogger(__name__)

#: ImageNet-1k training images / the PyTorch reference scripts' default batch size 256, rounded up
EACO_ITERATIONS_PER_EPOCH = math.ceil(1_281_167 / 256)
#: the board of EaCO's servers (8x V100), whose switching overhead its co-located jobs pay
EACO_GPU = "V100"
#: every EaCO job spans all 8 GPUs of the node and synchronizes them (data-parallel)
EACO_GPUS_PER_JOB = 8


@dataclass(frozen=True, slots=True)
class SharedGpu:
    """Jobs on one GPU: throughputs (1.0 = solo, uncapped) and the board's power."""

    throughputs: tuple[float, ...]
    power_w: float
    #: board floor while jobs run (active idle), part of ``power_w``
    floor_power_w: float
    #: each job's dynamic power on this board (sums with ``floor_power_w`` to ``power_w``)
    job_dynamic_w: tuple[float, ...]
    #: time ratio the cap adds to every job on the board (1.0 without a binding cap)
    cap_time_ratio: float
    saturated: bool
    extrapolated: bool


def shared_gpu(profiles: Sequence[Profile], gpu: GpuModel, power_cap_w: float | None = None,
               *, interference: InterferenceModel | None = None, power: BoardPowerModel | None = None) -> SharedGpu:
    """Throughputs and board power of 1..N jobs on ``gpu`` at ``power_cap_w``.

    A job without ``power_w`` is assumed to draw active idle + its demand x (max limit - active idle)
    (an assumption: dynamic power proportional to busy time).
    """
    power = power or default_power_model()
    profs = list(profiles)
    floor_w, extrapolated = power.active_idle_power_w(gpu)
    if not profs:
        return SharedGpu((), gpu.idle_power_w, gpu.idle_power_w, (), 1.0, False, extrapolated)
    x = (interference or default_interference_model()).predict(profs, gpu)
    dyn = []
    for p, xi in zip(profs, x):
        solo_w = p.power_w if p.power_w is not None else floor_w + p.demand * (gpu.power_limit_max_w - floor_w)
        dyn.append(max(0.0, solo_w - floor_w) * xi)
    total = floor_w + sum(dyn)
    ratio = 1.0
    if power_cap_w is not None and power_cap_w < gpu.power_limit_max_w and sum(dyn) > 0:
        pred = power.predict(total, power_cap_w, gpu)
        ratio, extrapolated = pred.time_ratio, extrapolated or pred.extrapolated
        scale = max(0.0, pred.power_w - floor_w) / sum(dyn)
        dyn = [d * scale for d in dyn]
        total = floor_w + sum(dyn)
    saturated = sum(p.demand for p in profs) > 1.0
    return SharedGpu(tuple(xi / ratio for xi in x), total, floor_w, tuple(dyn), ratio, saturated, extrapolated)


# --- energy accounting ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GpuLoad:
    """One GPU during an interval: its board power, its floor, and the dynamic power of each job on it."""

    power_w: float
    floor_power_w: float
    jobs: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EnergyReport:
    """The three accountings over everything added to an :class:`EnergyMeter` (joules)."""

    node_energy_j: float
    gpu_energy_j: float
    job_energy_j: Mapping[str, float]
    #: static pool while no job ran (part of the node energy, nobody's job energy)
    unattributed_energy_j: float
    duration_s: float
    #: what the boards would have drawn idle over the same time (the meter's ``gpu_idle_w``)
    gpu_idle_energy_j: float = 0.0

    @property
    def gpu_dynamic_energy_j(self) -> float:
        """The GPUs' energy above their idle power: what caps and placements move (node energy is mostly fixed)."""
        return self.gpu_energy_j - self.gpu_idle_energy_j


class EnergyMeter:
    """Accumulates node, GPU-only and job-attributed energy interval by interval
    (docs/simulator.md#energy-accounting)."""

    def __init__(self, host_static_w: float, gpu_idle_w: float = 0.0) -> None:
        """``gpu_idle_w``: the idle power of the node's GPUs added up (what the dynamic GPU energy is counted above)."""
        self.host_static_w = host_static_w
        self.gpu_idle_w = gpu_idle_w
        self._node = self._gpu = self._unattributed = self._duration = self._gpu_idle = 0.0
        self._jobs: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"EnergyMeter(host_static_w={self.host_static_w})"

    def add(self, duration_s: float, gpus: Sequence[GpuLoad], host_dynamic_w: Mapping[str, float] | None = None
            ) -> None:
        """Account ``duration_s`` seconds with these GPU loads (every GPU of the node, idle ones included)."""
        if duration_s <= 0:
            return
        host_dynamic_w = host_dynamic_w or {}
        gpu_w = sum(g.power_w for g in gpus)
        self._duration += duration_s
        self._gpu += gpu_w * duration_s
        self._gpu_idle += self.gpu_idle_w * duration_s
        self._node += (self.host_static_w + gpu_w + sum(host_dynamic_w.values())) * duration_s
        static_pool_w = self.host_static_w + sum(g.power_w for g in gpus if not g.jobs)
        weights: dict[str, float] = {}
        for g in gpus:
            for job, dyn_w in g.jobs.items():
                share = 1.0 / len(g.jobs)
                weights[job] = weights.get(job, 0.0) + share
                self._add_job(job, (dyn_w + g.floor_power_w * share) * duration_s)
        for job, watts in host_dynamic_w.items():
            self._add_job(job, watts * duration_s)
        if not weights:
            self._unattributed += static_pool_w * duration_s
            return
        total = sum(weights.values())
        for job, weight in weights.items():
            self._add_job(job, static_pool_w * weight / total * duration_s)

    def _add_job(self, job: str, joules: float) -> None:
        self._jobs[job] = self._jobs.get(job, 0.0) + joules

    def report(self) -> EnergyReport:
        return EnergyReport(self._node, self._gpu, dict(self._jobs), self._unattributed, self._duration, self._gpu_idle)


# --- EaCO Tables 1-4 --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EacoJob:
    """One row of EaCO Tables 1-2 (a job alone on the 8-GPU node)."""

    job: str
    node_power_w: float
    energy_kwh: float
    jct_h: float
    profile: Profile


@dataclass(frozen=True, slots=True)
class EacoSet:
    """A co-located set of Tables 3-4 next to its prediction from the solo rows."""

    name: str
    jobs: tuple[str, ...]
    saturated: bool
    utilization_sum_pct: float
    paper_power_w: float
    power_w: float
    paper_energy_saving_pct: float
    energy_saving_pct: float
    paper_jct_increase_pct: float
    jct_increase_pct: float
    #: the same two predictions with the static power fitted without this set (None for saturated sets)
    energy_saving_loo_pct: float | None
    jct_increase_loo_pct: float | None
    node_energy_kwh: float
    job_energy_kwh: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class EacoReproduction:
    static_power_w: float
    sets: tuple[EacoSet, ...]
    #: the 8-GPU jobs' wait per blocked collective used (fitted on the unsaturated sets unless given)
    sync_wait_s: float = 0.0


def eaco_jobs() -> dict[str, EacoJob]:
    """EaCO's exclusive rows as profiles (the assumptions: docs/simulator.md#eacos-tables-reproduced)."""
    exclusive, _ = eaco_tables()
    out = {}
    for r in exclusive:
        profile = Profile(
            iter_time_s=float(r["avg_epoch_time_h"]) * 3600.0 / EACO_ITERATIONS_PER_EPOCH,
            sm_util_pct=float(r["avg_gpu_util_pct"]),
            mem_bw_util_pct=float(r["avg_mem_util_pct"]),
        )
        out[r["job_id"]] = EacoJob(r["job_id"], float(r["avg_power_w"]), float(r["total_energy_kwh"]),
                                   float(r["jct_h"]), profile)
    return out


def run_colocated(jobs: Sequence[EacoJob], static_power_w: float,
                  interference: InterferenceModel | None = None) -> tuple[list[float], float, dict[str, float]]:
    """Jobs started together on one node: (JCT of each in hours, node energy in kWh, job energy in kWh)."""
    model = interference or default_interference_model()
    remaining = [1.0] * len(jobs)
    jct = [0.0] * len(jobs)
    now = energy_wh = 0.0
    job_wh = {j.job: 0.0 for j in jobs}
    active = list(range(len(jobs)))
    while active:
        x = model.predict([jobs[i].profile for i in active], EACO_GPU, [EACO_GPUS_PER_JOB] * len(active))
        rates = [xi / jobs[i].jct_h for xi, i in zip(x, active)]  # work fraction per hour
        dt = min(remaining[i] / r for i, r in zip(active, rates))
        dyn = [xi * (jobs[i].node_power_w - static_power_w) for xi, i in zip(x, active)]
        energy_wh += (static_power_w + sum(dyn)) * dt
        for i, r, d in zip(active, rates, dyn):
            job_wh[jobs[i].job] += (d + static_power_w / len(active)) * dt
            remaining[i] -= r * dt
        now += dt
        for i in list(active):
            if remaining[i] <= 1e-9:
                jct[i] = now
                active.remove(i)
    return jct, energy_wh / 1000.0, {k: v / 1000.0 for k, v in job_wh.items()}


def _set_jobs(name: str, solo: Mapping[str, EacoJob]) -> list[EacoJob]:
    return [solo[j.strip()] for j in name.split("&")]


def fit_static_power(sets: Sequence[tuple[list[EacoJob], float]], interference: InterferenceModel | None = None
                     ) -> float:
    """Least-squares node static power ``S`` from measured set powers: with every job running,
    ``P = S + sum(x_j (P_j - S))`` is linear in ``S``."""
    model = interference or default_interference_model()
    num = den = 0.0
    for jobs, measured_w in sets:
        x = model.predict([j.profile for j in jobs], EACO_GPU, [EACO_GPUS_PER_JOB] * len(jobs))
        a = 1.0 - sum(x)
        b = sum(xi * j.node_power_w for xi, j in zip(x, jobs))
        num += a * (measured_w - b)
        den += a * a
    return num / den


def jct_increase_pct(jobs: Sequence[EacoJob], interference: InterferenceModel) -> float:
    """The mean JCT of ``jobs`` started together on one node, against their mean exclusive JCT (%)."""
    jct, _, _ = run_colocated(jobs, 0.0, interference)  # the static power moves energy, not time
    return 100.0 * (sum(jct) / len(jct) / (sum(j.jct_h for j in jobs) / len(jobs)) - 1.0)


def fit_sync_wait(sets: Sequence[tuple[list[EacoJob], float]], interference: InterferenceModel | None = None
                  ) -> float:
    """Least-squares ``sync_wait_s`` (:mod:`ecolaunch.sim.interference`) of ``interference`` on ``sets`` of jobs
    and their measured mean JCT increase (%), the other parameters kept."""
    model = interference or default_interference_model()

    def residuals(x: np.ndarray) -> np.ndarray:
        m = replace(model, sync_wait_s=float(x[0]))
        return np.array([jct_increase_pct(jobs, m) - measured for jobs, measured in sets])

    return float(least_squares(residuals, np.array([0.01]), np.zeros(1), np.ones(1))[0])


def reproduce_eaco(interference: InterferenceModel | None = None, sync_wait_s: float | None = None
                   ) -> EacoReproduction:
    """Predict EaCO Tables 3-4 from Tables 1-2 alone (docs/simulator.md#eacos-tables-reproduced).

    ``sync_wait_s``: the 8-GPU jobs' wait per blocked collective (:func:`fit_sync_wait`); None fits it on the
    unsaturated sets' JCT (each set's ``loo`` figures refit it, and the static power, without the set); 0.0 is the
    one-GPU prior alone.
    """
    base = interference or default_interference_model()
    solo = eaco_jobs()
    _, colocated = eaco_tables()
    rows = []
    for r in colocated:
        jobs = _set_jobs(r["job_set"], solo)
        util = max(sum(j.profile.sm_util_pct or 0.0 for j in jobs), sum(j.profile.mem_bw_util_pct or 0.0 for j in jobs))
        rows.append((r, jobs, util > 100.0, util))
    unsaturated = [(jobs, float(r["avg_power_w"])) for r, jobs, sat, _ in rows if not sat]
    slowdowns = [(jobs, _paper_jct_increase_pct(r, jobs)) for r, jobs, sat, _ in rows if not sat]

    def fitted(without: list[EacoJob] | None = None) -> InterferenceModel:
        if sync_wait_s is not None:
            return replace(base, sync_wait_s=sync_wait_s)
        return replace(base, sync_wait_s=fit_sync_wait([s for s in slowdowns if s[0] is not without], base))

    model = fitted()
    static_w = fit_static_power(unsaturated, model)
    out = []
    for r, jobs, saturated, util in rows:
        base_energy = sum(j.energy_kwh for j in jobs)
        base_jct = sum(j.jct_h for j in jobs) / len(jobs)
        jct, energy, job_energy = run_colocated(jobs, static_w, model)
        loo_saving = loo_jct = None
        if not saturated:
            held = fitted(without=jobs)
            others = [s for s in unsaturated if s[0] is not jobs]
            jct_l, energy_l, _ = run_colocated(jobs, fit_static_power(others, held), held)
            loo_saving = 100.0 * (1.0 - energy_l / base_energy)
            loo_jct = 100.0 * (sum(jct_l) / len(jct_l) / base_jct - 1.0)
        x = model.predict([j.profile for j in jobs], EACO_GPU, [EACO_GPUS_PER_JOB] * len(jobs))
        out.append(EacoSet(
            name=r["job_set"], jobs=tuple(j.job for j in jobs), saturated=saturated, utilization_sum_pct=util,
            paper_power_w=float(r["avg_power_w"]),
            power_w=static_w + sum(xi * (j.node_power_w - static_w) for xi, j in zip(x, jobs)),
            paper_energy_saving_pct=100.0 * (1.0 - float(r["total_energy_kwh"]) / base_energy),
            energy_saving_pct=100.0 * (1.0 - energy / base_energy),
            paper_jct_increase_pct=_paper_jct_increase_pct(r, jobs),
            jct_increase_pct=100.0 * (sum(jct) / len(jct) / base_jct - 1.0),
            energy_saving_loo_pct=loo_saving, jct_increase_loo_pct=loo_jct,
            node_energy_kwh=energy, job_energy_kwh=job_energy,
        ))
    return EacoReproduction(static_w, tuple(out), model.sync_wait_s)


def _paper_jct_increase_pct(row: Mapping[str, str], jobs: Sequence[EacoJob]) -> float:
    return 100.0 * (float(row["avg_jct_h"]) / (sum(j.jct_h for j in jobs) / len(jobs)) - 1.0)
