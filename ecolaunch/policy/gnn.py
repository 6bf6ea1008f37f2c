"""``gnn``: energy-aware placement whose predictions come from the hierarchical GNN.

:class:`GnnPredictor` scores every candidate of :class:`~ecolaunch.policy.energy.EnergyAwarePolicy` (GPU set ×
power cap) in batched forward passes of the shipped model (``ecolaunch/policy/weights``; or a lab's own, written
by ``ecolaunch policy train``), through the plain-torch inference path (:mod:`ecolaunch.policy.infer`: no
torch_geometric on the launch path). It predicts each job's normalized throughput with its standard deviation and
each GPU's power at its cap; the policy keeps the candidate with the least predicted energy for the work that
keeps every affected job inside its slowdown bound, with ``sd_z`` standard deviations of each learned throughput
kept back. One decision's :class:`_GnnScorer` encodes and scores the machine as it runs now once, for every
candidate and for the objective's "before".

**A correction on measurements.** The model predicts residuals over physics priors (:mod:`ecolaunch.policy.infer`):
a job alone on its GPU(s) at a cap it was measured at (or between measured caps), or uncapped, is predicted
exactly as measured, with no learned part; when it shares, the learned interference factor multiplies its
measured speed at that cap. Running jobs' predictions are relative to how they run now (their slowdown bounds are
checked against that, as the launcher cannot know how far from solo a job already runs), with the standard
deviation scaled alike.

**Who decides.** On GPUs the new job would have to itself, its cap is the one its measured curve chooses
(``EnergyAwarePolicy``: :func:`~ecolaunch.profile.capchoice.job_cap_choice`, exactly the profiler's and the
closed loop's choice, with the margin the measurements ask for), and its speed and power there come from that
curve: such candidates are not even scored by the GNN (which keeps a decision within its latency goal) and their
outcomes say ``learned=False``. Sharing (the interference between co-located jobs, the power of shared GPUs) is
the GNN's, ``learned=True``; each decision says which won (``predicted["learned"]``).

A job without a measured profile is neither capped nor shared by this policy (``EnergyAwarePolicy``: sharing
needs a known memory size; capping needs a known power): the first launch of an unknown job runs alone at default
power, and its profile, once stored, lets the next launch be placed with full knowledge.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ecolaunch.jobmodel.capcurve import CapPrior, Priors, default_prior
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.curve import AloneOnCandidate
from ecolaunch.policy.energy import SD_Z, Candidate, EnergyAwarePolicy, Outcome
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
        # lazy: infer loads torch; the registry loads this module on every launch, and only a gnn decision needs torch
        from ecolaunch.policy.infer import load_default_model, load_model_cached

        model = load_default_model() if self.weights is None else load_model_cached(self.weights)
        return _GnnScorer(model, state, job, self.priors(job.id))


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
