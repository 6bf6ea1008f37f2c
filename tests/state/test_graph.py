from __future__ import annotations

import pytest

from ecolaunch.devices.backend import LinkKind
from ecolaunch.devices.catalogue import CATALOGUE
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.state.graph import (
    WHATIF_UUID,
    GpuNode,
    Host,
    Job,
    JobState,
    StateGraph,
    job_from_dict,
    job_to_dict,
)


def make_graph() -> StateGraph:
    graph = StateGraph(next_seq=3, generation=7)
    host = Host(name="ws1")
    for i in range(2):
        host.gpus[f"GPU-{i}"] = GpuNode(uuid=f"GPU-{i}", index=i, name="A100", memory_total_mib=81920)
    host.links[("GPU-0", "GPU-1")] = LinkKind.NVLINK
    graph.hosts["ws1"] = host
    graph.jobs["j1"] = Job(
        id="j1", uid=1000, user="alice", host="ws1", launcher_pid=42, launcher_start_time=1.5,
        nproc=1, name="train.py", seq=2, submitted_at=10.0, state=JobState.RUNNING,
        gpus=["GPU-1"], power_caps_w={"GPU-1": 250.0}, request={"memory_mib": 1000},
    )
    return graph


def test_round_trip_keeps_everything() -> None:
    graph = make_graph()
    again = StateGraph.from_dict(graph.to_dict())
    assert again.to_dict() == graph.to_dict()
    assert again.jobs["j1"].state is JobState.RUNNING
    assert again.hosts["ws1"].link("GPU-1", "GPU-0") is LinkKind.NVLINK
    assert again.jobs["j1"].memory_mib == 1000


def test_queue_order_and_positions() -> None:
    graph = make_graph()
    for seq, jid in [(9, "late"), (4, "early")]:
        graph.jobs[jid] = Job(id=jid, uid=1, user="bob", host="ws1", launcher_pid=1, launcher_start_time=0.0,
                              nproc=1, name="x", seq=seq, submitted_at=0.0)
    assert [j.id for j in graph.queued_jobs()] == ["early", "late"]
    assert graph.queue_position("late") == 2
    assert graph.queue_position("j1") is None
    assert [j.id for j in graph.jobs_on("GPU-1")] == ["j1"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(schema="other"), "schema"),
        (lambda d: d.update(version=99), "version"),
        (lambda d: d.update(next_seq=-1), "next_seq"),
        (lambda d: d["jobs"]["j1"].update(uid="root"), "jobs.j1.uid"),
        (lambda d: d["jobs"]["j1"].update(state="zombie"), "jobs.j1.state"),
        (lambda d: d["jobs"]["j1"].update(gpus=[1, 2]), "jobs.j1.gpus"),
        (lambda d: d["jobs"]["j1"].update(id="j2"), "jobs.j1.id"),
        (lambda d: d["hosts"]["ws1"]["gpus"]["GPU-0"].update(bogus=1), "hosts.ws1.gpus.GPU-0"),
        (lambda d: d["hosts"]["ws1"].update(links=[["GPU-0", "GPU-1", "warp"]]), "link kind"),
    ],
)
def test_invalid_documents_name_the_field(mutate, message) -> None:
    doc = make_graph().to_dict()
    mutate(doc)
    with pytest.raises(ValueError, match=message):
        StateGraph.from_dict(doc)


def test_set_and_enforced_limits_from_a_snapshot_survive_a_round_trip() -> None:
    from ecolaunch.devices.backend import GpuSnapshot

    snap = GpuSnapshot(uuid="GPU-0", index=0, name="H200", memory_total_mib=143_771, memory_used_mib=0,
                       util_gpu_pct=0.0, util_mem_pct=0.0, power_w=80.0, power_limit_min_w=200.0,
                       power_limit_default_w=700.0, power_limit_max_w=700.0, power_limit_w=450.0, energy_j=1.0,
                       power_limit_enforced_w=700.0)
    graph = make_graph()
    graph.hosts["ws1"].gpus["GPU-0"] = GpuNode.from_snapshot(snap)
    again = StateGraph.from_dict(graph.to_dict()).hosts["ws1"].gpus["GPU-0"]
    assert (again.power_limit_w, again.power_limit_enforced_w) == (450.0, 700.0)


def test_a_state_file_without_the_enforced_limit_still_loads() -> None:
    doc = make_graph().to_dict()
    for gpu in doc["hosts"]["ws1"]["gpus"].values():
        del gpu["power_limit_enforced_w"]  # written before the field existed
    assert StateGraph.from_dict(doc).hosts["ws1"].gpus["GPU-0"].power_limit_enforced_w is None


@pytest.mark.parametrize("value", ["700", float("nan"), True])
def test_a_bad_enforced_limit_names_the_field(value) -> None:
    doc = make_graph().to_dict()
    doc["hosts"]["ws1"]["gpus"]["GPU-0"]["power_limit_enforced_w"] = value
    with pytest.raises(ValueError, match="hosts.ws1.gpus.GPU-0.power_limit_enforced_w"):
        StateGraph.from_dict(doc)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_a_gpu_from_its_model_agrees_with_a_backend_reading_of_that_board(tmp_path, name: str) -> None:
    model = CATALOGUE[name]
    backend = SimulatedBackend(parse_spec(f"1x{name}", hostname="ws1").hosts[0], tmp_path / "sim.json")
    snap = backend.gpus()[0]
    read, built = GpuNode.from_snapshot(snap), GpuNode.from_model(model, snap.uuid, snap.index)
    static = ("uuid", "index", "name", "memory_total_mib", "power_limit_min_w", "power_limit_default_w",
              "power_limit_max_w", "power_limit_w")
    assert {k: getattr(built, k) for k in static} == {k: getattr(read, k) for k in static}
    assert (built.power_w, built.util_gpu_pct, built.memory_used_mib) == (None, None, 0)  # no reading yet
    capped = GpuNode.from_model(model, power_limit_w=model.power_limit_min_w)
    assert (capped.uuid, capped.index, capped.power_limit_w) == (WHATIF_UUID, 0, model.power_limit_min_w)


def test_a_queued_job_holds_nothing_and_survives_the_job_file_check() -> None:
    request = {"memory_mib": 1000, "allowed_slowdown_pct": 10.0}
    job = Job.queued("j9", user="sim", host="ws1", nproc=2, seq=4, submitted_at=3.0, request=request)
    request["memory_mib"] = 2  # the job keeps its own copy
    assert (job.state, job.gpus, job.power_caps_w, job.started_at, job.decision, job.profile) == (
        JobState.QUEUED, [], {}, None, {}, None)
    assert (job.name, job.uid, job.launcher_pid, job.memory_mib) == ("j9", 0, 1, 1000)
    assert job_from_dict("j9", job_to_dict(job)) == job
    graph = make_graph()
    graph.jobs[job.id] = job
    graph.book("j9", ["GPU-0"], {"GPU-0": 300.0, "GPU-1": None}, {"policy": "x"}, Profile(memory_mib=500), 7.0)
    assert job_from_dict("j9", job_to_dict(job)) == job
    assert (job.state, job.power_caps_w, job.started_at, job.memory_mib) == (
        JobState.RUNNING, {"GPU-0": 300.0}, 7.0, 500)
