"""``gnn``: energy-aware placement whose predictions come from the hierarchical GNN.

:class:`GnnPredictor` scores every candidate of :class:`~ecolaunch.policy.energy.EnergyAwarePolicy` (GPU set ×
power cap) in batched forward passes of the shipped model (``ecolaunch/policy/weights``; or a lab's own, written
by ``ecolaunch policy train``), through the plain-torch inference path (:mod:`ecolaunch.policy.infer`: no
torch_geometric on the launch path). It predicts each job's normalized throughput and each GPU's power at its
cap; the policy keeps the candidate with the least predicted energy for the work that keeps every affected job
inside its slowdown bound. One decision's :class:`_GnnScorer` encodes and scores the machine as it runs now once,
for every candidate and for the objective's "before".

**Relative predictions.** The model predicts absolute normalized throughputs with a small bias (a multi-GPU job
alone comes out at 0.90-0.93 instead of 1.0). The policy therefore divides: the new job's prediction by the
model's prediction of the same job alone, uncapped, on the same GPUs; a running job's by its prediction as it runs
now. Slowdown bounds of running jobs are so checked against how they run now.

**Calibration by the job's own measurements.** On GPUs the new job would have to itself, its cap is the one its
measured curve chooses (``EnergyAwarePolicy``: :func:`~ecolaunch.profile.capchoice.job_cap_choice`, exactly the
profiler's and the closed loop's choice, with the margin the measurements ask for), and its speed and power there
come from that curve rather than from the GNN: the GNN knows a job only by its solo profile, while the curve is
measurements of this very job (such candidates are not even scored by the GNN, which keeps a decision within its
latency goal). Sharing (the interference between co-located jobs, the power of shared GPUs) is the GNN's alone,
with 5 % of each bound kept back for its error.

A job without a measured profile is neither capped nor shared by this policy (``EnergyAwarePolicy``: sharing
needs a known memory size; capping needs a known power): the first launch of an unknown job runs alone at default
power, and its profile, once stored, lets the next launch be placed with full knowledge.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.energy import Candidate, EnergyAwarePolicy, Outcome
from ecolaunch.state.graph import StateGraph


class GnnPredictor:
    """The GNN as the policy's predictor; ``weights``: a weight file (None: the shipped weights)."""

    name = "gnn"

    def __init__(self, weights: Path | str | None = None) -> None:
        self.weights = None if weights is None else Path(weights)

    def __repr__(self) -> str:
        return f"GnnPredictor(weights={None if self.weights is None else str(self.weights)!r})"

    def scorer(self, state: StateGraph, job: JobRequest) -> _GnnScorer:
        from ecolaunch.policy.infer import load_default_model, load_model_cached

        model = load_default_model() if self.weights is None else load_model_cached(self.weights)
        return _GnnScorer(model, state, job)


class _GnnScorer:
    """One decision's predictions. The machine as it runs now is encoded and scored once, on first use: it
    serves every batch of candidates and the "before" of the objective."""

    def __init__(self, model, state: StateGraph, job: JobRequest) -> None:
        self._model, self._state, self._job = model, state, job
        self._enc = None
        self._now: dict[str, float] = {}
        self._now_power: dict[str, float] = {}
        self._alone: dict[tuple[str, ...], float] = {}
        self._curve = None

    def _base(self):
        if self._enc is None:
            from ecolaunch.policy.features import encode_state
            from ecolaunch.policy.infer import score

            self._enc = encode_state(self._state, hosts=[self._job.host])
            with _one_thread():
                thr, power = score(self._enc.graph(), self._model)
            self._now = dict(zip(self._enc.base.job_ids, thr[0].tolist()))
            self._now_power = dict(zip(self._enc.base.gpu_uuids, power[0].tolist()))
        return self._enc

    def _alone_on(self, sets: Sequence[tuple[str, ...]]) -> None:
        """The model's own "alone, uncapped" for the new job: the same GPU sets on an empty copy of the host."""
        from ecolaunch.policy.features import Placement, encode_state
        from ecolaunch.policy.infer import score

        todo = [g for g in sorted(set(sets)) if g not in self._alone]
        if not todo:
            return
        empty = encode_state(_without_jobs(self._state, self._job.host), hosts=[self._job.host])
        with _one_thread():
            thr, _ = score(empty.candidates(self._job, [Placement(g, dict.fromkeys(g)) for g in todo]), self._model)
        self._alone.update({g: max(t[-1].item(), 1e-6) for g, t in zip(todo, thr)})

    def predict(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        job = self._job
        measured = [self._measured(c) for c in candidates]
        # the GNN scores only the candidates the job's own measurements cannot decide alone
        scored = iter(self._scored([c for c, m in zip(candidates, measured) if not m[2]]))
        outcomes = []
        for curve, power, decides in measured:
            if decides:
                outcomes.append(Outcome({job.id: min(curve)}, power))
                continue
            out = next(scored)
            throughput = dict(out.throughput)
            if curve:  # below the measured range, or sharing: the more pessimistic of the two
                throughput[job.id] = min(throughput[job.id], *curve)
            outcomes.append(Outcome(throughput, {**out.gpu_power_w, **power}))
        return outcomes

    def _scored(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        """The GNN's outcomes, throughputs relative to its own reference: the new job alone on the same GPUs,
        the others as they run now (the model's small bias on solo jobs cancels out; see the module docstring)."""
        from ecolaunch.policy.features import Placement
        from ecolaunch.policy.infer import score

        if not candidates:
            return []
        job = self._job
        enc = self._base()
        self._alone_on([c.gpus for c in candidates])
        graphs = enc.candidates(job, [Placement(c.gpus, dict(zip(c.gpus, c.caps_w))) for c in candidates])
        with _one_thread():
            thr, power = score(graphs, self._model)
        ids = (*enc.base.job_ids, job.id)
        outcomes = []
        for cand, t, p in zip(candidates, thr, power):
            x = dict(zip(ids, t.tolist()))
            rel = {k: min(1.0, v / max(self._now.get(k, 1.0), 1e-6)) for k, v in x.items() if k != job.id}
            rel[job.id] = min(1.0, x[job.id] / self._alone[cand.gpus])
            outcomes.append(Outcome(rel, dict(zip(enc.base.gpu_uuids, p.tolist()))))
        return outcomes

    def current(self, gpus: Sequence[str]) -> Outcome:
        """Running jobs at 1.0 (predictions are relative to how they run now) and the GPUs' predicted power."""
        self._base()
        return Outcome(dict.fromkeys(self._now, 1.0), dict(self._now_power))

    def _cap_curve(self):
        """The new job's measured cap curve, fitted once per GPU maximum (None: it has none)."""
        from ecolaunch.policy.energy import job_points
        from ecolaunch.profile.powercap import fit_cap_model

        if self._curve is None:
            job = self._job

            def fit(max_w: float):
                points = job_points(job, max_w)
                return fit_cap_model(points) if points else None

            self._curve = functools.lru_cache(maxsize=8)(fit) if job_points(job, 1.0) else None
        return self._curve

    def _measured(self, cand: Candidate) -> tuple[list[float], dict[str, float], bool]:
        """The job's measured cap curve on the candidate's GPUs it would have to itself: its speed on each (against
        uncapped), each one's board power, and whether the measurements decide alone (every GPU its own: the GNN
        knows the job only by its solo profile, while the curve is measurements of this very job, and its cap was
        chosen on that curve with the margin its measurement error asks for)."""
        fit = self._cap_curve()
        if fit is None:
            return [], {}, False
        host = self._state.hosts[self._job.host]
        curve: list[float] = []
        power: dict[str, float] = {}
        for u, cap in zip(cand.gpus, cand.caps_w):
            gpu = host.gpus[u]
            if self._state.jobs_on(u) or gpu.power_limit_max_w is None:
                continue
            # the uncapped candidate too, so that every candidate on this GPU is judged by the same curve
            cap = gpu.power_limit_w or gpu.power_limit_max_w if cap is None else cap
            model = fit(gpu.power_limit_max_w)
            if model is None:
                continue
            top, at_cap = model.predict(gpu.power_limit_max_w), model.predict(cap)
            curve.append(top.iter_time_s / at_cap.iter_time_s)
            power[u] = at_cap.power_w
        return curve, power, bool(curve) and len(curve) == len(cand.gpus)


def _without_jobs(state: StateGraph, host: str) -> StateGraph:
    """The host with its GPUs and links but no jobs and no foreign use (readings of an idle machine)."""
    from dataclasses import replace

    from ecolaunch.state.graph import Host

    src = state.hosts[host]
    gpus = {u: replace(g, memory_used_mib=0, util_gpu_pct=0.0, util_mem_pct=0.0, foreign_memory_mib=0,
                       foreign_pids=[]) for u, g in src.gpus.items()}
    return StateGraph(hosts={host: Host(name=host, gpus=gpus, links=dict(src.links))})


class _one_thread:
    """torch's thread pool costs more than these tiny forward passes on a loaded machine: score on one thread."""

    def __enter__(self) -> None:
        import torch

        self._saved = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc) -> None:
        import torch

        torch.set_num_threads(self._saved)


def gnn_policy(objective: str = "node", weights: Path | str | None = None) -> EnergyAwarePolicy:
    """The default policy; ``weights``: a lab's own weight file (``ecolaunch policy train``), None = shipped."""
    return EnergyAwarePolicy(GnnPredictor(weights), name="gnn", objective=objective, margin_pct=5.0)
