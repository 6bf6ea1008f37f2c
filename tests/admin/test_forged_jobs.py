"""Issue 11, item 2: a member's own job file cannot throttle a colleague's GPU, nor keep a booking alive.

A real second uid (``nobody``) writes job files of its own through the store, as the review did: one naming the
GPU a root job holds with a 1 W cap and its own live pid, one with launcher pid 1, one on a GPU of its own, and
one that a root job later joined knowingly. The root cap agent's pass must cap only the last two.
"""

from __future__ import annotations

import os

from ecolaunch.caps.agent import CapAgent
from ecolaunch.admin.rules import parse_rules
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.layout import init_state
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir, start_as

HOST = "lab1"
POLICY = '[caps."A100-SXM4-80GB"]\nmin_w = 250\nmax_w = 350\n[agent]\ngpus = [0, 1, 2, 3]\n'

FORGER = """
me = os.getpid()
start = process_start_time(me)
def job(jid, pid, start, gpu, caps):
    return Job(id=jid, uid=os.getuid(), user="mallory", host=args["host"], launcher_pid=pid,
               launcher_start_time=start, nproc=1, name="x", seq=0, submitted_at=0.0, state=JobState.RUNNING,
               gpus=[gpu], power_caps_w=caps, started_at=1.0, decision={"colocated_with": {gpu: []}})
u = args["gpus"]
with StateStore(Path(args["d"])).transaction() as g:
    g.jobs["forged"] = job("forged", me, start, u[0], {u[0]: 1.0})  # bob's GPU, 1 W, a live pid of mine
    g.jobs["pidone"] = job("pidone", 1, process_start_time(1), u[1], {u[1]: 1.0})  # pid 1 never dies
    g.jobs["mine"] = job("mine", me, start, u[2], {u[2]: 260.0})  # a GPU of my own: honest
    g.jobs["first"] = job("first", me, start, u[3], {u[3]: 330.0})  # root's job joins it later, knowingly (330 W: above its 320 W no-curve floor)
print("ready", flush=True)
sys.stdin.read()  # stay alive (a live launcher) until the test closes stdin
"""
IMPORTS = """
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
"""


def _root_job(jid: str, gpu: str, coloc: list[str]) -> Job:
    me = os.getpid()
    return Job(id=jid, uid=0, user="root", host=HOST, launcher_pid=me, launcher_start_time=process_start_time(me),
               nproc=1, name="x", seq=1, submitted_at=0.0, state=JobState.RUNNING, gpus=[gpu], started_at=1.0,
               decision={"colocated_with": {gpu: coloc}})


def test_forged_job_files_cap_nothing_of_a_colleague_and_hold_nothing_with_pid_1() -> None:
    require_root()
    d = shared_dir()
    forger = None
    try:
        init_state(d, GID)
        backend = SimulatedBackend(parse_spec("4xA100-SXM4-80GB", hostname=HOST).hosts[0], d / "sim.json")
        u = [g.uuid for g in backend.gpus()]
        store = StateStore(d)
        with store.transaction() as graph:
            graph.jobs["bob"] = _root_job("bob", u[0], [])  # bob's job, alone on GPU 0, wants no cap
        forger = start_as(MALLORY, FORGER, {"d": str(d), "host": HOST, "gpus": u}, imports=IMPORTS)
        assert forger.stdout.readline().strip() == "ready", forger.stderr.read()
        with store.transaction() as graph:
            graph.jobs["joined"] = _root_job("joined", u[3], ["first"])  # placed after "first", knowing it
        # a second member's transaction may drop the pid-1 booking (its launcher is not the uid's): no StateError
        seen = last_json(run_as(ALICE, """
            from ecolaunch.state.reconcile import PsutilProcessTable, reconcile
            with StateStore(Path(args["d"])).transaction() as g:
                reconcile(g, args["host"], PsutilProcessTable())
                print(json.dumps(sorted(g.jobs)))
            """, {"d": str(d), "host": HOST}, imports=IMPORTS))
        assert seen == ["bob", "first", "forged", "joined", "mine"]
        report = CapAgent(store, backend, parse_rules(POLICY)[0]).step()
        limits = [g.power_limit_w for g in backend.gpus()]
        assert limits == [400.0, 400.0, 260.0, 330.0], report
        assert any("also runs job bob" in why for why in report.ignored)
        assert "pidone" not in store.read().jobs and not (d / "jobs" / "pidone.json").exists()  # root removed it
        # bob's job ends: the forged file is now alone on GPU 0 and is a booking of the forger's like any other,
        # while its launcher lives; the pid-1 one stays gone
        with store.transaction() as graph:
            del graph.jobs["bob"]
        forger.stdin.close()
        forger.wait(30)
        forger = None
        CapAgent(store, backend, parse_rules(POLICY)[0]).step()
        assert [g.power_limit_w for g in backend.gpus()] == [400.0] * 4  # every original restored
        assert sorted(store.read().jobs) == ["joined"]
    finally:
        if forger is not None:
            forger.kill()
        remove(d)
