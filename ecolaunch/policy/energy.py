"""Energy-aware placement: enumerate candidates, predict each, keep the cheapest that keeps every job in bound.

What lives here: :class:`Candidate` (GPU set + cap per GPU), :class:`Outcome` (what a predictor says would
happen), the :class:`Predictor` protocol, :func:`enumerate_candidates`, and :class:`EnergyAwarePolicy`, the
decision procedure shared by ``curve``, the GNN policy (``ecolaunch.policy.gnn``) and the simulator's oracle
(``ecolaunch.sim.oracle``). What does not: any model. The candidates, the objective and its constraint:
docs/gnn.md#the-energy-aware-decision.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ecolaunch.admin.rules import Rules
from ecolaunch.caps.limits import job_cap_bounds
from ecolaunch.jobmodel.capcurve import DEFAULT_PRIOR, CapPrior, Priors, default_prior
from ecolaunch.policy import contract
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.policy.candidates import best_set, eligible_gpus, worst_link
from ecolaunch.jobmodel.capchoice import CHOICE_STEP_W, CapChoice, job_cap_choice, queue_eta
from ecolaunch.state.graph import GpuNode, StateGraph

OBJECTIVES = ("node", "gpu", "job")
#: the grid caps are chosen on (``capchoice.CHOICE_STEP_W``): finer than Zeus's 25 W stride, since NVML takes
#: any limit within the board's range; the 25 W grid left jobs well short of the slowdown their bound allowed
DECISION_CAP_STEP_W = CHOICE_STEP_W
#: candidates whose cost is within this many watts per unit of work (or this fraction) of the least are
#: ties, decided by predicted speed (e.g. caps that cannot bind a job drawing little power)
TIE_W, TIE_FRACTION = 0.1, 0.001
#: above this many GPU sets a few good ones are built greedily instead of ranking them all
MAX_COMBINATIONS = 2000
#: standard deviations of a learned throughput kept back: the 95th percentile of (predicted - measured) / sd on
#: Gavel pairs of job types the model never saw (all folds of ``benchmarks/pair_prediction.py``, which prints it and
#: the coverage cross-fitted on the other folds; docs/gnn.md), i.e. a bound is kept with about 95 %
#: confidence where the model's errors look like those
SD_Z = 2.0
#: the least standard deviation a learned throughput is taken to have (normalized throughput)
MIN_SD = 0.005
#: the most alternatives a decision lists (``--explain``)
MAX_ALTERNATIVES = 4


@dataclass(frozen=True, slots=True)
class Candidate:
    gpus: tuple[str, ...]
    #: cap per GPU in watts; None = the GPU's current limit
    caps_w: tuple[float | None, ...]
    #: the cap is the job's own curve's choice (:func:`alone_cap`), its margin already kept back
    by_curve: bool = False
    #: why that cap, in words (the curve's choice), for the decision's reasons
    why_cap: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Predicted normalized throughput of each job on the affected GPUs (new job under its request id), and
    each affected GPU's board power."""

    throughput: dict[str, float]
    gpu_power_w: dict[str, float]
    #: standard deviation of each throughput that carries a learned part (absent: a measurement, or exact)
    throughput_sd: dict[str, float] = field(default_factory=dict)
    #: whether a learned model predicted a throughput here (see "Who decided" in docs/gnn.md#the-energy-aware-decision)
    learned: bool = False


class Scorer(Protocol):
    """A predictor's answers for one decision (one machine state, one new job)."""

    def predict(self, candidates: Sequence[Candidate]) -> list[Outcome]:
        """One outcome per candidate, with the new job placed."""
        ...

    def current(self, gpus: Sequence[str]) -> Outcome:
        """The outcome on ``gpus`` as they run now (no new job)."""
        ...


class Predictor(Protocol):
    name: str

    def scorer(self, state: StateGraph, job: JobRequest) -> Scorer:
        """Predictions for placing ``job`` on ``state``; ``state`` must not change while the scorer is used
        (what does not depend on the candidate is computed once per decision)."""
        ...


def usable_gpus(state: StateGraph, job: JobRequest, rules: Rules) -> list[GpuNode]:
    """GPUs the job could get now: idle, or shareable under the admin rules."""
    out = []
    for gpu in eligible_gpus(state, job, rules):
        jobs = state.jobs_on(gpu.uuid)
        if gpu.foreign_pids:
            continue
        if not jobs:
            if gpu.memory_free_mib >= (job.memory_mib or 0):
                out.append(gpu)
            continue
        if not rules.allow_colocation or len(jobs) >= rules.max_jobs_per_gpu:
            continue
        if job.memory_mib is None or any(j.memory_mib == 0 for j in jobs):
            continue  # unknown memory: never share blind
        if gpu.memory_free_mib >= job.memory_mib + rules.memory_margin_mib:
            out.append(gpu)
    return out


def alone_choice(job: JobRequest, gpus: Sequence[GpuNode], rules: Rules,
                 prior: CapPrior = DEFAULT_PRIOR) -> CapChoice | None:
    """The one objective's choice for the job alone on ``gpus`` from its measured curve read with ``prior``
    (:func:`~ecolaunch.jobmodel.capchoice.job_cap_choice`, as the profiler and the closed loop choose); None without
    a curve or cap bounds."""
    bounds = job_cap_bounds(rules, gpus)  # one cap for the job: every GPU's admin bounds intersected
    if bounds is None:
        return None
    points = job.profile.curve_points(bounds[1]) if job.profile else ()
    eta = queue_eta(rules.eta, rules.wait_weight, job.waiting_share)  # the jobs waiting behind, when weighed
    return job_cap_choice(points, bounds, job.allowed_slowdown_pct, eta, prior=prior)


def alone_cap(job: JobRequest, gpus: Sequence[GpuNode], rules: Rules,
              prior: CapPrior = DEFAULT_PRIOR) -> tuple[float | None, str | None]:
    """The cap of :func:`alone_choice` and its reason; (None, None) when the job stays uncapped (no curve, or no cap
    saves enough)."""
    choice = alone_choice(job, gpus, rules, prior)
    if choice is None or choice.cap_w >= min(g.power_limit_max_w for g in gpus) - 1e-9:  # type: ignore[type-var]
        return None, None
    weighed = (f"; {job.waiting_share:.3g} waiting job(s) weighed (wait_weight {rules.wait_weight:g})"
               if rules.wait_weight > 0 and job.waiting_share > 0 else "")
    return choice.cap_w, f"{job.curve_named}: {choice.reason}{weighed}"


def enumerate_candidates(state: StateGraph, job: JobRequest, rules: Rules, *, max_sets: int = 24,
                         cap_for=alone_cap) -> list[Candidate]:
    """GPU sets the job could get now, each with its cap: on GPUs it would have to itself, ``cap_for(job, gpus,
    rules) -> (cap, why)`` (the one cap choice from its measured curve; the oracle passes the truth's); on shared
    GPUs, None."""
    host = state.hosts.get(job.host)
    if host is None:
        return []
    gpus = usable_gpus(state, job, rules)
    if len(gpus) < job.nproc:
        return []
    def rank(combo):
        shared = sum(1 for g in combo if state.jobs_on(g.uuid))
        return (worst_link(host, [g.uuid for g in combo]), shared, [g.index for g in combo])

    if math.comb(len(gpus), job.nproc) > MAX_COMBINATIONS:
        # too many sets to rank one by one (a 4-GPU job on a 64-GPU host): the best idle set, the best set
        # among the least-loaded GPUs, and the best set among the busiest ones that can still share
        def idle_first(g: GpuNode) -> tuple:
            return (len(state.jobs_on(g.uuid)), g.util_gpu_pct or 0.0, g.memory_used_mib)

        idle = [g for g in gpus if not state.jobs_on(g.uuid)]
        busy = [g for g in gpus if state.jobs_on(g.uuid)]
        picks = [best_set(host, idle, job.nproc, idle_first), best_set(host, gpus, job.nproc, idle_first),
                 best_set(host, busy, job.nproc, lambda g: (-len(state.jobs_on(g.uuid)), g.memory_used_mib))]
        combos = list({tuple(g.uuid for g in p): tuple(p) for p in picks if p}.values())
    else:
        combos = list(itertools.combinations(gpus, job.nproc))
    # of the GPU sets nobody uses, only the best-linked: a worse link only slows a synchronous job, and no predictor
    # here knows by how much (measured on V100: 0.1-1.0 of its speed when spread out, benchmarks/energy.py's
    # workstation-topology), so a learned power difference must not buy one
    sets, idle_seen = [], False
    for combo in sorted(combos, key=rank):
        link, shared, _ = rank(combo)
        if not shared:
            if idle_seen:
                continue
            idle_seen = True
        sets.append(combo)
        if len(sets) >= max_sets:
            break
    out = []
    by_curve = bool(job.profile and job.profile.curve_points(1.0))
    for combo in sets:
        uuids = tuple(g.uuid for g in combo)
        if any(state.jobs_on(u) for u in uuids):  # sharing keeps the GPUs' caps: a newcomer takes them as found
            out.append(Candidate(uuids, (None,) * len(uuids)))
            continue
        cap, why = cap_for(job, combo, rules)
        out.append(Candidate(uuids, (cap,) * len(uuids), by_curve=by_curve, why_cap=why))
    return out


class EnergyAwarePolicy:
    """Least predicted energy for the work, every job within its slowdown bound (docs/gnn.md#the-energy-aware-decision)."""

    def __init__(self, predictor: Predictor, *, name: str | None = None, objective: str = "node",
                 margin_pct: float = 10.0, host_static_w: float = 0.0, sd_z: float = SD_Z,
                 priors: Priors = default_prior) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.predictor = predictor
        self.name = name or predictor.name
        self.objective = objective
        self.margin_pct = margin_pct
        self.host_static_w = host_static_w
        self.sd_z = sd_z
        self.priors = priors

    def __repr__(self) -> str:
        return (f"EnergyAwarePolicy(predictor={self.predictor.name!r}, objective={self.objective!r}, "
                f"margin_pct={self.margin_pct}, sd_z={self.sd_z})")

    def decide(self, state: StateGraph, job: JobRequest, rules: Rules) -> Decision | None:
        scorer = self.predictor.scorer(state, job)
        cap_for = getattr(scorer, "alone_cap", None) or functools.partial(alone_cap, prior=self.priors(job.id))
        if job.elastic:
            return self._elastic(state, job, rules, cap_for)
        candidates = enumerate_candidates(state, job, rules, cap_for=cap_for)
        if not candidates:
            return None
        outcomes = scorer.predict(candidates)
        before = scorer.current(sorted({u for c in candidates for u in c.gpus}))
        scored = self._ranked(state, job, candidates, outcomes, before)
        if not scored:
            return (self._contract(state, job, rules, scorer, candidates, outcomes, before) if job.share_if_sooner
                    else None)
        return self._decision(state, job, scored, self._set_aside(state, job, rules, scorer, scored, cap_for))

    def _contract(self, state: StateGraph, job: JobRequest, rules: Rules, scorer: Scorer,
                  candidates: Sequence[Candidate], outcomes: Sequence[Outcome], before: Outcome) -> Decision | None:
        """No candidate keeps the job's bound: under the sharing contract (:mod:`ecolaunch.policy.contract`), the
        shared candidates that finish it sooner than waiting would, every running job within its bound. Each shared
        set is weighed at its GPUs' caps as found and uncapped: a running job capped up to its bound has no room to
        share, and a GPU's cap is the highest its jobs want (``caps.keeper``), so the newcomer lifts it."""
        if rules.power_max_total_w is not None:
            return None  # under a power budget a lift would take watts from the budget's other jobs
        terms = contract.terms(state, job, rules)
        if not terms.known:
            return None
        gpus = state.hosts[job.host].gpus
        as_found = [(c, out) for c, out in zip(candidates, outcomes) if any(state.jobs_on(u) for u in c.gpus)]
        if not as_found:
            return None
        lifted = [Candidate(c.gpus, tuple(gpus[u].power_limit_max_w for u in c.gpus)) for c, _ in as_found]
        # ``before`` already covers these GPUs (they are the candidates'), and the as-found ones were predicted
        rows = [row for cand, out in [*as_found, *zip(lifted, scorer.predict(lifted))]
                if (row := self._score(state, job, cand, out, before, terms)) is not None]
        if not rows:
            return None
        return self._decision(state, job, self._ranked(state, job, (), (), before, rows), terms=terms)

    def _elastic(self, state: StateGraph, job: JobRequest, rules: Rules, cap_for) -> Decision | None:
        """``--nproc-per-node gpu``: every free GPU the user may use (as ``exclusive`` finds them; sharing a GPU
        with an elastic job would only slow both), capped as this policy caps any job alone on its GPUs."""
        placed = ExclusivePolicy().decide(state, job, rules)
        if placed is None:
            return None
        gpus = [state.hosts[job.host].gpus[u] for u in placed.gpus]
        cap, why = cap_for(job, gpus, rules)
        reasons = [f"GPU {','.join(str(g.index) for g in gpus)}: every free GPU user {job.user!r} may use "
                   "(--nproc-per-node gpu takes as many as the policy grants), "
                   + (f"capped at {cap:.0f} W" if cap is not None else "default power limit")]
        if why:
            reasons.append(why)
        return Decision(self.name, placed.gpus, dict.fromkeys(placed.gpus, cap), placed.colocated_with, reasons,
                        predicted={"predictor": self.predictor.name, "learned": False})

    def _ranked(self, state: StateGraph, job: JobRequest, candidates: Sequence[Candidate],
                outcomes: Sequence[Outcome], before: Outcome, scored: Sequence = ()) -> list:
        rows = list(scored)
        for cand, out in zip(candidates, outcomes):
            row = self._score(state, job, cand, out, before)
            if row is not None:
                rows.append(row)
        if not rows:
            return rows
        host = state.hosts[job.host]
        # least energy (within a tie tolerance: a difference the predictions cannot tell apart must not buy
        # a slower run); then the earliest completion; then the fastest links; then the lowest indices
        tie = _tie_limit(min(r[0] for r in rows))
        rows.sort(key=lambda r: (round(max(r[0], tie), 6), round(1.0 / r[1], 6), worst_link(host, r[2].gpus),
                                 [host.gpus[u].index for u in r[2].gpus]))
        return rows

    # --- scoring ---------------------------------------------------------------------------------
    def _within(self, x: float, sd: float | None, bound_pct: float, exact: bool) -> bool:
        """Whether throughput ``x`` keeps a slowdown bound with the room its prediction asks for (module
        docstring): ``sd_z`` standard deviations of a learned one, none for an exact one, else ``margin_pct``."""
        if sd is not None:
            x = self._kept_back(x, sd)
            limit = bound_pct + 1e-6
        else:
            limit = bound_pct + 1e-6 if exact else bound_pct * (1.0 - self.margin_pct / 100.0)
        return x > 0 and 100.0 * (1.0 / x - 1.0) <= limit

    def _kept_back(self, x: float, sd: float | None) -> float:
        """Throughput ``x`` with ``sd_z`` of its learned standard deviation ``sd`` (at least :data:`MIN_SD`) kept
        back; ``x`` itself when nothing was learned (``sd`` None)."""
        return x if sd is None else x - self.sd_z * max(sd, MIN_SD)

    def _score(self, state: StateGraph, job: JobRequest, cand: Candidate, out: Outcome, before: Outcome,
               terms: contract.Terms | None = None):
        """The candidate's (cost, new job's throughput, candidate, outcome, slowdowns), or None when a job breaks
        its bound; under the sharing contract (``terms``) the new job must finish sooner than waiting instead."""
        x_new = out.throughput.get(job.id, 0.0)
        sd = out.throughput_sd.get(job.id)
        if terms is not None:
            if not terms.sooner(self._kept_back(x_new, sd)):
                return None
        # a cap the job's curve chose already kept its margin (capchoice.cap_margin_pct)
        elif not self._within(x_new, sd, job.allowed_slowdown_pct, cand.by_curve):
            return None
        lost = 0.0
        slowdowns = {job.id: 100.0 * (1.0 / x_new - 1.0)}
        for u in cand.gpus:
            for other in state.jobs_on(u):
                x_after = out.throughput.get(other.id, 1.0)
                x_before = before.throughput.get(other.id, 1.0)
                bound = float(other.request.get("allowed_slowdown_pct") or 10.0)
                if x_after < x_before - 1e-9 and not self._within(x_after, out.throughput_sd.get(other.id), bound,
                                                                   False):
                    return None
                slowdowns[other.id] = 100.0 * (1.0 / max(x_after, 1e-9) - 1.0)
                share = before.gpu_power_w.get(u, 0.0) / max(1, len(state.jobs_on(u)))
                lost += max(0.0, x_before - x_after) * share / max(x_before, 1e-9)
        return self._cost(state, job, cand, out, before, lost, x_new), x_new, cand, out, slowdowns

    def _cost(self, state: StateGraph, job: JobRequest, cand: Candidate, out: Outcome, before: Outcome, lost: float,
              x_new: float) -> float:
        """The objective (docs/gnn.md#the-energy-aware-decision): power added per unit of the new job's work."""
        delta_w = sum(out.gpu_power_w[u] - before.gpu_power_w.get(u, 0.0) for u in cand.gpus)
        static = self.host_static_w * len(cand.gpus) / max(1, len(state.hosts[job.host].gpus)) if self.objective == "job" else 0.0
        return (delta_w + static + lost) / x_new

    # --- what --explain shows beside the decision -------------------------------------------------
    def _set_aside(self, state: StateGraph, job: JobRequest, rules: Rules, scorer: Scorer, scored,
                   cap_for) -> list[dict]:
        """The alternatives the ranking never weighed, predicted by the same scorer (for ``--explain``): on the
        chosen GPUs, uncapped and one step below the chosen cap (a job with a measured curve alone there); the best
        free set of each other GPU model and, for several GPUs, the best free set with a slower link (of the sets
        nobody uses only the best-linked one is a candidate: docs/gnn.md#the-energy-aware-decision)."""
        cost, x_new, best, _, _ = scored[0]
        host = state.hosts[job.host]
        weighed = {r[2].gpus for r in scored}
        cands: list[tuple[Candidate, str]] = []
        if best.by_curve and not any(state.jobs_on(u) for u in best.gpus):
            n, cap = len(best.gpus), best.caps_w[0]
            bounds = job_cap_bounds(rules, [host.gpus[u] for u in best.gpus])
            if cap is not None:
                cands.append((Candidate(best.gpus, (None,) * n, by_curve=True), "uncapped"))
            below = (cap if cap is not None else bounds[1] if bounds else 0.0) - DECISION_CAP_STEP_W
            if bounds is not None and below >= bounds[0]:
                cands.append((Candidate(best.gpus, (below,) * n, by_curve=True),
                              "a lower cap" if cap is not None else "capped"))
        for combo in set_aside_sets(state, job, rules, best.gpus):
            uuids = tuple(g.uuid for g in combo)
            if uuids not in weighed:
                cap, _ = cap_for(job, combo, rules)
                cands.append((Candidate(uuids, (cap,) * len(uuids), by_curve=best.by_curve), "set aside"))
        if not best.by_curve:  # the job's power is not known yet: every GPU would be predicted alike, at its limit
            why = ("the job's power is not known yet, so no GPU is predicted to save energy; of the free sets the "
                   "policy takes the best-linked, lowest indexes first")
            return [_alternative(cand, None, None, why) for cand, _ in cands]
        if not cands:
            return []
        outcomes = scorer.predict([c for c, _ in cands])
        before = scorer.current(sorted({u for c, _ in cands for u in c.gpus}))
        out = []
        for (cand, kind), outcome in zip(cands, outcomes):
            x = outcome.throughput.get(job.id, 0.0)
            c = self._cost(state, job, cand, outcome, before, 0.0, x) if x > 0 else math.inf
            slow = 100.0 * (1.0 / x - 1.0) if x > 0 else math.inf
            if slow > job.allowed_slowdown_pct + 1e-6:
                why = f"over the job's {job.allowed_slowdown_pct:g} % bound"
            elif kind == "a lower cap" and c < cost:
                why = ("within the bound as predicted, but not with the margin the cap choice keeps back for what "
                       "was not measured")
            else:
                why = _why_not(c, cost, x, x_new)
                if kind == "set aside":
                    why += "; of the free sets the policy takes the best-linked, lowest indexes first"
            out.append(_alternative(cand, slow, c, why))
        return out

    def _decision(self, state: StateGraph, job: JobRequest, scored, set_aside: Sequence[dict] = (),
                  terms: contract.Terms | None = None) -> Decision:
        gpus = state.hosts[job.host].gpus
        cost, x_new, best, out, slow = scored[0]
        caps = dict(zip(best.gpus, best.caps_w))
        colocated = {u: [j.id for j in state.jobs_on(u)] for u in best.gpus}
        idx = ",".join(str(gpus[u].index) for u in best.gpus)
        cap_txt = ", ".join(f"{w:.0f} W" for w in best.caps_w if w is not None) or "default power limit"
        share_txt = "shares with " + ", ".join(sorted({j for v in colocated.values() for j in v})) if any(colocated.values()) else "alone"
        n = f"{len(scored)} candidate{'' if len(scored) == 1 else 's'}"
        if terms is None:
            reasons = [f"GPU {idx} ({share_txt}, {cap_txt}): predicted {100 * (1 / x_new - 1):.1f} % slower than "
                       f"alone (bound {job.allowed_slowdown_pct:g} %), {_energy_text(cost, job)}: the least energy "
                       f"of {n} within every job's bound"]
        else:
            reasons = [f"GPU {idx} ({share_txt}, {cap_txt}): no GPUs of its own within its "
                       f"{job.allowed_slowdown_pct:g} % bound now; sharing, predicted {100 * (1 / x_new - 1):.1f} % "
                       f"slower than alone, it finishes in about {terms.sharing_done_s(x_new):.0f} s against "
                       f"{terms.waiting_done_s:.0f} s {terms.why} (--share-if-sooner); {_energy_text(cost, job)}: "
                       f"the least energy of {n} that finish it sooner, every running job within its bound"]
        if best.why_cap:
            reasons.append(best.why_cap)
        # the alternatives a user can weigh: other GPU sets (with their own caps), and sharing; then those the
        # ranking never weighed (other caps, other models, slower links)
        alternatives = [_alternative(cand, 100 * (1 / x - 1), c, _why_not(c, cost, x, x_new))
                        for c, x, cand, _, _s in scored[1:4]]
        alternatives += list(set_aside)[: max(0, MAX_ALTERNATIVES - len(alternatives))]
        return Decision(
            policy=self.name,
            gpus=best.gpus,
            power_caps_w=caps,
            colocated_with=colocated,
            reasons=reasons,
            predicted={
                "normalized_throughput": {k: round(v, 4) for k, v in out.throughput.items()},
                "slowdown_pct": {k: round(v, 2) for k, v in slow.items()},
                "gpu_power_w": {k: round(v, 1) for k, v in out.gpu_power_w.items()},
                "energy_w_per_work": round(cost, 2),
                "predictor": self.predictor.name,
                "learned": out.learned,
                **({"throughput_sd": {k: round(v, 4) for k, v in out.throughput_sd.items()}}
                   if out.throughput_sd else {}),
                **({"contract": {"wait_s": round(terms.wait_s, 1), "expected_s": round(terms.expected_s, 1),
                                 "sharing_done_s": round(terms.sharing_done_s(x_new), 1),
                                 "deadline_s": round(terms.deadline_s, 1)}} if terms is not None else {}),
            },
            alternatives=alternatives,
        )


def set_aside_sets(state: StateGraph, job: JobRequest, rules: Rules, chosen: Sequence[str]) -> list[tuple[GpuNode, ...]]:
    """Free GPU sets :func:`enumerate_candidates` leaves out (of the sets nobody uses it keeps the best-linked one):
    the best set of each GPU model other than ``chosen``'s, then, for several GPUs, the best set of ``chosen``'s
    model whose slowest link is slower than ``chosen``'s."""
    host = state.hosts.get(job.host)
    if host is None or not chosen:
        return []
    idle = [g for g in usable_gpus(state, job, rules) if not state.jobs_on(g.uuid)]
    mine = {host.gpus[u].name for u in chosen}

    def load(g: GpuNode) -> tuple:
        return (g.util_gpu_pct or 0.0, g.memory_used_mib)

    out = []
    for model in sorted({g.name for g in idle} - mine):
        found = best_set(host, [g for g in idle if g.name == model], job.nproc, load)
        if found:
            out.append(tuple(found))
    same = [g for g in idle if g.name in mine]
    if job.nproc > 1 and math.comb(len(same), job.nproc) <= MAX_COMBINATIONS:
        link = worst_link(host, list(chosen))
        slower = [c for c in itertools.combinations(same, job.nproc) if worst_link(host, [g.uuid for g in c]) > link]
        if slower:
            out.append(min(slower, key=lambda c: (worst_link(host, [g.uuid for g in c]), [g.index for g in c])))
    return out


def _alternative(cand: Candidate, slowdown_pct: float | None, cost: float | None, why_not: str) -> dict:
    """One of a decision's ``alternatives``: GPUs, caps, predicted slowdown and cost (None: no prediction), why not."""
    return {"gpus": list(cand.gpus), "power_caps_w": dict(zip(cand.gpus, cand.caps_w)),
            "predicted_slowdown_pct": None if slowdown_pct is None or not math.isfinite(slowdown_pct)
            else round(slowdown_pct, 2),
            "energy_w_per_work": None if cost is None or not math.isfinite(cost) else round(cost, 2),
            "why_not": why_not}


def _energy_text(cost_w: float, job: JobRequest) -> str:
    """What a candidate's cost means for the user: the energy the job adds per iteration when its iteration time
    is known (the cost is power per unit of its uncapped speed, so times its uncapped iteration time), else the
    power its work adds."""
    if cost_w < 0.5:
        return "next to no energy added (its GPUs draw about what they would idle)"
    t0 = job.profile.iter_time_s if job.profile else None
    if t0:
        return f"{cost_w * float(t0):.3g} J added per iteration"
    return f"{cost_w:.0f} W added at its full speed"


def _tie_limit(best: float) -> float:
    """The highest cost that still ties with ``best`` (see :data:`TIE_W`)."""
    return best + max(TIE_W, TIE_FRACTION * abs(best))


def _why_not(cost: float, best: float, x: float, x_best: float) -> str:
    if cost <= _tie_limit(best):
        return ("as little energy per unit of work, but slower" if x < x_best - 1e-9
                else "as little energy per unit of work, and no faster")
    return f"{(cost / best - 1) * 100:.1f} % more energy per unit of work" if best > 0 else "costs more"
