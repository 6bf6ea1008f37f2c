"""Why a job waits (issue 23, item 9): each of Slurm's reason codes on the state it names, judged by the real
policies and admin rules. Pure: a state graph, no devices."""

from __future__ import annotations

import pytest

from ecolaunch.caps.limits import least_total_w
from ecolaunch.admin.rules import Rules, parse_rules
from ecolaunch.jobmodel.codec import profile_from_json
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.policy.waiting import why_waiting
from ecolaunch.state.graph import (MAX_DETAIL_CHARS, MAX_NAME_CHARS, GpuNode, Host, Job, StateGraph, WaitReason, job_from_dict,
                                 job_to_dict)

STEEP = {"iter_time_s": 0.1, "power_w": 330.0, "memory_mib": 1000,
         "cap_points": [[400.0, 0.1, 330.0], [300.0, 0.106, 285.0], [250.0, 0.118, 242.0]]}


def machine(n: int = 2) -> StateGraph:
    graph = StateGraph()
    graph.hosts["h"] = Host("h", {f"GPU-{i}": GpuNode(f"GPU-{i}", i, "NVIDIA A100-SXM4-80GB", 81920,
                                                      power_limit_min_w=100.0, power_limit_default_w=400.0,
                                                      power_limit_max_w=400.0, power_limit_w=400.0, power_w=50.0)
                               for i in range(n)})
    return graph


def run(graph: StateGraph, jid: str, user: str, gpus: list[int], profile: dict | None = None) -> None:
    graph.jobs[jid] = Job.queued(jid, user=user, host="h", nproc=len(gpus), seq=graph.take_seq(), submitted_at=0.0,
                                 request={"allowed_slowdown_pct": 10.0, "memory_mib": 1000}, name=f"{jid}.py")
    graph.book(jid, [f"GPU-{i}" for i in gpus], {}, {}, None if profile is None else
               profile_from_json(profile, where="test"), 0.0)


def request(jid: str = "new", user: str = "alice", nproc: int = 1, **kw) -> JobRequest:
    return JobRequest(jid, user, "h", nproc, **kw)


def judge(graph: StateGraph, req: JobRequest, rules: Rules = Rules(), policy: str = "curve"):
    waiting = why_waiting(graph, req, get_policy(policy), rules)
    return waiting.reason, waiting.detail


def test_busy_gpus_are_resources_and_name_who_holds_them() -> None:
    graph = machine()
    run(graph, "a1", "bob", [0, 1])
    reason, detail = judge(graph, request())
    assert reason is WaitReason.RESOURCES
    assert detail == "0 of the 1 GPU(s) the job needs are free; GPU 0,1 run job a1 (bob: a1.py)"


def test_a_job_behind_another_waits_for_priority_and_names_the_head_and_its_reason() -> None:
    graph = machine()
    run(graph, "a1", "bob", [0, 1])
    head = Job.queued("q1", user="carol", host="h", nproc=2, seq=graph.take_seq(), submitted_at=1.0, request={},
                      name="big.py")
    head.wait_reason = WaitReason.RESOURCES
    graph.jobs["q1"] = head
    waiting = why_waiting(graph, request(), get_policy("curve"), Rules())  # not queued yet: it would join behind
    assert (waiting.position, waiting.reason) == (2, WaitReason.PRIORITY)
    assert waiting.detail == "1 job(s) ahead in this host's queue; the first is q1 (carol: big.py), which waits for Resources"


def test_the_users_gpu_limit_is_user_limit_even_with_gpus_free() -> None:
    graph = machine(4)
    run(graph, "a1", "alice", [0])
    rules = parse_rules('[users."*"]\nmax_gpus = 2\n')[0]
    reason, detail = judge(graph, request(nproc=2), rules)
    assert reason is WaitReason.USER_LIMIT
    assert detail == "user alice holds 1 of the 2 GPU(s) [users] max_gpus allows; the job needs 2"
    assert judge(graph, request(user="bob", nproc=2), rules)[0] is not WaitReason.USER_LIMIT


def test_free_gpus_reserved_for_others_are_reservation() -> None:
    graph = machine()
    run(graph, "a1", "bob", [1])
    rules = parse_rules('[reserve.0]\nusers = ["carol"]\n')[0]
    reason, detail = judge(graph, request(), rules)
    assert reason is WaitReason.RESERVATION
    assert detail.startswith("GPU 0 free but reserved for others ([reserve]); 0 of the 1 GPU(s)")


def test_free_gpus_without_the_memory_are_memory() -> None:
    graph = machine()
    graph.hosts["h"].gpus["GPU-0"].memory_used_mib = 80000  # held by something ecolaunch sees no process of
    run(graph, "a1", "bob", [1])
    reason, detail = judge(graph, request(memory_mib=4000))
    assert reason is WaitReason.MEMORY
    assert detail == "the job needs 4000 MiB per GPU; free MiB on the free GPUs too small for it: GPU 0 1920"


def test_a_placement_over_the_power_budget_is_power_budget() -> None:
    graph = machine()
    run(graph, "a1", "bob", [0], STEEP)
    rules = Rules(power_max_total_w=560.0)  # bob at its floor (285 W) and a newcomer's floor do not fit
    reason, detail = judge(graph, request(profile=profile_from_json(STEEP, where="test"),
                                          allowed_slowdown_pct=10.0, memory_mib=1000), rules)
    assert reason is WaitReason.POWER_BUDGET
    assert detail.startswith("with it on GPU 1 the host's caps cannot go below ") and "560 W power budget" in detail


@pytest.mark.parametrize("nproc, caps, expected", [
    (1, "", 200.0),            # 2 GPUs at their 100 W minimum: the job's one at the lowest cap, 100 W
    (2, "min_w = 300.0", 600.0),  # the admin's [caps] minimum is the lowest a job's GPU may go
])
def test_least_total_counts_the_jobs_gpus_at_their_lowest_allowed_cap(nproc: int, caps: str, expected: float) -> None:
    graph = machine()
    rules = parse_rules(f"[caps.A100-SXM4-80GB]\n{caps}\n" if caps else "")[0]
    gpus = list(graph.hosts["h"].gpus.values())
    assert least_total_w(rules, gpus, gpus, nproc) == expected
    assert least_total_w(rules, gpus, gpus[:1], 2) is None  # fewer usable GPUs than asked: not this check's to say


def test_the_words_stay_within_what_a_job_file_may_hold() -> None:
    graph = machine(64)
    for i in range(64):  # every GPU busy with a job whose name is as long as a job file allows
        graph.jobs[f"j{i}"] = Job.queued(f"j{i}", user="bob", host="h", nproc=1, seq=graph.take_seq(),
                                         submitted_at=0.0, request={}, name="n" * MAX_NAME_CHARS)
        graph.book(f"j{i}", [f"GPU-{i}"], {}, {}, None, 0.0)
    reason, detail = judge(graph, request())
    assert reason is WaitReason.RESOURCES and len(detail) == MAX_DETAIL_CHARS and detail.endswith("...")
    queued = Job.queued("new", user="alice", host="h", nproc=1, seq=graph.take_seq(), submitted_at=0.0, request={})
    queued.wait_reason, queued.wait_detail = reason, detail
    assert job_from_dict("new", job_to_dict(queued)).wait_detail == detail  # the file reads back
