"""The GNN's graph: exact nodes and edges of a small state, candidates equal to the state they describe."""

from __future__ import annotations

import math

import pytest
import torch

from ecolaunch.devices.backend import LinkKind, pair_key
from ecolaunch.devices.catalogue import lookup
from ecolaunch.errors import ConfigError
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.features import (
    EDGE_TYPES,
    GPU_FEATURES,
    JOB_FEATURES,
    CandidatePlacement,
    batch,
    build_graph,
    encode_state,
    job_row,
    scenario_graph,
)
from ecolaunch.jobmodel.codec import profile_from_json
from ecolaunch.jobmodel.capcurve import fit_curve
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.policy.infer import message_edges
from ecolaunch.state.graph import GpuNode, Host, Job, JobState, StateGraph

A100 = lookup("A100-SXM4-80GB")
#: the what-if GPU of an A100
A100_NODE = GpuNode.from_model(A100)
LINKS = {(0, 1): LinkKind.NVLINK, (2, 3): LinkKind.PCIE_SWITCH, (0, 2): LinkKind.PCIE_HOST,
         (1, 3): LinkKind.PCIE_HOST, (0, 3): LinkKind.SYSTEM, (1, 2): LinkKind.SYSTEM}
PROFILE = {"iter_time_s": 0.2, "sm_util_pct": 40.0, "mem_bw_util_pct": 20.0, "memory_mib": 8000, "power_w": 200.0}


def gpu(host: str, i: int, cap: float | None = None) -> GpuNode:
    return GpuNode(uuid=f"{host}-G{i}", index=i, name=A100.full_name, memory_total_mib=A100.memory_mib,
                   power_limit_min_w=A100.power_limit_min_w, power_limit_default_w=A100.power_limit_default_w,
                   power_limit_max_w=A100.power_limit_max_w, power_limit_w=cap or A100.power_limit_max_w)


def job(jid: str, gpus: list[str], seq: int, profile: dict | None = PROFILE, host: str = "h",
        state: JobState = JobState.RUNNING) -> Job:
    return Job(id=jid, uid=0, user="u", host=host, launcher_pid=1, launcher_start_time=0.0, nproc=len(gpus),
               name=jid, seq=seq, submitted_at=0.0, state=state, gpus=gpus,
               profile=None if profile is None else profile_from_json(profile, where="test"),
               request={"allowed_slowdown_pct": 10.0})


def small_state(hosts: tuple[str, ...] = ("h",)) -> StateGraph:
    state = StateGraph()
    for name in hosts:
        host = Host(name=name, gpus={g.uuid: g for g in (gpu(name, i) for i in range(4))})
        for (a, b), kind in LINKS.items():
            host.links[pair_key(f"{name}-G{a}", f"{name}-G{b}")] = kind
        state.hosts[name] = host
    state.jobs["j1"] = job("j1", ["h-G0"], 1)
    state.jobs["j2"] = job("j2", ["h-G0"], 2, profile=None)
    state.jobs["j3"] = job("j3", ["h-G1", "h-G2"], 3)
    state.jobs["q"] = job("q", [], 4, state=JobState.QUEUED)
    for node in state.hosts["h"].gpus.values():
        node.memory_used_mib = sum(j.memory_mib for j in state.jobs.values() if node.uuid in j.gpus)
    return state


def edge_set(graph, et) -> set[tuple[int, int]]:
    return set(map(tuple, graph.edges[et].t().tolist()))


def test_small_state_has_exact_nodes_and_edges() -> None:
    g = encode_state(small_state()).graph()
    assert {t: tuple(x.shape) for t, x in g.x.items()} == {
        "job": (3, len(JOB_FEATURES)), "gpu": (4, len(GPU_FEATURES)), "group": (2, 4), "host": (1, 2)}
    assert g.job_ids == ("j1", "j2", "j3") and g.gpu_uuids == ("h-G0", "h-G1", "h-G2", "h-G3")
    assert edge_set(g, ("job", "runs_on", "gpu")) == {(0, 0), (1, 0), (2, 1), (2, 2)}
    assert edge_set(g, ("gpu", "hosts", "job")) == {(0, 0), (0, 1), (1, 2), (2, 2)}
    # SYSTEM pairs (0-3, 1-2) get no edge; the other four pairs one edge each way
    assert edge_set(g, ("gpu", "link", "gpu")) == {(0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (2, 0), (1, 3), (3, 1)}
    kinds = dict(zip(map(tuple, g.edges[("gpu", "link", "gpu")].t().tolist()), g.link_kind.tolist()))
    assert (kinds[(0, 1)], kinds[(3, 2)], kinds[(1, 3)]) == (LinkKind.NVLINK, LinkKind.PCIE_SWITCH, LinkKind.PCIE_HOST)
    msg = message_edges(g)
    assert [msg[("gpu", r, "gpu")].shape[1] for r in ("nvlink", "pcie_switch", "pcie_host")] == [2, 2, 4]
    assert edge_set(g, ("gpu", "in", "group")) == {(0, 0), (1, 0), (2, 1), (3, 1)}
    assert edge_set(g, ("group", "has", "gpu")) == {(0, 0), (0, 1), (1, 2), (1, 3)}
    assert edge_set(g, ("group", "in", "host")) == {(0, 0), (1, 0)}
    assert edge_set(g, ("host", "has", "group")) == {(0, 0), (0, 1)}
    assert g.edges[("host", "peer", "host")].shape == (2, 0)
    # group 0 is an NVLink island of two GPUs, group 1 a PCIe switch of two
    assert torch.allclose(g.x["group"], torch.tensor([[1.0, 0, 0, 1 / 3], [0, 1, 0, 1 / 3]]))
    assert set(g.edges) == set(EDGE_TYPES)


def test_features_are_finite_with_missing_flags() -> None:
    state = small_state()
    state.jobs["j1"].profile = profile_from_json({**PROFILE, "sm_util_pct": None, "power_w": None}, where="test")
    g = encode_state(state).graph()
    col = {name: i for i, name in enumerate(JOB_FEATURES)}
    assert all(torch.isfinite(x).all() for x in g.x.values())
    j1, j2 = g.x["job"][0], g.x["job"][1]
    assert j1[col["sm_util_missing"]] == 1 and j1[col["power_missing"]] == 1 and j1[col["iter_time_missing"]] == 0
    assert j1[col["iter_time"]] == pytest.approx(math.log10(2.0))
    assert j2[col["iter_time_missing"]] == 1 and j2[col["demand"]] == 1.0  # unknown utilization: busy GPU
    gcol = {name: i for i, name in enumerate(GPU_FEATURES)}
    g0 = g.x["gpu"][0]
    assert g0[gcol["jobs"]] == 0.5 and g0[gcol["ampere"]] == 1 and g0[gcol["idle_power_missing"]] == 0
    assert g0[gcol["demand_sum"]] == pytest.approx(0.2 + 1.0)


def test_candidates_equal_the_state_with_the_job_added() -> None:
    state = small_state()
    request = JobRequest(id="new", user="u", host="h", nproc=2, memory_mib=30000, allowed_slowdown_pct=15.0,
                         profile=profile_from_json({**PROFILE, "memory_mib": 30000}, where="test"))
    places = [CandidatePlacement(("h-G0",)), CandidatePlacement(("h-G2", "h-G3"), {"h-G3": 250.0}),
              CandidatePlacement(("h-G1",), {"h-G1": None})]
    cands = encode_state(state).candidates(request, places)
    assert cands.num_graphs == 3
    singles = []
    for place in places:
        after = small_state()
        after.jobs["new"] = job("new", list(place.gpus), 99, profile={**PROFILE, "memory_mib": 30000})
        after.jobs["new"].request["allowed_slowdown_pct"] = 15.0
        for u in place.gpus:
            node = after.hosts["h"].gpus[u]
            node.memory_used_mib += 30000
            if place.power_caps_w.get(u) is not None:
                node.power_limit_w = place.power_caps_w[u]
        singles.append(encode_state(after).graph())
    expected = batch(singles)
    for t in expected.x:
        assert torch.allclose(cands.x[t], expected.x[t]), t
    for et in EDGE_TYPES:
        assert sorted(map(tuple, cands.edges[et].t().tolist())) == sorted(map(tuple, expected.edges[et].t().tolist()))
    assert cands.gpu_cap_w.tolist() == expected.gpu_cap_w.tolist()
    assert cands.job_ids == expected.job_ids and cands.job_ptr.tolist() == [0, 4, 8, 12]
    assert build_graph(state, request, places[1]).x["gpu"].tolist() == cands.x["gpu"][4:8].tolist()


def test_candidate_errors_name_the_gpu() -> None:
    enc = encode_state(small_state())
    request = JobRequest(id="new", user="u", host="h", nproc=1)
    with pytest.raises(ConfigError, match="'nope' is not in the encoded state"):
        enc.candidates(request, [(("nope",), None)])
    with pytest.raises(ConfigError, match="twice"):
        enc.candidates(request, [(("h-G0", "h-G0"), None)])


def test_two_hosts_are_peers_and_hosts_can_be_restricted() -> None:
    state = small_state(("h", "k"))
    g = encode_state(state).graph()
    assert g.x["host"].shape[0] == 2 and g.x["group"].shape[0] == 4
    assert edge_set(g, ("host", "peer", "host")) == {(0, 1), (1, 0)}
    only = encode_state(state, hosts=["k"]).graph()
    assert only.gpu_uuids == ("k-G0", "k-G1", "k-G2", "k-G3") and only.job_ids == ()


def test_cap_points_are_interpolated_at_the_reference_caps() -> None:
    profile = {"iter_time_s": 0.1, "cap_points": [{"power_cap_w": 200, "iter_time_s": 0.15, "power_w": 180},
                                                  [400, 0.1, 300]]}
    row = dict(zip(JOB_FEATURES, job_row(profile_from_json(profile, where="test"), memory_mib=None,
                                         allowed_slowdown_pct=None, n_gpus=1,
                                         gpu_memory_mib=81920, gpu_max_power_w=400.0)))
    curve = fit_curve([CapPoint(200, 0.15, 180), CapPoint(400, 0.1, 300)])  # the job's one curve, read there
    for cap, name in ((240, "cap60"), (320, "cap80")):
        at = curve.predict(cap)
        assert row[f"{name}_slowdown"] == pytest.approx(at.iter_time_s / 0.1 - 1) and 0 < row[f"{name}_slowdown"] < 0.5
        assert row[f"{name}_power"] == pytest.approx(at.power_w / 400) and 180 / 400 < row[f"{name}_power"] < 300 / 400
    assert row["cap60_missing"] == row["cap80_missing"] == 0
    high = {"iter_time_s": 0.1, "cap_points": [[300, 0.11, 250], [400, 0.1, 300]]}
    row = dict(zip(JOB_FEATURES, job_row(profile_from_json(high, where="test"), memory_mib=None,
                                         allowed_slowdown_pct=None, n_gpus=1,
                                         gpu_memory_mib=81920, gpu_max_power_w=400.0)))
    assert row["cap60_missing"] == 1 and row["cap80_missing"] == 0  # 240 W lies below the lowest measured cap


def test_scenario_graph_puts_every_job_on_one_gpu() -> None:
    jobs = [{"id": "a", **PROFILE, "memory_mib": 50000}, {"id": "b", **PROFILE, "memory_mib": 40000}]
    g = scenario_graph(A100_NODE, 250.0, jobs)
    assert g.job_ids == ("a", "b") and len(g.gpu_uuids) == 1
    assert edge_set(g, ("job", "runs_on", "gpu")) == {(0, 0), (1, 0)}
    assert g.gpu_cap_w.tolist() == [250.0] and g.gpu_memory_fits.tolist() == [False]
    assert scenario_graph(A100_NODE, None, jobs[:1]).gpu_cap_w.tolist() == [A100.power_limit_max_w]
