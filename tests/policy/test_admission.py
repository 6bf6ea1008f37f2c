"""Issue 11, item 4: the admin rules hold after any policy decides, for the user the kernel says is launching.

The review's two bypasses, each run as a real second uid (``nobody``): the ``gnn`` policy placing a second job
past ``[users."*"] max_gpus``, and ``LOGNAME=alice`` getting alice's reserved GPU. Then :func:`admit` itself
against a policy that ignores every rule.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ecolaunch.admin.rules import Rules, parse_rules
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.policy.admission import admit
from ecolaunch.policy.base import Decision, JobRequest
from ecolaunch.state.graph import GpuNode, Host, Job, JobState, StateGraph
from ecolaunch.state.layout import init_state
from tests.multiuser import GID, MALLORY, last_json, remove, require_root, run_as, shared_dir

HOST = "lab1"

# everything the session needs, loaded (and the GNN run once, on a scratch directory) before the drop
WARM = """
import tempfile
from ecolaunch.admin.rules import parse_rules
from ecolaunch.runtime import current_groups, current_user
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.errors import NeverFits
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
SPEC = parse_spec("4xA100-SXM4-80GB", hostname="lab1").hosts[0]
def session(d, policy, rules):
    return Session(StateStore(Path(d)), SimulatedBackend(SPEC, Path(d) / "sim.json", privileged=False),
                   get_policy(policy), rules, clock=VirtualClock())
_scratch = tempfile.mkdtemp()
session(_scratch, "gnn", parse_rules("")[0]).preview(JobRequest(id="warm", user="w", host="lab1", nproc=1))
"""


def test_the_gnn_policy_keeps_the_per_user_gpu_limit() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        out = last_json(run_as(MALLORY, """
            rules = parse_rules('[users."*"]\\nmax_gpus = 1\\n')[0]
            s = session(args["d"], "gnn", rules)
            me = Launcher(os.getpid(), process_start_time(os.getpid()), os.getuid(), current_user())
            got = []
            for jid in ("first", "second"):
                req = JobRequest(id=jid, user=current_user(), groups=current_groups(), host="lab1", nproc=1)
                s.submit(req, me, name=jid, info={})
                got.append("placed" if isinstance(s.try_place(jid), Placement) else "waits")
            print(json.dumps(got))
            """, {"d": str(d)}, imports=WARM))
        assert out == ["placed", "waits"]
    finally:
        remove(d)


def test_logname_does_not_make_a_member_someone_else() -> None:
    require_root()
    d = shared_dir()
    try:
        init_state(d, GID)
        out = last_json(run_as(MALLORY, """
            rules = parse_rules('[reserve.0]\\nusers = ["alice"]\\n')[0]
            s = session(args["d"], "exclusive", rules)
            me = Launcher(os.getpid(), process_start_time(os.getpid()), os.getuid(), current_user())
            req = JobRequest(id="all4", user=current_user(), groups=current_groups(), host="lab1", nproc=4)
            try:
                s.submit(req, me, name="all4", info={})
                result = "submitted"
            except NeverFits as e:
                result = str(e)
            print(json.dumps([current_user(), result]))
            """, {"d": str(d)}, imports=WARM, env={"LOGNAME": "alice", "USER": "alice"}))
        assert out == ["nobody", "job asks for 4 GPU(s) and can never fit: the host has 4 GPU(s), 3 of them usable by "
                                 "user 'nobody'"]
    finally:
        remove(d)


# --- admit() against a policy that ignores every rule ----------------------------------------------------
def _state(jobs: dict[str, Job] | None = None) -> StateGraph:
    host = Host(HOST, {f"G{i}": GpuNode(f"G{i}", i, "NVIDIA A100-SXM4-80GB", 81920, power_limit_min_w=100.0,
                                        power_limit_max_w=400.0, power_limit_w=400.0) for i in range(4)})
    return StateGraph(hosts={HOST: host}, jobs=jobs or {})


def _running(jid: str, user: str, gpus: list[str]) -> Job:
    return Job(id=jid, uid=1, user=user, host=HOST, launcher_pid=1, launcher_start_time=0.0, nproc=len(gpus), name="x",
               seq=0, submitted_at=0.0, state=JobState.RUNNING, gpus=gpus, request={"memory_mib": 40000})


def _decision(gpus: list[str], caps: dict | None = None) -> Decision:
    return Decision("rogue", tuple(gpus), caps or {u: None for u in gpus}, {u: [] for u in gpus}, ["rogue"])


def test_admit_refuses_what_any_policy_may_not_do() -> None:
    rules = parse_rules('[reserve.0]\nusers = ["alice"]\n[users.bob]\nmax_gpus = 2\n[colocation]\nmax_jobs_per_gpu = 2\n'
                        '[caps."A100-SXM4-80GB"]\nmin_w = 200\nmax_w = 300\n')[0]
    bob = JobRequest(id="n", user="bob", host=HOST, nproc=1, memory_mib=10000)
    state = _state({"b1": _running("b1", "bob", ["G1"]), "x": _running("x", "carol", ["G2"]),
                    "y": _running("y", "dave", ["G2"])})
    assert admit(state, bob, rules, _decision(["G0"])) is None  # alice's reserved GPU
    assert admit(state, bob, rules, _decision(["G2"])) is None  # already runs max_jobs_per_gpu jobs
    assert admit(state, bob, rules, _decision(["G3", "G1"])) is None  # 2 GPUs for a 1-GPU job
    assert admit(state, JobRequest(id="m", user="bob", host=HOST, nproc=2), rules, _decision(["G3", "G1"])) is None
    ok = admit(state, bob, rules, _decision(["G3"], {"G3": 50.0}))  # a cap below the admin's bounds is clipped
    assert ok is not None and ok.power_caps_w == {"G3": 200.0}
    shared = admit(state, bob, rules, _decision(["G1"], {"G1": 250.0}))  # a newcomer does not cap a colleague
    assert shared is not None and shared.power_caps_w == {"G1": None}
    assert admit(state, bob, Rules(allow_colocation=False), _decision(["G1"])) is None
    assert admit(state, JobRequest(id="a", user="alice", host=HOST, nproc=1), rules, _decision(["G0"])) is not None


def test_the_session_admits_what_any_policy_decides(tmp_path: Path) -> None:
    """A policy that ignores the reservations gets nothing booked: the session passes it through admit()."""
    from ecolaunch.launch.session import Session
    from ecolaunch.state.store import StateStore

    class Rogue:
        name = "rogue"

        def decide(self, state, job, rules):
            return _decision([min(state.hosts[job.host].gpus.values(), key=lambda g: g.index).uuid])

    spec = parse_spec("2xA100-SXM4-80GB", hostname=HOST).hosts[0]
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    s = Session(StateStore(d), SimulatedBackend(spec, d / "sim.json"), Rogue(), parse_rules('[reserve.0]\nusers = ["alice"]\n')[0])
    assert s.preview(JobRequest(id="p", user="bob", host=HOST, nproc=1))[0] is None
    assert s.preview(JobRequest(id="p", user="alice", host=HOST, nproc=1))[0] is not None
