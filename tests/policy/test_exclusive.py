from __future__ import annotations

import itertools

from ecolaunch.admin.rules import Rules
from ecolaunch.devices.backend import LinkKind, pair_key
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.state.graph import GpuNode, Host, Job, JobState, StateGraph


def host_graph(n: int = 4, nvlink_pairs=((0, 1), (2, 3)), utils=None) -> StateGraph:
    host = Host(name="h")
    for i in range(n):
        host.gpus[f"G{i}"] = GpuNode(uuid=f"G{i}", index=i, name="A100", memory_total_mib=80000,
                                     util_gpu_pct=(utils or {}).get(i, 0.0))
    for a, b in itertools.combinations(range(n), 2):
        kind = LinkKind.NVLINK if (a, b) in nvlink_pairs else LinkKind.PCIE_HOST
        host.links[pair_key(f"G{a}", f"G{b}")] = kind
    return StateGraph(hosts={"h": host})


def running(graph: StateGraph, jid: str, gpus: list[str], user: str = "u") -> None:
    graph.jobs[jid] = Job(id=jid, uid=1, user=user, host="h", launcher_pid=1, launcher_start_time=0.0,
                          nproc=len(gpus), name="x", seq=0, submitted_at=0.0, state=JobState.RUNNING, gpus=gpus)


def req(n: int = 1, **kw) -> JobRequest:
    return JobRequest(id="new", user=kw.pop("user", "u"), host="h", nproc=n, **kw)


def test_single_gpu_goes_to_least_loaded() -> None:
    graph = host_graph(utils={0: 50.0, 1: 10.0, 2: 5.0, 3: 70.0})
    d = ExclusivePolicy().decide(graph, req(), Rules())
    assert d.gpus == ("G2",)
    assert d.colocated_with == {"G2": []} and d.power_caps_w == {"G2": None}


def test_two_gpus_prefer_an_nvlink_pair_even_if_more_loaded() -> None:
    graph = host_graph(nvlink_pairs=((2, 3),), utils={0: 0.0, 1: 0.0, 2: 30.0, 3: 30.0})
    d = ExclusivePolicy().decide(graph, req(2), Rules())
    assert d.gpus == ("G2", "G3")
    assert "nvlink" in d.reasons[0]


def test_busy_gpus_are_skipped_and_none_when_nothing_fits() -> None:
    graph = host_graph()
    running(graph, "a", ["G0", "G1"])
    graph.hosts["h"].gpus["G2"].foreign_pids = [999]
    assert ExclusivePolicy().decide(graph, req(), Rules()).gpus == ("G3",)
    assert ExclusivePolicy().decide(graph, req(2), Rules()) is None


def test_elastic_takes_every_free_gpu() -> None:
    graph = host_graph()
    running(graph, "a", ["G1"])
    d = ExclusivePolicy().decide(graph, req(1, elastic=True), Rules())
    assert d.gpus == ("G0", "G2", "G3")


def test_memory_allocation_reservations_and_quota() -> None:
    graph = host_graph()
    graph.hosts["h"].gpus["G0"].memory_used_mib = 79000
    assert ExclusivePolicy().decide(graph, req(memory_mib=2000), Rules()).gpus == ("G1",)
    assert ExclusivePolicy().decide(graph, req(allowed_gpus=("G3",)), Rules()).gpus == ("G3",)
    rules = Rules(reserved={"0": ("alice",), "1": ("alice",)}, user_gpu_limit={"bob": 2})
    assert ExclusivePolicy().decide(graph, req(user="bob"), rules).gpus == ("G2",)
    running(graph, "b1", ["G2"], user="bob")
    assert ExclusivePolicy().decide(graph, req(2, user="bob"), rules) is None
    assert ExclusivePolicy().decide(graph, req(1, user="bob"), rules).gpus == ("G3",)
