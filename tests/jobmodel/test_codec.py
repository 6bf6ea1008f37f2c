"""The job model's codec: records of version 1 are read and migrated, a bad field is named with its file and value,
and what is not a finite number of the field's type (a bool, NaN, an infinity, a huge exponent) is refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ecolaunch.errors import ConfigError
from ecolaunch.jobmodel import codec
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.history import History, JobRecord, ProfileEntry
from ecolaunch.state.graph import job_from_dict, job_to_dict
from tests.profile.test_history import FP, make_record

#: a job record exactly as version 1 wrote it: cap points without their quality when unknown, or with it null
V1_RECORD = {
    "format": "ecolaunch-job", "version": 1, "job_id": "old", "user": "alice", "name": "bert", "fingerprint": FP,
    "started": 1_700_000_000.0, "ended": 1_700_000_100.0, "duration_s": 100.0, "exit_code": 0, "gpus": ["GPU-a"],
    "gpu_names": ["NVIDIA A100-SXM4-80GB"], "power_caps_w": {"GPU-a": 250.0}, "colocated_with": {"GPU-a": []},
    "energy_j": 21000.0, "gpu_energy_j": None, "profiling_energy_j": None, "iterations": 2000, "iter_time_s": 0.05,
    "profile": {"iter_time_s": 0.05, "sm_util_pct": 81.5, "mem_bw_util_pct": 40.0, "memory_mib": 12000,
                "power_w": 290, "instrumented": True,
                "cap_points": [{"power_cap_w": 400.0, "iter_time_s": 0.05, "power_w": 290.0},
                               {"power_cap_w": 250.0, "iter_time_s": 0.056, "power_w": 240.0, "iterations": None},
                               {"power_cap_w": 200.0, "iter_time_s": 0.07, "power_w": 198.0, "iterations": 15,
                                "iter_time_cv_pct": 2.5}]},
    "profile_action": "inline", "recommended_cap_w": 250.0, "recommendation": "cap 250 W", "findings": [],
    "samples": {"GPU-a": [{"t_s": 0.0, "power_w": 250.0}]},
}
V1_PROFILE = Profile(0.05, 81.5, 40.0, 12000, 290.0, (CapPoint(400.0, 0.05, 290.0), CapPoint(250.0, 0.056, 240.0),
                                                    CapPoint(200.0, 0.07, 198.0, 15, 2.5)))


def test_a_version_1_job_record_is_read_migrated_and_rewritten_at_the_current_version(tmp_path: Path) -> None:
    history = History(tmp_path)
    history.record(make_record("new"))  # makes this user's directory
    (history.jobs_dir / "old.json").write_text(json.dumps(V1_RECORD))
    rec = history.get("old")
    assert rec is not None and rec.profile == V1_PROFILE and rec.profile.cap_points[1].iterations == 0
    assert rec.energy_j == 21000.0 and rec.gpus == ("GPU-a",)
    assert sorted(r.job_id for r in history.list()) == ["new", "old"]
    written = json.loads(codec.encode_record("ecolaunch-job", rec))
    assert written["version"] == codec.VERSION > 1
    assert written["profile"]["cap_points"][0] == {"power_cap_w": 400.0, "iter_time_s": 0.05, "power_w": 290.0,
                                                   "iterations": 0, "iter_time_cv_pct": None, "windows": 0,
                                                   "run_iterations": 0}
    assert codec.decode_record(json.dumps(written).encode(), "ecolaunch-job", JobRecord, where="x") == rec


def test_a_version_1_profile_entry_is_read(tmp_path: Path) -> None:
    history = History(tmp_path)
    history.store_profile(FP, None)
    doc = {"format": "ecolaunch-profile", "version": 1, "fingerprint": FP, "profile": V1_RECORD["profile"],
           "profile_safe": True, "job_id": "old", "updated_at": 5.0, "hints": {"max_slowdown_pct": 7, "x": 1}}
    (history.profiles_dir / f"{FP}.json").write_text(json.dumps(doc))
    assert history.lookup(FP) == ProfileEntry(FP, V1_PROFILE, True, "old", 5.0, {"max_slowdown_pct": 7.0})


def test_a_version_1_profile_in_a_job_file_is_migrated() -> None:
    """Version 1 job files held the simulator's ``[cap, time, power]`` lists and could hold a whole float memory."""
    raw = {"id": "j1", "uid": 0, "user": "u", "host": "h", "launcher_pid": 1, "launcher_start_time": 0.0, "nproc": 1,
           "name": "x", "seq": 0, "submitted_at": 0.0, "state": "running", "gpus": ["G0"], "power_caps_w": {},
           "request": {}, "decision": {}, "started_at": 0.0, "heartbeat_at": 0.0,
           "profile": {"iter_time_s": 0.2, "memory_mib": 1024.0, "power_w": 180.0,
                       "cap_points": [[400, 0.2, 180], [250, 0.25, 170, 15, 3.0]]}}
    job = job_from_dict("j1", raw)
    assert job.profile == Profile(0.2, None, None, 1024, 180.0,
                                  (CapPoint(400.0, 0.2, 180.0), CapPoint(250.0, 0.25, 170.0, 15, 3.0)))
    again = json.loads(json.dumps(job_to_dict(job)))
    assert again["profile"]["version"] == codec.VERSION and job_from_dict("j1", again).profile == job.profile


@pytest.mark.parametrize("field, text, value", [
    ("energy_j", "-5", "-5"),
    ("profile.cap_points[1].iter_time_s", "true", "true"),
    ("profile.sm_util_pct", "101", "101"),
    ("gpus[0]", "7", "7"),
])
def test_a_bad_field_is_named_with_its_file_and_value(tmp_path: Path, caplog, field: str, text: str,
                                                      value: str) -> None:
    history = History(tmp_path)
    history.record(make_record("good"))
    doc = json.loads(json.dumps(V1_RECORD))
    target, *path = field.replace("]", "").replace("[", ".").split(".")
    holder = doc
    for step in [target, *path][:-1]:
        holder = holder[int(step)] if isinstance(holder, list) else holder[step]
    last = ([target, *path])[-1]
    holder[int(last) if isinstance(holder, list) else last] = json.loads(text)
    where = history.jobs_dir / "old.json"
    where.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="ecolaunch.profile.history"):
        assert history.get("old") is None
    message = next(r.getMessage() for r in caplog.records if "old.json" in r.getMessage())
    assert str(where) in message and f"{field} = {value}" in message, message


@pytest.mark.parametrize("token", ["true", "NaN", "Infinity", "-Infinity", "1e999"])
def test_bools_and_non_finite_numbers_are_refused(token: str) -> None:
    text = json.dumps(V1_RECORD).replace('"iter_time_s": 0.05, "sm_util_pct"', f'"iter_time_s": {token}, "sm_util_pct"')
    assert token in text
    with pytest.raises(ConfigError, match="rec.json"):
        codec.decode_record(text.encode(), "ecolaunch-job", JobRecord, where="rec.json")
    for bad in (True, float("nan"), float("inf")):  # already parsed (a job file read by the store)
        with pytest.raises(ConfigError, match=r"jobs\.j1\.profile: power_w"):
            codec.profile_from_json({"version": codec.VERSION, "power_w": bad}, where="jobs.j1.profile")
    with pytest.raises(ConfigError, match="memory_mib = true"):
        codec.profile_from_json({"memory_mib": True}, where="p")


def test_a_newer_version_is_refused_with_a_hint() -> None:
    doc = {**V1_RECORD, "version": codec.VERSION + 1}
    with pytest.raises(ConfigError, match=f"rec.json: version = {codec.VERSION + 1}") as e:
        codec.decode_record(json.dumps(doc).encode(), "ecolaunch-job", JobRecord, where="rec.json")
    assert "upgrade ecolaunch" in (e.value.hint or "")
    with pytest.raises(ConfigError, match="version = true"):
        codec.profile_from_json({"version": True}, where="p")


def test_a_non_finite_number_is_never_written() -> None:
    with pytest.raises(ConfigError, match="non-finite"):
        codec.encode_record("ecolaunch-job", make_record("j", energy_j=float("nan")))


def test_the_rule_its_cap_points_else_one_point_at_the_top_cap() -> None:
    assert V1_PROFILE.curve_points(400.0) == V1_PROFILE.cap_points
    uncapped = Profile(iter_time_s=0.1, power_w=200.0)
    assert uncapped.curve_points(300.0) == (CapPoint(300.0, 0.1, 200.0),)
    assert Profile(power_w=200.0).curve_points(300.0) == ()  # never capped blind
    assert Profile(power_w=200.0).curve_points(300.0, unknown_time_s=1.0) == (CapPoint(300.0, 1.0, 200.0),)
    assert Profile().demand == 1.0 and Profile(sm_util_pct=40.0, mem_bw_util_pct=70.0).demand == 0.7


def test_cap_points_below_the_top_get_the_uncapped_point_above_them() -> None:
    low = (CapPoint(200.0, 0.12, 190.0),)
    assert Profile(iter_time_s=0.1, power_w=250.0, cap_points=low).curve_points(300.0) == (
        *low, CapPoint(300.0, 0.1, 250.0))
    assert Profile(iter_time_s=0.1, cap_points=low).curve_points(300.0) == low  # its power there is not known
    assert Profile(iter_time_s=0.1, power_w=250.0, cap_points=low).curve_points(200.0) == low


def test_only_a_profile_is_written_as_one() -> None:
    assert codec.profile_to_json(Profile(iter_time_s=0.1))["iter_time_s"] == 0.1
    with pytest.raises(TypeError, match="got dict"):
        codec.profile_to_json({"iter_time_s": 0.1})  # type: ignore[arg-type]
