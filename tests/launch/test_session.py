"""The launcher's queue on a simulated host: strict FIFO, wait timeouts, release."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import NeverFits, NoPlacement, WaitTimeout
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore


@pytest.fixture
def session(state_dir: Path) -> Session:
    spec = parse_spec("2xA100-SXM4-80GB", hostname="h").hosts[0]
    backend = SimulatedBackend(spec, state_dir / "gpus.json")
    return Session(StateStore(state_dir), backend, ExclusivePolicy(), Rules(), clock=VirtualClock())


ME = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")


def submit(session: Session, jid: str, n: int) -> None:
    session.submit(JobRequest(id=jid, user="u", host="h", nproc=n), ME, name=jid, info={})


def test_the_head_of_the_queue_blocks_later_jobs_that_would_fit(session: Session) -> None:
    submit(session, "a", 1)
    assert isinstance(session.try_place("a"), Placement)
    submit(session, "big", 2)  # needs both GPUs: waits for "a"
    submit(session, "small", 1)  # would fit on the free GPU, but arrived later
    assert session.try_place("big").position == 1
    assert session.try_place("small").position == 2
    session.release("a")
    assert isinstance(session.try_place("big"), Placement)
    assert session.try_place("small").position == 1


def test_wait_timeout_and_no_wait_leave_the_queue(session: Session) -> None:
    submit(session, "a", 2)
    assert isinstance(session.try_place("a"), Placement)
    submit(session, "b", 1)
    with pytest.raises(WaitTimeout, match="waited"):
        session.wait_for_placement("b", timeout_s=1.0)
    submit(session, "c", 1)
    with pytest.raises(NoPlacement, match="no GPUs fit job c now"):
        session.wait_for_placement("c", timeout_s=0)
    assert session.snapshot().queued_jobs() == []


def test_a_request_that_can_never_fit_is_refused_at_once(session: Session) -> None:
    with pytest.raises(NeverFits, match="asks for 3 GPU.* can never fit: the host has 2 GPU"):
        submit(session, "huge", 3)
