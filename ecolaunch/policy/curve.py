"""``curve`` (the default): energy-aware placement from the job's own measurements, on GPUs of its own.

What lives here: :class:`AloneOnCandidate` (the new job alone on a candidate's GPUs, read off its fitted curve: its
speed and power there; shared with the GNN's scorer, :mod:`ecolaunch.policy.gnn`, which takes these answers where
they decide), :class:`CurvePredictor` and :func:`curve_policy`. It imports neither torch nor the GNN. What does not:
the decision procedure (:class:`~ecolaunch.policy.energy.EnergyAwarePolicy`), the cap choice
(:mod:`ecolaunch.jobmodel.capchoice`). Why it never shares and is the default: docs/gnn.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from ecolaunch.admin.rules import Rules
from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR, CapPrior, Priors, default_prior, profile_curve
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.energy import Candidate, EnergyAwarePolicy, Outcome
from ecolaunch.state.graph import StateGraph


class AloneOnCandidate:
    """The new job alone on a candidate's GPUs: its cap curve (fitted with ``prior`` once per GPU maximum) read
    there."""

    def __init__(self, state: StateGraph, job: JobRequest, prior: CapPrior = DEFAULT_PRIOR) -> None:
        self._state, self._job = state, job
        self._fit = None
        if job.profile and job.profile.curve_points(1.0):
            self._fit = functools.lru_cache(maxsize=8)(functools.partial(profile_curve, job.profile, prior=prior))

    @property
    def known(self) -> bool:
        """Whether the job has a measured curve."""
        return self._fit is not None

    def on(self, cand: Candidate) -> tuple[list[float], dict[str, float], bool]:
        """On the candidate's GPUs the job would have to itself: its speed on each (against uncapped), each one's
        board power, and whether the measurements decide alone (every GPU its own: the curve is measurements of this
        very job, and its cap was chosen on it with the margin its measurement error asks for)."""
        if self._fit is None:
            return [], {}, False
        host = self._state.hosts[self._job.host]
        speed: list[float] = []
        power: dict[str, float] = {}
        for u, cap in zip(cand.gpus, cand.caps_w):
            gpu = host.gpus[u]
            if self._state.jobs_on(u) or gpu.power_limit_max_w is None:
                continue
            # the uncapped candidate too, so that every candidate on this GPU is judged by the same curve
            cap = gpu.power_limit_w or gpu.power_limit_max_w if cap is None else cap
            model = self._fit(gpu.power_limit_max_w)
            if model is None:
                continue
            top, at_cap = model.predict(gpu.power_limit_max_w), model.predict(cap)
            speed.append(top.iter_time_s / at_cap.iter_time_s)
            power[u] = at_cap.power_w
        return speed, power, bool(speed) and len(speed) == len(cand.gpus)


class CurvePredictor:
    """Predictions from the job's measured curve alone (candidates on GPUs of its own only), read with its prior
    (``priors``, by job id)."""

    name = "curve"

    def __init__(self, priors: Priors = default_prior) -> None:
        self.priors = priors

    def __repr__(self) -> str:
        return "CurvePredictor()"

    def scorer(self, state: StateGraph, job: JobRequest) -> _CurveScorer:
        return _CurveScorer(state, job, self.priors(job.id))


class _CurveScorer:
    def __init__(self, state: StateGraph, job: JobRequest, prior: CapPrior) -> None:
        self._state, self._job = state, job
        self._curve = AloneOnCandidate(state, job, prior)

    def predict(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        host = self._state.hosts[self._job.host]
        out = []
        for cand in candidates:
            speed, power, decides = self._curve.on(cand)
            if not decides:  # unknown job: full speed, and its GPUs at their limit (every candidate alike)
                speed = [1.0]
                power = {u: float(host.gpus[u].power_limit_w or host.gpus[u].power_limit_max_w or 0.0)
                         for u in cand.gpus}
            out.append(Outcome({self._job.id: min(speed)}, power))
        return out

    def current(self, gpus: Sequence[str]) -> Outcome:
        """The GPUs as they read now (idle ones: their idle power)."""
        host = self._state.hosts[self._job.host]
        return Outcome({}, {u: float(host.gpus[u].power_w or 0.0) for u in gpus if u in host.gpus})


class CurvePolicy(EnergyAwarePolicy):
    """Energy-aware placement on GPUs of its own, from the job's measured curve (see the module docstring)."""

    def __init__(self, *, name: str = "curve", objective: str = "node", host_static_w: float = 0.0,
                 priors: Priors = default_prior) -> None:
        super().__init__(CurvePredictor(priors), name=name, objective=objective, margin_pct=0.0,
                         host_static_w=host_static_w, priors=priors)

    def __repr__(self) -> str:
        return f"CurvePolicy(name={self.name!r}, objective={self.objective!r})"

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        decision = super().decide(state, job, replace(rules, allow_colocation=False))
        if decision is None or (job.profile and job.profile.knows_power) or job.elastic:
            return decision
        gpus = state.hosts[job.host].gpus
        idx = ",".join(str(gpus[u].index) for u in decision.gpus)
        return replace(decision, reasons=[
            f"GPU {idx} (alone, default power limit): the best-linked free GPU{'s' if len(decision.gpus) > 1 else ''}; "
            "the job's power is not known yet, so it runs uncapped until its profile, once measured, caps it "
            f"(bound {job.allowed_slowdown_pct:g} %)"])


def curve_policy(**kwargs) -> CurvePolicy:
    """The default policy (``--policy curve``)."""
    return CurvePolicy(**kwargs)
