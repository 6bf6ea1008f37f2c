"""The link rule in the launcher (``--policy curve-link``, issue 39): a 2-GPU job offered a split pair waits for the
pair behind one PCIe switch that a running job's expected end frees, says so in its waiting reason and its job file
(what ``status`` shows), and ``--dry-run`` says so too. Real file locks and job files on a simulated host."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.state.graph import WaitReason
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore

ME = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")
#: GPU 0-1 and 2-3 behind one PCIe switch each, the host bridge between
SPEC = parse_spec("4xV100-PCIE-16GB", hostname="h").hosts[0]


def session_of(state_dir: Path, policy: str) -> Session:
    backend = SimulatedBackend(SPEC, state_dir / "gpus.json")
    return Session(StateStore(state_dir), backend, get_policy(policy), Rules(), clock=VirtualClock())


def submit(session: Session, jid: str, n: int, expected_s: float | None, on: tuple[int, ...] | None = None) -> None:
    info = {} if expected_s is None else {"expected_s": expected_s}
    allowed = None if on is None else tuple(SPEC.uuids[i] for i in on)
    session.submit(JobRequest(id=jid, user="u", host="h", nproc=n, expected_s=expected_s, allowed_gpus=allowed), ME,
                   name=jid, info=info)


def busy(session: Session) -> Session:
    """``a`` on GPU 0 (expected 1000 s), ``c`` on GPU 2 (length unknown): GPU 1 and 3 are free, a split pair."""
    for jid, length, gpu in (("a", 1000.0, 0), ("c", None, 2)):
        submit(session, jid, 1, length, on=(gpu,))
        assert isinstance(session.try_place(jid), Placement)
    return session


@pytest.mark.parametrize("length, waits", [(1000.0, True), (100.0, False)])
def test_a_pair_waits_for_the_switch_pair_when_its_wait_covers_it(state_dir: Path, length: float,
                                                                   waits: bool) -> None:
    session = busy(session_of(state_dir, "curve-link"))
    submit(session, "pair", 2, length)
    outcome = session.try_place("pair")
    if not waits:  # 4 x 100 s of wait cannot cover GPU 0's 1000 s: the split pair now
        assert isinstance(outcome, Placement)
        assert set(outcome.decision.gpus) == {SPEC.uuids[1], SPEC.uuids[3]}
        return
    assert outcome.position == 1 and outcome.reason is WaitReason.RESOURCES
    assert outcome.detail.startswith("waits for GPU 0,1 (linked by pcie switch) rather than take GPUs linked by pcie "
                                     "host: expected free in ")
    assert 990.0 <= outcome.starts_in(time.time()) <= 1000.0
    assert session.snapshot().jobs["pair"].wait_detail == outcome.detail  # what status shows


def test_the_default_policy_takes_the_split_pair(state_dir: Path) -> None:
    session = busy(session_of(state_dir, "curve"))
    submit(session, "pair", 2, 1000.0)
    assert set(session.try_place("pair").decision.gpus) == {SPEC.uuids[1], SPEC.uuids[3]}


def test_dry_run_says_the_launch_would_hold_out(state_dir: Path) -> None:
    session = busy(session_of(state_dir, "curve-link"))
    decision, waiting, _ = session.preview(JobRequest(id="dry", user="u", host="h", nproc=2, expected_s=1000.0))
    assert decision is None and waiting is not None
    assert waiting.detail.startswith("waits for GPU 0,1 (linked by pcie switch)")
