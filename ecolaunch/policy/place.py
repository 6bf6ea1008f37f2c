"""The one way a job is placed: the policy decides, the admin rules admit, the graph books, the budget follows.

:func:`place` is what the launcher's transaction (``launch.session.Session.try_place``) and the simulator
(``sim.engine.Simulation``) both run, in the same order with the same results:

1. the policy decides on the state as it is (:meth:`~ecolaunch.policy.base.Policy.decide`);
2. :func:`~ecolaunch.policy.admission.admit` refuses a decision that breaks an admin rule and clips its caps;
3. :meth:`~ecolaunch.state.graph.StateGraph.book` makes the queued job RUNNING on the decided GPUs, with its caps,
   the decision and the request's profile, so the next decision sees it as it is;
4. under a power budget (``[power] max_total_w``), :func:`~ecolaunch.policy.budgeted.book_budget` books the budget's
   caps of its GPUs and the running jobs' new ones (``Decision.recaps_w``).

:func:`admitted_decision` is steps 1-2 alone (``ecolaunch launch --dry-run`` books nothing).

What does not live here: how a policy chooses (``policy.*``), the rules themselves (``policy.admission``), applying
the caps to the GPUs (the launcher's ``launch.jobcaps.JobCaps``, the simulator's machine).
"""

from __future__ import annotations

from ecolaunch.admin.rules import Rules
from ecolaunch.policy.admission import admit
from ecolaunch.policy.base import Decision, JobRequest, Policy
from ecolaunch.policy.budgeted import book_budget
from ecolaunch.state.graph import StateGraph

__all__ = ["admitted_decision", "place"]


def admitted_decision(state: StateGraph, request: JobRequest, policy: Policy, rules: Rules) -> Decision | None:
    """What ``policy`` decides for ``request`` on ``state``, as the admin rules admit it; None: the job waits."""
    return admit(state, request, rules, policy.decide(state, request, rules))


def place(state: StateGraph, request: JobRequest, policy: Policy, rules: Rules, now: float) -> Decision | None:
    """Decide, admit and book ``request``'s job (queued in ``state`` under ``request.id``) at time ``now``; the
    admitted decision, or None when the job waits (nothing booked). Raises KeyError when the job is not in the
    graph."""
    decision = admitted_decision(state, request, policy, rules)
    if decision is None:
        return None
    state.book(request.id, list(decision.gpus), dict(decision.power_caps_w), decision.to_dict(), request.profile, now)
    if rules.power_max_total_w is not None:
        book_budget(state, decision)
    return decision
