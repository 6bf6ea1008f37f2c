"""The oracle: energy-aware placement that predicts with the simulator's own (true) model.

``EnergyAwarePolicy`` (:mod:`ecolaunch.policy.energy`) with :class:`TrueModelPredictor`: every candidate is
evaluated with exactly the models that play the machine (:func:`ecolaunch.sim.node.shared_gpu`), so its
predictions are exact and it only errs through the greediness of deciding one arrival at a time. It is the upper
bound the GNN policy is measured against on small instances (``benchmarks/energy.py``), and no policy a real
launcher could run: it knows the machine's response in advance.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ecolaunch.admin.rules import Rules
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.devices.catalogue import lookup
from ecolaunch.jobmodel.gpu import GpuModel
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.energy import Candidate, EnergyAwarePolicy, Outcome
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, MIN_SAVING_PCT
from ecolaunch.jobmodel.powercap import cap_grid
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.node import shared_gpu
from ecolaunch.state.graph import GpuNode, StateGraph


@functools.lru_cache(maxsize=64)
def _model(name: str) -> GpuModel:
    return lookup(name)


class TrueModelPredictor:
    name = "true-model"

    def __init__(self) -> None:
        self.cap_cache: dict = {}  # alone caps by (GPU models, profile, bounds, bound): the truth does not change

    def __repr__(self) -> str:
        return "TrueModelPredictor()"

    def scorer(self, state: StateGraph, job: JobRequest) -> _TrueScorer:
        return _TrueScorer(self, state, job)

    def predict(self, state: StateGraph, job: JobRequest, candidates: Sequence[Candidate]) -> list[Outcome]:
        new = job.profile or Profile()
        return [self._outcome(state, job.host, cand.gpus, cand.caps_w, (job.id, new)) for cand in candidates]

    def current(self, state: StateGraph, gpus: Sequence[str]) -> Outcome:
        hosts = {u: h for h in state.hosts.values() for u in gpus if u in h.gpus}
        merged = Outcome({}, {})
        for u in gpus:
            out = self._outcome(state, hosts[u].name, (u,), (None,), None)
            merged.gpu_power_w.update(out.gpu_power_w)
            for k, x in out.throughput.items():
                merged.throughput[k] = min(x, merged.throughput.get(k, x))
        return merged

    def _outcome(self, state: StateGraph, host: str, gpus: Sequence[str], caps: Sequence[float | None],
                 new: tuple[str, Profile] | None) -> Outcome:
        throughput: dict[str, float] = {}
        power: dict[str, float] = {}
        for u, cap in zip(gpus, caps):
            node: GpuNode = state.hosts[host].gpus[u]
            jobs = state.jobs_on(u)
            ids = [j.id for j in jobs]
            profiles = [j.profile or Profile() for j in jobs]
            if new is not None:
                ids.append(new[0])
                profiles.append(new[1])
            if cap is None and node.power_limit_w is not None and node.power_limit_max_w is not None \
                    and node.power_limit_w < node.power_limit_max_w:
                cap = node.power_limit_w
            sg = shared_gpu(profiles, _model(node.name), cap)
            power[u] = sg.power_w
            for k, x in zip(ids, sg.throughputs):
                throughput[k] = min(x, throughput.get(k, x))
        return Outcome(throughput, power)


class _TrueScorer:
    def __init__(self, predictor: TrueModelPredictor, state: StateGraph, job: JobRequest) -> None:
        self._p, self._state, self._job = predictor, state, job

    def alone_cap(self, job: JobRequest, gpus: Sequence[GpuNode], rules: Rules) -> tuple[float | None, str | None]:
        """The one objective with the truth instead of the job's curve: the least true energy per unit of work
        within the bound (no margin: nothing is unknown), on the same grid; (None, None) when no cap saves enough."""
        bounds = job_cap_bounds(rules, gpus)
        if bounds is None or not (job.profile and job.profile.knows_power):
            return None, None
        key = (tuple(g.name for g in gpus), job.profile, bounds, job.allowed_slowdown_pct)
        if key not in self._p.cap_cache:
            self._p.cap_cache[key] = self._best_cap(job, gpus, bounds)
        return self._p.cap_cache[key], None

    def _best_cap(self, job: JobRequest, gpus: Sequence[GpuNode], bounds: tuple[float, float]) -> float | None:
        new = (job.id, job.profile or Profile())
        uuids = tuple(g.uuid for g in gpus)
        host = self._job.host
        top = self._p._outcome(self._state, host, uuids, (bounds[1],) * len(uuids), new)
        top_cost = sum(top.gpu_power_w.values()) / top.throughput[job.id]
        best, best_cost = None, top_cost
        for cap in cap_grid(bounds[0], bounds[1], CHOICE_STEP_W):
            out = self._p._outcome(self._state, host, uuids, (cap,) * len(uuids), new)
            x = out.throughput[job.id]
            cost = sum(out.gpu_power_w.values()) / x
            if 100.0 * (1.0 / x - 1.0) <= job.allowed_slowdown_pct + 1e-9 and cost < best_cost:
                best, best_cost = cap, cost
        if best is None or 100.0 * (1.0 - best_cost / top_cost) < MIN_SAVING_PCT:
            return None
        return best

    def predict(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        return self._p.predict(self._state, self._job, candidates)

    def current(self, gpus: Sequence[str]) -> Outcome:
        return self._p.current(self._state, gpus)


def oracle_policy(objective: str = "node", host_static_w: float = 0.0) -> EnergyAwarePolicy:
    """The oracle: no safety margin (its predictions are exact)."""
    return EnergyAwarePolicy(TrueModelPredictor(), name="oracle", objective=objective, margin_pct=0.0,
                             host_static_w=host_static_w)
