"""Issue 35 (safety, round three), items 1 and 4: the files root trusts, and outsiders.

Real second uids (``tests/multiuser.py``) on the layout ``ecolaunch init-state`` makes: a member hard-links the
root-owned, group-writable ``state.json`` or ``state.lock`` into ``jobs/`` and writes a running root job into it; a
user outside the group tries to open the lock; a member holds the lock; an old, world-readable layout is repaired.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ecolaunch.errors import StateError
from ecolaunch.safefs import RefusedFile, check_trusted, read_file
from ecolaunch.state.graph import Job
from ecolaunch.state.layout import init_state
from ecolaunch.state.store import MAX_JOB_FILES_PER_UID, StateStore
from tests.multiuser import GID, MALLORY, OUTSIDER, OUTSIDER_GID, last_json, remove, require_root, run_as, shared_dir
from tests.multiuser import start_as

FORGE_IMPORTS = """
from ecolaunch.state.graph import Job, JobState, job_to_dict
from ecolaunch.state.reconcile import process_start_time
"""
FORGE = """
d = Path(args["d"])
job = Job(id="forged", uid=0, user="root", host="lab1", launcher_pid=1, launcher_start_time=process_start_time(1),
          nproc=4, name="x", seq=0, submitted_at=0.0, state=JobState.RUNNING, gpus=["GPU-0", "GPU-1"],
          power_caps_w={"GPU-0": 100.0, "GPU-1": 100.0}, started_at=1.0)
os.link(d / args["target"], d / "jobs" / "forged.json")  # the kernel allows it: she may read and write the file
with open(d / "jobs" / "forged.json", "w") as f:  # through the link: root's file, group-writable
    json.dump({"schema": "ecolaunch.job", "version": 1, "job": job_to_dict(job)}, f)
st = os.stat(d / "jobs" / "forged.json")
print(json.dumps([st.st_uid, st.st_nlink]))
"""


@pytest.mark.parametrize("target", ["state.json", "state.lock"])
def test_a_member_cannot_pass_a_hard_link_of_a_root_file_off_as_a_root_job(target: str) -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        owner, links = last_json(run_as(MALLORY, FORGE, {"d": str(d), "target": target}, imports=FORGE_IMPORTS))
        assert (owner, links) == (0, 2)  # root's file, as the store would once have believed it
        graph = StateStore(d).read()
        assert "forged" not in graph.jobs
        assert graph.ignored["forged"].reason == "refused: forged.json: 2 hard links (a trusted file has one)"
    finally:
        remove(d)


def test_the_rule_of_trust_refuses_links_shared_writes_and_special_files(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_text("{}")
    good.chmod(0o640)
    assert read_file(good, 10, trusted=True)[0] == b"{}"
    os.link(good, tmp_path / "twin")
    for path, why in ((good, "2 hard links"), (tmp_path / "twin", "2 hard links")):
        with pytest.raises(RefusedFile, match=why):
            read_file(path, 10, trusted=True)
    assert read_file(good, 10)[0] == b"{}"  # untrusted reads (state.json) take any regular file
    (tmp_path / "twin").unlink()
    good.chmod(0o660)
    with pytest.raises(RefusedFile, match="writable by others"):
        check_trusted(os.stat(good))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RefusedFile, match="not a regular file"):
        read_file(tmp_path / "fifo", 10, trusted=True)


def test_nothing_outside_the_group_opens_the_tree_or_blocks_the_lock() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        with StateStore(d).transaction() as graph:  # a root transaction writes the layout's modes, as init-state
            graph.jobs["r"] = Job.queued("r", user="root", host="lab1", nproc=1, seq=0, submitted_at=0.0, request={},
                                         name="r", uid=0, launcher_pid=os.getpid(), launcher_start_time=0.0)
        modes = {n: stat.S_IMODE(os.stat(d / n).st_mode) for n in ("", "jobs", "state.lock", "state.json", "jobs/r.json")}
        assert modes == {"": 0o3770, "jobs": 0o3770, "state.lock": 0o660, "state.json": 0o660, "jobs/r.json": 0o640}
        tried = last_json(run_as(OUTSIDER, """
            out = {}
            for what, attempt in (("open lock", lambda: os.open(Path(args["d"]) / "state.lock", os.O_RDONLY)),
                                  ("list", lambda: os.listdir(args["d"])),
                                  ("read job", lambda: open(Path(args["d"]) / "jobs" / "r.json").read())):
                try:
                    attempt()
                    out[what] = "done"
                except OSError as e:
                    out[what] = type(e).__name__
            print(json.dumps(out))
            """, {"d": str(d)}, gid=OUTSIDER_GID))
        assert tried == {"open lock": "PermissionError", "list": "PermissionError", "read job": "PermissionError"}
    finally:
        remove(d)


def test_a_lock_held_for_ever_by_a_member_is_named() -> None:
    require_root()
    d = shared_dir()
    holder = None
    try:
        init_state(d, GID)
        holder = start_as(MALLORY, """
            fd = os.open(Path(args["d"]) / "state.lock", os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("ready", flush=True)
            sys.stdin.read()
            """, {"d": str(d)}, imports="import fcntl")
        assert holder.stdout.readline().strip() == "ready", holder.stderr.read()
        with pytest.raises(StateError) as e:
            StateStore(d, lock_timeout_s=0.3).read()
        assert f"held by pid {holder.pid} (uid {MALLORY}: " in str(e.value)
    finally:
        if holder is not None:
            holder.stdin.close()
            holder.wait(timeout=30)
        remove(d)


def test_init_state_takes_an_old_layout_away_from_outsiders() -> None:
    require_root()
    d = shared_dir(0o3775)
    try:
        init_state(d, GID)
        for name, mode in (("", 0o3775), ("jobs", 0o3775), ("history", 0o3775), ("state.lock", 0o664),
                           ("state.json", 0o664), ("gnn", 0o755)):
            os.chmod(d / name, mode)
        run_as(MALLORY, """
            p = Path(args["d"]) / "jobs" / "old.json"
            p.write_text("{}")
            p.chmod(0o644)
            """, {"d": str(d)})
        lines = init_state(d, GID)
        assert f"fixed {d}: mode 3775 -> 3770" in lines and f"fixed {d}/state.lock: mode 664 -> 660" in lines
        assert f"fixed 1 entry in {d}/jobs/: no access for users outside the group" in lines
        every = [d, *d.rglob("*")]
        assert [p for p in every if os.lstat(p).st_mode & 0o007] == []
        assert init_state(d, GID) == []  # repaired: nothing left to change
    finally:
        remove(d)


def test_a_member_who_fills_jobs_with_files_costs_nobody_more_than_a_bound(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    with store.transaction() as graph:
        graph.jobs["mine"] = Job.queued("mine", user="root", host="h", nproc=1, seq=0, submitted_at=0.0, request={},
                                        name="m", uid=os.geteuid(), launcher_pid=os.getpid(), launcher_start_time=0.0)
    doc = json.loads((tmp_path / "jobs" / "mine.json").read_text())
    for i in range(MAX_JOB_FILES_PER_UID + 50):
        doc["job"]["id"] = f"junk{i:04d}"
        (tmp_path / "jobs" / f"junk{i:04d}.json").write_text(json.dumps(doc))
    graph = StateStore(tmp_path).read()
    assert len(graph.jobs) == MAX_JOB_FILES_PER_UID
    surplus = [i for i in graph.ignored.values() if "more files of uid" in i.id]
    assert [s.reason for s in surplus] == [f"over the {MAX_JOB_FILES_PER_UID} job files one uid may have; not read"]
