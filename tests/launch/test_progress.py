"""A running job's progress (``Job.progress``): what the observer measures so far, the saving estimate, and the
heartbeat that writes it into the job file for ``ecolaunch status`` and ``top``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ecolaunch.admin.rules import Rules
from ecolaunch.clock import SystemClock, VirtualClock
from ecolaunch.jobmodel.capcurve import profile_curve
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.jobmodel.progress import JobProgress
from ecolaunch.launch import pipeline
from ecolaunch.launch.argv import parse
from ecolaunch.run.observer import ObserveConfig, RunObserver
from ecolaunch.launch.pipeline import expected_length
from ecolaunch.profile.record import saving_estimate_j
from ecolaunch.launch.session import Launcher, Placement, Session
from ecolaunch.policy.base import JobRequest
from ecolaunch.policy.baselines import ExclusivePolicy
from ecolaunch.profile import channel
from ecolaunch.profile.history import History, ProfileEntry, RunLength
from ecolaunch.profile.modes import ProfileAction
from ecolaunch.profile.sampler import GpuSample
from ecolaunch.runtime import open_gpus, resolve
from ecolaunch.state.graph import MAX_EXPECTED_S
from ecolaunch.state.reconcile import process_start_time
from ecolaunch.state.store import StateStore
from tests.conftest import REPO, clean_env, ecolaunch_cmd
from tests.launch.test_observe import FakeWorkers, observer
from tests.profile.conftest import iter_time_at

SOLO = Profile(0.1, 80.0, 40.0, 10_000, 300.0)  # alone and uncapped: 0.1 s and 300 W per iteration


def test_progress_so_far_counts_the_steps_the_energy_and_estimates_the_saving(backend, vclock, tmp_path: Path) -> None:
    for g in backend.gpus_:
        g.limit_w = 250.0  # the decision capped the job; caps may not change here, so no closed loop moves them
    obs = observer(backend, vclock, tmp_path, ProfileAction.HISTORY, profile=SOLO, set_cap=None)
    with obs:
        assert obs.progress() == JobProgress(at=1.7e9 + 1000.0, iterations=0, energy_j=0.0, saving_j=0.0)
        workers = FakeWorkers(obs.worker_env()["ECOLAUNCH_HOOK_DIR"], vclock, backend)
        workers.run(60, obs)
        progress = obs.progress()
        workers.close()
    assert progress.at == pytest.approx(1.7e9 + vclock.now())
    assert progress.iterations == 60
    assert progress.iter_time_s == pytest.approx(iter_time_at(250.0, 300.0), rel=1e-9)
    assert progress.energy_j == pytest.approx(2 * 250.0 * 60 * iter_time_at(250.0, 300.0), rel=1e-9)  # alone on both
    # every sampled interval ran at 250 W: uncapped, the same work would have cost E(400 W) / E(250 W) times as much
    curve = profile_curve(SOLO, 400.0)
    top, capped = curve.at(400.0), curve.at(250.0)
    ratio = (top.iter_time_s * top.power_w) / (capped.iter_time_s * capped.power_w)
    assert ratio > 1.0
    assert progress.saving_j == pytest.approx(progress.energy_j * (ratio - 1.0), rel=1e-9)


def test_without_a_cap_curve_there_is_no_saving_estimate(backend, vclock, tmp_path: Path) -> None:
    obs = observer(backend, vclock, tmp_path, "off")  # a first launch: no profile
    with obs:
        vclock.advance(5.0)
        obs.poll()
        progress = obs.progress()
    assert progress.saving_j is None and progress.energy_j == pytest.approx(2 * 300.0 * 5.0)


def _sample(t_s: float, energy_j: float, limit_w: float | None) -> GpuSample:
    return GpuSample(t_s, None, None, energy_j, None, None, 0, limit_w)


def test_the_saving_estimate_reads_each_interval_at_its_cap_and_scales_to_the_share() -> None:
    # measured: 0.1 s and 300 W at 400 W (30 J per iteration), 0.125 s and 200 W at 200 W (25 J)
    curve = profile_curve(Profile(0.1, power_w=300.0, cap_points=(CapPoint(200.0, 0.125, 200.0),
                                                                   CapPoint(400.0, 0.1, 300.0))), 400.0)
    series = [_sample(0.0, 0.0, 200.0), _sample(1.0, 1000.0, 400.0), _sample(2.0, 1300.0, None),
              _sample(3.0, 1500.0, 200.0), _sample(4.0, 2500.0, 200.0)]
    # 1000 J at 200 W would have been 1200 J uncapped (30/25); the intervals at 400 W and at an unknown limit save
    # nothing; the job had half of the GPU's 2500 J
    assert saving_estimate_j(series, 1250.0, curve, 400.0) == pytest.approx(0.5 * 2 * 200.0)
    assert saving_estimate_j(series[:1], 0.0, curve, 400.0) == 0.0


def test_the_heartbeat_writes_the_progress_that_status_shows(state_dir: Path, monkeypatch) -> None:
    env = {"ECOLAUNCH_SIMULATE": "1xA100-SXM4-80GB", "ECOLAUNCH_STATE_DIR": str(state_dir), "ECOLAUNCH_POLICY": ""}
    backend = open_gpus(resolve(env)[0])
    session = Session(StateStore(state_dir), backend, ExclusivePolicy(), Rules())
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")
    job = session.submit(JobRequest(id="beat0001", user="u", host=backend.hostname(), nproc=1), me, name="t.py",
                         info={"expected_iterations": 100})  # as its completed runs tell
    placement = session.try_place(job.id)
    assert not isinstance(placement, int)
    config = ObserveConfig(job.id, tuple(placement.gpus), state_dir, mode="off", fingerprint=None, rules=Rules(),
                           allowed_slowdown_pct=10.0, background=False)
    obs = RunObserver(config, backend, clock=SystemClock(), history=History(state_dir))
    monkeypatch.setattr(pipeline, "HEARTBEAT_S", 0.05)
    stop = threading.Event()
    beat = threading.Thread(target=pipeline._heartbeat, args=(session, placement, obs, stop), daemon=True)
    with obs:
        steps = VirtualClock(0.0)  # the worker's step clock: one step every 0.2 s
        writer = channel.StepWriter(obs.worker_env()[channel.ENV_HOOK_DIR], 0, clock=steps.now)
        for _ in range(30):
            steps.advance(0.2)
            writer.stamp()
        writer.close()
        time.sleep(0.1)  # some energy on the simulated GPU's clock
        obs.poll()
        beat.start()
        try:
            deadline = time.monotonic() + 20
            while (progress := StateStore(state_dir).read().jobs[job.id].progress) is None:
                assert time.monotonic() < deadline, "no heartbeat wrote the job's progress"
                time.sleep(0.05)
        finally:
            stop.set()
            beat.join(timeout=10)
    assert progress.iterations == 30 and progress.iter_time_s == pytest.approx(0.2)
    assert progress.energy_j > 0 and progress.saving_j is None  # no profile: no curve to estimate a saving with
    shown = subprocess.run(ecolaunch_cmd("status", "--json"), env=clean_env(**env), cwd=REPO, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)["jobs"]
    assert (row["id"], row["iterations"], row["saving_j"]) == (job.id, 30, None)
    assert row["total_iterations"] is None  # the script declared nothing (its request expects 100 steps)
    assert row["iter_time_s"] == pytest.approx(0.2) and row["energy_j"] == pytest.approx(progress.energy_j)
    assert 0.0 < row["remaining_s"] <= 70 * 0.2  # 70 steps to go at 0.2 s, less the time since the heartbeat
    session.release(job.id)


def test_a_first_launchs_measured_profile_is_booked_on_its_job_once_and_never_replaces_a_known_one(
        state_dir: Path) -> None:
    """What the run measured of a job booked without a profile reaches the state graph at the next heartbeat (so a
    power budget reads its curve from then on); a job booked with one keeps it."""
    env = {"ECOLAUNCH_SIMULATE": "2xA100-SXM4-80GB", "ECOLAUNCH_STATE_DIR": str(state_dir), "ECOLAUNCH_POLICY": ""}
    backend = open_gpus(resolve(env)[0])
    session = Session(StateStore(state_dir), backend, ExclusivePolicy(), Rules())
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")
    measured = Profile(0.1, 80.0, 40.0, None, 300.0, (CapPoint(250.0, 0.11, 240.0), CapPoint(400.0, 0.1, 300.0)))

    def booked(jid: str, profile: Profile | None):
        job = session.submit(JobRequest(id=jid, user="u", host=backend.hostname(), nproc=1, memory_mib=2048,
                                        profile=profile), me, name="t.py", info={})
        placement = session.try_place(job.id)
        assert not isinstance(placement, int)
        return placement.job

    first = booked("first001", None)
    session.heartbeat(first, None, None)  # profiling not done yet: nothing to book
    assert StateStore(state_dir).read().jobs["first001"].profile is None
    session.heartbeat(first, None, measured)
    assert StateStore(state_dir).read().jobs["first001"].profile == measured  # memory: the measured one's (none)
    known = booked("known001", SOLO)
    session.heartbeat(known, None, measured)
    assert StateStore(state_dir).read().jobs["known001"].profile == SOLO


def test_a_completed_run_tells_the_next_launch_how_long_to_expect(sim_env, state_dir: Path) -> None:
    """Each run that ends with exit code 0 is noted in its job's history entry; the next launch of the same job
    books its expected length (``ecolaunch top``'s LEFT, a sharing decision's estimate of waiting)."""
    stepper = str(REPO / "tests" / "bin" / "stepper.py")
    cmd = ecolaunch_cmd("-v", "--profile", "off", "--nproc-per-node", "1", stepper, "12", "0.01")
    first = subprocess.run(cmd, env=sim_env("1xA100-SXM4-80GB"), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "completed run(s) of this job" not in first.stderr
    (entry_file,) = (state_dir / "history").rglob("profiles/*.json")
    entry = History(state_dir).lookup(entry_file.stem)
    assert len(entry.runs) == 1 and entry.runs[0].iterations == 12 and entry.runs[0].duration_s > 0.1
    second = subprocess.run(cmd, env=sim_env("1xA100-SXM4-80GB"), cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 0, second.stderr
    assert "history: 1 completed run(s) of this job: expecting about" in second.stderr and "12 steps" in second.stderr
    assert len(History(state_dir).lookup(entry_file.stem).runs) == 2
    fail = ecolaunch_cmd("-v", "--profile", "off", "--nproc-per-node", "1", str(REPO / "tests" / "bin" / "fail.py"),
                         "0", "3")
    for _ in range(2):  # a run that fails notes no length: the second launch expects nothing
        failed = subprocess.run(fail, env=sim_env("1xA100-SXM4-80GB"), cwd=REPO, capture_output=True, text=True,
                                timeout=120)
        assert failed.returncode != 0 and "completed run(s) of this job" not in failed.stderr


def test_the_placement_and_each_heartbeat_count_the_jobs_waiting_behind(state_dir: Path) -> None:
    """Caps that weigh the queue read who waits from the state graph: the request a placement decides carries the
    jobs queued behind it, and each heartbeat tells a running job how many waiting jobs its slowdown delays (the
    queue times its share of the host's GPUs), as they come and go."""
    env = {"ECOLAUNCH_SIMULATE": "2xA100-SXM4-80GB", "ECOLAUNCH_STATE_DIR": str(state_dir), "ECOLAUNCH_POLICY": ""}
    backend = open_gpus(resolve(env)[0])
    seen: list[float] = []

    class Spy(ExclusivePolicy):
        def decide(self, state, job, rules):
            seen.append(job.waiting_share)
            return super().decide(state, job, rules)

    session = Session(StateStore(state_dir), backend, Spy(), Rules())
    me = Launcher(pid=os.getpid(), start_time=process_start_time(os.getpid()), uid=os.getuid(), user="u")
    for jid, n in (("one00001", 1), ("two00001", 2), ("two00002", 2)):
        session.submit(JobRequest(id=jid, user="u", host=backend.hostname(), nproc=n, memory_mib=2048), me,
                       name="t.py", info={})
    placement = session.try_place("one00001")
    assert isinstance(placement, Placement) and seen == [2.0 * 0.5]  # two behind it; it takes 1 of the 2 GPUs
    assert session.heartbeat(placement.job).waiting_share == 1.0
    session.release("two00002")
    assert session.heartbeat(placement.job).waiting_share == 0.5
    session.release("two00001")
    beat = session.heartbeat(placement.job)
    assert beat.waiting_share == 0.0 and set(beat.residents) == set(placement.job.gpus)


# --- how long a job is expected to run ------------------------------------------------------------------------
FP_LEN = "ab" * 32


def _entry(profile: Profile | None = None, runs: tuple = (), **hints) -> ProfileEntry:
    return ProfileEntry(FP_LEN, profile, hints=hints, runs=runs)


def test_a_declared_length_is_its_steps_at_the_profiles_pace_else_the_history_scaled_else_unknown(
        caplog: pytest.LogCaptureFixture) -> None:
    runs = (RunLength(90.0, 30), RunLength(120.0, 40), RunLength(100.0, 50))  # medians: 100 s, 40 steps
    with caplog.at_level(logging.INFO, logger="ecolaunch.launch.pipeline"):
        assert expected_length(600, _entry(Profile(iter_time_s=0.5), runs)) == (300.0, 600)
        assert caplog.messages[-1] == ("length: 600 steps declared (--steps): expecting about 300 s, at its "
                                       "profile's 0.5 s per step")
        # the option wins over the script's hint; without a profile, the median run scaled by the steps
        assert expected_length(80, _entry(None, runs, steps=400)) == (200.0, 80)
        assert expected_length(None, _entry(None, runs, steps=400)) == (1000.0, 400)
        assert caplog.messages[-1] == ("length: 400 steps declared (the script's @ecolaunch.job): expecting about "
                                       "1000 s, scaling the median of 3 completed run(s) (100 s for 40 steps)")
        assert expected_length(600, None) == (None, 600)  # a first launch: its seconds unknown until it runs
        assert caplog.messages[-1] == "length: 600 steps declared (--steps): seconds unknown until the run measures its pace"
        # nothing declared: the medians of the completed runs, as before; nothing known: nothing
        assert expected_length(None, _entry(Profile(iter_time_s=0.5), runs)) == (100.0, 40)
        assert caplog.messages[-1] == "history: 3 completed run(s) of this job: expecting about 100 s, 40 steps"
        assert expected_length(None, _entry(Profile(iter_time_s=0.5))) == (None, None)
        assert expected_length(10 ** 12, _entry(Profile(iter_time_s=1.0)))[0] == MAX_EXPECTED_S  # within a job file


def test_the_request_carries_the_declared_length(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    conf = parse(["--steps", "600", "--nproc-per-node", "1", str(tmp_path / "train.py")], {})
    ctx = SimpleNamespace(rules=Rules(), user="u", groups=())
    ui = pipeline.LaunchCallbacks(decision=lambda *a: None, no_gpus=lambda *a: None)
    request = pipeline._request(conf, SimpleNamespace(host="h"), ctx, None,
                                _entry(Profile(iter_time_s=0.25), (RunLength(100.0, 50),)), ui)
    assert (request.expected_s, request.expected_iterations) == (150.0, 600)
    assert pipeline._request_info(conf, request)["expected_iterations"] == 600


def test_the_progress_says_the_total_the_run_declared(backend, vclock, tmp_path: Path) -> None:
    """The script's steps win over its tracked total; --steps over both; nothing declared: None."""
    for hints, steps, total in (({"steps": 900, "tracked_steps": 30}, None, 900), ({"tracked_steps": 30}, None, 30),
                                ({"steps": None}, None, None), ({"steps": 900}, 1200, 1200)):
        (tmp_path / f"{total}-{steps}").mkdir()
        obs = observer(backend, vclock, tmp_path / f"{total}-{steps}", "off", steps=steps)
        with obs:
            workers = FakeWorkers(obs.worker_env()["ECOLAUNCH_HOOK_DIR"], vclock, backend, hints=hints)
            workers.run(5, obs)
            progress = obs.progress()
            workers.close()
        assert (progress.iterations, progress.total_iterations) == (5, total), hints


def test_the_record_keeps_the_length_the_launch_predicted(backend, vclock, tmp_path: Path) -> None:
    obs = observer(backend, vclock, tmp_path, "off", predicted_s=42.5)
    with obs:
        workers = FakeWorkers(obs.worker_env()["ECOLAUNCH_HOOK_DIR"], vclock, backend)
        workers.run(5, obs)
        workers.close()
        obs.set_exit_code(0)
    assert obs.record.predicted_s == 42.5
    assert History(tmp_path).length_predictions() == [(42.5, obs.record.duration_s)]


def test_a_declared_length_is_known_to_the_next_launch_and_its_prediction_recorded(tmp_path: Path, sim_env,
                                                                                    state_dir: Path) -> None:
    """``@ecolaunch.job(steps=...)`` is kept in the history: the next launch expects its length before it starts,
    and its record keeps what was expected next to what it took."""
    script = tmp_path / "declared.py"
    script.write_text("import time\nimport ecolaunch\n\n@ecolaunch.job(steps=24)\ndef main():\n"
                      "    for _ in range(12):\n        time.sleep(0.01)\n        ecolaunch.step()\n\nmain()\n")
    cmd = ecolaunch_cmd("-v", "--profile", "off", "--nproc-per-node", "1", str(script))
    first = subprocess.run(cmd, env=sim_env("1xA100-SXM4-80GB"), cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert first.returncode == 0, first.stderr
    assert "steps declared" not in first.stderr  # nothing known before its first run
    (entry_file,) = (state_dir / "history").rglob("profiles/*.json")
    entry = History(state_dir).lookup(entry_file.stem)
    assert entry.hints.get("steps") == 24 and entry.runs[0].iterations == 12
    second = subprocess.run(cmd, env=sim_env("1xA100-SXM4-80GB"), cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 0, second.stderr
    assert ("length: 24 steps declared (the script's @ecolaunch.job): expecting about" in second.stderr
            and "scaling the median of 1 completed run(s)" in second.stderr), second.stderr
    ((predicted_s, duration_s),) = History(state_dir).length_predictions()
    # twice the first run's steps: twice its length
    assert predicted_s == pytest.approx(2 * entry.runs[0].duration_s, rel=1e-9) and duration_s > 0.1
