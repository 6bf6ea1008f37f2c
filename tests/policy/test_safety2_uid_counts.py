"""Issue 17, items 7 and 8: a job counts as the uid that owns its file, and a request over max_gpus fails at once.

A real second uid (``nobody``, "mallory") writes running job files of her own with a live launcher of hers, as the
review did: one claiming ``"user": "alice"``, one renamed to ``"bob"``, and a booking of every GPU that never went
through admission. A third real uid ("alice", a uid without an account, so named by its number) then launches
through the real :class:`Session` under the admin's rules. For item 8, mallory runs the real CLI with
``--nproc-per-node 2`` under ``max_gpus = 1``; root's launch behind her is not blocked.
"""

from __future__ import annotations

import subprocess

import pytest

from ecolaunch.devices.select import open_backend
from ecolaunch.state.layout import init_state
from ecolaunch.state.store import StateStore
from tests.conftest import BIN, clean_env, ecolaunch_cmd
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir, start_as

SPEC = "4xA100-SXM4-80GB"
ALICE_NAME = str(ALICE)  # a uid without an account is named by its number (runtime.current_user)

IMPORTS = """
from ecolaunch.admin.rules import parse_rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.select import open_backend
from ecolaunch.errors import EcolaunchError
from ecolaunch.launch.session import Launcher, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
"""

#: mallory's running job files with a live pid of hers; she stays alive until stdin closes
FORGE = """
me, d = os.getpid(), Path(args["d"])
with StateStore(d).transaction() as g:
    for jid, user, gpus in args["jobs"]:
        g.jobs[jid] = Job(id=jid, uid=os.getuid(), user=user, host=args["host"], launcher_pid=me,
                          launcher_start_time=process_start_time(me), nproc=len(gpus), name="x", seq=0,
                          submitted_at=0.0, state=JobState.RUNNING, gpus=gpus, started_at=1.0)
print("ready", flush=True)
sys.stdin.read()
"""

#: one launch of ``nproc`` GPUs under the policy text, placed at once or not (wait 0)
LAUNCH = """
d = Path(args["d"])
rules = parse_rules(args["policy"])[0]
s = Session(StateStore(d), open_backend(args["spec"], d), ExclusivePolicy(), rules, clock=VirtualClock())
import pwd
try:
    name = pwd.getpwuid(os.getuid()).pw_name
except KeyError:
    name = str(os.getuid())
me = Launcher(os.getpid(), process_start_time(os.getpid()), os.getuid(), name)
s.submit(JobRequest(id=args["id"], user=name, host=s.host, nproc=args["nproc"]), me, name="x", info={})
try:
    placed = s.wait_for_placement(args["id"], 0)
    outcome = sorted(s.snapshot().hosts[s.host].gpus[u].index for u in placed.job.gpus)
except EcolaunchError as e:
    outcome = type(e).__name__
graph = s.snapshot()
print(json.dumps({"outcome": outcome, "ignored": {k: v.reason for k, v in graph.ignored.items()},
                  "users": {k: j.user for k, j in graph.jobs.items() if k != args["id"]}}))
"""


def _launch(uid: int, d, policy: str, jid: str, nproc: int = 1) -> dict:
    out = run_as(uid, LAUNCH, {"d": str(d), "spec": SPEC, "policy": policy, "id": jid, "nproc": nproc},
                 imports=IMPORTS)
    assert "Traceback" not in out.stderr, out.stderr
    return last_json(out)


def _forge(d, host: str, jobs: list) -> subprocess.Popen:
    forger = start_as(MALLORY, FORGE, {"d": str(d), "host": host, "jobs": jobs}, imports=IMPORTS)
    assert forger.stdout.readline().strip() == "ready", forger.stderr.read()
    return forger


def _stop(forger: subprocess.Popen | None) -> None:
    if forger is not None:
        forger.stdin.close()
        forger.wait(30)


def test_the_user_field_is_display_only_limits_count_the_files_owner() -> None:
    require_root()
    d = shared_dir()
    forger = None
    policy = '[users."*"]\nmax_gpus = 1\n'
    try:
        init_state(d, GID)
        backend = open_backend(SPEC, d)
        u = [g.uuid for g in backend.gpus()]
        # "alice"'s job on GPU 1, really mallory's; and mallory's job on GPU 2 renamed to bob
        forger = _forge(d, backend.hostname(), [["forged", ALICE_NAME, [u[1]]]])
        seen = _launch(ALICE, d, policy, "a1")
        assert seen["outcome"] == [0], seen  # alice's one GPU: the forged job used none of her limit
        assert seen["users"] == {"forged": "nobody"}  # the file's owner, whatever it claims
        _stop(forger)
        forger = _forge(d, backend.hostname(), [["renamed", "bob", [u[2]]]])
        # mallory already holds one GPU (her limit) under bob's name: a second one waits, it is not granted
        seen = _launch(MALLORY, d, policy, "m2")
        assert seen["outcome"] == "NoPlacement", seen
        assert seen["users"]["renamed"] == "nobody"
    finally:
        _stop(forger)
        remove(d)


@pytest.mark.parametrize("policy", [
    f'[reserve.0]\nusers = ["{ALICE_NAME}"]\n',
    '[users."*"]\nmax_gpus = 1\n',
], ids=["reservation", "max_gpus"])
def test_a_booking_that_never_went_through_admission_holds_nothing(policy: str) -> None:
    require_root()
    d = shared_dir()
    forger = None
    try:
        init_state(d, GID)
        backend = open_backend(SPEC, d)
        u = [g.uuid for g in backend.gpus()]
        forger = _forge(d, backend.hostname(), [["grab", "nobody", u]])  # every GPU, reserved one included
        seen = _launch(ALICE, d, policy, "a1")
        assert seen["outcome"] == [0], seen  # GPU 0 (reserved for alice, or simply the first free one)
        assert list(seen["ignored"]) == ["grab"]
        assert "never admitted" in seen["ignored"]["grab"]
        assert ("reserved" if "reserve" in policy else "max_gpus") in seen["ignored"]["grab"]
        # root's transaction leaves mallory's file alone (it is set aside, not removed) while her launcher lives
        assert "grab" in StateStore(d).read().jobs and (d / "jobs" / "grab.json").exists()
    finally:
        _stop(forger)
        remove(d)


#: mallory runs the real CLI in-process (the interpreter's own directory is not hers to read, so she imports first)
CLI = """
from ecolaunch.cli.main import main
sys.argv = ["ecolaunch"] + args["argv"]
try:
    main(args["argv"])
except SystemExit as e:
    print(json.dumps({"exit": e.code, "jobs": sorted(os.listdir(Path(args["d"]) / "jobs"))}))
"""
CLI_IMPORTS = """
import ecolaunch.cli.main, ecolaunch.cli.launch_cmd, ecolaunch.launch.pipeline, ecolaunch.launch.torchrun
import ecolaunch.runtime, ecolaunch.sim.reading, ecolaunch.devices.select, ecolaunch.policy.curve
import ecolaunch.caps.job, ecolaunch.profile.history, ecolaunch.profile.modes, ecolaunch.run.observer
import ecolaunch.policy.registry, ecolaunch.policy.gnn, ecolaunch.admin.rules, ecolaunch.launch.argv
import torch.distributed.run
"""


def test_a_request_over_max_gpus_fails_before_it_is_queued_and_blocks_nobody() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        policy = d / "policy.toml"
        policy.write_text('[users."*"]\nmax_gpus = 1\n')
        env = {"ECOLAUNCH_SIMULATE": SPEC, "ECOLAUNCH_STATE_DIR": str(d), "ECOLAUNCH_POLICY": str(policy)}
        out = run_as(MALLORY, CLI, {"d": str(d), "argv": ["--nproc-per-node", "2", "--wait-timeout", "30",
                                                         str(BIN / "env_dump.py"), str(d)]},
                     imports=CLI_IMPORTS, env=env)
        assert last_json(out) == {"exit": 1, "jobs": []}, out.stdout + out.stderr
        errors = [line for line in out.stderr.splitlines() if line.startswith(("Error:", "HINT:"))]
        assert errors[0].startswith("Error: job asks for 2 GPU(s) and can never fit: your limit is 1 GPU"), out.stderr
        assert errors[1].startswith("HINT: lower --nproc-per-node to 1"), out.stderr
        # root's launch right behind her is placed at once (wait 0) on the idle machine
        (d / "dump").mkdir()
        root = subprocess.run(ecolaunch_cmd("--wait-timeout", "0", "--nproc-per-node", "1", str(BIN / "env_dump.py"),
                                            str(d / "dump")), env=clean_env(**env), capture_output=True, text=True,
                              timeout=120)
        assert root.returncode == 0, root.stderr
        assert (d / "dump" / "rank-0.json").exists()
    finally:
        remove(d)
