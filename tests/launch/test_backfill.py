"""EASY backfill in the launcher's queue (issue 40): a job behind the waiting head starts when it keeps the head's
reservation, says why it does not otherwise, and the head says whether the reservation was kept. Real file locks and
job files on a simulated host."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.state.graph import WaitReason
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore

ME = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")


@pytest.fixture
def session(state_dir: Path) -> Session:
    spec = parse_spec("2xA100-SXM4-80GB", hostname="h").hosts[0]
    backend = SimulatedBackend(spec, state_dir / "gpus.json")
    return Session(StateStore(state_dir), backend, ExclusivePolicy(), Rules(), clock=VirtualClock(),
                   backfill_margin=0.0)


def submit(session: Session, jid: str, n: int, expected_s: float | None = None) -> None:
    """A job of ``n`` GPUs expected to run ``expected_s`` (its request, and its job file, as the launcher writes it)."""
    info = {} if expected_s is None else {"expected_s": expected_s}
    session.submit(JobRequest(id=jid, user="u", host="h", nproc=n, expected_s=expected_s), ME, name=jid, info=info)


@pytest.fixture
def blocked(session: Session) -> Session:
    """One GPU runs ``a`` (expected 1000 s), the head ``big`` waits for both GPUs."""
    submit(session, "a", 1, expected_s=1000.0)
    assert isinstance(session.try_place("a"), Placement)
    submit(session, "big", 2)
    assert session.try_place("big").position == 1
    return session


def test_a_short_job_starts_on_the_idle_gpu_ahead_of_the_waiting_head(blocked: Session) -> None:
    submit(blocked, "short", 1, expected_s=100.0)
    placed = blocked.try_place("short")
    assert isinstance(placed, Placement)
    said = placed.decision.reasons[-1]
    assert said.startswith("backfilled ahead of job big: expected to end (100 s, 100 s with a 0% margin) before")
    booked = blocked.snapshot().jobs["short"].decision["predicted"]["backfill"]
    assert booked["head"] == "big" and booked["reservation_at"] == pytest.approx(time.time() + 1000.0, abs=5.0)


def test_a_job_that_would_outlast_the_reservation_or_says_no_length_waits_and_says_why(blocked: Session) -> None:
    submit(blocked, "long", 1, expected_s=5000.0)
    waiting = blocked.try_place("long")
    assert waiting.position == 2 and waiting.reason is WaitReason.PRIORITY
    assert re.search(r"backfill: backfill window too short: expected to run 5000 s with a 0% margin, job big is "
                     r"reserved GPUs in (99\d|1000) s$", waiting.detail)
    assert "backfill window too short" in blocked.snapshot().jobs["long"].wait_detail  # status shows it
    submit(blocked, "unsaid", 1)
    assert "its length is unknown (declare it: --steps or @ecolaunch.job(steps=...))" in \
        blocked.try_place("unsaid").detail


def test_the_margin_pads_the_predicted_length(blocked: Session) -> None:
    blocked.backfill_margin = 0.5
    submit(blocked, "tight", 1, expected_s=800.0)  # 1200 s with the margin: past the head's reservation
    assert "1200 s with a 50% margin" in blocked.try_place("tight").detail


def test_no_job_starts_ahead_when_a_running_job_has_no_expected_end(session: Session) -> None:
    submit(session, "a", 1)  # nothing known of its length
    assert isinstance(session.try_place("a"), Placement)
    submit(session, "big", 2)
    session.try_place("big")
    submit(session, "short", 1, expected_s=1.0)
    waiting = session.try_place("short")
    assert "no job starts ahead of job big: the running jobs' known ends never free its 2 GPU(s) (no expected end: " \
           "job a)" in waiting.detail


def test_without_backfill_the_queue_is_a_strict_fifo(blocked: Session) -> None:
    blocked.backfill_margin = None
    submit(blocked, "short", 1, expected_s=1.0)
    waiting = blocked.try_place("short")
    assert waiting.position == 2 and "backfill" not in waiting.detail


def test_the_head_says_whether_the_reservation_kept_for_it_held(session: Session) -> None:
    submit(session, "a", 1, expected_s=0.5)
    assert isinstance(session.try_place("a"), Placement)
    submit(session, "big", 2)
    session.try_place("big")
    submit(session, "short", 1, expected_s=0.1)
    assert isinstance(session.try_place("short"), Placement)
    session.try_place("big")  # the head's launcher sees the job that started past it
    time.sleep(2.0)  # "a" overruns its expected end: the head starts late
    session.release("a")
    session.release("short")
    placed = session.try_place("big")
    assert isinstance(placed, Placement)
    late = placed.decision.predicted["reservation_late_s"]
    assert 1.0 < late < 10.0
    assert placed.decision.reasons[-1] == f"1 job(s) started ahead of it by backfill; it starts {late:.0f} s after " \
                                          "its reservation"


def test_a_dry_run_says_it_would_start_ahead_or_when_it_would_start(blocked: Session) -> None:
    decision, waiting, _ = blocked.preview(JobRequest(id="p", user="u", host="h", nproc=1, expected_s=10.0))
    assert waiting is None and decision.reasons[-1].startswith("would start ahead of job big by backfill: expected")
    decision, waiting, _ = blocked.preview(JobRequest(id="p", user="u", host="h", nproc=1, expected_s=5000.0))
    # behind big, which starts when "a" ends (about 1000 s from now) and then holds both GPUs for an unknown time
    assert waiting.position == 2 and waiting.starts_at is None
    blocked.backfill_margin = None
    _, waiting, _ = blocked.preview(JobRequest(id="p", user="u", host="h", nproc=1, expected_s=10.0))
    assert waiting is not None and waiting.starts_at is None


def test_the_queue_shows_each_waiting_jobs_expected_start(session: Session) -> None:
    from ecolaunch.state.queue import queue_rows

    submit(session, "a", 2, expected_s=600.0)
    assert isinstance(session.try_place("a"), Placement)
    submit(session, "b", 2, expected_s=300.0)
    submit(session, "c", 1)
    waiting = session.try_place("b")
    assert waiting.starts_at == pytest.approx(time.time() + 600.0, abs=5.0)
    rows = {r.job.id: r.to_dict() for r in queue_rows(session.snapshot(), "h", time.time())}
    assert rows["b"]["starts_in_s"] == pytest.approx(600.0, abs=5.0)
    assert rows["c"]["starts_in_s"] == pytest.approx(900.0, abs=5.0)  # after b, whose length is known


def test_a_wait_timeout_shorter_than_the_expected_start_fails_at_once(session: Session) -> None:
    from ecolaunch.errors import WaitTimeout

    submit(session, "a", 2, expected_s=600.0)
    assert isinstance(session.try_place("a"), Placement)
    submit(session, "b", 2)
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"job b is expected to start in (599|600) s, later than --wait-timeout 60 "
                                          r"allows \(after 0 s waited\)"):
        session.wait_for_placement("b", timeout_s=60.0)
    assert time.monotonic() - started < 5.0
    assert [j.id for j in session.snapshot().queued_jobs()] == []  # it left the queue


def test_a_declared_length_gets_its_seconds_once_a_profiling_run_measures_the_pace() -> None:
    from ecolaunch.jobmodel.profile import Profile
    from ecolaunch.launch.pipeline import _with_profile

    declared = JobRequest(id="d", user="u", host="h", nproc=1, expected_iterations=500)  # a first launch: no seconds
    measured = Profile(iter_time_s=0.2, sm_util_pct=80.0, mem_bw_util_pct=40.0, memory_mib=1000)
    assert _with_profile(declared, measured).expected_s == pytest.approx(100.0)
    known = JobRequest(id="k", user="u", host="h", nproc=1, expected_iterations=500, expected_s=70.0)
    assert _with_profile(known, measured).expected_s == 70.0  # what the history said stays


def test_the_waiting_line_says_the_expected_start_and_is_not_repeated_as_the_seconds_tick(capsys) -> None:
    from ecolaunch.launch.console import _wait_reporter
    from ecolaunch.policy.waiting import Waiting
    from ecolaunch.state.graph import Job

    job = Job.queued("w1", user="u", host="h", nproc=1, seq=1, submitted_at=0.0, request={}, name="t.py")
    report = _wait_reporter()
    for left in (900.0, 899.8, 899.6):  # three tries 0.2 s apart: the reservation's seconds tick down
        report(job, Waiting(2, WaitReason.PRIORITY, f"backfill: job big is reserved GPUs in {left:.0f} s",
                            time.time() + left), 1.0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and re.fullmatch(r"ecolaunch: job w1 \(t\.py\) waiting: position 2 in the queue, 1 s so far, "
                                            r"expected to start in about (899|900) s: Priority \(backfill: job big is "
                                            r"reserved GPUs in 900 s\)", lines[0]), lines
    report(job, Waiting(2, WaitReason.PRIORITY, "backfill: its length is unknown"), 1.2)  # new words: a new line
    assert capsys.readouterr().err.endswith("1 s so far: Priority (backfill: its length is unknown)\n")
