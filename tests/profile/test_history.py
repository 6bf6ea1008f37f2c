"""Job history: records and profiles round-trip, bad files are skipped with a warning, fingerprints."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from ecolaunch.errors import ConfigError, StateError
from ecolaunch.jobmodel.codec import decode_record, encode_record, profile_from_json, profile_to_json
from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.history import KEPT_RUNS, ExpectedRun, History, JobRecord, ProfileEntry, fingerprint
from ecolaunch.state.userdirs import user_dir_name

FP = "ab" * 32
PROFILE = Profile(0.05, 81.5, 40.0, 12_000, 290.0,
                  (CapPoint(400.0, 0.05, 290.0), CapPoint(250.0, 0.056, 240.0)))


def make_record(job_id: str = "j1", ended: float = 1_700_000_100.0, **kw) -> JobRecord:
    fields = dict(job_id=job_id, user="alice", name="bert", fingerprint=FP, started=ended - 100.0, ended=ended,
                  duration_s=100.0, exit_code=0, gpus=("GPU-a",), gpu_names=("NVIDIA A100-SXM4-80GB",),
                  power_caps_w={"GPU-a": 250.0}, colocated_with={"GPU-a": ["j0"]}, energy_j=21_000.0,
                  gpu_energy_j=30_000.0, iterations=2000, iter_time_s=0.05, profile=PROFILE,
                  profile_action="inline", recommended_cap_w=250.0, recommendation="cap 250 W",
                  findings=("slow",), samples={"GPU-a": [{"t_s": 0.0, "power_w": 250.0}]})
    fields.update(kw)
    return JobRecord(**fields)


def test_profile_round_trip_and_validation() -> None:
    assert profile_from_json(profile_to_json(PROFILE), where="p") == PROFILE
    assert profile_from_json(json.loads(json.dumps(profile_to_json(PROFILE))), where="p") == PROFILE
    empty = Profile(None, None, None, None, None, (), instrumented=False)
    assert profile_from_json(profile_to_json(empty), where="p") == empty
    for key, bad in [("iter_time_s", 0.0), ("sm_util_pct", 101.0), ("memory_mib", -1), ("memory_mib", 1.5),
                     ("power_w", "300"), ("cap_points", [{"power_cap_w": 300, "iter_time_s": 0.1}]),
                     ("cap_points", "x"), ("instrumented", "yes")]:
        with pytest.raises(ConfigError):
            profile_from_json({**profile_to_json(PROFILE), key: bad}, where="p")


def test_record_round_trip(tmp_path: Path) -> None:
    history = History(tmp_path)
    rec = make_record()
    path = history.record(rec)
    assert path == tmp_path / "history" / user_dir_name(os.geteuid()) / "jobs" / "j1.json"  # this user's own directory
    assert history.get("j1") == rec
    assert decode_record(encode_record("ecolaunch-job", rec), "ecolaunch-job", JobRecord, where="r") == rec
    assert history.get("nope") is None
    assert history.get("../etc/passwd") is None


def test_profile_store_and_lookup(tmp_path: Path) -> None:
    history = History(tmp_path)
    assert history.lookup(FP) is None
    history.store_profile(FP, PROFILE, profile_safe=True, job_id="j1", now=5.0)
    assert history.lookup(FP) == ProfileEntry(FP, PROFILE, True, "j1", 5.0)
    assert history.lookup_profile(FP) == PROFILE
    history.store_profile(FP, None, profile_safe=True)  # a job that ran without yielding a profile
    assert history.lookup(FP).profile is None  # type: ignore[union-attr]
    with pytest.raises(ConfigError):
        history.lookup("not-a-fingerprint")


def test_list_is_newest_first_and_limited(tmp_path: Path) -> None:
    history = History(tmp_path)
    for i, ended in enumerate([300.0, 100.0, 200.0]):
        history.record(make_record(f"j{i}", ended=1e9 + ended))
        os.utime(history.jobs_dir / f"j{i}.json", (1e9 + ended, 1e9 + ended))
    assert [r.job_id for r in history.list()] == ["j0", "j2", "j1"]
    assert [r.job_id for r in history.list(limit=2)] == ["j0", "j2"]
    assert history.list(limit=0) == []
    with pytest.raises(ConfigError):
        history.list(limit=-1)
    assert History(tmp_path / "elsewhere").list() == []


@pytest.mark.parametrize("content", [
    b'{"format": "ecolaunch-job", "version": 1, "job_id": "j9", "us',  # torn
    b"\x00\xff garbage",
    b'{"format": "something-else", "version": 1}',
    b'[1, 2]',
    encode_record("ecolaunch-job", make_record("j9", energy_j=-5.0)),
])
def test_unreadable_records_are_skipped_with_a_warning(tmp_path: Path, caplog, content: bytes) -> None:
    history = History(tmp_path)
    history.record(make_record("good"))
    (history.jobs_dir / "j9.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="ecolaunch.profile.history"):
        assert [r.job_id for r in history.list()] == ["good"]
        assert history.get("j9") is None
    assert any("ignoring history" in r.message and "j9.json" in r.message for r in caplog.records)


def test_a_bad_profile_file_is_treated_as_missing(tmp_path: Path, caplog) -> None:
    history = History(tmp_path)
    history.store_profile(FP, PROFILE)
    path = history.profiles_dir / f"{FP}.json"
    doc = json.loads(path.read_text())
    doc["profile"]["power_w"] = -3
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING):
        assert history.lookup(FP) is None
    path.write_bytes(path.read_bytes()[:40])
    with caplog.at_level(logging.WARNING):
        assert history.lookup_profile(FP) is None
    assert sum("ignoring history" in r.message for r in caplog.records) == 2


def test_a_crash_during_a_write_keeps_the_old_file_whole(tmp_path: Path, monkeypatch) -> None:
    history = History(tmp_path)
    history.store_profile(FP, PROFILE)

    def crash(*args, **kwargs):
        raise OSError(5, "I/O error (simulated crash)")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(StateError):
        history.store_profile(FP, Profile(1.0, None, None, None, None))
    with pytest.raises(StateError):
        history.record(make_record("j2"))
    monkeypatch.undo()
    assert history.lookup_profile(FP) == PROFILE
    assert history.get("j2") is None
    assert [p.name for p in history.profiles_dir.iterdir()] == [f"{FP}.json"]  # no temp file left behind


def test_unwritable_history_raises_state_error(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    with pytest.raises(StateError):
        History(blocker).record(make_record())


def test_non_finite_numbers_never_reach_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        History(tmp_path).record(make_record(energy_j=float("nan")))


# --- fingerprints ------------------------------------------------------------------------------------

@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text("print('train')\n")
    return path


def test_fingerprint_is_stable(script: Path, tmp_path: Path) -> None:
    fp = fingerprint(script, ["--lr", "3e-4"], 2, "alice", "NVIDIA A100-SXM4-80GB")
    assert len(fp) == 64 and int(fp, 16) >= 0
    copy = tmp_path / "elsewhere.py"
    copy.write_bytes(script.read_bytes())
    assert fingerprint(copy, ("--lr", "3e-4"), "2", "alice", "NVIDIA  A100-SXM4-80GB ") == fp  # content, not path
    assert History.fingerprint(script, ["--lr", "3e-4"], 2, "alice", "NVIDIA A100-SXM4-80GB") == fp
    # the recipe is frozen: changing it would orphan every stored profile
    assert fingerprint(script, [], 1, "u", "g") == "ca9ebdcbbc3539f6d76f1510049637c1c29e5069912a74dd7dad42f8aec1a83f"


def test_fingerprint_changes_with_each_input(script: Path) -> None:
    base = dict(script=script, script_args=["--lr", "3e-4"], nproc=2, user="alice", gpu_model="A100")
    fp = fingerprint(**base)
    variants = [dict(script_args=["--lr", "1e-3"]), dict(script_args=["3e-4", "--lr"]), dict(nproc=4),
                dict(user="bob"), dict(gpu_model="H100")]
    seen = {fp}
    for change in variants:
        other = fingerprint(**{**base, **change})
        assert other not in seen, change
        seen.add(other)
    script.write_text("print('train, edited')\n")
    assert fingerprint(**base) not in seen


def test_fingerprint_of_a_module_or_an_unreadable_script(tmp_path: Path) -> None:
    a = fingerprint("pkg.train", [], 1, "u", "g", module=True)
    assert a == fingerprint("pkg.train", [], 1, "u", "g", module=True)
    assert a != fingerprint("pkg.other", [], 1, "u", "g", module=True)
    missing = fingerprint(tmp_path / "missing.py", [], 1, "u", "g")
    assert missing == fingerprint(tmp_path / "missing.py", [], 1, "u", "g")
    assert missing != fingerprint(tmp_path / "missing2.py", [], 1, "u", "g")


def test_completed_runs_tell_the_next_launch_how_long_to_expect(tmp_path: Path) -> None:
    history = History(tmp_path)
    assert history.lookup(FP) is None
    history.note_run(FP, 120.0, 2000, job_id="j1", now=1.0)  # no entry yet: one without a profile
    entry = history.lookup(FP)
    assert entry.profile is None and entry.expected_run() == ExpectedRun(120.0, 2000, 1)
    history.store_profile(FP, PROFILE, now=2.0)  # a profile stored later keeps the runs
    for seconds, steps in ((100.0, 1900), (400.0, None), (110.0, 2100), (90.0, 2000), (130.0, 2050)):
        history.note_run(FP, seconds, steps)
    entry = history.lookup(FP)
    assert entry.profile == PROFILE and len(entry.runs) == KEPT_RUNS  # the latest five: the first run is gone
    assert [r.duration_s for r in entry.runs] == [100.0, 400.0, 110.0, 90.0, 130.0]
    assert entry.expected_run() == ExpectedRun(110.0, 2000, 5)  # medians; a run without steps counts for time only
    assert ProfileEntry(FP, PROFILE).expected_run() is None


def test_a_profile_file_claiming_too_many_runs_is_treated_as_missing(tmp_path: Path, caplog) -> None:
    history = History(tmp_path)
    history.note_run(FP, 10.0, 5)
    (path,) = (tmp_path / "history").rglob(f"{FP}.json")
    doc = json.loads(path.read_text())
    doc["runs"] = doc["runs"] * (KEPT_RUNS + 1)
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING):
        assert history.lookup(FP) is None
    assert "ignoring history file" in caplog.text


def test_a_record_keeps_its_predicted_length_and_old_records_read_without_one(tmp_path: Path) -> None:
    history = History(tmp_path)
    rec = make_record(predicted_s=90.0)
    history.record(rec)
    assert history.get("j1") == rec and history.get("j1").predicted_s == 90.0
    old = json.loads(encode_record("ecolaunch-job", make_record()))
    del old["predicted_s"]
    old["version"] = 3  # written before predictions were kept
    assert decode_record(json.dumps(old).encode(), "ecolaunch-job", JobRecord, where="r").predicted_s is None
    with pytest.raises(ConfigError, match="predicted_s = -1.0"):
        decode_record(json.dumps({**old, "predicted_s": -1.0}).encode(), "ecolaunch-job", JobRecord, where="r")


def test_length_predictions_pair_what_was_expected_with_what_it_took(tmp_path: Path) -> None:
    history = History(tmp_path)
    assert history.length_predictions() == []
    t = 1_700_000_000.0
    history.record(make_record("a", ended=t + 300, predicted_s=80.0, duration_s=100.0))
    history.record(make_record("b", ended=t + 100, predicted_s=120.0, duration_s=110.0))
    history.record(make_record("c", ended=t + 200, predicted_s=50.0, exit_code=1))  # failed: not its length
    history.record(make_record("d", ended=t + 400))  # nothing was predicted
    history.record(make_record("e", ended=t + 500, predicted_s=30.0, duration_s=40.0))
    assert history.length_predictions() == [(120.0, 110.0), (80.0, 100.0), (30.0, 40.0)]  # newest last
    assert history.length_predictions(limit=1) == [(30.0, 40.0)]
    assert history.length_predictions(limit=0) == []
    with pytest.raises(ConfigError, match="limit must be an integer >= 0, got -1"):
        history.length_predictions(limit=-1)


def test_a_declared_steps_hint_is_kept_for_the_next_launch(tmp_path: Path) -> None:
    history = History(tmp_path)
    history.store_profile(FP, None, hints={"steps": 600, "tracked_steps": 30})
    assert history.lookup(FP).hints == {"steps": 600}  # the tracked total is the running run's alone
    for bad in (0, 2.5, True, "600", 10 ** 13):
        history.store_profile(FP, None, hints={"steps": bad, "key": "k"})
        assert history.lookup(FP).hints == {"key": "k"}, bad
