"""``gnn``: energy-aware placement whose predictions come from the hierarchical GNN.

What lives here: :class:`GnnPredictor` (scores the candidates of
:class:`~ecolaunch.policy.energy.EnergyAwarePolicy` through :mod:`ecolaunch.policy.infer`), one decision's
:class:`_GnnScorer`, and :class:`GnnFirstCurve` (a first launch's cap curve predicted by the GNN). What does not:
the decision procedure (:mod:`ecolaunch.policy.energy`), the network (:mod:`.infer`, :mod:`.model`). How the
policy decides and when the network is asked: docs/gnn.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ecolaunch.jobmodel.capcurve import CapPrior, Priors, default_prior
from ecolaunch.jobmodel.codec import profile_to_json
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.curve import AloneOnCandidate
from ecolaunch.policy.energy import SD_Z, Candidate, EnergyAwarePolicy, Outcome
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, MARGIN_Z
from ecolaunch.jobmodel.powercap import cap_grid
from ecolaunch.state.graph import StateGraph


class GnnPredictor:
    """The GNN as the policy's predictor; ``weights``: a weight file (None: the shipped weights); ``priors``: the
    prior each new job's own curve is read with where it decides alone (by job id)."""

    name = "gnn"

    def __init__(self, weights: Path | str | None = None, priors: Priors = default_prior) -> None:
        self.weights = None if weights is None else Path(weights)
        self.priors = priors

    def __repr__(self) -> str:
        return f"GnnPredictor(weights={None if self.weights is None else str(self.weights)!r})"

    def scorer(self, state: StateGraph, job: JobRequest) -> _GnnScorer:
        # _model loads torch lazily: the registry loads this module on every launch, and only a gnn decision needs it
        return _GnnScorer(_model(self.weights), state, job, self.priors(job.id))


class _GnnScorer:
    """One decision's predictions. The machine as it runs now is encoded and scored once, on first use: it
    serves every batch of candidates and the "before" of the objective."""

    def __init__(self, model, state: StateGraph, job: JobRequest, prior: CapPrior) -> None:
        self._model, self._state, self._job, self._prior = model, state, job, prior
        self._enc = None
        self._now: dict[str, float] = {}
        self._now_power: dict[str, float] = {}
        self._curve = None

    def _base(self):
        if self._enc is None:
            # lazy: features and infer load torch, which only a gnn decision needs (see scorer)
            from ecolaunch.policy.features import encode_state
            from ecolaunch.policy.infer import score  # lazy: as above

            self._enc = encode_state(self._state, hosts=[self._job.host])
            with _one_thread():
                thr, power = score(self._enc.graph(), self._model)
            self._now = dict(zip(self._enc.base.job_ids, thr[0].tolist()))
            self._now_power = dict(zip(self._enc.base.gpu_uuids, power[0].tolist()))
        return self._enc

    def predict(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        job = self._job
        if self._curve is None:
            self._curve = AloneOnCandidate(self._state, job, self._prior)
        measured = [self._curve.on(c) for c in candidates]
        # the GNN scores only the candidates the job's own measurements cannot decide alone
        scored = iter(self._scored([c for c, m in zip(candidates, measured) if not m[2]]))
        outcomes = []
        for curve, power, decides in measured:
            if decides:
                outcomes.append(Outcome({job.id: min(curve)}, power))
                continue
            out = next(scored)
            throughput = dict(out.throughput)
            if curve:  # partly on GPUs of its own: the more pessimistic of the two
                throughput[job.id] = min(throughput[job.id], *curve)
            outcomes.append(Outcome(throughput, {**out.gpu_power_w, **power}, out.throughput_sd, out.learned))
        return outcomes

    def _scored(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        """The GNN's outcomes: the new job against solo uncapped, the others relative to how they run now."""
        # lazy: features and infer load torch, which only a gnn decision needs (see scorer)
        from ecolaunch.policy.features import CandidatePlacement
        from ecolaunch.policy.infer import score_sd  # lazy: as above

        if not candidates:
            return []
        job = self._job
        enc = self._base()
        graphs = enc.candidates(job, [CandidatePlacement(c.gpus, dict(zip(c.gpus, c.caps_w))) for c in candidates])
        with _one_thread():
            thr, power, sd = score_sd(graphs, self._model)
        ids = (*enc.base.job_ids, job.id)
        now = {k: max(self._now.get(k, 1.0), 1e-6) if k != job.id else 1.0 for k in ids}
        outcomes = []
        for cand, t, p, s in zip(candidates, thr, power, sd):
            rel = {k: min(1.0, v / now[k]) for k, v in zip(ids, t.tolist())}
            # the standard deviations of the jobs this candidate affects; 0 = a measurement, nothing learned
            affected = {job.id, *(j.id for u in cand.gpus for j in self._state.jobs_on(u))}
            rel_sd = {k: v / now[k] for k, v in zip(ids, s.tolist()) if v > 0.0 and k in affected}
            outcomes.append(Outcome(rel, dict(zip(enc.base.gpu_uuids, p.tolist())), rel_sd, bool(rel_sd)))
        return outcomes

    def current(self, gpus: Sequence[str]) -> Outcome:
        """Running jobs at 1.0 (predictions are relative to how they run now) and the GPUs' predicted power."""
        self._base()
        return Outcome(dict.fromkeys(self._now, 1.0), dict(self._now_power))


class PriorPredictor(GnnPredictor):
    """The GNN's physics prior alone as the policy's predictor, for the rows that ask which pairs a rule would share
    (``benchmarks/energy.py``'s ``analytic-share`` and ``util-share``; not a launcher policy): the model of
    ``weights`` with its residual heads silenced (:meth:`~ecolaunch.policy.infer.PlainModel.prior_only`: the
    analytic interference model, and the analytic power), and with ``switching=False`` no switching overhead (the
    utilization-sum rule: no slowdown while the jobs' summed demand stays within 1). Nothing is learned, so its
    outcomes carry no standard deviation and say ``learned=False``: the policy keeps its ``margin_pct`` back."""

    def __init__(self, weights: Path | str | None = None, priors: Priors = default_prior, *,
                 switching: bool = True) -> None:
        super().__init__(weights, priors)
        self.switching = switching
        self.name = "analytic" if switching else "util-sum"

    def __repr__(self) -> str:
        return f"PriorPredictor(switching={self.switching})"

    def scorer(self, state: StateGraph, job: JobRequest) -> _GnnScorer:
        return _PriorScorer(_model(self.weights).prior_only(switching=self.switching), state, job,
                            self.priors(job.id))


class _PriorScorer(_GnnScorer):
    def _scored(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        return [dataclasses.replace(o, throughput_sd={}, learned=False) for o in super()._scored(candidates)]


def prior_share_policy(name: str, weights: Path | str | None = None, *, priors: Priors = default_prior,
                       host_static_w: float = 0.0) -> EnergyAwarePolicy:
    """``analytic-share`` (the analytic interference model chooses the pairs) or ``util-share`` (the utilization-sum
    rule does): :func:`gnn_policy` with :class:`PriorPredictor` in the GNN's place."""
    if name not in ("analytic-share", "util-share"):
        raise ValueError(f"unknown prior policy {name!r}: analytic-share or util-share")
    return EnergyAwarePolicy(PriorPredictor(weights, priors, switching=name == "analytic-share"), name=name,
                             objective="node", margin_pct=5.0, host_static_w=host_static_w, priors=priors)


#: standard deviations of a first launch's predicted speed its cap margin keeps back (:class:`GnnFirstCurve`): the
#: 99th percentile of (predicted - measured speed) / sd on measured curves the scoring weights never saw, the coverage
#: the cap margin aims at (``MARGIN_Z`` = 2.33 standard errors, a one-sided 99 %). ``benchmarks/energy.py`` fits it
#: per fold of job types (``folds.*.first_curve_z``: 1.50-1.71 on the Zeus V100 and P100 sweeps of the other folds)
#: and over every fold's held-out curves (``first_curve_z_pooled``: 1.61, this value). The GNN's own standard
#: deviation is too wide for a job nothing is known of (z = 2.33 would keep back more than every measured curve
#: needs), so fewer of them are kept back.
FIRST_CURVE_Z = 1.61


#: the caps the GNN is asked at for a first launch's curve (Zeus's 25 W stride); the 5 W grid between is interpolated
#: linearly, speed, standard deviation and power alike (one forward pass of a fifth of the graphs: a launch's
#: first decision stays within the latency goal)
ASKED_STEP_W = 25.0


class GnnFirstCurve:
    """A first launch's cap curve as the GNN predicts it before anything of the job is measured (module docstring):
    a :class:`~ecolaunch.jobmodel.profile.Profile` for :class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves`, or
    None where the host mixes board models (the board is not known before the placement) or the board's limits are
    not known. ``weights``: as :class:`GnnPredictor`; ``z``: standard deviations kept back; ``step_w``: the cap grid
    (the cap choice's, so that every cap it weighs carries its own predicted uncertainty, not a neighbour's).

    Each point is the job alone at that cap: its iteration time ``t0 / speed`` (``t0``: its known iteration time,
    else :attr:`~ecolaunch.policy.infer.ModelConfig.default_iter_time_s`: only ratios are read), the speed made
    non-increasing towards low caps (a lower cap never speeds a job up: the more pessimistic of two disagreeing
    predictions holds), and the predicted board power; its standard error (``iterations=1``) is the GNN's standard
    deviation of that speed, in %, scaled so that the cap margin (``MARGIN_Z`` standard errors) keeps back ``z``
    standard deviations (:data:`FIRST_CURVE_Z`, calibrated on measured curves the weights never saw). The top of the
    grid is uncapped, by definition exact. Predictions are cached per board and what is known of the job."""

    name = "gnn"
    #: a decision told this curve was decided by the learned model (``Decision.predicted["learned"]``)
    learned = True
    #: what the decision's reasons call the curve (:class:`~ecolaunch.policy.firstcurve.FirstLaunchCurves`)
    described_as = "the GNN's predicted curve"

    def __init__(self, weights: Path | str | None = None, *, z: float = FIRST_CURVE_Z,
                 step_w: float = CHOICE_STEP_W) -> None:
        if not z >= 0:
            raise ValueError(f"z must be >= 0, got {z!r}")
        self.weights = None if weights is None else Path(weights)
        self.z, self.step_w = z, step_w
        self._cache: dict[tuple, Profile | None] = {}

    def __repr__(self) -> str:
        return f"GnnFirstCurve(weights={None if self.weights is None else str(self.weights)!r})"

    def __call__(self, state: StateGraph, job: JobRequest) -> Profile | None:
        gpus = list(state.hosts[job.host].gpus.values())
        boards = {(g.name, g.power_limit_min_w, g.power_limit_max_w) for g in gpus}
        if len(boards) != 1:
            return None
        name, low, high = boards.pop()
        if not (low and high and 0 < low <= high):
            return None
        known = job.profile or Profile()
        key = (name, low, high, known, job.memory_mib, job.allowed_slowdown_pct)
        if key not in self._cache:
            self._cache[key] = self._predict(gpus[0], known, job)
        return self._cache[key]

    def _predict(self, gpu, known: Profile, job: JobRequest) -> Profile:
        t0 = known.iter_time_s or _model(self.weights).config.default_iter_time_s
        scale = self.z / MARGIN_Z  # the margin keeps back MARGIN_Z standard errors: z standard deviations
        points = []
        for cap, speed, sd, power in self.speeds(gpu, known, job.memory_mib, job.allowed_slowdown_pct):
            se_pct = 100.0 * scale * sd / speed
            points.append(CapPoint(cap, t0 / speed, power, iterations=1 if se_pct > 0 else 0,
                                   iter_time_cv_pct=se_pct if se_pct > 0 else None))
        return Profile(t0, known.sm_util_pct, known.mem_bw_util_pct, job.memory_mib, points[-1].power_w,
                       tuple(points))

    def speeds(self, gpu, known: Profile | None = None, memory_mib: int | None = None,
               allowed_slowdown_pct: float = 10.0) -> list[tuple[float, float, float, float]]:
        """``(cap_w, speed, sd, power_w)`` on the grid, ascending: the job known by ``known`` alone on the board of
        ``gpu`` (a :class:`~ecolaunch.state.graph.GpuNode`) at each cap, its normalized throughput made
        non-increasing towards low caps, the GNN's standard deviation of it and the predicted board power (asked at
        :data:`ASKED_STEP_W`, interpolated between)."""
        import numpy as np  # lazy: as the two below

        # lazy: features and infer load torch, which only a gnn decision needs (see GnnPredictor.scorer)
        from ecolaunch.policy.features import scenario_graph
        from ecolaunch.policy.infer import score_sd  # lazy: as above

        doc = {**profile_to_json(dataclasses.replace(known or Profile(), memory_mib=memory_mib)), "id": "first",
               "allowed_slowdown_pct": allowed_slowdown_pct}
        coarse = cap_grid(gpu.power_limit_min_w, gpu.power_limit_max_w, ASKED_STEP_W)
        with _one_thread():
            thr, power, sd = score_sd([scenario_graph(gpu, cap, [doc]) for cap in coarse], _model(self.weights))
        speeds, slowest = [], 1.0
        for t in reversed(thr):
            slowest = min(slowest, max(float(t[0]), 1e-3))
            speeds.append(slowest)
        speeds.reverse()
        sds = [float(x[0]) for x in sd]
        watts = [max(float(p[0]), 1e-3) for p in power]
        fine = cap_grid(gpu.power_limit_min_w, gpu.power_limit_max_w, self.step_w)
        return list(zip(fine, *(np.interp(fine, coarse, column).tolist() for column in (speeds, sds, watts))))


def _model(weights: Path | None):
    # lazy: infer loads torch, which only a gnn decision needs (see GnnPredictor.scorer)
    from ecolaunch.policy.infer import load_default_model, load_model_cached

    return load_default_model() if weights is None else load_model_cached(weights)


class _one_thread:
    """torch's thread pool costs more than these tiny forward passes on a loaded machine: score on one thread."""

    def __enter__(self) -> None:
        import torch

        self._saved = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc) -> None:
        import torch

        torch.set_num_threads(self._saved)


def gnn_policy(objective: str = "node", weights: Path | str | None = None, *, sd_z: float = SD_Z,
               host_static_w: float = 0.0, priors: Priors = default_prior) -> EnergyAwarePolicy:
    """The default policy; ``weights``: a weight file (a lab's own from ``ecolaunch policy train``, or one of a
    k-fold's ``train(out_path=...)``), None = shipped; ``sd_z``: standard deviations of a learned throughput kept
    back (:data:`~ecolaunch.policy.energy.SD_Z`). ``margin_pct`` (5 % of the bound) is kept back only for
    predictions that are neither learned nor measured. ``priors``: each job's curve prior, by job id (its own curve,
    read where it decides alone, and its cap; the GNN's features read :data:`~ecolaunch.jobmodel.capcurve.DEFAULT_PRIOR`,
    as its training did)."""
    return EnergyAwarePolicy(GnnPredictor(weights, priors), name="gnn", objective=objective, margin_pct=5.0,
                             sd_z=sd_z, host_static_w=host_static_w, priors=priors)
