"""The cap ledger: apply within the policy, restore the original cap, survive crashes, never leave the policy."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecolaunch.caps.keeper import (
    CapKeeper,
    apply_caps_as_launcher,
    cap_recommendation,
    desired_caps,
)
from ecolaunch.caps.ledger import load_ledger
from ecolaunch.admin.rules import Rules, parse_rules
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import PermissionDenied
from ecolaunch.state.graph import Job, JobState, StateGraph
from ecolaunch.state.store import StateStore

HOST = "lab1"
POLICY = '[caps."A100-SXM4-80GB"]\nmin_w = 150\nmax_w = 300\n'


class Processes:
    """A fake process table: pids listed in ``alive`` run (with any start time)."""

    def __init__(self, alive: set[int] | None = None) -> None:
        self.alive_pids = {100, 200, 300} if alive is None else alive

    def alive(self, pid: int, start_time: float) -> bool:
        return pid in self.alive_pids

    def ancestors(self, pid: int) -> list[int]:
        return []


def backend(tmp_path: Path, privileged: bool = True, spec: str = "4xA100-SXM4-80GB") -> SimulatedBackend:
    return SimulatedBackend(parse_spec(spec, hostname=HOST).hosts[0], tmp_path / "sim.json", privileged=privileged)


def running(jid: str, gpus: list[str], caps: dict, pid: int = 100, uid: int = 0, host: str = HOST) -> Job:
    return Job(id=jid, uid=uid, user="u", host=host, launcher_pid=pid, launcher_start_time=1.0, nproc=len(gpus),
               name="x", seq=0, submitted_at=0.0, state=JobState.RUNNING, gpus=list(gpus), power_caps_w=caps)


def limits(b: SimulatedBackend) -> list[float]:
    return [g.power_limit_w for g in b.gpus()]


def keeper(b, tmp_path: Path, rules: Rules | None = None, processes=None) -> CapKeeper:
    rules = rules if rules is not None else parse_rules(POLICY)[0]
    return CapKeeper(b, tmp_path, rules, host=HOST, processes=processes or Processes())


def test_apply_then_restore_the_original_not_the_default(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = [g.uuid for g in b.gpus()]
    b.set_power_limit(u[1], 250.0)  # the admin's own cap, below NVIDIA's 400 W default
    k = keeper(b, tmp_path)
    graph = StateGraph(jobs={"a": running("a", [u[1]], {u[1]: 200.0})})
    report = k.reconcile(graph)
    assert report.applied == {u[1]: 200.0} and limits(b) == [400.0, 200.0, 400.0, 400.0]
    assert load_ledger(tmp_path / "caps.json", HOST) == {u[1]: 250.0}
    del graph.jobs["a"]
    report = k.reconcile(graph)
    assert report.restored == {u[1]: 250.0} and limits(b) == [400.0, 250.0, 400.0, 400.0]
    assert load_ledger(tmp_path / "caps.json", HOST) == {}


def test_policy_bounds_clip_requests_and_highest_request_wins(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = [g.uuid for g in b.gpus()]
    graph = StateGraph(jobs={
        "low": running("low", [u[0]], {u[0]: 50.0}),  # below the policy's 150 W
        "high": running("high", [u[2]], {u[2]: 390.0}),  # above the policy's 300 W
        "s1": running("s1", [u[3]], {u[3]: 160.0}, pid=200),
        "s2": running("s2", [u[3]], {u[3]: 220.0}, pid=300),  # two jobs share GPU 3: the least restrictive wins
    })
    keeper(b, tmp_path).reconcile(graph)
    assert limits(b) == [150.0, 400.0, 300.0, 220.0]


def test_requests_the_policy_forbids_are_ignored(tmp_path: Path, caplog) -> None:
    b = backend(tmp_path)
    u = [g.uuid for g in b.gpus()]
    rules = parse_rules(POLICY + "[agent]\ngpus = [0, 1]\n")[0]
    graph = StateGraph(jobs={
        "unnamed": running("unnamed", [u[2]], {u[2]: 200.0}),  # GPU 2 is not in [agent] gpus
        "notheirs": running("notheirs", [u[0]], {u[1]: 200.0}),  # a cap on a GPU the job does not hold
        "ghost": running("ghost", ["GPU-ffff"], {"GPU-ffff": 200.0}),  # not a GPU of this host
        "other": running("other", [u[0]], {u[0]: 200.0}, host="elsewhere"),
        "dead": running("dead", [u[1]], {u[1]: 200.0}, pid=999),  # its launcher died: no lease
    })
    report = keeper(b, tmp_path, rules).reconcile(graph)
    assert limits(b) == [400.0] * 4 and report.applied == {}
    assert len(report.ignored) == 3 and "not one of the job's GPUs" in caplog.text


def test_ledger_is_written_before_the_hardware_changes(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = b.gpus()[0].uuid
    seen = []

    class Spy:
        kind = "simulated"

        def __getattr__(self, name):
            return getattr(b, name)

        def set_power_limit(self, uuid, watts):
            seen.append(load_ledger(tmp_path / "caps.json", HOST))
            b.set_power_limit(uuid, watts)

    keeper(Spy(), tmp_path).reconcile(StateGraph(jobs={"a": running("a", [u], {u: 200.0})}))
    assert seen == [{u: 400.0}]


def test_a_new_keeper_restores_from_the_ledger_after_a_crash(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = [g.uuid for g in b.gpus()]
    b.set_power_limit(u[0], 320.0)
    keeper(b, tmp_path).reconcile(StateGraph(jobs={"a": running("a", [u[0]], {u[0]: 180.0})}))
    assert limits(b)[0] == 180.0
    # the keeper "crashes" (is dropped); its job is gone by the time a fresh one starts (reboot, agent restart)
    report = keeper(b, tmp_path).reconcile(StateGraph())
    assert report.restored == {u[0]: 320.0} and limits(b)[0] == 320.0


def test_an_untrusted_or_garbage_ledger_is_ignored(tmp_path: Path, caplog) -> None:
    b = backend(tmp_path)
    u = b.gpus()[0].uuid
    ledger = tmp_path / "caps.json"
    doc = {"schema": "ecolaunch.jobcaps", "version": 1, "host": HOST, "gpus": {u: {"original_w": 120.0}}}
    ledger.write_text(json.dumps(doc))
    os.chmod(ledger, 0o666)  # writable by anyone: could have been forged
    assert load_ledger(ledger, HOST) is None and "only root may write it" in caplog.text
    os.chmod(ledger, 0o644)
    assert load_ledger(ledger, HOST) == {u: 120.0}
    for bad in ({**doc, "host": "other"}, {**doc, "gpus": {u: {"original_w": "lots"}}}, {**doc, "gpus": []}, [1]):
        ledger.write_text(json.dumps(bad))
        assert load_ledger(ledger, HOST) is None
    ledger.unlink()
    ledger.symlink_to(tmp_path / "sim.json")
    assert load_ledger(ledger, HOST) is None and "symbolic link" in caplog.text


def test_a_deleted_ledger_is_rebuilt_from_memory(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = b.gpus()[0].uuid
    b.set_power_limit(u, 330.0)
    k = keeper(b, tmp_path)
    graph = StateGraph(jobs={"a": running("a", [u], {u: 200.0})})
    k.reconcile(graph)
    (tmp_path / "caps.json").unlink()  # a colleague removes it from the group-writable directory
    k.reconcile(graph)
    assert load_ledger(tmp_path / "caps.json", HOST) == {u: 330.0}
    del graph.jobs["a"]
    k.reconcile(graph)
    assert limits(b)[0] == 330.0


def test_unprivileged_backend_raises_permission_denied(tmp_path: Path) -> None:
    b = backend(tmp_path, privileged=False)
    u = b.gpus()[0].uuid
    with pytest.raises(PermissionDenied):
        keeper(b, tmp_path).reconcile(StateGraph(jobs={"a": running("a", [u], {u: 200.0})}))


def test_recommendation_is_one_line_with_the_policy_range(tmp_path: Path) -> None:
    b = backend(tmp_path)
    gpus = {g.uuid: g for g in b.gpus()}
    u = list(gpus)
    rules = parse_rules(POLICY)[0]
    line = cap_recommendation(gpus, rules, {u[1]: 210.0, u[2]: 500.0})
    assert line == ("would set GPU 1 to 210 W (policy allows 150-300 W), GPU 2 to 300 W (policy allows 150-300 W); "
                    "run `ecolaunch agent` as root to apply caps")
    assert cap_recommendation(gpus, rules, {u[1]: None}) is None


def test_root_launcher_applies_and_restores_through_the_store(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = b.gpus()[0].uuid
    store = StateStore(tmp_path / "state")
    with store.transaction() as graph:
        graph.jobs["a"] = running("a", [u], {u: 200.0}, pid=os.getpid())
    rules = parse_rules(POLICY)[0]
    from ecolaunch.state.reconcile import process_start_time

    with store.transaction() as graph:
        graph.jobs["a"].launcher_start_time = process_start_time(os.getpid())
    apply_caps_as_launcher(store, b, rules, host=HOST)
    assert limits(b)[0] == 200.0 and (tmp_path / "state" / "caps.json").exists()
    with store.transaction() as graph:
        del graph.jobs["a"]
    apply_caps_as_launcher(store, b, rules, host=HOST)
    assert limits(b)[0] == 400.0


# --- property-based: whatever the state file says, no cap leaves the policy ---------------------------
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6), st.booleans(), st.none(),
    st.text(max_size=5), st.lists(st.integers(), max_size=2),
)
_uuids = st.sampled_from(["GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-x", "", "gpu-0"])


@st.composite
def _graphs(draw) -> StateGraph:
    graph = StateGraph()
    for n in range(draw(st.integers(0, 5))):
        gpus = draw(st.lists(_uuids, max_size=4))
        caps = draw(st.dictionaries(_uuids, _values, max_size=4))
        job = running(f"j{n}", gpus, caps, pid=draw(st.sampled_from([100, 999])), host=draw(st.sampled_from([HOST, "x"])))
        job.state = draw(st.sampled_from(list(JobState)))
        graph.jobs[job.id] = job
    return graph


class _Recorder:
    """A backend of 4 GPUs (100-400 W boards) that records every power limit it is asked to set."""

    kind = "fake"

    def __init__(self) -> None:
        from ecolaunch.devices.backend import GpuSnapshot

        self.limits = {f"GPU-{i}": 400.0 for i in range(4)}
        self.calls: list[tuple[str, float]] = []
        self._snap = lambda i: GpuSnapshot(
            uuid=f"GPU-{i}", index=i, name="NVIDIA A100-SXM4-80GB", memory_total_mib=1, memory_used_mib=0,
            util_gpu_pct=None, util_mem_pct=None, power_w=None, power_limit_min_w=100.0, power_limit_default_w=400.0,
            power_limit_max_w=400.0, power_limit_w=self.limits[f"GPU-{i}"], energy_j=None)

    def hostname(self) -> str:
        return HOST

    def gpus(self):
        return [self._snap(i) for i in range(4)]

    def set_power_limit(self, uuid: str, watts: float) -> None:
        self.calls.append((uuid, watts))
        self.limits[uuid] = watts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=_graphs())
def test_fuzzed_requests_never_set_an_out_of_policy_cap(tmp_path: Path, graph: StateGraph) -> None:
    rules = parse_rules(POLICY + "[agent]\ngpus = [0, 1, 3]\n")[0]
    fake = _Recorder()
    ledger = tmp_path / "fuzz-caps.json"
    k = CapKeeper(fake, tmp_path, rules, host=HOST, processes=Processes(), ledger_path=ledger)
    k.reconcile(graph)
    for uuid, watts in fake.calls:
        assert uuid in ("GPU-0", "GPU-1", "GPU-3"), uuid
        assert isinstance(watts, float) and math.isfinite(watts) and 150.0 <= watts <= 300.0, watts
    wanted = desired_caps(graph, HOST, fake.gpus(), rules, Processes())
    assert all(150.0 <= w <= 300.0 for w in wanted.values())
    # and once nobody wants anything, every GPU is back at its original 400 W
    k.reconcile(StateGraph())
    assert fake.limits == {f"GPU-{i}": 400.0 for i in range(4)}
    ledger.unlink(missing_ok=True)


def test_the_ledger_records_what_ecolaunch_set_and_a_gpu_changed_since_is_left_as_found(tmp_path: Path, caplog) -> None:
    from ecolaunch.caps.ledger import load_ledger_entries

    b = backend(tmp_path)
    u = [g.uuid for g in b.gpus()]
    k = keeper(b, tmp_path)
    graph = StateGraph(jobs={"a": running("a", [u[0], u[1]], {u[0]: 200.0, u[1]: 200.0})})
    k.reconcile(graph)
    entries = load_ledger_entries(tmp_path / "caps.json", HOST)
    assert {x: (e.original_w, e.set_w) for x, e in entries.items()} == {u[0]: (400.0, 200.0), u[1]: (400.0, 200.0)}
    b.set_power_limit(u[1], 280.0)  # the admin changes GPU 1 with nvidia-smi while the job runs
    del graph.jobs["a"]  # the job ends (or its launcher dies)
    report = k.reconcile(graph)
    assert report.restored == {u[0]: 400.0} and report.left == {u[1]: 280.0}
    assert limits(b)[:2] == [400.0, 280.0]  # the admin's change stays
    assert "someone changed it since" in caplog.text and "nvidia-smi -i 1 -pl 400" in caplog.text
    assert load_ledger(tmp_path / "caps.json", HOST) == {}  # and is no longer ecolaunch's to restore


def test_a_ledger_written_before_set_w_still_restores(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = b.gpus()[0].uuid
    b.set_power_limit(u, 250.0)
    (tmp_path / "caps.json").write_text(json.dumps({"schema": "ecolaunch.jobcaps", "version": 1, "host": HOST,
                                                    "gpus": {u: {"original_w": 400.0}}}))
    os.chmod(tmp_path / "caps.json", 0o644)
    report = keeper(b, tmp_path).reconcile(StateGraph())
    assert report.restored == {u: 400.0} and limits(b)[0] == 400.0


def test_restoring_orphans_applies_nothing_new(tmp_path: Path) -> None:
    b = backend(tmp_path)
    u = [g.uuid for g in b.gpus()]
    k = keeper(b, tmp_path, processes=Processes({100}))
    assert k.restore_orphans(StateGraph(jobs={"a": running("a", [u[0]], {u[0]: 200.0})})).applied == {}
    assert limits(b)[0] == 400.0  # an empty ledger: nothing to do, and a live job's wish is the agent's to apply
    k.reconcile(StateGraph(jobs={"dead": running("dead", [u[1]], {u[1]: 200.0})}))  # applied while pid 100 lived
    assert limits(b)[1] == 200.0
    graph = StateGraph(jobs={"dead": running("dead", [u[1]], {u[1]: 200.0}, pid=999),
                             "new": running("new", [u[2]], {u[2]: 180.0})})
    report = k.restore_orphans(graph)
    assert report.restored == {u[1]: 400.0} and report.applied == {}
    assert limits(b)[1:3] == [400.0, 400.0]
