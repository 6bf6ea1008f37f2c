"""The simulated backend: reading model, energy integration, validation, recovery, and sharing across processes."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ecolaunch.devices.catalogue import lookup
from ecolaunch.devices.simulated import ProcessLoad, SimulatedBackend, basic_reading
from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import DeviceError, PermissionDenied

REPO = Path(__file__).resolve().parents[2]
SPEC = "2xA100-SXM4-80GB"


class ManualClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _backend(tmp_path, clock=None, **kwargs) -> SimulatedBackend:
    spec = parse_spec(SPEC, hostname="simhost").hosts[0]
    return SimulatedBackend(spec, tmp_path / "sim" / "gpus.json", clock=clock or ManualClock(), **kwargs)


def _gpu(backend, index=0):
    return backend.gpus()[index]


@pytest.fixture
def sleeper():
    """A real process to attach (it dies with SIGKILL when the test ends)."""
    procs = []

    def start():
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


# --- the reading model -----------------------------------------------------------------------------

def test_basic_reading_sums_and_clips():
    a100 = lookup("A100-SXM4-80GB")  # idle 50 W (assumption), limits 100..400 W
    loads = [ProcessLoad(1, 1000, 70.0, 40.0, 250.0), ProcessLoad(2, 500, 50.0, 80.0, 150.0)]
    r = basic_reading(a100, 400.0, loads)
    assert r.memory_used_mib == 1500
    assert r.util_gpu_pct == 100.0 and r.util_mem_pct == 100.0  # capped
    assert r.power_w == pytest.approx(50 + 200 + 100)
    assert basic_reading(a100, 300.0, loads).power_w == 300.0  # clipped to the enforced limit
    idle = basic_reading(a100, 400.0, [ProcessLoad(3, 2048)])  # memory only: no load given
    assert (idle.memory_used_mib, idle.util_gpu_pct, idle.power_w) == (2048, 0.0, 50.0)


def test_readings_follow_attached_processes(tmp_path, sleeper):
    b = _backend(tmp_path)
    uuid = _gpu(b).uuid
    assert (_gpu(b).memory_used_mib, _gpu(b).util_gpu_pct, _gpu(b).power_w) == (0, 0.0, 50.0)
    p = sleeper()
    b.attach(uuid, p.pid, 4096, util_gpu_pct=30, util_mem_pct=10, power_w=200)
    b.attach(uuid, os.getpid(), 1024, util_gpu_pct=20, power_w=100)
    g = _gpu(b)
    assert (g.memory_used_mib, g.util_gpu_pct, g.util_mem_pct, g.power_w) == (5120, 50.0, 10.0, 250.0)
    assert sorted((q.pid, q.memory_mib) for q in g.processes) == sorted([(p.pid, 4096), (os.getpid(), 1024)])
    assert _gpu(b, 1).memory_used_mib == 0


def test_attach_again_replaces_and_detach_removes_everywhere(tmp_path):
    b = _backend(tmp_path)
    u0, u1 = (g.uuid for g in b.gpus())
    b.attach(u0, os.getpid(), 1000)
    b.attach(u0, os.getpid(), 3000)
    b.attach(u1, os.getpid(), 500)
    assert [g.memory_used_mib for g in b.gpus()] == [3000, 500]
    assert b.detach(os.getpid()) == 2
    assert [g.memory_used_mib for g in b.gpus()] == [0, 0]
    assert b.detach(os.getpid()) == 0


# --- energy and power limits -----------------------------------------------------------------------

def test_energy_integrates_power_over_the_clock(tmp_path):
    clock = ManualClock(100.0)
    b = _backend(tmp_path, clock)
    uuid = _gpu(b).uuid  # created at t=100, idle 50 W
    clock.now = 110.0
    assert b.energy_j(uuid) == pytest.approx(500.0)
    b.attach(uuid, os.getpid(), 1000, power_w=300)
    clock.now = 120.0
    assert b.energy_j(uuid) == pytest.approx(500.0 + 3000.0)
    b.set_power_limit(uuid, 200)  # the job is now held to 200 W
    clock.now = 130.0
    assert _gpu(b).power_w == 200.0
    assert _gpu(b).energy_j == pytest.approx(3500.0 + 2000.0)
    b.detach(os.getpid())
    clock.now = 140.0
    assert b.energy_j(uuid) == pytest.approx(5500.0 + 500.0)
    clock.now = 135.0  # a clock stepping back never makes the counter run backwards
    assert b.energy_j(uuid) >= 5500.0


def test_set_power_limit_validates_range_and_privilege(tmp_path):
    b = _backend(tmp_path)
    uuid = _gpu(b).uuid
    b.set_power_limit(uuid, 250.5)
    assert _gpu(b).power_limit_w == 250.5
    for bad in (99, 401, float("nan"), "300"):
        with pytest.raises(DeviceError) as info:
            b.set_power_limit(uuid, bad)
        assert repr(bad) in str(info.value) and "[100, 400] W" in str(info.value)
    assert _gpu(b).power_limit_w == 250.5
    unprivileged = _backend(tmp_path, privileged=False)
    assert unprivileged.privileged is False
    with pytest.raises(PermissionDenied) as info:
        unprivileged.set_power_limit(uuid, 300)
    assert info.value.hint
    with pytest.raises(DeviceError, match="no simulated GPU"):
        b.set_power_limit("GPU-nope", 300)


# --- attach validation -----------------------------------------------------------------------------

def test_attach_rejects_bad_input(tmp_path, sleeper):
    b = _backend(tmp_path)
    uuid = _gpu(b).uuid
    with pytest.raises(DeviceError, match="no simulated GPU"):
        b.attach("GPU-nope", os.getpid(), 1)
    with pytest.raises(DeviceError, match="memory_mib=-1"):
        b.attach(uuid, os.getpid(), -1)
    with pytest.raises(DeviceError, match="util_gpu_pct=120"):
        b.attach(uuid, os.getpid(), 1, util_gpu_pct=120)
    with pytest.raises(DeviceError, match="power_w=-5"):
        b.attach(uuid, os.getpid(), 1, power_w=-5)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(DeviceError, match="no such process"):
        b.attach(uuid, dead.pid, 1)
    b.attach(uuid, os.getpid(), 80000)
    with pytest.raises(DeviceError, match="out of memory.*1920 MiB of 81920 MiB free") as info:
        b.attach(uuid, sleeper().pid, 2000)
    assert info.value.hint
    assert _gpu(b).memory_used_mib == 80000


# --- the shared state file -------------------------------------------------------------------------

def test_two_instances_share_state(tmp_path):
    a, b = _backend(tmp_path), _backend(tmp_path)
    a.attach(_gpu(a).uuid, os.getpid(), 777)
    a.set_power_limit(_gpu(a).uuid, 123)
    g = _gpu(b)
    assert (g.memory_used_mib, g.power_limit_w) == (777, 123.0)


@pytest.mark.parametrize("content", [
    "", "{", "garbage\x00", "[]", '{"format": "other", "version": 1}',
    '{"format": "ecolaunch-simulated-gpus", "version": 1, "host": "simhost", "gpus": {"x": {}}}',
    '{"format": "ecolaunch-simulated-gpus", "version": 1, "host": "simhost", "gpus": {"x": '
    '{"power_limit_w": NaN, "energy_j": 0, "updated_s": 0, "processes": []}}}',
])
def test_corrupt_state_is_rebuilt_with_a_warning(tmp_path, caplog, content):
    b = _backend(tmp_path)
    b.state_path.parent.mkdir(parents=True)
    b.state_path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="ecolaunch.devices.simulated"):
        gpus = b.gpus()
    assert [g.memory_used_mib for g in gpus] == [0, 0]
    assert "rebuilding" in caplog.text
    doc = json.loads(b.state_path.read_text())  # rewritten as a valid document
    assert set(doc["gpus"]) == {g.uuid for g in gpus}


def test_state_of_another_spec_is_replaced(tmp_path):
    other = SimulatedBackend(parse_spec("4xT4", hostname="simhost").hosts[0], tmp_path / "sim" / "gpus.json")
    other.attach(other.gpus()[0].uuid, os.getpid(), 100)
    b = _backend(tmp_path)
    assert [g.memory_used_mib for g in b.gpus()] == [0, 0]
    assert set(json.loads(b.state_path.read_text())["gpus"]) == {g.uuid for g in b.gpus()}


def test_reused_pid_is_dropped(tmp_path):
    b = _backend(tmp_path)
    b.attach(_gpu(b).uuid, os.getpid(), 100)
    doc = json.loads(b.state_path.read_text())
    doc["gpus"][_gpu(b).uuid]["processes"][0]["create_time"] -= 100.0  # as if an older process had our pid
    b.state_path.write_text(json.dumps(doc))
    assert _gpu(b).memory_used_mib == 0


def test_unwritable_directory_is_a_device_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    b = SimulatedBackend(parse_spec(SPEC, hostname="h").hosts[0], blocker / "gpus.json")
    with pytest.raises(DeviceError, match="cannot use the simulated GPU state") as info:
        b.gpus()
    assert info.value.hint


# --- across real processes -------------------------------------------------------------------------

_PRELUDE = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from ecolaunch.devices.simulated import SimulatedBackend
    from ecolaunch.devices.spec import parse_spec
    backend = SimulatedBackend(parse_spec(%r, hostname="simhost").hosts[0], Path(sys.argv[1]))
    uuids = [g.uuid for g in backend.gpus()]
""") % SPEC


def _python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", _PRELUDE + textwrap.dedent(code), *args], env=env,
                            stdout=subprocess.PIPE, text=True, **kwargs)


def _read_in_another_process(state: Path) -> list[dict]:
    reader = _python("print(json.dumps([[g.memory_used_mib, [p.pid for p in g.processes]] "
                     "for g in backend.gpus()]))", str(state))
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0
    return json.loads(out)


def test_attach_in_one_process_read_in_another_and_sigkill_frees(tmp_path):
    state = tmp_path / "gpus.json"
    worker = _python("""
        backend.attach(uuids[1], os.getpid(), 3000, util_gpu_pct=90, power_w=350)
        print("attached", flush=True)
        time.sleep(120)
    """, str(state))
    try:
        assert worker.stdout.readline().strip() == "attached"
        assert _read_in_another_process(state) == [[0, []], [3000, [worker.pid]]]
        worker.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, worker.pid, os.WEXITED | os.WNOWAIT)  # dead but not reaped: a zombie
        assert _read_in_another_process(state) == [[0, []], [0, []]]
    finally:
        worker.kill()
        worker.communicate()
    spec = parse_spec(SPEC, hostname="simhost").hosts[0]
    assert SimulatedBackend(spec, state).gpus()[1].power_w == 50.0


def test_concurrent_attaches_lose_nothing(tmp_path, sleeper):
    state = tmp_path / "gpus.json"
    holders = [sleeper() for _ in range(8)]
    writers = [
        _python("""
            for pid in map(int, sys.argv[2:]):
                backend.attach(uuids[0], pid, 100)
        """, str(state), *(str(h.pid) for h in holders[k::4]))
        for k in range(4)
    ]
    for w in writers:
        w.communicate(timeout=60)
        assert w.returncode == 0
    spec = parse_spec(SPEC, hostname="simhost").hosts[0]
    g = SimulatedBackend(spec, state).gpus()[0]
    assert g.memory_used_mib == 800
    assert sorted(p.pid for p in g.processes) == sorted(h.pid for h in holders)
