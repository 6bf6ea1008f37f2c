"""Issue 17, items 5, 6, 9 (the agent), 10 and 11: what a member's job file or ``state.json`` may do to a colleague's
power cap and to the host's power budget, with the member as a real second uid and the keeper as root.

A member process (``MEMBER``) stays alive as its own uid (a live launcher pid) and applies, one JSON line at a time,
edits to its own job files and to ``state.json`` through the store, as a colleague at a shell could.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ecolaunch.caps.agent import CapAgent
from ecolaunch.caps.keeper import CapKeeper, apply_caps_as_launcher
from ecolaunch.admin.rules import parse_rules
from ecolaunch.devices.select import open_backend
from ecolaunch.policy.registry import get_policy
from ecolaunch.caps.limits import budget_ceilings, job_floor_w
from ecolaunch.launch.session import Session
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.layout import init_state
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import REPO, clean_env
from tests.multiuser import ALICE, GID, MALLORY, last_json, remove, require_root, run_as, shared_dir, start_as

SPEC = "4xA100-SXM4-80GB"  # 100-400 W, default 400 W: a job without a curve is never below 320 W (80 %)
#: measured: input-bound, no cap down to 200 W slows it (its floor is low)
FLAT = {"iter_time_s": 0.2, "power_w": 180.0, "memory_mib": 1000,
        "cap_points": [[400.0, 0.2, 180.0], [250.0, 0.2, 179.0], [200.0, 0.2005, 175.0]]}
#: measured: compute-bound, 6 % slower at 300 W, 18 % at 250 W: its floor under a 10 % bound is 285 W
STEEP = {"iter_time_s": 0.1, "power_w": 330.0, "memory_mib": 1000,
         "cap_points": [[400.0, 0.1, 330.0], [300.0, 0.106, 285.0], [250.0, 0.118, 242.0]]}

MEMBER = """
me = os.getpid()
start = process_start_time(me)
print("ready", flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    with StateStore(Path(args["d"])).transaction() as g:
        if "budget_caps_w" in cmd:
            g.budget_caps_w = cmd["budget_caps_w"]
        for jid, spec in cmd.get("jobs", {}).items():
            if spec is None:
                g.jobs.pop(jid, None)
                continue
            g.jobs[jid] = Job(id=jid, uid=os.getuid(), user="member", host=args["host"], launcher_pid=me,
                              launcher_start_time=start, nproc=len(spec["gpus"]), name="x", seq=spec.get("seq", 0),
                              submitted_at=0.0, state=JobState.RUNNING, gpus=spec["gpus"],
                              power_caps_w=spec.get("caps", {}), started_at=1.0, decision=spec.get("decision", {}),
                              profile=profile_from_json(spec["profile"], where=jid) if "profile" in spec else None,
                              request={"allowed_slowdown_pct": 10.0})
    print("ok", flush=True)
"""
IMPORTS = """
from ecolaunch.jobmodel.codec import profile_from_json
from ecolaunch.state.graph import Job, JobState
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
"""


class Member:
    """A live colleague (a real uid) who edits their own job files and ``state.json``."""

    def __init__(self, uid: int, d: Path, host: str) -> None:
        self.proc = start_as(uid, MEMBER, {"d": str(d), "host": host}, imports=IMPORTS)
        assert self.proc.stdout.readline().strip() == "ready", self.proc.stderr.read()

    def do(self, **cmd) -> None:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok", self.proc.stderr.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


def _root_job(jid: str, host: str, gpu: str, caps: dict | None = None, profile: dict | None = None,
              wanted_w: float | None = None, decision: dict | None = None) -> Job:
    me = os.getpid()
    decision = dict(decision or {})
    if wanted_w is not None:
        decision["predicted"] = {"budget": {"wanted_w": {gpu: wanted_w}}}
    return Job(id=jid, uid=0, user="root", host=host, launcher_pid=me, launcher_start_time=process_start_time(me),
               nproc=1, name="x", seq=1, submitted_at=0.0, state=JobState.RUNNING, gpus=[gpu], started_at=1.0,
               power_caps_w=dict(caps or {}), profile=profile, decision=decision,
               request={"allowed_slowdown_pct": 10.0})


@pytest.fixture()
def lab():
    require_root()
    d = shared_dir()
    members: list[Member] = []
    try:
        init_state(d, GID)
        backend = open_backend(SPEC, d)
        yield d, backend, [g.uuid for g in sorted(backend.gpus(), key=lambda g: g.index)], members
    finally:
        for m in members:
            m.proc.kill()
        remove(d)


def _limits(backend) -> list[float]:
    return [g.power_limit_w for g in sorted(backend.gpus(), key=lambda g: g.index)]


def test_a_forged_budget_cap_throttles_no_colleague_and_a_first_launch_has_a_floor(lab) -> None:
    """Item 5: mallory writes budget caps of 100 W into state.json; alice's first launch (no curve) keeps 400 W."""
    d, backend, u, members = lab
    host = backend.hostname()
    rules = parse_rules("[power]\nmax_total_w = 1000\n")[0]
    store = StateStore(d)
    alice = Member(ALICE, d, host)
    members.append(alice)
    alice.do(jobs={"alice": {"gpus": [u[0]]}})  # a first launch: no profile, no curve, no cap
    with store.transaction() as graph:
        graph.jobs["root"] = _root_job("root", host, u[1])
    mallory = Member(MALLORY, d, host)
    members.append(mallory)
    mallory.do(budget_caps_w={u[0]: 100.0, u[1]: 400.0})  # state.json is every member's to write
    assert store.read().budget_caps_w == {u[0]: 100.0, u[1]: 400.0}  # the forgery is really there
    report = CapAgent(store, backend, rules).step()
    assert _limits(backend) == [400.0] * 4, report  # 400 + 400 + 2 x 100 W idle = 1000 W: nothing to lower
    # (read as it stands, the forgery leaves alice's GPU a ceiling of 100 W plus half of the 300 W it frees: 250 W)
    graph = store.read()
    assert graph.budget_caps_w == {u[0]: 100.0, u[1]: 400.0}
    assert budget_ceilings(graph, rules, graph.budget_caps_w)[u[0]] == 250.0
    # alice's launcher follows ceilings it computes from the job files, never the file's copy
    seen = last_json(run_as(ALICE, """
        g = StateStore(Path(args["d"])).read_unlocked()
        rules = parse_rules(args["policy"])[0]
        job = g.jobs["alice"]
        nodes = [g.hosts[job.host].gpus[x] for x in job.gpus]
        print(json.dumps({"ceilings": budget_ceilings(g, rules), "floor": job_floor_w(job, nodes, rules)}))
        """, {"d": str(d), "policy": "[power]\nmax_total_w = 1000\n"}, imports=IMPORTS + """
from ecolaunch.admin.rules import parse_rules
from ecolaunch.caps.limits import budget_ceilings, job_floor_w
"""))
    assert seen["ceilings"][u[0]] >= 400.0 and seen["floor"] == 320.0
    # the next lock holder writes the caps it computed, not the forgery
    Session(store, backend, get_policy("exclusive"), rules).snapshot()
    assert store.read().budget_caps_w == {u[0]: 400.0, u[1]: 400.0}
    # the floor of a job without a curve: the admin's minimum for its model when that is higher
    graph = store.read()
    nodes = [graph.hosts[host].gpus[u[0]]]
    strict = parse_rules('[caps."A100-SXM4-80GB"]\nmin_w = 350\n[power]\nmax_total_w = 1000\n')[0]
    assert job_floor_w(graph.jobs["alice"], nodes, strict) == 350.0
    assert job_floor_w(graph.jobs["root"], nodes, rules) == 320.0


def test_a_cap_that_would_slow_a_co_runner_past_its_bound_is_refused_whenever_written(lab) -> None:
    """Item 6: mallory's job was first on GPU 1; alice's joined knowingly; mallory then asks 100 W there."""
    d, backend, u, members = lab
    host = backend.hostname()
    rules = parse_rules("")[0]
    store = StateStore(d)
    mallory = Member(MALLORY, d, host)
    members.append(mallory)
    mallory.do(jobs={"first": {"gpus": [u[1]]}, "other": {"gpus": [u[2]]}})
    alice = Member(ALICE, d, host)
    members.append(alice)
    alice.do(jobs={"alice": {"gpus": [u[1]], "decision": {"colocated_with": {u[1]: ["first"]}}},  # no curve
                   "steep": {"gpus": [u[2]], "profile": STEEP,
                             "decision": {"colocated_with": {u[2]: ["other"]}}}})
    mallory.do(jobs={"first": {"gpus": [u[1]], "caps": {u[1]: 100.0}},  # after alice joined
                     "other": {"gpus": [u[2]], "caps": {u[2]: 250.0}}})
    agent = CapAgent(store, backend, rules)
    report = agent.step()
    assert _limits(backend)[1:3] == [400.0, 400.0], report
    assert any("would slow job alice" in why and "at least 320 W" in why for why in report.ignored), report.ignored
    assert any("would slow job steep" in why and "at least 285 W" in why for why in report.ignored), report.ignored
    # a cap within the co-runners' bounds is honoured: the rule is the bound, not a blanket refusal
    mallory.do(jobs={"first": {"gpus": [u[1]], "caps": {u[1]: 330.0}},
                     "other": {"gpus": [u[2]], "caps": {u[2]: 290.0}}})
    agent.step()
    assert _limits(backend)[1:3] == [330.0, 290.0]
    alice.stop()
    mallory.stop()
    agent.step()
    assert _limits(backend) == [400.0] * 4


def _host_total_w(backend, busy: set[str]) -> float:
    """The budget's count: a GPU with a job at its limit, an idle one at its minimum limit."""
    return sum(g.power_limit_w if g.uuid in busy else g.power_limit_min_w for g in backend.gpus())


def test_what_the_agent_applies_keeps_the_sum_within_the_budget(lab) -> None:
    """Item 10: three root jobs want 300 W; the budget (1000 W) leaves mallory's job 100 W. Her stopped launcher's
    file then asks 400 W, then no cap, then drops its curve: the agent never holds more than 1000 W."""
    d, backend, u, members = lab
    host = backend.hostname()
    rules = parse_rules("[power]\nmax_total_w = 1000\n")[0]
    store = StateStore(d)
    with store.transaction() as graph:
        for i in range(3):
            graph.jobs[f"r{i}"] = _root_job(f"r{i}", host, u[i], {u[i]: 300.0}, wanted_w=300.0)
    mallory = Member(MALLORY, d, host)
    members.append(mallory)
    honest = {"gpus": [u[3]], "profile": FLAT, "decision": {"predicted": {"budget": {"wanted_w": {u[3]: 400.0}}}}}
    mallory.do(jobs={"m": {**honest, "caps": {u[3]: 100.0}}})
    agent = CapAgent(store, backend, rules)
    agent.step()
    assert _limits(backend) == [300.0, 300.0, 300.0, 100.0]
    busy = set(u)
    for edit in ({**honest, "caps": {u[3]: 400.0}},  # her wish raised past the budget
                 {**honest, "caps": {}},  # no wish: the GPU would go back to its original 400 W
                 {"gpus": [u[3]], "caps": {u[3]: 400.0},  # no curve, wanting 400 W: floors that no longer fit
                  "decision": {"predicted": {"budget": {"wanted_w": {u[3]: 400.0}}}}}):
        mallory.do(jobs={"m": edit})
        report = agent.step()
        assert _host_total_w(backend, busy) <= 1000.0 + 0.5, (edit, _limits(backend), report)
        assert _limits(backend)[:3] == [300.0, 300.0, 300.0]  # the root jobs keep what they were booked
    mallory.stop()
    agent.step()
    assert _limits(backend) == [300.0, 300.0, 300.0, 400.0]  # her GPU is restored when her job is gone


def test_root_without_an_agent_applies_no_members_cap_and_leaves_none_behind(lab) -> None:
    """Item 11: no agent; mallory's live job asks 150 W on GPU 2; root commands (a root launcher's pass, a guard's,
    the orphan keeper of calibrate/status) apply only root's own job's cap, and restore a member's cap they find."""
    d, backend, u, members = lab
    host = backend.hostname()
    rules = parse_rules("")[0]
    store = StateStore(d)
    mallory = Member(MALLORY, d, host)
    members.append(mallory)
    mallory.do(jobs={"m": {"gpus": [u[2]], "caps": {u[2]: 150.0}}})
    with store.transaction() as graph:
        graph.jobs["mine"] = _root_job("mine", host, u[0], {u[0]: 250.0})
    apply_caps_as_launcher(store, backend, rules, host=host)  # a root launcher's pass (calibrate's, through JobCaps)
    assert _limits(backend) == [250.0, 400.0, 400.0, 400.0]
    CapKeeper(backend, d, rules, host=host).pass_over(store)  # a guard's pass
    assert _limits(backend)[2] == 400.0
    # an agent applied her cap, then died: the next root command restores it (no agent is there to take it back
    # when her job ends), while her job still runs
    CapAgent(store, backend, rules).step()
    assert _limits(backend)[2] == 150.0
    with store.transaction() as graph:
        Session(store, backend, get_policy("exclusive"), rules,
                cap_keeper=CapKeeper(backend, d, rules, host=host)).refresh(graph)
    assert _limits(backend) == [250.0, 400.0, 400.0, 400.0]
    with store.transaction() as graph:
        del graph.jobs["mine"]
    apply_caps_as_launcher(store, backend, rules, host=host)  # the root launcher's release
    assert _limits(backend) == [400.0] * 4
    mallory.stop()


# --- item 9: the agent process survives what a member or a full disk does to its ledger -------------------------
def _agent(d: Path, *args: str) -> subprocess.Popen:
    policy = d / "policy-for-the-test.toml"  # no rules: every cap of the board's range
    policy.write_text("")
    env = clean_env(ECOLAUNCH_SIMULATE=SPEC, ECOLAUNCH_STATE_DIR=str(d), ECOLAUNCH_POLICY=str(policy))
    return subprocess.Popen([sys.executable, "-m", "ecolaunch.cli.agent_cmd", "--interval", "0.1", *args], env=env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _stop(agent: subprocess.Popen) -> str:
    agent.send_signal(signal.SIGTERM)
    _, err = agent.communicate(timeout=30)
    assert agent.returncode == 143, err  # 128 + SIGTERM: stopped by the signal, every cap restored
    return err


def test_the_agent_keeps_running_when_a_member_makes_caps_json_a_directory(lab) -> None:
    d, backend, u, members = lab
    run_as(MALLORY, 'os.mkdir(Path(args["d"]) / "caps.json")', {"d": str(d)})
    assert (d / "caps.json").is_dir() and (d / "caps.json").stat().st_uid == MALLORY
    with StateStore(d).transaction() as graph:
        graph.jobs["mine"] = _root_job("mine", backend.hostname(), u[0], {u[0]: 250.0})
    agent = _agent(d)
    try:
        time.sleep(1.5)  # a dozen passes
        assert agent.poll() is None
        assert _limits(backend)[0] == 400.0  # no original could be made durable: nothing changed
        (d / "caps.json").rmdir()  # the admin repairs it (`ecolaunch init-state`)
        _wait(lambda: _limits(backend)[0] == 250.0, 15, "the cap once the ledger can be written")
    finally:
        err = _stop(agent)
    assert err.count("cap pass failed: cannot write the cap ledger") == 1, err  # said once, not at every pass
    assert err.count("vanished or was replaced") <= 1 and err.count("not a regular file") <= 1, err
    assert "Traceback" not in err and "ecolaunch init-state" in err and "work again" in err
    assert _limits(backend)[0] == 400.0  # restored at SIGTERM


def test_the_agent_keeps_running_on_a_full_disk_under_its_ledger(lab) -> None:
    d, backend, u, members = lab
    mnt = Path(tempfile.mkdtemp(prefix="ecolaunch-tmpfs-"))
    os.chmod(mnt, 0o755)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        mnt.rmdir()
        pytest.skip("cannot mount a small tmpfs here (needs root and mount rights) to fill a disk for real")
    agent = None
    try:
        (mnt / "agent").mkdir(mode=0o755)
        scratch = mnt / "scratch"  # group-writable, on the same file system: a member can fill it
        scratch.mkdir()
        os.chown(scratch, 0, GID)
        os.chmod(scratch, 0o3775)
        run_as(MALLORY, """
            f = open(Path(args["f"]), "wb", buffering=0)
            try:
                while True:
                    f.write(b"x" * 4096)
            except OSError as e:
                assert e.errno == 28, e
            """, {"f": str(scratch / "fill")})
        with StateStore(d).transaction() as graph:
            graph.jobs["mine"] = _root_job("mine", backend.hostname(), u[0], {u[0]: 250.0})
        agent = _agent(d, "--ledger", str(mnt / "agent" / "caps.json"))
        time.sleep(1.5)
        assert agent.poll() is None
        assert _limits(backend)[0] == 400.0
        (scratch / "fill").unlink()
        _wait(lambda: _limits(backend)[0] == 250.0, 15, "the cap once the disk has room")
        err = _stop(agent)
        agent = None
        assert err.count("cap pass failed: cannot write the cap ledger") == 1, err  # said once
        assert "No space left on device" in err and "free space there" in err, err
        assert "Traceback" not in err
        assert _limits(backend)[0] == 400.0
    finally:
        if agent is not None:
            agent.kill()
        subprocess.run(["umount", str(mnt)], check=False)
        mnt.rmdir()
