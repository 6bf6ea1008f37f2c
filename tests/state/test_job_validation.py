"""Issue 11, item 3: another user's bad job file never crashes, blocks or reorders anyone else's launch.

A real second uid (``nobody``) writes its own job files with the review's values, while a process of its own
lives (so no file is released as dead); a root launcher on the same simulated host must still be placed at once,
by the ``exclusive`` and by the ``gnn`` policy, and each bad file is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import VirtualClock
from ecolaunch.devices.simulated import SimulatedBackend
from ecolaunch.devices.spec import parse_spec
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.registry import get_policy
from ecolaunch.state.graph import Job, JobState, job_from_dict, job_to_dict
from ecolaunch.state.layout import init_state
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.multiuser import GID, MALLORY, remove, require_root, shared_dir, start_as

HOST = "lab1"

FORGER = """
me = os.getpid()
start = process_start_time(me)
jobs = Path(args["d"]) / "jobs"
for jid, (overrides, raw) in args["files"].items():
    body = dict(args["base"], id=jid, uid=os.getuid(), launcher_pid=me, launcher_start_time=start, **overrides)
    text = json.dumps({"schema": "ecolaunch.job", "version": 1, "job": body})
    for token, value in raw.items():  # values JSON cannot hold as Python floats: written as the review did
        text = text.replace(json.dumps(token), value)
    (jobs / f"{jid}.json").write_text(text)
print("ready", flush=True)
sys.stdin.read()
"""
IMPORTS = "from ecolaunch.state.reconcile import process_start_time\n"

BASE = job_to_dict(Job(id="x", uid=0, user="mallory", host=HOST, launcher_pid=1, launcher_start_time=0.0, nproc=1,
                       name="x", seq=0, submitted_at=0.0))
RUNNING = {"state": "running", "started_at": 1.0}
FILES = {  # job id -> (fields, raw JSON substitutions)
    "memabc": ({**RUNNING, "gpus": ["G3"], "request": {"memory_mib": "abc"}}, {}),
    "meminf": ({**RUNNING, "gpus": ["G3"], "request": {"memory_mib": "@inf"}}, {"@inf": "Infinity"}),
    "profx": ({**RUNNING, "gpus": ["G3"], "profile": {"memory_mib": "x"}}, {}),
    "negmem": ({**RUNNING, "gpus": ["G2"], "request": {"memory_mib": -99999999}}, {}),
    "head": ({"state": "queued", "seq": -5, "nproc": 64}, {}),
    "never": ({"state": "queued", "seq": 0, "nproc": 64}, {}),  # valid types, but no 4-GPU host can ever run it
}


def _files(uuids: list[str]) -> dict:
    out = {}
    for jid, (fields, raw) in FILES.items():
        fields = dict(fields)
        if "gpus" in fields:
            fields["gpus"] = [uuids[int(fields["gpus"][0][1])]]
        out[jid] = (fields, raw)
    return out


@pytest.mark.parametrize("policy", ["exclusive", "gnn"])
def test_a_members_bad_job_files_do_not_stop_anyone_else(policy: str, caplog) -> None:
    require_root()
    d = shared_dir()
    forger = None
    try:
        init_state(d, GID)
        backend = SimulatedBackend(parse_spec("4xA100-SXM4-80GB", hostname=HOST).hosts[0], d / "sim.json")
        uuids = [g.uuid for g in backend.gpus()]
        forger = start_as(MALLORY, FORGER, {"d": str(d), "base": BASE, "files": _files(uuids)}, imports=IMPORTS)
        assert forger.stdout.readline().strip() == "ready", forger.stderr.read()
        session = Session(StateStore(d), backend, get_policy(policy), Rules(), clock=VirtualClock())
        me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=0, user="root")
        with caplog.at_level(logging.WARNING):
            job = session.submit(JobRequest(id="rootjob", user="root", host=HOST, nproc=1), me, name="r", info={})
            placement = session.try_place(job.id)
            assert isinstance(placement, Placement), f"queue position {placement}"
            graph = session.snapshot()
        assert sorted(graph.jobs) == ["never", "rootjob"]  # the others are skipped; "never" is valid, but ...
        assert graph.queued_jobs() == []  # ... it cannot hold the head of the queue
        for jid in ("memabc", "meminf", "profx", "negmem", "head"):
            assert f"ignoring job file {d / 'jobs' / jid}.json" in caplog.text, jid
        session.release(job.id)
    finally:
        if forger is not None:
            forger.stdin.close()
            forger.wait(30)
        remove(d)


@pytest.mark.parametrize(("field", "value"), [
    ("seq", -5), ("nproc", 0), ("nproc", 10_000), ("uid", 2**40), ("launcher_pid", 2**40),
    ("request", {"memory_mib": 1.5}), ("request", {"memory_mib": 2**60}), ("request", {"allowed_slowdown_pct": -1}),
    ("request", {"expected_s": -1.0}), ("request", {"expected_s": 1e300}), ("request", {"expected_s": "soon"}),
    ("request", {"expected_iterations": 2.5}), ("request", {"expected_iterations": 10**15}),
    ("profile", {"power_w": float("inf")}), ("profile", {"sm_util_pct": 101}), ("profile", {"cap_points": [[1, 2]]}),
    ("profile", {"cap_points": [{"power_cap_w": 200, "iter_time_s": 0.0, "power_w": 150}]}),
    ("profile", {"instrumented": "yes"}), ("power_caps_w", {"G": 1e12}), ("gpus", ["G", "G"]),
])
def test_out_of_range_fields_are_refused(field: str, value: object) -> None:
    body = {**BASE, "id": "a", field: value}
    with pytest.raises(ValueError, match=field):
        job_from_dict("a", body)


@pytest.mark.parametrize(("progress", "shown"), [
    ({"at": 1.0, "energy_j": -5}, "progress: energy_j = -5"),
    ({"at": 1.0, "iterations": True}, "progress: iterations = true"),
    ({"at": 1.0, "iter_time_s": 0}, "progress: iter_time_s = 0"),
    ({"at": 1.0, "saving_j": 1e300}, "progress: saving_j = 1e+300"),
    ({"at": 1.0, "total_iterations": -1}, "progress: total_iterations = -1"),
    ({"at": 1.0, "total_iterations": 2.5}, "progress: total_iterations = 2.5"),
    ({"at": 1.0, "total_iterations": 2**60}, "progress: total_iterations = 1152921504606846976"),
    ({"iterations": 3}, "progress: Object missing required field `at`"),
    ("fast", 'progress = "fast": expected an object'),
])
def test_a_running_jobs_bad_progress_is_refused_naming_the_field(progress: object, shown: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"jobs.a.{shown}")):
        job_from_dict("a", {**BASE, "id": "a", **RUNNING, "gpus": ["G"], "progress": progress})


def test_a_running_jobs_progress_survives_its_job_file() -> None:
    raw = {**BASE, "id": "a", **RUNNING, "gpus": ["G"],
           "progress": {"at": 5.0, "iterations": 7, "iter_time_s": 0.25, "energy_j": 40.0, "saving_j": -1.5}}
    job = job_from_dict("a", raw)
    # a job file written before the declared total: it reads, the total unknown
    assert job.progress == JobProgress(at=5.0, iterations=7, iter_time_s=0.25, energy_j=40.0, saving_j=-1.5)
    assert job.progress.total_iterations is None
    assert job_from_dict("a", json.loads(json.dumps(job_to_dict(job)))) == job
    declared = job_from_dict("a", {**raw, "progress": {**raw["progress"], "total_iterations": 900}})
    assert declared.progress.total_iterations == 900
    assert job_from_dict("a", json.loads(json.dumps(job_to_dict(declared)))) == declared


def test_a_running_jobs_time_left_comes_from_its_expected_length_and_progress() -> None:
    def job(request: dict, progress: dict | None = None) -> Job:
        raw = {**BASE, "id": "a", **RUNNING, "gpus": ["G"], "request": request}
        return job_from_dict("a", {**raw, "progress": progress} if progress else raw)

    started = RUNNING["started_at"]
    assert job({}).remaining_s(started + 10) is None  # it never completed here: unknown
    assert job({"expected_s": 100.0}).remaining_s(started + 30) == pytest.approx(70.0)
    assert job({"expected_s": 100.0}).remaining_s(started + 130) is None  # past what was expected: unknown again
    # steps to go at its measured pace, less the time since that was measured
    paced = job({"expected_s": 100.0, "expected_iterations": 1000},
                {"at": started + 20, "iterations": 400, "iter_time_s": 0.2})
    assert paced.remaining_s(started + 25) == pytest.approx(600 * 0.2 - 5)
    assert job({"expected_iterations": 1000}, {"at": started + 20, "iterations": 1200, "iter_time_s": 0.2}
               ).remaining_s(started + 25) is None
    queued = job_from_dict("a", {**BASE, "id": "a", "request": {"expected_s": 100.0}})
    assert queued.remaining_s(0.0) is None
    # the total the running script declared wins over the request's
    declared = job({"expected_s": 100.0, "expected_iterations": 1000},
                   {"at": started + 20, "iterations": 400, "iter_time_s": 0.2, "total_iterations": 1500})
    assert declared.remaining_s(started + 25) == pytest.approx(1100 * 0.2 - 5)
    # a total declared with nothing expected before the start (a first launch) is enough
    first = job({}, {"at": started + 20, "iterations": 100, "iter_time_s": 0.5, "total_iterations": 300})
    assert first.remaining_s(started + 20) == pytest.approx(200 * 0.5)


def test_a_queued_job_holds_nothing() -> None:
    for extra in ({"gpus": ["G"]}, {"power_caps_w": {"G": 200.0}}, {"started_at": 1.0}, {"progress": {"at": 1.0}}):
        with pytest.raises(ValueError, match="queued job"):
            job_from_dict("a", {**BASE, "id": "a", **extra})
    assert job_from_dict("a", {**BASE, "id": "a", **RUNNING, "gpus": ["G"], "profile": {
        "memory_mib": 12000.0, "cap_points": [[300, 0.1, 250, 20, 1.5], {"power_cap_w": 250, "iter_time_s": 0.11,
                                                                          "power_w": 220, "iterations": 5}]}}).state \
        is JobState.RUNNING
