"""Multi-user safety of the state store: directory checks, no symlink following, per-user job files, ownership."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecolaunch.errors import StateError
from ecolaunch.state.graph import Job, JobState, job_to_dict
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import REPO


def _job(jid: str, uid: int = 0, pid: int = 1, start: float = 0.0, seq: int = 0) -> Job:
    return Job(id=jid, uid=uid, user="u", host="h", launcher_pid=pid, launcher_start_time=start, nproc=1,
               name="x", seq=seq, submitted_at=0.0)


def _write_job_file(state_dir: Path, job: Job, owner: int | None = None, doc: object = None) -> Path:
    jobs = state_dir / "jobs"
    jobs.mkdir(exist_ok=True)
    path = jobs / f"{job.id}.json"
    path.write_text(json.dumps(doc if doc is not None else {"schema": "ecolaunch.job", "version": 1, "job": job_to_dict(job)}))
    if owner is not None:
        os.chown(path, owner, -1)
    return path


def test_jobs_live_in_per_user_files_and_state_json_holds_none(state_dir: Path) -> None:
    store = StateStore(state_dir)
    with store.transaction() as graph:
        graph.jobs["a"] = _job("a")
    doc = json.loads((state_dir / "state.json").read_text())
    assert doc["jobs"] == {}
    job_file = state_dir / "jobs" / "a.json"
    assert json.loads(job_file.read_text())["job"]["id"] == "a"
    assert stat.S_IMODE(job_file.stat().st_mode) == 0o640
    assert (state_dir / "jobs").stat().st_mode & stat.S_ISVTX
    with store.transaction() as graph:
        del graph.jobs["a"]
    assert not job_file.exists() and store.read().jobs == {}


def test_symlinked_lock_file_is_refused(state_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (state_dir / "state.lock").symlink_to(victim)
    with pytest.raises(StateError, match="symbolic link"):
        StateStore(state_dir).read()
    assert victim.read_text() == "precious"


def test_symlinked_state_file_is_never_followed(state_dir: Path, tmp_path: Path, caplog) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    (state_dir / "state.json").symlink_to(victim)
    store = StateStore(state_dir)
    with store.transaction() as graph:
        graph.next_seq = 3
    assert victim.read_text() == "precious"
    assert not (state_dir / "state.json").is_symlink() and store.read().next_seq == 3
    assert "symbolic link" in caplog.text


def test_symlinked_job_file_is_ignored(state_dir: Path, tmp_path: Path, caplog) -> None:
    real = _write_job_file(tmp_path / "elsewhere", _job("x")) if (tmp_path / "elsewhere").mkdir() is None else None
    (state_dir / "jobs").mkdir(mode=0o1755)
    (state_dir / "jobs" / "x.json").symlink_to(real)
    assert StateStore(state_dir).read().jobs == {}
    assert "symbolic link" in caplog.text


def test_world_writable_directory_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(StateError, match="world-writable") as e:
        StateStore(d).read()
    assert "chmod" in e.value.hint
    os.chmod(d, 0o1777)  # sticky, like /tmp: allowed
    StateStore(d).read()


def test_group_writable_directory_gets_setgid_when_ours_and_is_refused_otherwise(tmp_path: Path) -> None:
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o775)
    StateStore(d).read()
    assert d.stat().st_mode & stat.S_ISGID
    if os.geteuid() != 0:
        pytest.skip("changing a directory's owner needs root")
    other = tmp_path / "theirs"
    other.mkdir()
    os.chmod(other, 0o775)
    os.chown(other, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(StateError, match="not setgid"):
        StateStore(other).read()


def test_policy_group_must_exist(state_dir: Path) -> None:
    with pytest.raises(StateError, match="does not exist"):
        StateStore(state_dir, group="no-such-group-ecolaunch").read()


def test_a_job_file_naming_another_uid_is_ignored(state_dir: Path, caplog) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create files owned by another uid")
    nobody = pwd.getpwnam("nobody").pw_uid
    _write_job_file(state_dir, _job("forged", uid=0), owner=nobody)  # nobody claims a job in root's name
    _write_job_file(state_dir, _job("honest", uid=nobody), owner=nobody)
    _write_job_file(state_dir, _job("byroot", uid=1234), owner=0)  # root may write for anyone
    assert sorted(StateStore(state_dir).read().jobs) == ["byroot", "honest"]
    assert "names uid 0 but belongs to uid" in caplog.text


def test_a_look_alike_job_directory_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a directory owned by another uid")
    d = tmp_path / "state"
    d.mkdir()
    (d / "jobs").mkdir(mode=0o3777)
    os.chown(d / "jobs", pwd.getpwnam("nobody").pw_uid, -1)  # planted by a member after moving the real one away
    with pytest.raises(StateError, match="not to root or the state directory's owner"):
        StateStore(d).read()


def test_a_reset_queue_counter_never_reuses_a_seq(state_dir: Path) -> None:
    store = StateStore(state_dir)
    with store.transaction() as graph:
        graph.jobs["a"] = _job("a", seq=7)
        graph.next_seq = 8
    doc = json.loads((state_dir / "state.json").read_text())
    doc["next_seq"] = 0  # any group member can rewrite the shared file
    (state_dir / "state.json").write_text(json.dumps(doc))
    assert store.read().next_seq == 8


# --- a second uid against the first user's job (real processes, the kernel enforces it) ---------------
_AS_NOBODY = r"""
import dataclasses, json, os, sys
from pathlib import Path
from ecolaunch.errors import StateError
from ecolaunch.state.store import StateStore
# the interpreter lives under root's home, which nobody cannot read: import first, then become nobody for good
uid, gid = int(sys.argv[2]), int(sys.argv[3])
os.setgroups([]); os.setgid(gid); os.setuid(uid)
assert os.getuid() == os.geteuid() == uid
d = Path(sys.argv[1]); out = {}
store = StateStore(d)
def attempt(name, fn):
    try:
        fn(); out[name] = "ok"
    except StateError as e:
        out[name] = "StateError: " + str(e)
    except OSError as e:
        out[name] = type(e).__name__
def remove_live():
    with store.transaction() as g:
        del g.jobs["live"]
def alter_live():
    with store.transaction() as g:
        g.jobs["live"].gpus = ["GPU-stolen"]
def drop_dead():
    with store.transaction() as g:
        del g.jobs["dead"]
def own_job():
    with store.transaction() as g:
        g.jobs["mine"] = dataclasses.replace(g.jobs["live"], id="mine", uid=os.getuid(), user="nobody")
    with store.transaction() as g:
        g.jobs["mine"].gpus = ["GPU-0"]
    with store.transaction() as g:
        del g.jobs["mine"]
attempt("remove_live", remove_live)
attempt("alter_live", alter_live)
attempt("drop_dead", drop_dead)
attempt("own_job", own_job)
attempt("unlink_file", lambda: os.unlink(d / "jobs" / "live.json"))
attempt("overwrite_file", lambda: open(d / "jobs" / "live.json", "w").write("{}"))
def replace_file():
    fake = d / "jobs" / "fake.json"
    fake.write_text("{}")
    try:
        os.replace(fake, d / "jobs" / "live.json")
    finally:
        fake.unlink(missing_ok=True)
attempt("replace_file", replace_file)
def plant_look_alike():
    os.rename(d / "jobs", d / "jobs.old")
    os.mkdir(d / "jobs", 0o3777)
attempt("plant_look_alike", plant_look_alike)
print(json.dumps(out))
"""


def test_a_second_uid_cannot_remove_or_alter_the_first_users_job() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as nobody")
    pw = pwd.getpwnam("nobody")
    shared = Path(tempfile.mkdtemp(prefix="ecolaunch-shared-"))
    try:
        os.chown(shared, 0, pw.pw_gid)
        os.chmod(shared, 0o2775)  # the recommended layout: group-shared, setgid
        store = StateStore(shared)
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        with store.transaction() as graph:
            graph.jobs["live"] = _job("live", uid=0, pid=os.getpid(), start=process_start_time(os.getpid()))
            graph.jobs["live"].state = JobState.RUNNING
            graph.jobs["dead"] = _job("dead", uid=0, pid=int(dead.stdout), start=1.0, seq=1)
        live_before = (shared / "jobs" / "live.json").read_bytes()
        args = [sys.executable, "-c", _AS_NOBODY, str(shared), str(pw.pw_uid), str(pw.pw_gid)]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd="/",
                                env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")})
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["remove_live"].startswith("StateError") and "launcher" in out["remove_live"]
        assert out["alter_live"].startswith("StateError") and "may not change it" in out["alter_live"]
        assert out["drop_dead"] == "ok"  # its launcher is provably dead
        assert out["own_job"] == "ok"  # a user manages their own jobs
        assert out["unlink_file"] == out["overwrite_file"] == out["replace_file"] == "PermissionError"
        # the store made the shared directory sticky too: the job directory cannot be swapped for a look-alike
        assert shared.stat().st_mode & stat.S_ISVTX
        assert out["plant_look_alike"] == "PermissionError"
        assert (shared / "jobs" / "live.json").read_bytes() == live_before
        assert "live" in StateStore(shared).read().jobs
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


# --- property-based: the loader never crashes and never admits an invalid job -------------------------
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
_job_keys = list(job_to_dict(_job("a")).keys())


@st.composite
def _job_docs(draw):
    body = job_to_dict(_job("a"))
    for key in draw(st.lists(st.sampled_from(_job_keys), max_size=3)):
        if draw(st.booleans()):
            body[key] = draw(_json)
        else:
            body.pop(key, None)
    doc = {"schema": "ecolaunch.job", "version": 1, "job": body}
    return draw(st.sampled_from([doc, {**doc, "version": draw(_json)}, draw(_json), body]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state_doc=_json, job_doc=_job_docs(), raw=st.binary(max_size=64))
def test_fuzzed_documents_never_crash_the_loader(tmp_path: Path, state_doc, job_doc, raw: bytes) -> None:
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    (d / "state.json").write_text(json.dumps(state_doc))
    _write_job_file(d, _job("a"), doc=job_doc)
    (d / "jobs" / "b.json").write_bytes(raw)
    graph = StateStore(d).read()
    assert set(graph.jobs) <= {"a"}
    for job in graph.jobs.values():  # whatever survived is fully typed
        assert isinstance(job.uid, int) and isinstance(job.gpus, list) and isinstance(job.state, JobState)
        assert all(isinstance(w, float) for w in job.power_caps_w.values())
