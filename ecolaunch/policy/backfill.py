"""EASY backfill on one host's queue: when each waiting job is expected to start, the head's reservation, and which job
behind the head may start now. The one rule the launcher (``launch.session.Session.try_place``) and the simulator
(``sim.engine.Simulation``) both run.

What lives here: :class:`Reservation` and :func:`reservation` (the head's promise), :func:`may_backfill` (a job
behind the head may start now), :func:`place_behind` (it, placed), :func:`overrun_margin` (how much to add to a
predicted length, learned from how often predictions ran over), :func:`late_by` and :func:`backfill_default` (which
policies backfill unless told). What does not: how long a job is expected to run (its request's ``expected_s`` and
``expected_iterations``, :meth:`~ecolaunch.state.graph.Job.remaining_s`), the placement itself (``policy.place``),
when each waiting job is expected to start (``state.queue.expected_starts``, re-exported here). The rule and what it
costs when a declared length lies: docs/queue.md#backfill.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ecolaunch.admin.rules import Rules
from ecolaunch.policy.base import Decision, JobRequest, Policy
from ecolaunch.policy.place import place
from ecolaunch.state.graph import StateGraph
from ecolaunch.state.queue import expected_starts, free_times

__all__ = ["DEFAULT_MARGIN", "MIN_PREDICTIONS", "OVERRUN_QUANTILE", "Reservation", "Verdict", "backfill_default",
           "expected_starts", "late_by", "may_backfill", "place_behind", "overrun_margin", "reservation"]

#: the share of predictions a margin lets run over: a backfilled job overruns its margin about this often
OVERRUN_QUANTILE = 0.9
#: predictions a lab's history needs before its own margin replaces :data:`DEFAULT_MARGIN`
MIN_PREDICTIONS = 5
#: the margin before a lab has its own: in Zeus's training runs (You et al., NSDI '23; 61 configurations run 4-10
#: times) a rerun misses the median of the others by 0.129 in log(run time), so 90 % of reruns end within
#: exp(1.2816 x 0.129) - 1 = 18 % over the median (the data and its measurement: docs/benchmarks.md, "Backfill: the
#: headroom before anyone builds it")
DEFAULT_MARGIN = 0.18


def backfill_default(policy: str) -> bool:
    """Whether a job launched under ``policy`` backfills unless told: every policy but ``exclusive``, which stays the
    by-hand baseline (a strict FIFO)."""
    return policy != "exclusive"


def overrun_margin(predictions: Iterable[tuple[float, float]]) -> float:
    """The margin to add to a predicted length, from ``(predicted_s, actual_s)`` pairs of completed runs: the
    :data:`OVERRUN_QUANTILE` quantile of how far runs ran over their prediction (``actual / predicted - 1``, 0 for a
    run that ended early); :data:`DEFAULT_MARGIN` with fewer than :data:`MIN_PREDICTIONS` pairs."""
    over = sorted(max(0.0, actual / predicted - 1.0) for predicted, actual in predictions
                  if predicted > 0 and actual >= 0 and math.isfinite(actual / predicted))
    if len(over) < MIN_PREDICTIONS:
        return DEFAULT_MARGIN
    return over[min(len(over) - 1, math.ceil(OVERRUN_QUANTILE * len(over)) - 1)]


@dataclass(frozen=True, slots=True)
class Reservation:
    """The head of a host's queue and its promise: ``at``, when enough GPUs are expected free for it (None: the ends
    known never free enough), ``extra``, how many GPUs beyond its need are free by then, and ``unknown``, the running
    jobs with no expected end (counted as never ending)."""

    head: str
    need: int
    at: float | None
    extra: int = 0
    unknown: tuple[str, ...] = ()


def reservation(graph: StateGraph, host: str, head: str, need: int, now: float) -> Reservation:
    """The promise to ``head``, the job at the head of ``host``'s queue needing ``need`` GPUs (EASY backfill's *shadow
    time*): the earliest time the running jobs' expected ends free enough of the host's GPUs."""
    times, unknown = free_times(graph, host, now)
    ends = sorted(times.values())
    if len(ends) < need:
        return Reservation(head, need, None, 0, tuple(unknown))
    at = max(now, ends[need - 1])
    return Reservation(head, need, at, sum(1 for t in ends if t <= at) - need, tuple(unknown))


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a job behind the head may start now (``yes``), and why, in words."""

    yes: bool
    why: str


def may_backfill(promise: Reservation, nproc: int, length_s: float | None, margin: float, now: float) -> Verdict:
    """Whether a job of ``nproc`` GPUs expected to run ``length_s`` (None: unknown) may start now ahead of the head
    of ``promise``: it takes only GPUs the head will not need at its reservation, or it is expected to end by then
    with ``margin`` added to its length. The policy still decides its GPUs and caps, and may find none."""
    if promise.at is None:
        who = ", ".join(promise.unknown) if promise.unknown else "none"
        return Verdict(False, f"no job starts ahead of job {promise.head}: the running jobs' known ends never free "
                              f"its {promise.need} GPU(s) (no expected end: job {who})")
    if nproc <= promise.extra:
        return Verdict(True, f"takes only GPUs job {promise.head} will not need at its reservation "
                             f"(in {max(0.0, promise.at - now):.0f} s)")
    window = promise.at - now
    if length_s is None:
        return Verdict(False, f"its length is unknown (declare it: --steps or @ecolaunch.job(steps=...)) and job "
                              f"{promise.head} is reserved GPUs in {max(0.0, window):.0f} s")
    padded = length_s * (1.0 + margin)
    if padded <= window:
        return Verdict(True, f"expected to end ({length_s:.0f} s, {padded:.0f} s with a {margin:.0%} margin) before "
                             f"job {promise.head}'s reservation in {window:.0f} s")
    return Verdict(False, f"backfill window too short: expected to run {padded:.0f} s with a {margin:.0%} margin, "
                          f"job {promise.head} is reserved GPUs in {max(0.0, window):.0f} s")


def late_by(promised: Sequence[float], started: float) -> float | None:
    """How late a head started against the earliest reservation it was promised when others backfilled past it (0
    when on time); None when nobody backfilled past it."""
    return max(0.0, started - min(promised)) if promised else None


def place_behind(state: StateGraph, request: JobRequest, policy: Policy, rules: Rules, now: float, head: str,
                 need: int, margin: float) -> tuple[Decision | None, Verdict]:
    """Backfill ``request``'s job (queued in ``state`` behind ``head``, which needs ``need`` GPUs) if
    :func:`may_backfill` lets it start now: placed as the head would be (:func:`~ecolaunch.policy.place.place`), its
    decision saying whom it started ahead of and the reservation it kept (``predicted["backfill"]``). The decision
    (None: not placed) and the verdict."""
    promise = reservation(state, request.host, head, need, now)
    verdict = may_backfill(promise, request.nproc, request.expected_s, margin, now)
    if not verdict.yes:
        return None, verdict
    said = {"head": head, "reservation_at": promise.at, "margin": round(margin, 4)}
    decision = place(state, request, policy, rules, now,
                     note=lambda d: replace(d, reasons=[*d.reasons, f"backfilled ahead of job {head}: {verdict.why}"],
                                            predicted={**d.predicted, "backfill": said}))
    return decision, verdict
