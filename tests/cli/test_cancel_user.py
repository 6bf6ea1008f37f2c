"""Issue 41 item 7: ``ecolaunch cancel -u USER`` (``--user``), Slurm's ``scancel -u``: every job of a user on this
host, through the one safe signalling path (``ecolaunch.launch.cancel``). Real launchers on a simulated 2-GPU
machine; another user's launcher is a real second uid (``tests/multiuser.py``)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from ecolaunch.state.graph import JobState
from ecolaunch.state.store import StateStore
from tests.cli.test_launch import run, status, wait_for
from tests.cli.test_queue import CLI, CLI_IMPORTS, SPEC, alice_queued_behind_root, running, start
from tests.conftest import clean_env
from tests.launch.test_safety3_cancel import _job
from tests.multiuser import ALICE, MALLORY, last_json, run_as


def test_cancel_user_cancels_every_job_of_that_user_the_queued_first(sim_env, tmp_path: Path) -> None:
    env = sim_env(SPEC)
    nothing = run(["cancel", "-u", "root"], env)
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout == f"no queued or running job of user root on host {status(env)['host']}: nothing to cancel\n"
    hog = start(env, tmp_path, 2, 120, "--name", "hog")
    waiter = None
    try:
        hog_id = running(env, "hog")["id"]
        waiter = start(env, tmp_path, 1, 120, "--name", "second")
        queued = wait_for(lambda: next(iter(status(env)["queue"]), None), what="the second job queued")
        done = run(["cancel", "--user", "root"], env)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == (f"cancelled job {queued['id']} (root: second), queued at position 1: its launcher "
                            f"(pid {queued['launcher_pid']}) left the queue")
        assert lines[1].startswith(f"cancelled job {hog_id} (root: hog), running on GPU 0,1: its launcher (pid ")
        assert len(lines) == 2
        assert waiter.wait(30) == 143 and hog.wait(30) == 143
        after = status(env)
        assert after["jobs"] == [] and after["queue"] == []
        assert all(p.read_text() == "0,1" for p in tmp_path.glob("started-*"))  # only the hog's workers ever ran
    finally:
        for proc in (hog, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)


def test_usage_neither_job_nor_user_and_an_unknown_user(sim_env) -> None:
    env = sim_env(SPEC)
    bare = run(["cancel"], env)
    assert bare.returncode == 2, bare.stderr
    assert bare.stderr.splitlines()[-1] == ("Error: give JOB (a job's id or name), or --user USER to cancel every job "
                                            "of that user")
    assert "Try 'ecolaunch cancel --help' for help." in bare.stderr
    unknown = run(["cancel", "-u", "no-such-user-41"], env)
    assert unknown.returncode == 2, unknown.stderr
    assert unknown.stderr.splitlines()[-1] == "Error: Invalid value for '--user': no user 'no-such-user-41' on this host"
    helped = run(["cancel", "--help"], env)
    assert "-u, --user USER" in helped.stdout and "scancel -u" in helped.stdout


def test_cancel_user_never_signals_a_process_a_job_file_merely_names(tmp_path: Path) -> None:
    env = clean_env(ECOLAUNCH_SIMULATE=SPEC, ECOLAUNCH_STATE_DIR=str(tmp_path))
    host = status(env)["host"]
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        with StateStore(tmp_path).transaction() as graph:  # root's job file naming root's sleep: not a launcher
            graph.jobs["forged"] = _job("forged", sleeper.pid, host=host)
            assert graph.jobs["forged"].state is JobState.QUEUED
        out = run(["cancel", "-u", "root"], env)
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stderr.splitlines()[0] == (f"Error: job forged was not cancelled: pid {sleeper.pid} does not hold "
                                              "the job's file open, as its launcher does; nothing was signalled")
        time.sleep(0.2)
        assert sleeper.poll() is None  # alive: nothing was signalled
    finally:
        sleeper.kill()
        sleeper.wait(10)


#: a launcher alice starts herself may be read in /proc by her (``holds_open``); one this test drops to her uid from
#: root is not, until it says so (the kernel clears "dumpable" on setuid without an exec)
DUMPABLE = """
import ctypes
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
"""


def test_a_member_cancels_only_their_own_jobs_and_names_only_themselves() -> None:
    # alice's launch waits behind root's job, in her own job file
    with alice_queued_behind_root(DUMPABLE + CLI) as (env, hog, alice, row):
        assert row["user"] == str(ALICE)

        other = run_as(MALLORY, CLI, {"env": env, "argv": ["cancel", "-u", str(ALICE)]}, imports=CLI_IMPORTS, env=env)
        assert last_json(other) == {"exit": 77}, other.stdout + other.stderr
        assert f"Error: user nobody may cancel only their own jobs; --user {ALICE} names another user" in other.stderr
        assert f"HINT: ask {ALICE} or the lab admin (root: sudo ecolaunch cancel -u {ALICE})" in other.stderr
        assert [q["id"] for q in status(clean_env(**env))["queue"]] == [row["id"]]  # still queued

        own = run_as(ALICE, CLI, {"env": env, "argv": ["cancel", "-u", str(ALICE)]}, imports=CLI_IMPORTS, env=env)
        assert last_json(own) == {"exit": 0}, own.stdout + own.stderr
        assert f"cancelled job {row['id']} ({ALICE}: mine), queued at position 1" in own.stdout
        out, err = alice.communicate(timeout=30)
        assert json.loads(out.strip().splitlines()[-1]) == {"exit": 143}, out + err
        after = status(clean_env(**env))
        assert [j["id"] for j in after["jobs"]] == [hog["id"]] and after["queue"] == []  # root's job untouched
