"""Issue 11, items 1 and 7: members share simulated GPUs in the admin's sticky layout, caps go through the root
agent, and the simulated backend's files are never opened through a link a member planted.

Real second and third uids (``nobody``, and a uid without an account, both in the lab's group) use one simulated
machine; root runs the cap agent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ecolaunch.caps.agent import CapAgent
from ecolaunch.caps.ledger import load_ledger
from ecolaunch.admin.rules import parse_rules
from ecolaunch.devices.select import open_backend, simulated_privilege
from ecolaunch.errors import DeviceError
from ecolaunch.state.layout import init_state
from ecolaunch.state.store import StateStore
from ecolaunch.statedir import LEDGER_FILE, SIM_GPUS_FILE
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir, start_as

SPEC = "4xA100-SXM4-80GB"
POLICY = '[caps."A100-SXM4-80GB"]\nmin_w = 250\nmax_w = 350\n[agent]\ngpus = [0, 1]\n'
IMPORTS = """
from ecolaunch.caps.keeper import apply_caps_as_launcher
from ecolaunch.admin.rules import parse_rules
from ecolaunch.devices.select import open_backend, simulated_privilege
from ecolaunch.errors import PermissionDenied
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
"""

FIRST = """
d = Path(args["d"])
b = open_backend(args["spec"], d)
u = b.gpus()[0].uuid
b.attach(u, os.getpid(), 1000)
me, store = os.getpid(), StateStore(d)
with store.transaction() as g:  # a job of mine on GPU 0 that wants a cap, as a launcher records it
    g.jobs["m"] = Job(id="m", uid=os.getuid(), user="nobody", host=b.hostname(), launcher_pid=me,
                      launcher_start_time=process_start_time(me), nproc=1, name="x", seq=0, submitted_at=0.0,
                      state=JobState.RUNNING, gpus=[u], power_caps_w={u: 300.0}, started_at=1.0)
try:
    apply_caps_as_launcher(store, b, parse_rules(args["policy"])[0], host=b.hostname())
    applied = "applied"
except PermissionDenied:
    applied = "PermissionDenied"
print(json.dumps([simulated_privilege(d), applied, b.gpus()[0].power_limit_w]), flush=True)
sys.stdin.read()
"""

SECOND = """
b = open_backend(args["spec"], Path(args["d"]))
gpus = b.gpus()
b.attach(gpus[1].uuid, os.getpid(), 2000)  # the first member owns the state file: rewritten in place
print(json.dumps([simulated_privilege(Path(args["d"])), [p.memory_mib for p in gpus[0].processes],
                  [p.memory_mib for p in b.gpus()[1].processes]]))
"""


def test_members_share_simulated_gpus_and_their_caps_go_through_the_root_agent() -> None:
    require_root()
    d = shared_dir()
    first = None
    try:
        init_state(d, GID)
        first = start_as(MALLORY, FIRST, {"d": str(d), "spec": SPEC, "policy": POLICY}, imports=IMPORTS)
        line = first.stdout.readline()
        assert json.loads(line) == [False, "PermissionDenied", 400.0], line + first.stderr.read()
        assert not (d / LEDGER_FILE).exists()  # the member wrote no ledger of its own
        assert (d / SIM_GPUS_FILE).stat().st_uid == MALLORY
        out = last_json(run_as(ALICE, SECOND, {"d": str(d), "spec": SPEC}, imports=IMPORTS))
        assert out == [False, [1000], [2000]]
        root_backend = open_backend(SPEC, d)
        assert simulated_privilege(d)  # root
        agent = CapAgent(StateStore(d), root_backend, parse_rules(POLICY)[0])
        agent.step()
        assert root_backend.gpus()[0].power_limit_w == 300.0  # the agent applies the member's wish
        assert load_ledger(d / LEDGER_FILE, root_backend.hostname()) == {root_backend.gpus()[0].uuid: 400.0}
        first.stdin.close()
        first.wait(30)
        first = None
        agent.step()
        assert root_backend.gpus()[0].power_limit_w == 400.0  # and restores it when the member's job is gone
    finally:
        if first is not None:
            first.kill()
        remove(d)


@pytest.mark.parametrize("planted", [SIM_GPUS_FILE + ".lock", SIM_GPUS_FILE])
def test_root_never_follows_a_link_planted_for_the_simulated_backend(planted: str, tmp_path: Path) -> None:
    require_root()
    d = shared_dir(0o2775)  # not sticky, as a directory of an older layout
    victim = tmp_path / "etc"
    victim.mkdir()
    target = victim / "created-by-root"
    try:
        run_as(MALLORY, 'os.symlink(args["target"], Path(args["d"]) / args["name"])',
               {"d": str(d), "target": str(target), "name": planted})
        backend = open_backend(SPEC, d)
        if planted.endswith(".lock"):
            with pytest.raises(DeviceError, match="symbolic link"):
                backend.gpus()
        else:
            assert len(backend.gpus()) == 4  # the link is not read; the state is rebuilt, written as a file
            assert not (d / planted).is_symlink()
        assert not target.exists() and list(victim.iterdir()) == []
    finally:
        remove(d)

