"""The sharing contract (ecolaunch.policy.contract): start now on a shared GPU when that finishes the job sooner than
waiting for GPUs of its own, every running job within its bound; unknown lengths mean no such sharing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.devices.spec import parse_spec
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.policy import contract
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.place import place
from ecolaunch.sim.engine import Simulation, Trace, TraceJob
from ecolaunch.sim.metrics import summarize
from ecolaunch.sim.oracle import oracle_policy
from ecolaunch.state.graph import Job
from tests.policy.test_energy_policy import idle_host

LIGHT = Profile(iter_time_s=0.2, sm_util_pct=50.0, mem_bw_util_pct=25.0, memory_mib=8000, power_w=200.0)
NOW = 1000.0


def running(state, jid: str, gpu: str, *, expected_s: float | None, started: float = NOW - 100.0,
            cap_w: float | None = 175.0) -> None:
    """A job running on ``gpu`` since ``started``, capped where it runs 9 % slower than alone (its bound is 10 %),
    its expected length booked as the launcher books it."""
    state.jobs[jid] = Job.queued(jid, user="u", host="h", nproc=1, seq=0, submitted_at=started,
                                 request={"allowed_slowdown_pct": 10.0, "memory_mib": 8000,
                                          **({"expected_s": expected_s} if expected_s is not None else {})})
    state.book(jid, [gpu], {gpu: cap_w}, {}, LIGHT, started)
    if cap_w is not None:
        state.hosts["h"].gpus[gpu].power_limit_w = cap_w  # as the machine reads it once the cap is applied


def request(**kw) -> JobRequest:
    base = dict(id="new", user="u", host="h", nproc=1, memory_mib=8000, allowed_slowdown_pct=10.0, profile=LIGHT,
                expected_s=100.0, share_if_sooner=True, decided_at=NOW)
    return JobRequest(**{**base, **kw})


def test_waiting_is_when_enough_gpus_are_free_then_the_jobs_own_length() -> None:
    state = idle_host(2)
    running(state, "a", "G0", expected_s=400.0)  # 300 s left
    running(state, "b", "G1", expected_s=1100.0)  # 1000 s left
    t = contract.terms(state, request(), Rules())
    assert t.known and t.wait_s == pytest.approx(300.0) and t.waiting_done_s == pytest.approx(400.0)
    assert t.deadline_s == pytest.approx(440.0)  # waiting x (1 + its 10 % bound)
    assert contract.terms(state, request(nproc=2), Rules()).wait_s == pytest.approx(1000.0)
    assert t.sooner(0.5) and not t.sooner(0.2)  # 200 s sharing against 400 s waiting; 500 s is later


def test_progress_tells_the_time_left_better_than_the_clock() -> None:
    state = idle_host(1)
    running(state, "a", "G0", expected_s=400.0)
    state.jobs["a"].request["expected_iterations"] = 2000
    state.jobs["a"].progress = JobProgress(at=NOW, iterations=500, iter_time_s=0.4)  # slower than it used to be
    assert contract.terms(state, request(), Rules()).wait_s == pytest.approx(1500 * 0.4)


@pytest.mark.parametrize(("setup", "job", "said"), [
    (lambda s: running(s, "a", "G0", expected_s=None), {}, "nothing says when GPU 0 is free"),
    (lambda s: running(s, "a", "G0", expected_s=50.0), {}, "nothing says when GPU 0 is free"),  # ran past it
    (lambda s: running(s, "a", "G0", expected_s=400.0), {"expected_s": None}, "this job never completed here"),
    (lambda s: running(s, "a", "G0", expected_s=400.0), {"decided_at": None}, "no time to count from"),
])
def test_unknown_means_no_such_sharing_said_in_one_line(setup, job: dict, said: str) -> None:
    state = idle_host(1)
    setup(state)
    t = contract.terms(state, request(**job), Rules())
    assert not t.known and said in t.why and "\n" not in t.why and not t.sooner(1.0)


def test_a_contract_job_shares_a_capped_gpu_lifting_its_cap_and_keeps_the_running_jobs_bound() -> None:
    state = idle_host(1)
    running(state, "a", "G0", expected_s=1100.0)
    oracle = oracle_policy()
    assert oracle.decide(state, request(share_if_sooner=False), Rules()) is None  # its bound alone: it waits
    decision = oracle.decide(state, request(), Rules())
    assert decision is not None and decision.gpus == ("G0",) and decision.colocated_with == {"G0": ["a"]}
    assert decision.power_caps_w == {"G0": 400.0}  # the GPU's cap is the highest its jobs want: lifted
    terms = decision.predicted["contract"]
    assert terms["wait_s"] == pytest.approx(1000.0) and terms["sharing_done_s"] < 1100.0
    assert decision.predicted["slowdown_pct"]["a"] <= 10.0  # the running job keeps its bound
    assert "--share-if-sooner" in decision.reasons[0] and "finishes in about" in decision.reasons[0]
    # what the GNN policy would do is the same procedure with a learned predictor; nothing is sooner with no estimate
    state.jobs["a"].request.pop("expected_s")
    assert oracle.decide(state, request(), Rules()) is None


def test_no_sharing_when_waiting_is_sooner() -> None:
    state = idle_host(1)
    running(state, "a", "G0", expected_s=100.5)  # free in 0.5 s: waiting finishes the new job at 100.5 s
    assert oracle_policy().decide(state, request(), Rules()) is None  # sharing: 1.3 % slower, 101.3 s
    state.jobs["a"].request["expected_s"] = 110.0  # free in 10 s: sharing is sooner
    assert oracle_policy().decide(state, request(), Rules()) is not None


def test_place_books_the_contract_decision_like_any_other() -> None:
    state = idle_host(1)
    running(state, "a", "G0", expected_s=1100.0)
    state.jobs["new"] = Job.queued("new", user="u", host="h", nproc=1, seq=1, submitted_at=NOW,
                                   request={"allowed_slowdown_pct": 10.0, "memory_mib": 8000})
    decision = place(state, request(), oracle_policy(), Rules(), NOW)
    assert decision is not None and {j.id for j in state.jobs_on("G0")} == {"a", "new"}
    assert state.jobs["new"].power_caps_w == {"G0": 400.0}  # admitted: a lift of the GPU's cap, not a newcomer's cap


def test_in_simulation_a_contract_job_starts_sooner_and_keeps_its_promise() -> None:
    machine = parse_spec("1xA100-SXM4-80GB", hostname="ws")
    jobs = (TraceJob("long", 0.0, 1, 1000.0, LIGHT), TraceJob("short", 10.0, 1, 100.0, replace(LIGHT, sm_util_pct=40.0)))
    trace = Trace("contract", jobs)
    plain = Simulation(machine, oracle_policy()).run(trace)
    shared = Simulation(machine, oracle_policy(), share_if_sooner=True).run(trace)
    short_plain, short_shared = plain.jobs[1], shared.jobs[1]
    assert short_plain.start_s > 900.0 and not short_plain.shared  # waited for the GPU
    assert short_shared.start_s == 10.0 and short_shared.shared and short_shared.contract_deadline_s is not None
    assert short_shared.end_s < short_plain.end_s and not short_shared.contract_violated
    long_shared = shared.jobs[0]
    assert long_shared.slowdown_pct <= long_shared.allowed_slowdown_pct + 0.01  # the running job kept its bound
    summary = summarize(shared)
    assert summary.contract_jobs_pct == 50.0 and summary.contract_violations_pct == 0.0
    assert summary.mean_jct_s < summarize(plain).mean_jct_s


@pytest.mark.parametrize("name", ["analytic-share", "util-share"])
def test_the_rows_whose_pairs_a_rule_chooses_share_an_underused_gpu_and_not_a_busy_one(name: str) -> None:
    """benchmarks/energy.py's ``analytic-share`` and ``util-share``: the same contract, the pairs predicted by the
    GNN's prior alone or by the utilization-sum rule; nothing learned decides, so the 5 % margin is kept back."""
    from ecolaunch.policy.gnn import prior_share_policy

    policy = prior_share_policy(name)
    state = idle_host(1)
    running(state, "a", "G0", expected_s=1100.0)
    decision = policy.decide(state, request(), Rules())  # two jobs at 50 % of the GPU each
    assert decision is not None and decision.colocated_with == {"G0": ["a"]}
    assert decision.policy == name and decision.predicted["learned"] is False
    slow = decision.predicted["slowdown_pct"]["a"]
    assert slow == pytest.approx(0.0, abs=1e-6) if name == "util-share" else 0.0 < slow <= 9.5
    busy = replace(LIGHT, sm_util_pct=95.0)
    state.jobs["a"].profile = busy
    assert policy.decide(state, request(profile=busy), Rules()) is None  # summed demand 1.9: each would halve
    with pytest.raises(ValueError, match="analytic-share or util-share"):
        prior_share_policy("gnn")
