"""The one way a job is placed: the policy decides, the admin rules admit, the graph books, the budget follows.

What lives here: :func:`place` (decide, :func:`~ecolaunch.policy.admission.admit`,
:meth:`~ecolaunch.state.graph.StateGraph.book`, then under a power budget
:func:`~ecolaunch.policy.budgeted.book_budget`), which the launcher's transaction
(``launch.session.Session.try_place``) and the simulator (``sim.engine.Simulation``) both run, and
:func:`admitted_decision`, its first two steps alone (``--dry-run`` books nothing). What does not: how a policy
chooses (``policy.*``), the rules (``policy.admission``), applying the caps to the GPUs (``caps.job.JobCaps``,
the simulator's machine). The steps in a launch: docs/architecture.md#the-flow-of-one-launch.
"""

from __future__ import annotations

from collections.abc import Callable

from ecolaunch.admin.rules import Rules
from ecolaunch.policy.admission import admit
from ecolaunch.policy.base import Decision, JobRequest, Policy
from ecolaunch.policy.budgeted import book_budget
from ecolaunch.state.graph import StateGraph

__all__ = ["admitted_decision", "place"]


def admitted_decision(state: StateGraph, request: JobRequest, policy: Policy, rules: Rules) -> Decision | None:
    """What ``policy`` decides for ``request`` on ``state``, as the admin rules admit it; None: the job waits."""
    return admit(state, request, rules, policy.decide(state, request, rules))


def place(state: StateGraph, request: JobRequest, policy: Policy, rules: Rules, now: float,
          note: Callable[[Decision], Decision] | None = None) -> Decision | None:
    """Decide, admit and book ``request``'s job (queued in ``state`` under ``request.id``) at time ``now``; the
    admitted decision, or None when the job waits (nothing booked). ``note``: what the booking records of how it
    was placed besides (a backfill, ``policy.backfill``). Raises KeyError when the job is not in the graph."""
    decision = admitted_decision(state, request, policy, rules)
    if decision is None:
        return None
    if note is not None:
        decision = note(decision)
    state.book(request.id, list(decision.gpus), dict(decision.power_caps_w), decision.to_dict(), request.profile, now)
    if rules.power_max_total_w is not None:
        book_budget(state, decision)
    return decision
