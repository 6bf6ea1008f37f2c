"""``ecolaunch report`` without a JOB: energy, GPU-hours and the estimated saving across jobs, through the real CLI
over a history of records (written by the history's own API, and by a real simulated launch)."""

from __future__ import annotations

import calendar
import csv
import io
import json
import subprocess
import time
from pathlib import Path

import pytest

from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.history import History, JobRecord
from tests.conftest import BIN, REPO, clean_env, ecolaunch_cmd

DAY = 86400.0
#: midnight (UTC) ten days ago: the records' days are whole, whatever the time the test runs
BASE = calendar.timegm(time.gmtime(time.time() - 10 * DAY)[:3] + (0, 0, 0)) + 12 * 3600.0


def day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def record(job_id: str, user: str, ended: float, *, gpus: int = 1, energy_j: float, duration_s: float,
           iterations: int | None = None, iter_time_s: float | None = None, profile: Profile | None = None,
           profiling_energy_j: float | None = None) -> JobRecord:
    uuids = tuple(f"GPU-{i:04d}" for i in range(gpus))
    return JobRecord(job_id=job_id, user=user, name=f"{job_id}-train", fingerprint=None, started=ended - duration_s,
                     ended=ended, duration_s=duration_s, exit_code=0, gpus=uuids,
                     gpu_names=("NVIDIA A100-SXM4-80GB",) * gpus, energy_j=energy_j, gpu_energy_j=energy_j,
                     profiling_energy_j=profiling_energy_j, iterations=iterations, iter_time_s=iter_time_s,
                     profile=profile)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A history of four jobs (the test runs as root, whose records may name any user):

    - a1 (alice, 2 GPUs, 1 h, 0.5 kWh): 10000 iterations of 0.3 s (5/6 of the run); alone and uncapped 0.27 s at
      300 W per GPU: 1.62 MJ against 1.5 MJ measured for the iterations, a saving of 0.12 MJ (7.41 %);
    - a2 (alice, 30 min, 0.1 kWh): no profile, no estimate;
    - b1 (bob, 2 h, 0.2 kWh plus 36 kJ of pre-launch profiling): 1000 iterations of 6 s (5/6 of the run); uncapped
      5 s at 200 W: 1 MJ against 0.6 MJ, less the profiling run's 36 kJ: a saving of 0.364 MJ (36.4 %);
    - c1 (carol): ended 40 days before a1, outside the default 30 days.
    """
    path = tmp_path / "state"
    h = History(path)
    h.record(record("a1", "alice", BASE, gpus=2, energy_j=1.8e6, duration_s=3600.0, iterations=10_000,
                    iter_time_s=0.3, profile=Profile(iter_time_s=0.27, power_w=300.0)))
    h.record(record("a2", "alice", BASE - 2 * DAY, energy_j=3.6e5, duration_s=1800.0))
    h.record(record("b1", "bob", BASE - DAY, energy_j=7.2e5, duration_s=7200.0, iterations=1000, iter_time_s=6.0,
                    profile=Profile(iter_time_s=5.0, power_w=200.0), profiling_energy_j=3.6e4))
    h.record(record("c1", "carol", BASE - 40 * DAY, energy_j=3.6e6, duration_s=3600.0))
    return path


def report(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd("report", *args), env=clean_env(ECOLAUNCH_STATE_DIR=str(state), TZ="UTC"),
                          cwd=REPO, capture_output=True, text=True, timeout=60)


SINCE = day(BASE - 5 * DAY)
NOTE = ("* estimated for 2 of 3 jobs: the saving is an estimate against running alone and uncapped, made for the "
        "undisturbed\n  jobs whose profile holds their uncapped iteration time and power: their iterations at that time "
        "and power, minus\n  the measured energy of the same iterations and of any pre-launch profiling run "
        "(docs/accounting.md)\n")


def test_by_user_is_the_default_table(state: Path) -> None:
    result = report(state, "--since", SINCE)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"jobs that ended since {SINCE} 00:00, by user:\n"
        "USER     JOBS  ENERGY (kWh)  GPU-HOURS  SAVING (kWh)*  SAVING*\n"
        "alice       2         0.600       2.50         0.0333    7.4 %\n"
        "bob         1         0.210       2.00          0.101   36.4 %\n"
        "total       3         0.810       4.50          0.134   18.5 %\n" + NOTE)
    assert result.stderr == ""


def test_by_job_table(state: Path) -> None:
    result = report(state, "--since", SINCE, "--by", "job")
    assert result.returncode == 0, result.stderr
    ended = [time.strftime("%Y-%m-%d %H:%M", time.gmtime(t)) for t in (BASE, BASE - DAY, BASE - 2 * DAY)]
    assert result.stdout == (
        f"jobs that ended since {SINCE} 00:00, by job:\n"
        "JOB  USER   NAME      ENDED               ENERGY (kWh)  GPU-HOURS  SAVING (kWh)*  SAVING*\n"
        f"a1   alice  a1-train  {ended[0]}           0.500       2.00         0.0333    7.4 %\n"
        f"b1   bob    b1-train  {ended[1]}           0.210       2.00          0.101   36.4 %\n"
        f"a2   alice  a2-train  {ended[2]}           0.100      0.500            N/A      N/A\n"
        "total (3 jobs)                                   0.810       4.50          0.134   18.5 %\n" + NOTE)


def test_by_day_as_csv(state: Path) -> None:
    result = report(state, "--since", SINCE, "--by", "day", "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["day"] for r in rows] == [day(BASE), day(BASE - DAY), day(BASE - 2 * DAY)]  # newest first
    assert list(rows[0]) == ["day", "jobs", "energy_kwh", "gpu_hours", "jobs_estimated", "uncapped_kwh_estimate",
                             "saving_kwh_estimate", "saving_pct_estimate", "saving_error_pct_estimate"]
    assert float(rows[0]["energy_kwh"]) == pytest.approx(0.5) and float(rows[0]["gpu_hours"]) == pytest.approx(2.0)
    assert float(rows[0]["uncapped_kwh_estimate"]) == pytest.approx(1.62e6 / 3.6e6)
    assert float(rows[0]["saving_kwh_estimate"]) == pytest.approx(0.12e6 / 3.6e6)
    assert float(rows[1]["saving_pct_estimate"]) == pytest.approx(36.4)
    assert rows[2]["jobs_estimated"] == "0" and rows[2]["saving_kwh_estimate"] == ""  # no profile: no estimate


def test_by_job_as_json_says_how_the_saving_is_estimated(state: Path) -> None:
    result = report(state, "--since", SINCE, "--by", "job", "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["by"] == "job" and doc["since"] == f"{SINCE}T00:00:00+00:00"
    assert [r["job"] for r in doc["rows"]] == ["a1", "b1", "a2"]  # newest first
    b1 = doc["rows"][1]
    assert (b1["user"], b1["name"], b1["gpus"]) == ("bob", "b1-train", 1)
    assert b1["energy_kwh"] == pytest.approx(0.21) and b1["saving_kwh_estimate"] == pytest.approx(0.364e6 / 3.6e6)
    assert doc["rows"][2]["saving_kwh_estimate"] is None
    assert doc["total"]["jobs"] == 3 and doc["total"]["jobs_estimated"] == 2
    assert "alone and uncapped" in doc["estimate"] and "profiling run" in doc["estimate"]
    assert report(state, "--since", SINCE, "--by", "job", "--json").stdout == result.stdout  # --json: the same


def test_a_disturbed_run_gets_no_estimate(state: Path) -> None:
    """A run that updated nothing in the history (its iterations far outside its profile's spread: the audit's
    contended run read -394.6 %) counts its energy and GPU-hours but no saving: the profile does not describe it."""
    import dataclasses

    slow = record("d1", "dave", BASE, energy_j=3.6e5, duration_s=600.0, iterations=1000, iter_time_s=0.5,
                  profile=Profile(iter_time_s=0.1, power_w=300.0))
    History(state).record(dataclasses.replace(slow, not_learned="its iterations took 5.0 times the profile's"))
    doc = json.loads(report(state, "--since", SINCE, "--by", "job", "--json").stdout)
    d1 = next(r for r in doc["rows"] if r["job"] == "d1")
    assert d1["energy_kwh"] == pytest.approx(0.1) and d1["gpu_hours"] == pytest.approx(600.0 / 3600.0)
    assert d1["saving_kwh_estimate"] is None and d1["uncapped_kwh_estimate"] is None
    assert doc["total"]["jobs"] == 4 and doc["total"]["jobs_estimated"] == 2


def test_the_window_and_the_users(state: Path) -> None:
    default = json.loads(report(state, "--format", "json").stdout)  # 30 days back from now
    assert [r["user"] for r in default["rows"]] == ["alice", "bob"]
    wider = json.loads(report(state, "--since", "8w", "--format", "json").stdout)
    assert [r["user"] for r in wider["rows"]] == ["alice", "bob", "carol"]
    assert [r["user"] for r in json.loads(report(state, "--since", "8w", "--user", "carol", "--user", "bob",
                                                 "--format", "json").stdout)["rows"]] == ["bob", "carol"]
    recent = report(state, "--since", "1h", "--by", "job")
    assert recent.returncode == 0
    assert recent.stdout.startswith("no finished jobs ended since ") and recent.stdout.rstrip().endswith(
        f" (1h) in the history of {state}")
    nobody = report(state, "--user", "dave")
    assert nobody.returncode == 0 and nobody.stdout.startswith("no finished jobs of dave ended since ")


@pytest.mark.parametrize(("since", "why"), [
    ("3x", "'3x' is neither a duration nor an ISO date"),
    ("30", "'30' has no unit"),
    ("0d", "'0d' is no time at all"),
    ("2999-01-01", "'2999-01-01' is in the future (2999-01-01 00:00)"),
])
def test_a_bad_since_is_a_usage_error_with_the_forms_to_use(state: Path, since: str, why: str) -> None:
    result = report(state, "--since", since)
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith(f"Error: Invalid value for '--since': {why}\nHINT: give a duration back from now "
                                  "(90m, 12h, 30d, 2w) or an ISO date (2026-11-01, 2026-11-01T09:00)\n")
    assert result.stdout == ""


def test_options_of_the_report_across_jobs_with_a_job_are_usage_errors(state: Path) -> None:
    result = report(state, "a1", "--by", "day", "--format", "csv")
    assert result.returncode == 2
    assert result.stderr.endswith("Error: --by and --format are for the report across jobs, not for one job (a1)\n"
                                  "HINT: leave out JOB (a1), or --by and --format\n")
    plot = report(state, "--plot", "out.png")
    assert plot.returncode == 2 and "Error: --plot draws one job, and no JOB was given\nHINT: give its job id" in plot.stderr
    both = report(state, "--json", "--format", "csv")
    assert both.returncode == 2 and "Error: --json asks for JSON and --format for csv\nHINT: give one of them" in both.stderr
    one = report(state, "a1")  # one job's report is as before
    assert one.returncode == 0 and one.stdout.startswith("job a1  a1-train  (user alice)\n")


def test_a_real_launch_is_accounted(sim_env, state_dir: Path) -> None:
    """A simulated launch of an instrumented script: its record has a profile, so its saving is estimated."""
    launch = subprocess.run(ecolaunch_cmd("--nproc-per-node", "1", str(BIN / "stepper.py"), "120", "0.01"),
                            env=sim_env(), cwd=REPO, capture_output=True, text=True, timeout=240)
    assert launch.returncode == 0, launch.stderr
    (job,) = json.loads(report(state_dir, "--by", "job", "--format", "json").stdout)["rows"]
    assert job["energy_kwh"] > 0 and job["gpu_hours"] > 0 and job["gpus"] == 1
    # it ran alone and uncapped all through (no cap below 400 W binds the job): the baseline itself, no saving (issue
    # 41: such a run read a "saving" of its iterations' noise); its iterations' energy counts on both sides
    assert job["uncapped_kwh_estimate"] > 0 and job["saving_pct_estimate"] == 0.0
    assert job["saving_error_pct_estimate"] == 0.0
    table = report(state_dir).stdout.splitlines()
    assert table[2].startswith("root ") and table[2].split()[1] == "1" and table[2].split()[-2:] == ["none", "none"]


def test_no_saving_for_a_job_alone_and_uncapped_and_none_within_the_measurement_error(tmp_path: Path) -> None:
    """Issue 41: a job at 400 W all through its run (Ctrl-C'd) showed "SAVING -12.4 %": it ran alone and uncapped, the
    baseline itself, so it saved nothing. A capped job's 5 % against a reference of 20 iterations with a 20 % spread
    is within its measurement error (2.33 standard errors of that reference, its window error included): no finding."""
    import dataclasses

    path = tmp_path / "state"
    h = History(path)
    flat = record("n1", "nora", BASE, energy_j=4.5e4, duration_s=100.0, iterations=1000, iter_time_s=0.1,
                  profile=Profile(iter_time_s=0.1, power_w=400.0, cap_points=(CapPoint(400.0, 0.1, 400.0, 200, 5.0),)))
    h.record(dataclasses.replace(flat, exit_code=130, power_caps_w={"GPU-0000": 400.0},
                                 samples={"GPU-0000": [{"t_s": t, "power_w": 450.0, "power_limit_w": 400.0}
                                                       for t in (1.0, 50.0, 100.0)]}))
    jittery = Profile(iter_time_s=0.1, power_w=400.0, cap_points=(CapPoint(300.0, 0.105, 300.0, 20, 20.0),
                                                                   CapPoint(400.0, 0.1, 400.0, 20, 20.0)))
    capped = record("w1", "walt", BASE - 3600.0, energy_j=3.8e4, duration_s=100.0, iterations=1000, iter_time_s=0.1,
                    profile=jittery)
    h.record(dataclasses.replace(capped, power_caps_w={"GPU-0000": 300.0},
                                 samples={"GPU-0000": [{"t_s": 50.0, "power_w": 380.0, "power_limit_w": 300.0}]}))
    result = report(path, "--since", SINCE, "--by", "job")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"jobs that ended since {SINCE} 00:00, by job:\n"
        "JOB  USER  NAME      ENDED               ENERGY (kWh)  GPU-HOURS  SAVING (kWh)*         SAVING*\n"
        f"n1   nora  n1-train  {day(BASE)} 12:00          0.0125     0.0278           none            none\n"
        f"w1   walt  w1-train  {day(BASE)} 11:00          0.0106     0.0278             ~0  within ±11.9 %\n"
        "total (2 jobs)                                 0.0231     0.0556             ~0   within ±5.6 %\n"
        "* estimated for 2 of 2 jobs: the saving is an estimate against running alone and uncapped, made for the "
        "undisturbed\n  jobs whose profile holds their uncapped iteration time and power: their iterations at that time "
        "and power, minus\n  the measured energy of the same iterations and of any pre-launch profiling run "
        "(docs/accounting.md); none: the\n  jobs ran alone and uncapped, the baseline itself; within ±N %: the saving "
        "is within its measurement error, no\n  finding\n")
    rows = {r["job"]: r for r in json.loads(report(path, "--since", SINCE, "--by", "job", "--json").stdout)["rows"]}
    assert rows["n1"]["saving_kwh_estimate"] == 0.0 and rows["n1"]["saving_error_pct_estimate"] == 0.0
    assert rows["n1"]["uncapped_kwh_estimate"] == pytest.approx(4.5e4 / 3.6e6)  # what its iterations used
    assert rows["w1"]["saving_pct_estimate"] == pytest.approx(5.0)
    # 2.33 x (20 % / sqrt(20 iterations), the window's repeating 2.2 % and independent 1.1 % in quadrature)
    assert rows["w1"]["saving_error_pct_estimate"] == pytest.approx(2.33 * (20.0 ** 2 / 20 + 2.2 ** 2 + 1.1 ** 2) ** 0.5,
                                                                    abs=0.05)
