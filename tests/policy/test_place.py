"""One placement (ecolaunch.policy.place): decide, admit, book, budget, for the launcher and the simulator alike."""

from __future__ import annotations

from ecolaunch.admin.rules import parse_rules
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.policy.place import admitted_decision, place
from ecolaunch.state.graph import GpuNode, Host, Job, JobState, StateGraph

HOST = "lab1"
RULES = '[reserve.0]\nusers = ["alice"]\n[caps."A100-SXM4-80GB"]\nmin_w = 200\nmax_w = 300\n'


class Fixed:
    """A policy that answers one decision whatever the rules say."""

    name = "fixed"

    def __init__(self, decision: Decision) -> None:
        self.decision = decision

    def decide(self, state, job, rules):
        return self.decision


def _queued_state() -> StateGraph:
    host = Host(HOST, {f"G{i}": GpuNode(f"G{i}", i, "NVIDIA A100-SXM4-80GB", 81920, power_limit_min_w=100.0,
                                        power_limit_max_w=400.0, power_limit_w=400.0) for i in range(4)})
    state = StateGraph(hosts={HOST: host})
    state.jobs["n"] = Job.queued("n", user="bob", host=HOST, nproc=1, seq=0, submitted_at=0.0, request={})
    return state


def _decision(gpu: str, cap: float | None, **extra) -> Decision:
    return Decision("fixed", (gpu,), {gpu: cap}, {gpu: []}, ["fixed"], **extra)


REQUEST = JobRequest(id="n", user="bob", host=HOST, nproc=1, profile={"power_w": 180.0})


def test_a_refused_decision_books_nothing() -> None:
    state = _queued_state()
    assert place(state, REQUEST, Fixed(_decision("G0", 250.0)), parse_rules(RULES)[0], 5.0) is None  # alice's GPU
    job = state.jobs["n"]
    assert (job.state, job.gpus, job.power_caps_w, job.started_at) == (JobState.QUEUED, [], {}, None)


def test_an_admitted_decision_is_booked_as_admitted() -> None:
    state, rules = _queued_state(), parse_rules(RULES)[0]
    policy = Fixed(_decision("G1", 50.0))
    admitted = admitted_decision(state, REQUEST, policy, rules)
    assert admitted is not None and admitted.power_caps_w == {"G1": 200.0}  # clipped into the admin's bounds
    assert state.jobs["n"].state is JobState.QUEUED  # deciding books nothing
    assert place(state, REQUEST, policy, rules, 5.0) == admitted
    job = state.jobs["n"]
    assert (job.state, job.gpus, job.power_caps_w, job.started_at) == (JobState.RUNNING, ["G1"], {"G1": 200.0}, 5.0)
    assert job.decision == admitted.to_dict() and job.profile == {"power_w": 180.0}
    assert state.budget_caps_w == {}  # no budget, no budget caps


def test_under_a_budget_the_booking_books_the_budget_caps() -> None:
    state, rules = _queued_state(), parse_rules(RULES + "[power]\nmax_total_w = 1000\n")[0]
    state.jobs["old"] = Job.queued("old", user="carol", host=HOST, nproc=1, seq=1, submitted_at=0.0, request={})
    state.book("old", ["G2"], {}, {}, None, 1.0)
    decision = _decision("G1", 250.0, recaps_w={"G2": 220.0}, predicted={"budget": {"caps_w": {"G1": 250.0}}})
    assert place(state, REQUEST, Fixed(decision), rules, 5.0) is not None
    assert state.budget_caps_w == {"G1": 250.0, "G2": 220.0}
