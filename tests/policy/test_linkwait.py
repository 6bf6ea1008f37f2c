"""The link rule (ecolaunch.policy.linkwait): a multi-GPU job offered a split set holds out for a best-linked one the
running jobs' expected ends free within its wait, says why, and takes the split set once the wait is over or cannot
be judged; ``why_waiting`` tells the hold and when the job starts by."""

from __future__ import annotations

import math

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.devices.backend import LinkKind
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.policy.linkwait import LINK_WAIT_SHARE, LinkWait, link_hold
from ecolaunch.policy.registry import get_policy
from ecolaunch.policy.waiting import why_waiting
from ecolaunch.state.graph import GpuNode, Host, Job, StateGraph, WaitReason

NOW = 1000.0


def _graph(running: dict[str, tuple[list[int], float | None]], gpus: int = 4) -> StateGraph:
    """``gpus`` GPUs linked in pairs by NVLink (0-1, 2-3, ...), PCIe between pairs; ``running``: job -> (GPU indexes,
    expected length from its start at 0 s; None: unknown)."""
    graph = StateGraph()
    host = Host(name="h")
    for i in range(gpus):
        host.gpus[f"g{i}"] = GpuNode(uuid=f"g{i}", index=i, name="V100", memory_total_mib=16384)
    for i in range(gpus):
        for j in range(i + 1, gpus):
            host.links[(f"g{i}", f"g{j}")] = LinkKind.NVLINK if i // 2 == j // 2 else LinkKind.PCIE_HOST
    graph.hosts["h"] = host
    for seq, (jid, (on, length)) in enumerate(running.items()):
        graph.jobs[jid] = Job.queued(jid, user="u", host="h", nproc=len(on), seq=seq, submitted_at=0.0,
                                     request={} if length is None else {"expected_s": length})
        graph.book(jid, [f"g{i}" for i in on], {}, {}, None, 0.0)
    return graph


def _request(expected_s: float | None, nproc: int = 2, now: float = NOW) -> JobRequest:
    return JobRequest(id="pair", user="u", host="h", nproc=nproc, expected_s=expected_s, decided_at=now)


def _queue(graph: StateGraph, request: JobRequest) -> StateGraph:
    graph.jobs[request.id] = Job.queued(request.id, user="u", host="h", nproc=request.nproc, seq=50,
                                        submitted_at=NOW, request={"expected_s": request.expected_s})
    return graph


def test_a_pair_offered_a_split_set_holds_out_for_the_nvlink_pair_expected_within_its_wait() -> None:
    graph = _graph({"a": ([0], 1500.0), "b": ([2], None)})  # GPU 1 and 3 free: only a split pair now
    offered = ExclusivePolicy().decide(graph, _request(1000.0), Rules())
    assert offered.gpus == ("g1", "g3")
    held = link_hold(graph, _request(1000.0), Rules(), offered)
    assert held is not None and held.gpus == ("g0", "g1") and held.at == 1500.0
    assert held.until == NOW + LINK_WAIT_SHARE * 1000.0 and held.retry_at == 1500.0
    assert held.why.startswith("waits for GPU 0,1 (linked by nvlink) rather than take GPUs linked by pcie host: "
                               "expected free in 500 s; it waits at most 4000 s for it (400% of its expected 1000 s)")
    # its wait too short for the pair's expected time: it takes the split set now
    assert link_hold(graph, _request(100.0), Rules(), offered) is None
    assert link_hold(graph, _request(1000.0), Rules(), offered, share=0.4) is None
    assert link_hold(graph, _request(1000.0), Rules(), offered, share=0.5) is not None


def test_no_hold_for_one_gpu_an_unknown_length_a_best_linked_offer_or_a_wait_that_is_over() -> None:
    graph = _graph({"a": ([0], 1500.0), "b": ([2], None)})
    offered = ExclusivePolicy().decide(graph, _request(1000.0), Rules())
    assert link_hold(graph, _request(None), Rules(), offered) is None  # never waits blind by default
    assert link_hold(graph, _request(None), Rules(), offered, unknown_s=600.0) is not None
    one = ExclusivePolicy().decide(graph, _request(1000.0, nproc=1), Rules())
    assert link_hold(graph, _request(1000.0, nproc=1), Rules(), one) is None
    paired = _graph({"a": ([0], 1500.0)})  # the NVLink pair 2-3 is free: offered, nothing to wait for
    assert link_hold(paired, _request(1000.0), Rules(), ExclusivePolicy().decide(paired, _request(1000.0), Rules())) \
        is None
    # first held at 0 s: at 1000 s its 800 s wait is over; first held at 500 s, it ends at 1300 s, before the pair
    assert link_hold(graph, _request(1000.0), Rules(), offered, share=0.8, since=0.0) is None
    assert link_hold(graph, _request(1000.0), Rules(), offered, share=0.8, since=500.0) is None
    assert link_hold(graph, _request(1000.0), Rules(), offered, share=0.8, since=800.0).until == 1600.0


def test_a_set_a_job_of_unknown_end_holds_is_waited_for_until_the_wait_is_over() -> None:
    graph = _graph({"a": ([0], None), "b": ([2], None)})  # no end known: every pair frees "some time"
    offered = ExclusivePolicy().decide(graph, _request(1000.0), Rules())
    held = link_hold(graph, _request(1000.0), Rules(), offered, share=0.5)
    assert held is not None and held.at is None and held.retry_at == held.until == NOW + 500.0
    assert "a running job's end is unknown" in held.why


def test_the_policy_waits_while_it_holds_out_counting_its_wait_from_the_first_hold() -> None:
    graph = _graph({"a": ([0], 1500.0), "b": ([2], None)})
    policy = LinkWait(ExclusivePolicy(), share=0.5)  # 500 s for a 1000 s job
    assert policy.decide(graph, _request(1000.0), Rules()) is None
    assert policy.holds["pair"].since == NOW
    assert policy.decide(graph, _request(1000.0, now=NOW + 400.0), Rules()) is None
    placed = policy.decide(graph, _request(1000.0, now=NOW + 501.0), Rules())  # its wait is over
    assert placed is not None and placed.gpus == ("g1", "g3") and "pair" not in policy.holds
    assert policy.name == "exclusive" and repr(policy).startswith("LinkWait(ExclusivePolicy()")


def test_why_waiting_says_the_job_holds_out_and_when_it_starts_by() -> None:
    graph = _queue(_graph({"a": ([0], 1500.0), "b": ([2], None)}), _request(1000.0))
    waiting = why_waiting(graph, _request(1000.0), get_policy("curve-link"), Rules())
    assert waiting.reason is WaitReason.RESOURCES and waiting.position == 1
    assert waiting.detail.startswith("waits for GPU 0,1 (linked by nvlink) rather than take GPUs linked by pcie host")
    assert waiting.starts_at == 1500.0 and waiting.starts_in(NOW) == 500.0
    # the default policy takes the split set: no hold to tell
    assert get_policy("curve").decide(graph, _request(1000.0), Rules()).gpus == ("g1", "g3")


def test_too_many_sets_to_look_at_never_hold() -> None:
    graph = _graph({"a": ([0], 1500.0)}, gpus=64)
    request = JobRequest(id="big", user="u", host="h", nproc=4, expected_s=1000.0, decided_at=NOW)
    offered = ExclusivePolicy().decide(graph, request, Rules())
    assert offered is not None and math.comb(63, 4) > 2000
    assert link_hold(graph, request, Rules(), offered) is None


@pytest.mark.parametrize("name", ["curve-link"])
def test_the_registered_policy_holds_out(name: str) -> None:
    graph = _graph({"a": ([0], 1500.0), "b": ([2], None)})
    assert get_policy(name).decide(graph, _request(1000.0), Rules()) is None
    assert get_policy(name).decide(graph, _request(100.0), Rules()).gpus == ("g1", "g3")
