"""The run observer's parts, each on its own: the run's caps, the monitor, the early check, the closed loop's start,
the recorder, and the one configuration (real channel files, history directories and a scripted backend)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path

import pytest

from ecolaunch.admin.rules import Rules, profiler_settings
from ecolaunch.profile.earlycheck import EarlyCheck
from ecolaunch.profile.monitor import RunMonitor
from ecolaunch.run.observer import ObserveConfig
from ecolaunch.profile.record import RunRecorder, RunSpan
from ecolaunch.profile import channel
from ecolaunch.caps.control import Feeds, start_loop
from ecolaunch.profile.history import History, Profile
from ecolaunch.profile.modes import ProfileAction, ProfilerSettings
from ecolaunch.jobmodel.profile import CapPoint
from ecolaunch.caps.job import RunCaps
from ecolaunch.profile.sampler import Sampler

FP = "ab" * 32
UUIDS = ("GPU-0", "GPU-1")


# --- RunCaps: the run's caps and their one restore ---------------------------------------------------------
def test_run_caps_restore_only_what_the_run_changed_to_what_it_found(backend) -> None:
    caps = RunCaps("job1", UUIDS, backend.set_power_limit, found={"GPU-0": 400.0, "GPU-1": 300.0})
    assert caps.apply(250.0, "test") and caps.current("GPU-0") == 250.0
    caps.set("GPU-1", 300.0)  # set to what it found: nothing to restore there
    caps.restore()
    assert backend.calls == [("GPU-0", 250.0), ("GPU-1", 250.0), ("GPU-1", 300.0), ("GPU-0", 400.0)]
    assert caps.current("GPU-0") == 400.0  # back to the found cap
    caps.restore()  # nothing left to restore
    assert len(backend.calls) == 4


def test_a_failed_restore_is_tried_again(backend, caplog) -> None:
    refused = {"GPU-0"}

    def flaky(uuid: str, watts: float) -> None:
        if watts == 400.0 and uuid in refused:
            raise OSError("busy")
        backend.set_power_limit(uuid, watts)

    caps = RunCaps("job1", UUIDS, flaky, found={u: 400.0 for u in UUIDS})
    assert caps.apply(200.0, "test")
    with caplog.at_level(logging.WARNING):
        caps.restore()
    assert "could not restore the power cap of GPU GPU-0 to 400 W: busy" in caplog.text
    assert backend.gpu("GPU-0").limit_w == 200.0 and backend.gpu("GPU-1").limit_w == 400.0
    refused.clear()
    caps.restore()
    assert backend.gpu("GPU-0").limit_w == 400.0


def test_apply_stops_at_the_first_gpu_that_refuses(backend) -> None:
    caps = RunCaps("job1", UUIDS, backend.set_power_limit, found={u: 400.0 for u in UUIDS})
    assert not caps.apply(50.0, "below the board's range")  # the scripted board refuses it
    assert backend.calls == [] and caps.current("GPU-0") == 400.0
    assert not RunCaps("job1", UUIDS, None).can_set


# --- RunMonitor --------------------------------------------------------------------------------------------
def test_the_monitor_reads_stamps_and_hints_through_its_own_channel(backend, vclock, tmp_path: Path) -> None:
    monitor = RunMonitor(backend, UUIDS, tmp_path / "hooks" / "job1", clock=vclock, interval_s=1.0, poll_s=1.0,
                         background=False)
    assert monitor.open_channel() and monitor.hook_dir.name.startswith("job1-")
    channel.write_hints(monitor.hook_dir, 0, {"name": "bert"})
    writer = channel.StepWriter(monitor.hook_dir, 0, clock=vclock.now)
    for _ in range(3):
        vclock.advance(0.5)
        writer.stamp()
    writer.close()
    assert list(monitor.read(final=False)) == [1000.5, 1001.0, 1001.5]
    assert monitor.hints()["name"] == "bert"
    assert monitor.sampler.latest("GPU-0") is not None  # without threads, a read takes a sample
    monitor.close()
    assert not monitor.hook_dir.exists()


def test_the_monitor_thread_stops_at_the_first_failed_poll(backend, vclock, tmp_path: Path) -> None:
    monitor = RunMonitor(backend, UUIDS, tmp_path / "job1", clock=vclock, interval_s=0.01, poll_s=0.01,
                         background=True)
    polls, failed = [], threading.Event()
    monitor.start(lambda: polls.append(1) or len(polls) < 3, failed.set)
    assert failed.wait(5.0)
    monitor.stop()
    assert len(polls) == 3


def test_a_channel_that_cannot_be_made_is_warned_and_left_out(backend, vclock, tmp_path: Path, caplog) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monitor = RunMonitor(backend, UUIDS, blocked / "hooks" / "job1", clock=vclock, interval_s=1.0, poll_s=1.0,
                         background=False)
    with caplog.at_level(logging.WARNING):
        assert not monitor.open_channel()
    assert "cannot create the step-hook directory" in caplog.text


# --- EarlyCheck --------------------------------------------------------------------------------------------
def test_the_early_check_runs_once_after_the_skipped_iterations(backend, vclock) -> None:
    settings = ProfilerSettings(warmup_iters=2, settle_iters=1, measured_iters=5)
    sampler = Sampler(backend, UUIDS, clock=vclock)
    backend.gpu("GPU-0").limit_w = 250.0
    sampler.sample_once()
    check = EarlyCheck(settings, sampler, UUIDS)
    assert not check.armed
    check.arm(0.0, 2, slowdown=True)
    known = Profile(0.1, None, None, None, 300.0)
    slow = [0.2 * i for i in range(1, 8)]  # 0.2 s per iteration, twice the profile's
    assert check.step(slow, known, 10.0, (100.0, 400.0)) is None and check.armed  # 2 skipped + 5 measured: 8 stamps
    finding = check.step([*slow, 1.6], known, 10.0, (100.0, 400.0))
    assert finding is not None and finding.slowdown_pct == pytest.approx(100.0) and finding.cap_w == 250.0
    # nearly twice what the profile says at 250 W (its prior-shaped curve): far outside its spread (unknown: 0)
    assert check.off_profile is not None and "1.86 times the profile's 107.5 ms" in check.off_profile
    assert not check.armed  # once per run
    check.arm(0.0, 0, slowdown=True)
    assert check.step([0.1 * i for i in range(1, 7)], known, 10.0, None) is None  # within the bound
    assert not check.armed


# --- start_loop --------------------------------------------------------------------------------------------
def test_the_closed_loop_starts_only_with_a_curve_and_at_a_cap_within_the_bounds(backend, vclock, tmp_path) -> None:
    sampler = Sampler(backend, UUIDS, clock=vclock)
    reader = channel.StepReader(tmp_path)
    feeds = Feeds(reader, sampler, UUIDS, vclock, lambda cap, why: True)
    assert start_loop(Profile(None, None, None, None, None), Rules(), (100.0, 400.0), 10.0, None, feeds, 0) is None
    uncapped = start_loop(Profile(0.1, None, None, None, 300.0), Rules(), (100.0, 400.0), 10.0, 500.0, feeds, 0)
    assert uncapped is not None and uncapped.controller.cap_w == 400.0  # clipped to the bounds
    assert uncapped.controller.allowed_slowdown_pct == 10.0
    curve = Profile(0.1, None, None, None, 300.0, cap_points=(CapPoint(400.0, 0.1, 300.0), CapPoint(200.0, 0.12, 200.0)))
    loop = start_loop(curve, Rules(), (150.0, 400.0), 5.0, None, feeds, 0)
    assert loop is not None and loop.controller.cap_w == 400.0  # None: the top of the bounds


# --- RunRecorder -------------------------------------------------------------------------------------------
def recorder(backend, vclock, tmp_path: Path, **kw) -> tuple[RunRecorder, History, Sampler]:
    history = History(tmp_path)
    sampler = Sampler(backend, UUIDS, clock=vclock)
    return RunRecorder("job1", UUIDS, history=history, fingerprint=FP, sampler=sampler, clock=vclock,
                       wall_clock=lambda: 1.7e9, **kw), history, sampler


def test_co_residents_say_when_a_gpu_became_shared(backend, vclock, tmp_path: Path) -> None:
    rec, _, _ = recorder(backend, vclock, tmp_path)
    assert not rec.shared()
    assert not rec.set_co_residents("GPU-0", {"job1": 300.0})  # only itself
    assert rec.set_co_residents("GPU-0", {"job1": 300.0, "other": 100.0})
    assert not rec.set_co_residents("GPU-0", {"other": 100.0})  # no change
    assert rec.shared()
    assert not rec.set_co_residents("GPU-0", {})  # the other left: not shared now, but it was during the run
    assert rec.shared()


def test_a_run_that_measured_nothing_keeps_what_history_knew(backend, vclock, tmp_path: Path) -> None:
    rec, history, _ = recorder(backend, vclock, tmp_path)
    known = Profile(0.1, 80.0, 40.0, None, 300.0)
    history.store_profile(FP, known, hints={"max_slowdown_pct": 5.0})
    assert not rec.hints_changed({"max_slowdown_pct": 5.0}) and rec.hints_changed({"profile_safe": True})
    rec.store_profile(None, {"memory_mib": 2048, "profile_safe": True})
    entry = history.lookup(FP)
    assert entry.profile == dataclasses.replace(known, memory_mib=2048)  # the declared peak fills the gap
    assert entry.profile_safe and entry.hints == {"max_slowdown_pct": 5.0, "memory_mib": 2048}


def test_the_record_charges_the_job_its_share_and_names_its_dominant_cap(backend, vclock, tmp_path: Path) -> None:
    rec, history, sampler = recorder(backend, vclock, tmp_path, colocated_with={"GPU-0": ["other"]},
                            co_resident_power_w={"other": 300.0}, idle_power_w={u: 0.0 for u in UUIDS})
    rec.names = {u: "NVIDIA A100-SXM4-80GB" for u in UUIDS}
    for _ in range(11):
        sampler.sample_once()
        vclock.advance(1.0)
    record = rec.build(RunSpan(1000.0, 1011.0, 1.7e9, 1.7e9 + 11.0), user="alice", name="train.py",
                       hints={"name": "bert"}, profile=Profile(0.1, None, None, None, 300.0), exit_code=0,
                       iterations=10, iter_time_s=0.1, source="off", result=None, findings=(), profiling_energy_j=None)
    assert record.name == "bert" and record.colocated_with == {"GPU-0": ["other"]}
    assert record.power_caps_w == {u: 400.0 for u in UUIDS}
    assert record.energy_j == pytest.approx(record.gpu_energy_j * 0.75)  # half of GPU-0, all of GPU-1
    rec.write(record)
    assert history.list() == [record]


# --- ObserveConfig -----------------------------------------------------------------------------------------
def test_the_config_is_frozen_data_with_its_mode_resolved(tmp_path: Path) -> None:
    config = ObserveConfig("job1", ["GPU-0"], str(tmp_path), mode="inline", fingerprint=None, rules=Rules(eta=0.5),
                           allowed_slowdown_pct=7.0)
    assert config.mode is ProfileAction.INLINE and config.gpu_uuids == ("GPU-0",) and config.state_dir == tmp_path
    assert config.source == "inline" and dataclasses.replace(config, profile_source="pre").source == "pre"
    assert config.profiler_settings() == profiler_settings(Rules(eta=0.5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.allowed_slowdown_pct = 20.0  # type: ignore[misc]
