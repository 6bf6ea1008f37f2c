"""Issue 17, item 13: a full (or read-only) disk under the state directory, and a wall clock set back.

A real small tmpfs is the state directory; a member (a real second uid) fills it. A launch then exits 1 with an
``Error:``/``HINT:`` pair (never "ecolaunch bug"); a running launcher whose heartbeat hits the full disk logs one
warning without a traceback and keeps going. A launcher whose wall clock is two days behind records its job's
real energy, not 0 kJ.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ecolaunch.admin.rules import parse_rules
from ecolaunch.runtime import open_gpus, resolve
from ecolaunch.launch import pipeline
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.profile.history import History
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import BIN, REPO, ecolaunch_cmd
from tests.multiuser import GID, MALLORY, remove, require_root, run_as, shared_dir

SPEC = "1xA100-SXM4-80GB"
FILL = """
fd = os.open(args["path"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError as e:
    assert e.errno == 28, e
os.close(fd)
"""

@pytest.fixture
def small_fs():
    """A 1 MiB tmpfs, ``3775 root:<the lab's group>`` (the admin's layout), unmounted afterwards."""
    require_root()
    mnt = shared_dir()  # where the other uid can reach it
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=3775", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        remove(mnt)
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    os.chown(mnt, 0, GID)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        remove(mnt)


def _fill(fs: Path) -> Path:
    """Mallory fills the file system (a member may write in the shared directory)."""
    filler = fs / "filler"
    run_as(MALLORY, FILL, {"path": str(filler)})
    assert filler.stat().st_uid == MALLORY
    return filler


def _launch(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd("--nproc-per-node", "1", *extra, str(BIN / "stepper.py"), "3", "0.01"),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_launch_on_a_full_disk_is_an_error_with_a_hint(small_fs, sim_env) -> None:
    env = {**sim_env(SPEC), "ECOLAUNCH_STATE_DIR": str(small_fs / "state")}
    first = _launch(env)
    assert first.returncode == 0, first.stderr  # the layout exists: now only space is missing
    _fill(small_fs)
    ran = _launch(env)
    assert ran.returncode == 1, ran.stderr
    assert "ecolaunch bug" not in ran.stderr and "Traceback" not in ran.stderr
    lines = ran.stderr.splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("Error: "))
    assert "No space left on device" in lines[error] and str(small_fs / "state") in lines[error]
    assert lines[error + 1].startswith(f"HINT: free space (or quota) on the file system that holds {small_fs}")
    assert list((small_fs / "state" / "jobs").iterdir()) == []  # nothing booked, nothing left behind


def test_a_launch_on_a_read_only_disk_is_an_error_with_a_hint(small_fs, sim_env) -> None:
    env = {**sim_env(SPEC), "ECOLAUNCH_STATE_DIR": str(small_fs / "state")}
    assert _launch(env).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    ran = _launch(env)
    assert ran.returncode == 1, ran.stderr
    assert "ecolaunch bug" not in ran.stderr and "Traceback" not in ran.stderr
    assert "Error: " in ran.stderr and "read-only" in ran.stderr and "\nHINT: " in ran.stderr


def test_disk_errors_become_state_errors_naming_the_directory() -> None:
    full = pipeline.disk_error(OSError(errno.EDQUOT, "Disk quota exceeded", "/s/jobs/x.json"), "/s")
    assert str(full) == "cannot write the state directory /s: Disk quota exceeded (/s/jobs/x.json)"
    assert "df -h /s" in (full.hint or "")
    assert "read-only" in (pipeline.disk_error(OSError(errno.EROFS, "Read-only file system"), "/s").hint or "")


class _Residents:
    def set_co_residents(self, uuid, jobs) -> None:
        pass

    def set_waiting(self, share) -> None:
        pass

    def progress(self) -> None:
        return None

    def measured_profile(self) -> None:
        return None


def test_a_heartbeat_on_a_full_disk_warns_once_without_a_traceback_and_keeps_going(small_fs, monkeypatch) -> None:
    env = {"ECOLAUNCH_SIMULATE": SPEC, "ECOLAUNCH_STATE_DIR": str(small_fs / "state")}
    backend = open_gpus(resolve(env)[0])
    session = Session(StateStore(small_fs / "state"), backend, ExclusivePolicy(), parse_rules("")[0])
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="root")
    job = session.submit(JobRequest(id="beat0001", user="root", host=backend.hostname(), nproc=1), me, name="t",
                         info={})
    placement = session.try_place(job.id)
    assert placement is not None
    session.heartbeat(placement.job)  # works while there is space
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log = logging.getLogger(pipeline.__name__)
    log.addHandler(handler)
    monkeypatch.setattr(log, "level", logging.WARNING)
    monkeypatch.setattr(pipeline, "HEARTBEAT_S", 0.02)
    filler = _fill(small_fs)
    stop = threading.Event()
    beat = threading.Thread(target=pipeline._heartbeat, args=(session, placement, _Residents(), stop), daemon=True)
    try:
        beat.start()
        time.sleep(0.6)  # many beats, each failing
        failed = [r for r in records if r.levelno >= logging.WARNING]
        assert len(failed) == 1, [r.getMessage() for r in failed]
        assert "heartbeat failed" in failed[0].getMessage() and "No space left" in failed[0].getMessage()
        assert not failed[0].exc_info  # no traceback
        assert beat.is_alive()
        run_as(MALLORY, "os.unlink(args['path'])", {"path": str(filler)})
        time.sleep(0.3)
        assert any("heartbeat works again" in r.getMessage() for r in records)
    finally:
        stop.set()
        beat.join(5)
        log.removeHandler(handler)
        if filler.exists():
            filler.unlink()
        session.release(job.id)


def test_a_wall_clock_set_back_two_days_still_records_the_jobs_energy(sim_env, state_dir, tmp_path) -> None:
    env = sim_env(SPEC)
    backend = open_gpus(resolve(env)[0])
    backend.gpus()  # the simulated GPUs' state exists, stamped before the clock goes back
    fake = tmp_path / "fakeclock"
    fake.mkdir()
    (fake / "sitecustomize.py").write_text(
        "import time\n_wall = time.time\ntime.time = lambda: _wall() - 2 * 86400.0  # an admin set the clock back\n")
    env["PYTHONPATH"] = os.pathsep.join([str(fake), env["PYTHONPATH"]])
    ran = subprocess.run(ecolaunch_cmd("--nproc-per-node", "1", str(BIN / "stepper.py"), "40", "0.03"), env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    (record,) = History(state_dir).list()
    assert record.ended < time.time() - 86400  # the launcher's wall clock really was two days behind
    assert record.duration_s >= 1.0
    idle_w = 40.0  # below any A100's idle draw in the simulated model
    assert record.gpu_energy_j >= idle_w * record.duration_s * 0.5, record
    assert record.energy_j > 0.0
