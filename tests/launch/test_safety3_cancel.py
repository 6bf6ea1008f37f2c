"""Issue 35 (safety, round three), item 2: root's ``cancel`` signals only the job's own launcher.

A job file is its owner's word; a forged or stale one names a process the kernel says is not the job's launcher:
root's ``sleep``, pid 1, another uid's process. ``ecolaunch cancel`` refuses each with an ``Error:`` line and a
``HINT:``, exit 1, and the process lives on. A real launcher (``tests/cli/test_queue.py``) is still cancelled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ecolaunch.launch.cancel import NotItsLauncher, not_its_launcher, stop
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.reconcile import PsutilProcessTable, process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import clean_env, ecolaunch_cmd

SPEC = "2xA100-SXM4-80GB"


def _job(jid: str, pid: int, uid: int = 0, host: str = "x") -> Job:
    return Job(id=jid, uid=uid, user="root", host=host, launcher_pid=pid, launcher_start_time=process_start_time(pid),
               nproc=1, name=jid, seq=0, submitted_at=0.0, state=JobState.QUEUED)


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait(10)


def test_root_cancel_never_signals_a_process_the_job_file_merely_names(tmp_path: Path, sleeper) -> None:
    env = clean_env(ECOLAUNCH_SIMULATE=SPEC, ECOLAUNCH_STATE_DIR=str(tmp_path))
    status = subprocess.run(ecolaunch_cmd("status", "--json"), env=env, capture_output=True, text=True, check=True)
    with StateStore(tmp_path).transaction() as graph:  # a root job file, as a stale or forged record would be
        graph.jobs["forged"] = _job("forged", sleeper.pid, host=json.loads(status.stdout)["host"])
    out = subprocess.run(ecolaunch_cmd("cancel", "forged"), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr == (f"Error: job forged was not cancelled: pid {sleeper.pid} does not hold the job's file open, "
                          "as its launcher does; nothing was signalled\n"
                          "HINT: the job's file may be forged or stale: the lab admin can remove it (sudo rm "
                          f"{tmp_path}/jobs/forged.json)\n")
    time.sleep(0.2)
    assert sleeper.poll() is None  # alive: nothing was signalled


def test_only_the_kernels_launcher_of_the_job_is_ever_signalled(tmp_path: Path, sleeper) -> None:
    table = PsutilProcessTable()
    store = StateStore(tmp_path)
    me = _job("me", os.getpid())
    with store.transaction() as graph:
        graph.jobs["me"] = me
    assert not_its_launcher(_job("one", 1), table, store.job_file("one")) == \
        "its file names pid 1, which no launcher has"
    other_uid = _job("other", sleeper.pid, uid=4242)
    assert not_its_launcher(other_uid, table, store.job_file("other")) == \
        f"the kernel's uids of pid {sleeper.pid} are 0, not the job's uid 4242"
    assert not_its_launcher(me, table, store.job_file("me")) == \
        f"pid {os.getpid()} does not hold the job's file open, as its launcher does"
    fd = store.hold_job_file("me")  # what a launcher does from the moment it queues
    try:
        assert not_its_launcher(me, table, store.job_file("me")) is None
        with store.transaction() as graph:  # a heartbeat replaces the file: the kernel still names it
            graph.jobs["me"].name = "renamed"
        assert not_its_launcher(me, table, store.job_file("me")) is None
    finally:
        os.close(fd)
    with pytest.raises(NotItsLauncher):
        stop(_job("forged", sleeper.pid), table, store.job_file("forged"))
    assert sleeper.poll() is None


def test_a_process_table_that_cannot_tell_owners_or_open_files_signals_nothing() -> None:
    class Blind:
        def alive(self, pid: int, start_time: float) -> bool:
            return True

        def ancestors(self, pid: int) -> list[int]:
            return []

    job = Job(id="j", uid=0, user="root", host="x", launcher_pid=os.getpid(), launcher_start_time=0.0, nproc=1,
              name="j", seq=0, submitted_at=0.0, state=JobState.QUEUED)
    assert not_its_launcher(job, Blind(), Path("/nonexistent/j.json")).startswith(f"the kernel's uids of pid {os.getpid()}")
    assert sys.platform != "linux" or PsutilProcessTable().holds_open(os.getpid(), "/nonexistent/j.json") is False
