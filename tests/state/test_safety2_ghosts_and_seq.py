"""Issue 17, items 3, 4 and 13 (corrupt copies): what one member's files can no longer do to everyone's launches.

A real second uid (``nobody``, "mallory") plants job files and rewrites the group-writable ``state.json``, as the
review did; a third real uid ("alice", a uid without an account) then launches through the real :class:`Session`,
and root reads the state, as ``ecolaunch status`` does:

* item 3: a running job of "another host" with a dead pid and every GPU of this host, and a queued one of that host
  with ``seq`` 0, blocked every launch (exit 75 on an idle machine); now the first is set aside and flagged, and the
  second waits in its own host's queue;
* item 4: a job ``seq`` of 2**53, or ``next_seq`` 2**60 in ``state.json``, made every later launch fail; now both
  are refused, the counter is rebuilt (and saturates at ``MAX_SEQ``), and a launch whose job vanishes anyway
  leaves no job file behind;
* item 13: each corruption of ``state.json`` left a root-owned copy; now at most ``KEEP_CORRUPT_COPIES`` are kept.
"""

from __future__ import annotations

import json
import os

from ecolaunch.devices.select import open_backend
from ecolaunch.state.graph import MAX_SEQ
from ecolaunch.state.layout import init_state
from ecolaunch.state.store import CORRUPT_PREFIX, KEEP_CORRUPT_COPIES, StateStore
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir

SPEC = "4xA100-SXM4-80GB"

IMPORTS = """
from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.select import open_backend
from ecolaunch.errors import EcolaunchError, StateError
from ecolaunch.launch.session import Launcher, Session, Placement
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
"""

#: mallory's own job files, written through the store as any member can (her uid, her file)
PLANT = """
d = Path(args["d"])
def job(jid, **kw):
    base = dict(id=jid, uid=os.getuid(), user="mallory", host=args["host"], launcher_pid=os.getpid(),
                launcher_start_time=process_start_time(os.getpid()), nproc=1, name="x", seq=0, submitted_at=0.0)
    base.update(kw)
    return Job(**base)
with StateStore(d).transaction() as g:
    for spec in args["jobs"]:
        if spec.pop("running", False):
            spec.update(state=JobState.RUNNING, started_at=1.0)
        jid = spec.pop("id")
        g.jobs[jid] = job(jid, **spec)
for name, value in args.get("raw_seq", {}).items():  # a seq the Job type would not write: edit the file itself
    p = d / "jobs" / (name + ".json")
    doc = json.loads(p.read_text())
    doc["job"]["seq"] = value
    p.write_text(json.dumps(doc))
"""

#: alice's launches: each job submitted, then placed (wait 0: the head of an idle machine's queue is placed at once)
LAUNCH = """
d = Path(args["d"])
s = Session(StateStore(d), open_backend(args["spec"], d), ExclusivePolicy(), Rules(), clock=VirtualClock())
me = Launcher(os.getpid(), process_start_time(os.getpid()), os.getuid(), str(os.getuid()))
out = []
for jid, nproc in args["jobs"]:
    job = s.submit(JobRequest(id=jid, user=me.user, host=s.host, nproc=nproc), me, name=jid, info={})
    try:
        placed = s.wait_for_placement(jid, 0)
        out.append([jid, job.seq, len(placed.job.gpus)])
    except EcolaunchError as e:
        out.append([jid, job.seq, type(e).__name__])
graph = s.snapshot()
print(json.dumps({"placed": out, "ignored": sorted(graph.ignored), "files": sorted(os.listdir(d / "jobs"))}))
"""


def _setup():
    d = shared_dir()
    init_state(d, GID)
    backend = open_backend(SPEC, d)
    return d, backend, [g.uuid for g in backend.gpus()]


def test_a_ghost_job_of_another_host_blocks_no_launch_and_status_flags_it() -> None:
    require_root()
    d, backend, uuids = _setup()
    try:
        # a dead pid (the planting process exits), another host, every GPU of this host; and that host's queue head
        run_as(MALLORY, PLANT, {"d": str(d), "host": "elsewhere", "jobs": [
            {"id": "ghost", "running": True, "gpus": uuids, "nproc": 4},
            {"id": "ghostq", "seq": 0},
        ]}, imports=IMPORTS)
        out = run_as(ALICE, LAUNCH, {"d": str(d), "spec": SPEC, "jobs": [["a1", 4]]}, imports=IMPORTS)
        result = last_json(out)
        assert result["placed"] == [["a1", 1, 4]], out.stderr  # all four GPUs, at once: nothing counted the ghost
        assert result["ignored"] == ["ghost"]
        assert "Traceback" not in out.stderr
        # the ghost's file stays (it is mallory's, and another host's job is legitimate in form) and is flagged
        assert {"ghost.json", "ghostq.json"} <= set(os.listdir(d / "jobs"))
        from ecolaunch.cli.hostview import status_doc
        from ecolaunch.cli.status_cmd import _render
        from ecolaunch.config import Environment
        from ecolaunch.launch.session import Session
        from ecolaunch.admin.rules import Rules
        from ecolaunch.policy.baselines import ExclusivePolicy

        session = Session(StateStore(d), backend, ExclusivePolicy(), Rules())
        graph = session.snapshot()
        doc = status_doc(graph, session.host, backend.kind, Environment(state_dir=d, simulate=SPEC, policy_file=d / "none.toml"))
        assert [(i["id"], i["host"]) for i in doc["ignored"]] == [("ghost", "elsewhere")]
        assert doc["queue"] == [] and all(g["jobs"] == [] for g in doc["gpus"])
        text = _render(doc)
        assert ("warning: ignoring job file jobs/ghost.json (nobody on host elsewhere): claims host 'elsewhere' "
                "but names GPU 0, 1, 2, 3 of " + session.host) in text, text
        # another host's own queue is still its own: the ghost's queued job keeps its place there
        assert [j.id for j in graph.queued_jobs("elsewhere")] == ["ghostq"]
    finally:
        remove(d)


def test_one_number_stops_no_launch_and_a_failed_launch_leaves_no_file() -> None:
    require_root()
    d, _backend, _ = _setup()
    try:
        # a queued job of mallory's at seq 2**53 (refused), one at the bound itself (valid: the counter saturates),
        # and next_seq 2**60 written into the group-writable state.json
        run_as(MALLORY, PLANT, {"d": str(d), "host": "elsewhere", "jobs": [{"id": "huge"}, {"id": "atbound"}],
                                "raw_seq": {"huge": 2**53, "atbound": MAX_SEQ}}, imports=IMPORTS)
        run_as(MALLORY, """
            p = Path(args["d"]) / "state.json"
            doc = json.loads(p.read_text()); doc["next_seq"] = 2**60
            with open(p, "r+") as f:  # rewritten in place, as any member may
                f.write(json.dumps(doc)); f.truncate()
            """, {"d": str(d)})
        out = run_as(ALICE, LAUNCH, {"d": str(d), "spec": SPEC, "jobs": [["a1", 1], ["a2", 1]]}, imports=IMPORTS)
        result = last_json(out)
        assert result["placed"] == [["a1", MAX_SEQ, 1], ["a2", MAX_SEQ, 1]], out.stderr
        assert result["ignored"] == ["huge"]
        assert "queue counter is at its bound" in out.stderr and "vanished" not in out.stderr
        # root's next read moves the bad counter aside and keeps the counter within the bound
        graph = StateStore(d).read()
        assert graph.next_seq == MAX_SEQ and "refused" in graph.ignored["huge"].reason
        assert json.loads((d / "state.json").read_text())["next_seq"] <= MAX_SEQ
        # a launch whose own job vanishes from the graph while queued (its file no longer valid) removes its file
        out = run_as(ALICE, """
            d = Path(args["d"])
            s = Session(StateStore(d), open_backend(args["spec"], d), ExclusivePolicy(), Rules(), clock=VirtualClock())
            me = Launcher(os.getpid(), process_start_time(os.getpid()), os.getuid(), str(os.getuid()))
            s.submit(JobRequest(id="lost", user=me.user, host=s.host, nproc=1), me, name="lost", info={})
            p = d / "jobs" / "lost.json"
            doc = json.loads(p.read_text()); doc["job"]["seq"] = 2**53; p.write_text(json.dumps(doc))
            try:
                s.wait_for_placement("lost", None)
            except StateError as e:
                print(json.dumps([str(e), p.exists()]))
            """, {"d": str(d), "spec": SPEC}, imports=IMPORTS)
        assert last_json(out) == ["job lost vanished from the state graph while queued", False], out.stderr
    finally:
        remove(d)


def test_corrupting_state_json_again_and_again_keeps_few_copies() -> None:
    require_root()
    d, _backend, _ = _setup()
    try:
        for k in range(KEEP_CORRUPT_COPIES + 3):
            run_as(MALLORY, """
                with open(Path(args["d"]) / "state.json", "r+") as f:  # the root-owned, group-writable file
                    f.write("x" * (1 << 20) + str(args["k"])); f.truncate()
                """, {"d": str(d), "k": k})
            with StateStore(d).transaction() as graph:  # root's transaction moves it aside and writes a new one
                graph.next_seq += 1
        copies = sorted(p for p in d.iterdir() if p.name.startswith(CORRUPT_PREFIX))
        assert len(copies) == KEEP_CORRUPT_COPIES, copies
        assert all(p.stat().st_uid == 0 for p in copies)
        kept = sorted(p.read_text()[-1] for p in copies)
        assert kept == [str(k) for k in range(3, KEEP_CORRUPT_COPIES + 3)]  # the newest ones
        # and nobody is stopped: alice's launch is placed on the rebuilt state
        out = run_as(ALICE, LAUNCH, {"d": str(d), "spec": SPEC, "jobs": [["a1", 1]]}, imports=IMPORTS)
        assert last_json(out)["placed"][0][2] == 1, out.stderr
    finally:
        remove(d)
