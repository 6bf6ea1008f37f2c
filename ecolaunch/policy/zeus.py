"""``zeus``: exclusive placement with each job's energy-optimal power cap under its slowdown bound.

What Zeus's GlobalPowerLimitOptimizer does for one job (You et al., NSDI '23), placed like ``exclusive``: the
job's cap curve comes from its profile (:func:`ecolaunch.jobmodel.capcurve.profile_curve`: measured cap points, or its
uncapped power with the prior learned from the Zeus traces), and the cap is the one with the least GPU energy per
iteration (Zeus's ``eta = 1``) whose predicted slowdown stays within the job's bound, on a 25 W grid inside the
admin policy's bounds. A job without a profile keeps the default power limit.
"""

from __future__ import annotations

from ecolaunch.admin.rules import Rules, cap_bounds_w
from ecolaunch.jobmodel.capcurve import Priors, default_prior, profile_curve
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.jobmodel.capchoice import choose_cap
from ecolaunch.jobmodel.powercap import DEFAULT_CAP_STEP_W, cap_grid
from ecolaunch.state.graph import StateGraph


class ZeusPolicy:
    """``cap_step_w``: the cap grid (Zeus's own stride by default; ``benchmarks/energy.py`` also runs a 5 W
    ablation under another ``name``); ``priors``: each job's curve prior, by job id."""

    name = "zeus"

    def __init__(self, cap_step_w: float = DEFAULT_CAP_STEP_W, name: str = "zeus",
                 priors: Priors = default_prior) -> None:
        self.cap_step_w, self.name, self.priors = cap_step_w, name, priors

    def __repr__(self) -> str:
        return f"ZeusPolicy(eta=1.0, cap_step_w={self.cap_step_w})"

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        placed = ExclusivePolicy().decide(state, job, rules)
        if placed is None:
            return None
        caps: dict[str, float | None] = {}
        reasons = list(placed.reasons)
        host = state.hosts[job.host]
        chosen = None  # the first GPU's choice: its predictions are the decision's (one cap per job)
        for uuid in placed.gpus:
            gpu = host.gpus[uuid]
            if gpu.power_limit_max_w is None or gpu.power_limit_min_w is None:
                caps[uuid] = None
                continue
            model = profile_curve(job.profile, gpu.power_limit_max_w, unknown_time_s=1.0, prior=self.priors(job.id))
            if model is None:
                caps[uuid] = None
                continue
            low, high = cap_bounds_w(rules, gpu.name, gpu.index, gpu.power_limit_min_w, gpu.power_limit_max_w)
            # Zeus's own rule: no margin for what is not known, any saving is taken (ecolaunch's policies keep both)
            choice = choose_cap(model, cap_grid(low, high, self.cap_step_w), job.allowed_slowdown_pct, 1.0,
                                gpu.power_limit_max_w, z=0.0, min_saving_pct=0.0)
            caps[uuid] = None if choice.cap_w >= gpu.power_limit_max_w else choice.cap_w
            if chosen is None:
                chosen = (uuid, model, choice)
                reasons.append(choice.reason)
        if chosen is None:
            reasons.append("no profile with power: default power limit")
            return Decision(self.name, placed.gpus, caps, placed.colocated_with, reasons)
        uuid, model, choice = chosen
        predicted = {"slowdown_pct": {job.id: round(choice.slowdown_pct, 2)},
                     "gpu_power_w": {u: round(choice.predicted_power_w, 1) for u in placed.gpus if u in caps},
                     "energy_j_per_iter": round(choice.predicted_energy_j_per_iter, 6), "predictor": "zeus curve"}
        alternatives = []
        if caps[uuid] is not None and choice.predicted_energy_j_per_iter > 0:  # uncapped: what the cap saves
            top = model.predict(host.gpus[uuid].power_limit_max_w)
            more_pct = 100.0 * (top.iter_time_s * top.power_w / choice.predicted_energy_j_per_iter - 1.0)
            alternatives.append({"gpus": list(placed.gpus), "power_caps_w": dict.fromkeys(placed.gpus),
                                 "predicted_slowdown_pct": 0.0, "energy_w_per_work": None,
                                 "why_not": f"{more_pct:.1f} % more energy per iteration"})
        return Decision(self.name, placed.gpus, caps, placed.colocated_with, reasons, predicted=predicted,
                        alternatives=alternatives)
