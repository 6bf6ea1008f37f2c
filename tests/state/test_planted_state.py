"""Issue 11, item 6: a ``state.json`` planted by a member (a directory, or a file only they may write) stops nobody.

A real second uid (``nobody``) plants it in a sticky, group-shared state directory that has none yet; a third
uid (a uid without an account) then queues and places a job, and root's next transaction moves the plant aside.
"""

from __future__ import annotations

import json
import os

import pytest

from ecolaunch.state.store import StateStore
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir

LAUNCH = """
import logging
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
spec = parse_spec("2xA100-SXM4-80GB", hostname="lab1").hosts[0]
d = Path(args["d"])
s = Session(StateStore(d), SimulatedBackend(spec, d / "sim.json", privileged=False), ExclusivePolicy(), Rules(),
            clock=VirtualClock())
me = Launcher(os.getpid(), process_start_time(os.getpid()), os.getuid(), "alice")
for _ in range(2):  # twice: the second transaction must not repeat the warnings
    jid = "j%d" % _
    s.submit(JobRequest(id=jid, user="alice", host="lab1", nproc=1), me, name=jid, info={})
    placed = s.try_place(jid)
print(json.dumps([type(placed).__name__, sorted(s.snapshot().jobs)]))
"""
IMPORTS = """
from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
"""


@pytest.mark.parametrize("plant", [
    'os.mkdir(Path(args["d"]) / "state.json")',
    'p = Path(args["d"]) / "state.json"; p.write_text("garbage"); os.chmod(p, 0o644)',
    'p = Path(args["d"]) / "state.json"; p.write_text("{}"); os.chmod(p, 0o600)',
], ids=["directory", "file-0644", "file-0600"])
def test_a_planted_state_file_stops_no_other_member(plant: str, caplog) -> None:
    require_root()
    d = shared_dir()
    try:
        for name in ("jobs", "state.lock"):  # the review's layout: jobs/ and the lock pre-created, state.json not
            (d / name).mkdir(mode=0o3775) if name == "jobs" else (d / name).touch(mode=0o664)
            os.chown(d / name, 0, GID)
            os.chmod(d / name, 0o3775 if name == "jobs" else 0o664)
        run_as(MALLORY, plant, {"d": str(d)})
        out = run_as(ALICE, LAUNCH, {"d": str(d)}, imports=IMPORTS)
        assert last_json(out) == ["Placement", ["j0", "j1"]], out.stderr
        assert "moved it to" not in out.stderr and "Traceback" not in out.stderr
        assert out.stderr.count("cannot be moved aside") == 1, out.stderr  # said once, not at every poll
        # root may move another user's file: its next transaction does, and says so
        with StateStore(d).transaction() as graph:
            assert sorted(graph.jobs) == ["j0", "j1"]
            graph.next_seq += 1
        assert "moved it to" in caplog.text and list(d.glob("state.json.corrupt-*"))
        assert json.loads((d / "state.json").read_text())["schema"] == "ecolaunch.state"
    finally:
        remove(d)
