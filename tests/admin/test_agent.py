"""The cap agent with real processes: launchers and the agent itself are SIGKILLed; caps always come back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ecolaunch.caps.agent import CapAgent, agent_alive
from ecolaunch.admin.rules import parse_rules
from ecolaunch.devices.select import open_backend
from ecolaunch.state.store import StateStore
from tests.conftest import REPO, clean_env

SPEC = "4xA100-SXM4-80GB"
POLICY = '[caps."A100-SXM4-80GB"]\nmin_w = 150\nmax_w = 300\n'

# A stand-in for a launcher that records the caps it wants: registers a running job, then sleeps.
_LAUNCHER = r"""
import os, sys, time
from pathlib import Path
from ecolaunch.devices.select import open_backend
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
d, index, watts = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
backend = open_backend(sys.argv[4], d)
uuid = backend.gpus()[index].uuid
me = os.getpid()
with StateStore(d).transaction() as graph:
    graph.jobs[f"j{me}"] = Job(id=f"j{me}", uid=os.getuid(), user="u", host=backend.hostname(), launcher_pid=me,
                               launcher_start_time=process_start_time(me), nproc=1, name="sleeper", seq=graph.next_seq,
                               submitted_at=time.time(), state=JobState.RUNNING, gpus=[uuid], power_caps_w={uuid: watts})
    graph.next_seq += 1
print("ready", flush=True)
time.sleep(300)
"""


def _launcher(state_dir: Path, index: int, watts: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(state_dir), str(index), str(watts), SPEC],
                            env=clean_env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _agent_proc(state_dir: Path, policy: Path, *args: str) -> subprocess.Popen:
    env = clean_env(ECOLAUNCH_SIMULATE=SPEC, ECOLAUNCH_STATE_DIR=str(state_dir), ECOLAUNCH_POLICY=str(policy))
    return subprocess.Popen([sys.executable, "-m", "ecolaunch.cli.agent_cmd", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _limit(state_dir: Path, index: int) -> float:
    return open_backend(SPEC, state_dir).gpus()[index].power_limit_w


def _wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path


def test_caps_come_back_after_a_launcher_is_sigkilled(state_dir: Path) -> None:
    backend = open_backend(SPEC, state_dir)
    backend.set_power_limit(backend.gpus()[1].uuid, 330.0)  # the host's own cap before ecolaunch
    agent = CapAgent(StateStore(state_dir), backend, parse_rules(POLICY)[0])
    launcher = _launcher(state_dir, 1, 120.0)  # below the policy: clipped to 150 W
    try:
        agent.step()
        assert _limit(state_dir, 1) == 150.0
        assert agent_alive(state_dir)
    finally:
        _kill(launcher)
    report = agent.step()
    assert _limit(state_dir, 1) == 330.0 and list(report.restored.values()) == [330.0]
    assert StateStore(state_dir).read().jobs == {}
    assert not list((state_dir / "jobs").iterdir())  # root's reconcile removed the dead job's file


def test_caps_come_back_after_the_agent_itself_is_sigkilled(state_dir: Path, tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    backend = open_backend(SPEC, state_dir)
    backend.set_power_limit(backend.gpus()[2].uuid, 310.0)
    launcher = _launcher(state_dir, 2, 200.0)
    agent = _agent_proc(state_dir, policy, "--interval", "0.1")
    try:
        _wait_for(lambda: _limit(state_dir, 2) == 200.0, what="the agent to cap GPU 2")
        _kill(agent)  # crash: no restore happens
        _kill(launcher)
        assert _limit(state_dir, 2) == 200.0
    finally:
        for p in (agent, launcher):
            if p.poll() is None:
                _kill(p)
    once = _agent_proc(state_dir, policy, "--once")  # the restarted agent's first pass reads the ledger
    out, err = once.communicate(timeout=60)
    assert once.returncode == 0, err
    assert _limit(state_dir, 2) == 310.0 and "restored GPU-" in out


def test_sigterm_restores_every_gpu_and_retires(state_dir: Path, tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    launcher = _launcher(state_dir, 0, 250.0)
    agent = _agent_proc(state_dir, policy, "--interval", "0.1")
    try:
        _wait_for(lambda: _limit(state_dir, 0) == 250.0, what="the agent to cap GPU 0")
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=60)
        assert agent.returncode == 143, err  # 128 + SIGTERM, as the launcher and the exporter (issue 41: it was 0)
        assert "stopped (SIGTERM); restored" in err
        assert _limit(state_dir, 0) == 400.0  # back at the original although the job still runs
        assert not (state_dir / "agent.json").exists() and not agent_alive(state_dir)
    finally:
        _kill(launcher)
        if agent.poll() is None:
            _kill(agent)


def test_run_loop_stops_on_the_event_and_restores(state_dir: Path) -> None:
    backend = open_backend(SPEC, state_dir)
    agent = CapAgent(StateStore(state_dir), backend, parse_rules(POLICY)[0])
    launcher = _launcher(state_dir, 3, 180.0)
    stop = threading.Event()
    try:
        thread = threading.Thread(target=agent.run, args=(0.05, stop))
        thread.start()
        _wait_for(lambda: _limit(state_dir, 3) == 180.0, what="the loop to cap GPU 3")
        stop.set()
        thread.join(30)
        assert not thread.is_alive() and _limit(state_dir, 3) == 400.0
    finally:
        _kill(launcher)


def test_a_held_lock_does_not_stop_the_agent(state_dir: Path) -> None:
    backend = open_backend(SPEC, state_dir)
    agent = CapAgent(StateStore(state_dir, lock_timeout_s=0.2), backend, parse_rules(POLICY)[0])
    launcher = _launcher(state_dir, 0, 200.0)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR);"
         " fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)", str(state_dir / "state.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # a hostile member sits on the lock
        agent.step()
        assert _limit(state_dir, 0) == 200.0
    finally:
        _kill(holder)
        _kill(launcher)
    agent.step()
    assert _limit(state_dir, 0) == 400.0
