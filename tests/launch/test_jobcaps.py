"""JobCaps, the one owner of a job's caps: clip, record, apply (agent / root with a guard / refused, said once),
restore. Simulated GPUs, a real state store; the guard is a recording stand-in (tests/launch/test_guard.py runs
the real one)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ecolaunch.caps.ledger import load_ledger
from ecolaunch.admin.rules import parse_rules
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import PermissionDenied
from ecolaunch.caps.job import JobCaps
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from ecolaunch.statedir import AGENT_FILE, LEDGER_FILE

ME = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")
RULES = parse_rules('[caps."A100-SXM4-80GB"]\nmin_w = 150\nmax_w = 300\n')[0]


class CappingPolicy:
    """Places on GPU 0 with the cap the test chooses."""

    name = "capping"

    def __init__(self, cap_w: float | None) -> None:
        self.cap_w = cap_w

    def decide(self, state, job, rules):
        gpu = sorted(state.hosts[job.host].gpus.values(), key=lambda g: g.index)[0]
        return Decision(self.name, (gpu.uuid,), {gpu.uuid: self.cap_w}, {gpu.uuid: []}, ["test"])


class FakeGuard:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def wait_ready(self, timeout_s: float = 10.0) -> bool:
        self.log.append("guard ready")
        return True

    def done(self, timeout_s: float = 2.0) -> None:
        self.log.append("guard done")


def placed(state_dir: Path, cap_w: float | None, privileged: bool = True) -> tuple[Session, Placement]:
    spec = parse_spec("2xA100-SXM4-80GB", hostname="h").hosts[0]
    backend = SimulatedBackend(spec, state_dir / "gpus.json", privileged=privileged)
    session = Session(StateStore(state_dir), backend, CappingPolicy(cap_w), RULES)
    session.submit(JobRequest(id="j", user="u", host="h", nproc=1), ME, name="j", info={})
    placement = session.try_place("j")
    assert isinstance(placement, Placement)
    return session, placement


def owner(session: Session, placement: Placement, state_dir: Path, log: list[str], said: list[str]) -> JobCaps:
    def guard(env):
        log.append("guard started")
        return FakeGuard(log)

    return JobCaps(session, placement, state_dir, {}, on_message=said.append, guard_factory=guard)


def limit(session: Session, index: int = 0) -> float:
    return session.backend.gpus()[index].power_limit_w


def test_as_root_the_guard_watches_before_the_first_change_and_release_restores(state_dir: Path) -> None:
    session, placement = placed(state_dir, 250.0)
    log, said = [], []
    caps = owner(session, placement, state_dir, log, said)
    caps.begin()
    assert limit(session) == 250.0 and log == ["guard started", "guard ready"] and caps.applied
    assert load_ledger(state_dir / LEDGER_FILE, "h") == {placement.job.gpus[0]: 400.0}
    caps.set_cap(placement.job.gpus[0], 500.0)  # the closed loop asks above the policy: clipped to its 300 W
    assert limit(session) == 300.0
    with session.store.transaction() as graph:
        assert graph.jobs["j"].power_caps_w == {placement.job.gpus[0]: 300.0}  # the wish is recorded
    session.release("j")
    caps.release()
    assert limit(session) == 400.0 and log[-1] == "guard done" and said == []


def test_without_privilege_it_is_said_once_and_the_job_keeps_its_caps(state_dir: Path) -> None:
    session, placement = placed(state_dir, 250.0, privileged=False)
    log, said = [], []
    caps = owner(session, placement, state_dir, log, said)
    caps.begin()
    assert limit(session) == 400.0 and not caps.applied
    assert said == ["would set GPU 0 to 250 W (policy allows 150-300 W); run `ecolaunch agent` as root to apply caps"]
    for watts in (200.0, 180.0):  # the profiler and the closed loop try again: refused, not said again
        with pytest.raises(PermissionDenied):
            caps.set_cap(placement.job.gpus[0], watts)
    assert len(said) == 1 and limit(session) == 400.0
    assert log == []  # no guard is started where no cap may be set


def test_a_refused_set_takes_the_wish_back(state_dir: Path) -> None:
    session, placement = placed(state_dir, None, privileged=False)
    said: list[str] = []
    caps = owner(session, placement, state_dir, [], said)
    caps.begin()  # nothing decided: nothing to say
    assert said == []
    with pytest.raises(PermissionDenied):
        caps.set_cap(placement.job.gpus[0], 200.0)
    with session.store.transaction() as graph:
        assert graph.jobs["j"].power_caps_w == {}
    assert len(said) == 1 and "cannot be set here" in said[0]


def test_with_a_cap_agent_the_wish_is_recorded_and_left_to_it(state_dir: Path) -> None:
    (state_dir / AGENT_FILE).write_text(json.dumps({"pid": ME.pid, "start_time": ME.start_time, "host": "h"}))
    os.chmod(state_dir / AGENT_FILE, 0o644)
    session, placement = placed(state_dir, 250.0)
    log: list[str] = []
    caps = owner(session, placement, state_dir, log, [])
    caps.begin()
    caps.set_cap(placement.job.gpus[0], 220.0)
    assert caps.by_agent and limit(session) == 400.0 and log == []  # applying is the agent's
    with session.store.transaction() as graph:
        assert graph.jobs["j"].power_caps_w == {placement.job.gpus[0]: 220.0}


def test_a_privileged_session_restores_what_a_dead_launcher_left(state_dir: Path) -> None:
    from ecolaunch.caps.keeper import CapKeeper

    session, placement = placed(state_dir, 250.0)
    owner(session, placement, state_dir, [], []).begin()
    assert limit(session) == 250.0
    with session.store.transaction() as graph:  # its launcher dies (SIGKILL: no release ran)
        graph.jobs["j"].launcher_pid = 2 ** 22 + 12345
    keeper = CapKeeper(session.backend, state_dir, RULES, host="h")
    other = Session(StateStore(state_dir), session.backend, CappingPolicy(None), RULES, cap_keeper=keeper)
    other.snapshot()  # e.g. `ecolaunch status` run as root: any transaction of a privileged process
    assert limit(session) == 400.0 and load_ledger(state_dir / LEDGER_FILE, "h") == {}


def test_an_unprivileged_inline_profile_says_the_refused_cap_once(state_dir: Path, tmp_path: Path, caplog) -> None:
    """A launch that is not root and has no agent: its real run is profiled inline on GPUs that draw power, the
    profiler asks for a lower cap, the owner refuses and says so once; the profiler and the closed loop do not say
    it again (the review saw it twice), and the run goes on at the caps it found."""
    import logging
    import subprocess
    import sys

    from ecolaunch.clock import SystemClock
    from ecolaunch.run.observer import ObserveConfig, RunObserver
    from ecolaunch.profile.history import History
    from ecolaunch.profile.modes import ProfilerSettings
    from tests.conftest import BIN, clean_env

    session, placement = placed(state_dir, None, privileged=False)
    gpu = placement.job.gpus[0]
    session.backend.attach(gpu, os.getpid(), 8_000, util_gpu_pct=90.0, util_mem_pct=30.0, power_w=280.0)
    said: list[str] = []
    caps = owner(session, placement, state_dir, [], said)
    caps.begin()  # nothing decided: nothing said yet
    config = ObserveConfig("j", (gpu,), state_dir, mode="inline", fingerprint="f" * 64, rules=RULES,
                           allowed_slowdown_pct=10.0, user="u", name="stepper",
                           settings=ProfilerSettings(warmup_iters=3, settle_iters=2, measured_iters=5),
                           interval_s=0.05, poll_s=0.05)
    caplog.set_level(logging.INFO, logger="ecolaunch")
    observer = RunObserver(config, session.backend, clock=SystemClock(), history=History(state_dir),
                           set_cap=caps.set_cap, ceiling_w=caps.ceiling_w)
    try:
        with observer:
            env = clean_env(**observer.worker_env())
            proc = subprocess.run([sys.executable, str(BIN / "stepper.py"), "120", "0.01"], env=env, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=120, check=False)
            observer.set_exit_code(proc.returncode)
    finally:
        session.backend.detach(os.getpid())
    assert proc.returncode == 0, proc.stderr
    assert said == ["power caps cannot be set here (not root, and no cap agent serves this state directory): the job "
                    "runs at its GPUs' current caps; run `ecolaunch agent` as root to apply them"]
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], loud  # what the user sees: the one line above
    assert any("cannot set the power cap" in r.getMessage() for r in caplog.records)  # -v still tells
    assert limit(session) == 400.0
