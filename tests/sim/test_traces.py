"""Standard traces (determinism, load, sizes, profiles), user trace files and their errors, a smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import ConfigError
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.sim.engine import Simulation
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.sim.trace_registry import MEASURED, MODEL, TRACES, lookup, trace_names
from ecolaunch.sim.traces import build_trace, load_trace_file, offered_load
from ecolaunch.sim.workloads import workload_names, workload_profiles

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def workstation():
    return parse_spec("4xA100-SXM4-80GB", hostname="ws")


@pytest.fixture(scope="module")
def cluster():
    return parse_spec("8xA100-SXM4-80GB", hostname="n").replicate(3)


def machine_for(name: str, workstation, cluster):
    return workstation if name.startswith("workstation") else cluster


STANDARD_TRACES = trace_names(MODEL)


def test_the_registry_names_and_describes_every_trace(workstation) -> None:
    assert STANDARD_TRACES == ["workstation-light", "workstation-heavy", "cluster-light", "cluster-heavy",
                               "alibaba-share"]
    assert trace_names(MEASURED) == ["workstation-mixed", "power-budget", "workstation-measured",
                                     "workstation-topology", "workstation-mixed-models"]
    assert trace_names() == STANDARD_TRACES + trace_names(MEASURED)
    assert all(e.description and e.world in (MODEL, MEASURED) for e in TRACES.values())
    trace = TRACES["workstation-light"].build(workstation, seed=3, jobs=20)
    assert trace.jobs == build_trace("workstation-light", workstation, seed=3, jobs=20).jobs
    assert trace.description.startswith(TRACES["workstation-light"].description + "; 20 jobs on 4 GPUs")


def test_a_model_trace_runs_on_the_given_machine_a_measured_one_on_its_own() -> None:
    assert [h.name for h in TRACES["cluster-light"].machine("2xA100-SXM4-80GB", 3).hosts] == ["node0", "node1",
                                                                                              "node2"]
    own = TRACES["workstation-mixed-models"].machine("8xA100-SXM4-80GB", 3)
    assert [g.name for g in own.hosts[0].gpus] == ["V100-PCIE-16GB"] * 2 + ["P100-PCIE-16GB"] * 2


@pytest.mark.parametrize("name", list(STANDARD_TRACES))
def test_same_seed_same_trace_other_seed_other_trace(name: str, workstation, cluster) -> None:
    m = machine_for(name, workstation, cluster)
    a = build_trace(name, m, seed=7, jobs=120)
    assert a == build_trace(name, m, seed=7, jobs=120)
    b = build_trace(name, m, seed=8, jobs=120)
    assert [j.arrival_s for j in a.jobs] != [j.arrival_s for j in b.jobs]
    assert [j.work_s for j in a.jobs] != [j.work_s for j in b.jobs]


@pytest.mark.parametrize("name", list(STANDARD_TRACES))
def test_offered_load_hits_the_target(name: str, workstation, cluster) -> None:
    m = machine_for(name, workstation, cluster)
    target = 0.4 if name.endswith("light") else 0.9
    for seed in (0, 1):
        assert offered_load(build_trace(name, m, seed=seed), m) == pytest.approx(target, rel=0.02)
    assert offered_load(build_trace(name, m, jobs=50, load=1.3), m) == pytest.approx(1.3, rel=0.02)


@pytest.mark.parametrize("name", list(STANDARD_TRACES))
def test_jobs_are_sized_for_the_machine_and_valid(name: str, workstation, cluster) -> None:
    m = machine_for(name, workstation, cluster)
    trace = build_trace(name, m, seed=2)
    assert len(trace.jobs) == (300 if name.startswith("workstation") else 1000)
    assert len({j.id for j in trace.jobs}) == len(trace.jobs)
    per_host = max(len(h.gpus) for h in m.hosts)
    arrivals = [j.arrival_s for j in trace.jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    for j in trace.jobs:
        assert 1 <= j.nproc <= per_host
        assert 120.0 <= j.work_s <= 48 * 3600.0
        assert j.allowed_slowdown_pct == 10.0
        p = j.profile
        assert isinstance(p, Profile)
        assert p.iter_time_s is not None and p.iter_time_s > 0
        assert p.sm_util_pct is not None and 0 < p.sm_util_pct <= 100
        assert p.memory_mib is not None and p.memory_mib > 0


def test_workstation_clips_eight_gpu_jobs_to_the_host(workstation) -> None:
    trace = build_trace("workstation-heavy", workstation, jobs=2000)  # the whole VC: it has 2-, 4- and 8-GPU jobs
    assert max(j.nproc for j in trace.jobs) == 4
    assert sum(j.nproc > 1 for j in trace.jobs) > 0


def test_gavel_traces_use_catalogue_profiles(cluster) -> None:
    trace = build_trace("cluster-light", cluster, jobs=200)
    profiles = workload_profiles(cluster.hosts[0].gpus[0])
    assert all(j.profile == profiles[j.kind] for j in trace.jobs)
    assert {j.kind for j in trace.jobs} <= set(workload_names())
    assert {j.nproc for j in trace.jobs} == {1, 2, 4, 8}


def test_alibaba_share_demand_is_the_pods_gpu_share(cluster) -> None:
    trace = build_trace("alibaba-share", cluster, seed=4)
    shares = [j.profile.sm_util_pct for j in trace.jobs]
    fractional = [s for s in shares if s < 100.0]
    assert 0.2 < len(fractional) / len(shares) < 0.6  # 39 % of the pods that ran ask a GPU fraction
    assert all(j.profile.power_w is None for j in trace.jobs)
    assert all(j.kind.startswith("alibaba ") for j in trace.jobs)
    assert int(trace.jobs[0].kind.split()[1].rstrip("m")) / 10 == trace.jobs[0].profile.sm_util_pct


def test_many_jobs_wrap_around_the_source(cluster) -> None:
    trace = build_trace("cluster-heavy", cluster, jobs=3000)  # the VC has 1,181 jobs
    assert len(trace.jobs) == 3000
    arrivals = [j.arrival_s for j in trace.jobs]
    assert arrivals == sorted(arrivals)
    assert offered_load(trace, cluster) == pytest.approx(0.9, rel=0.02)


@pytest.mark.parametrize("kwargs, match", [
    ({"jobs": 0}, "jobs=0"), ({"load": -1.0}, "load=-1.0"), ({"allowed_slowdown_pct": -5}, "allowed_slowdown_pct"),
])
def test_build_trace_rejects_bad_arguments(kwargs, match, workstation) -> None:
    with pytest.raises(ConfigError, match=match):
        build_trace("workstation-light", workstation, **kwargs)


def test_unknown_trace_name(workstation) -> None:
    with pytest.raises(ConfigError, match="unknown trace 'philly'") as e:
        build_trace("philly", workstation)
    assert "workstation-light" in e.value.hint
    with pytest.raises(ConfigError, match="unknown trace 'philly'") as e:
        lookup("philly")
    assert all(name in e.value.hint for name in trace_names())


# --- trace files -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", ["trace_example.json", "trace_example.csv"])
def test_trace_file_parses(fixture: str, workstation) -> None:
    trace = load_trace_file(DATA / fixture, workstation)
    assert [j.id for j in trace.jobs] == ["resnet", "custom", "lm"]
    resnet, custom, lm = trace.jobs
    assert (resnet.nproc, resnet.work_s, resnet.kind) == (2, 3600.0, "ResNet-50 (batch size 64)")
    assert resnet.profile == workload_profiles(workstation.hosts[0].gpus[0])["ResNet-50 (batch size 64)"]
    assert custom.profile == Profile(iter_time_s=0.05, sm_util_pct=35.0, memory_mib=6000, power_w=180.0)
    assert (custom.nproc, custom.allowed_slowdown_pct) == (1, 25.0)
    assert lm.arrival_s == 120.5 and lm.profile.memory_mib == 3000  # the override wins over the workload
    assert lm.profile.iter_time_s == workload_profiles()["LM (batch size 20)"].iter_time_s
    assert lookup(str(DATA / fixture)).build(workstation, seed=5, jobs=1) == trace


def test_json_and_csv_fixtures_agree(workstation) -> None:
    a = load_trace_file(DATA / "trace_example.json", workstation)
    b = load_trace_file(DATA / "trace_example.csv", workstation)
    assert [(j.id, j.arrival_s, j.nproc, j.work_s, j.profile, j.allowed_slowdown_pct) for j in a.jobs] == \
        [(j.id, j.arrival_s, j.nproc, j.work_s, j.profile, j.allowed_slowdown_pct) for j in b.jobs]
    assert a.name == "example" and b.name == "trace_example"


def write_json(tmp_path: Path, jobs) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"jobs": jobs}))
    return path


@pytest.mark.parametrize("job, field", [
    ({"id": "a", "work_s": 10}, "'arrival_s' is missing"),
    ({"id": "a", "arrival_s": 0, "work_s": 0}, "'work_s' = 0 is out of range"),
    ({"id": "a", "arrival_s": "soon", "work_s": 10}, "'arrival_s' = 'soon' is not a number"),
    ({"id": "a", "arrival_s": 0, "work_s": 10, "nproc": 1.5}, "'nproc' = 1.5 is not an integer"),
    ({"id": "a", "arrival_s": 0, "work_s": 10, "nproc": 5}, "'nproc' = 5 exceeds the 4 GPUs"),
    ({"id": "a", "arrival_s": 0, "work_s": 10, "sm_util_pct": 120}, "'sm_util_pct' = 120 is out of range"),
    ({"id": "a", "arrival_s": 0, "work_s": 10, "memory_mib": 0}, "'memory_mib' = 0 is not an integer >= 1"),
    ({"id": "a", "arrival_s": 0, "work_s": 10, "workload": "BERT"}, "'workload' = 'BERT' is not a known"),
    ({"id": "a", "arrival_s": 0, "work_s": 10, "gpus": 2}, "unknown field\\(s\\) 'gpus'"),
    ({"id": "a", "arrival_s": 0, "work_s": "NaN"}, "'work_s' = 'NaN' is out of range"),
])
def test_trace_file_errors_name_the_field(job, field, tmp_path, workstation) -> None:
    with pytest.raises(ConfigError, match=f"job 0 \\('a'\\): .*{field}|job 0: .*{field}"):
        load_trace_file(write_json(tmp_path, [job]), workstation)


def test_trace_file_errors_for_the_file(tmp_path, workstation) -> None:
    with pytest.raises(ConfigError, match="repeats id 'a'"):
        load_trace_file(write_json(tmp_path, [{"id": "a", "arrival_s": 0, "work_s": 1}] * 2), workstation)
    with pytest.raises(ConfigError, match="has no jobs"):
        load_trace_file(write_json(tmp_path, []), workstation)
    bad = tmp_path / "bad.json"
    bad.write_text("{jobs: [")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        load_trace_file(bad, workstation)
    with pytest.raises(ConfigError, match="cannot read"):
        load_trace_file(tmp_path / "missing.csv", workstation)
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("id,arrival_s,work_s,colour\na,0,10,red\n")
    with pytest.raises(ConfigError, match="job 0: unknown field\\(s\\) 'colour'"):
        load_trace_file(csv_path, workstation)
    csv_path.write_text("id,arrival_s,work_s\na,0,10\nb,1,10,extra\n")
    with pytest.raises(ConfigError, match="job 1: the row has more cells"):
        load_trace_file(csv_path, workstation)


# --- one run ---------------------------------------------------------------------------------------------

def test_smoke_run_finishes_every_job(workstation) -> None:
    trace = build_trace("workstation-heavy", workstation, jobs=60, seed=5)
    result = Simulation(workstation, ExclusivePolicy()).run(trace)
    assert len(result.jobs) == 60
    assert all(o.end_s is not None and o.rejected is None for o in result.jobs)
    assert all(o.start_s >= o.arrival_s for o in result.jobs)
    assert result.energy.node_energy_j > result.energy.gpu_energy_j > 0
