"""Through the launcher: what a run teaches the history, and how a launch finds its job there (issue 23).

A disturbed run (its iterations far outside its profile's spread: here a sleeping worker five times slower than the
one profiled under the same ``--job-key``) updates nothing and says so; a junk stored profile (the issue's: a lower
cap measured faster than uncapped) never yields a negative prediction; a repeat matches without its run length and
seed, by the key a script declares, not at all with ``--fresh-profile``; an older record still reads."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.history import History, JobIdentity
from ecolaunch.runtime import current_user
from tests.conftest import REPO, ecolaunch_cmd

STEPPER = str(REPO / "tests" / "bin" / "stepper.py")
EXAMPLE = str(REPO / "examples" / "instrumented_ddp.py")
A100 = "NVIDIA A100-SXM4-80GB"


def run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=240)


def records(env: dict[str, str]) -> list[dict]:
    out = run(["history", "--json"], env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_disturbed_run_updates_nothing_and_says_so(sim_env, state_dir) -> None:
    env = sim_env()
    first = run(["--job-key", "sleepy", STEPPER, "120", "0.02"], env)
    assert first.returncode == 0, first.stderr
    assert "not updated" not in first.stderr and re.search(r"mean power \d+ W per GPU\n", first.stderr)
    (path,) = (state_dir / "history").glob("*/profiles/*.json")
    stored = path.read_bytes()
    assert json.loads(stored)["profile"]["iter_time_s"] < 0.05

    # the same key, iterations five times slower: a stall, contention, or another job under the key
    slow = run(["--job-key", "sleepy", STEPPER, "40", "0.1"], env)
    assert slow.returncode == 0, slow.stderr
    lines = [line for line in slow.stderr.splitlines() if "history: not updated from this run" in line]
    assert len(lines) == 1, slow.stderr
    assert "times the profile's" in lines[0] and "--fresh-profile" in lines[0]
    assert "a disturbed run, or not the job whose profile it matched (job key 'sleepy'" in slow.stderr  # early check
    assert "kept in the history" not in slow.stderr
    assert path.read_bytes() == stored  # the profile is untouched

    newest, oldest = records(env)
    assert newest["not_learned"] and oldest["not_learned"] is None
    assert newest["profile_from"] == oldest["job_id"] and newest["profile_action"] == "history"
    assert newest["history_match"].startswith("job key 'sleepy' (--job-key), script stepper.py, 1 worker, " + A100)
    table = run(["history"], env).stdout.splitlines()
    assert table[1].split()[0] == newest["job_id"] and f"{oldest['job_id']}*" in table[1]
    assert table[-1].startswith("* updated nothing in the history")
    detail = run(["history", newest["job_id"][:6]], env)
    assert detail.returncode == 0, detail.stderr
    assert f"  profile     the stored profile of job {oldest['job_id']}" in detail.stdout
    assert "  learned     not updated from this run: " in detail.stdout
    report = run(["report", newest["job_id"]], env).stdout
    assert "  history     matched on job key 'sleepy'" in report and "not updated from this run" in report
    assert "  GPU         0 (NVIDIA A100-SXM4-80GB, GPU-" in report  # named by index, as `status` does


def test_a_stored_profile_measured_while_disturbed_predicts_nothing_negative(sim_env, state_dir) -> None:
    env = sim_env()
    identity = JobIdentity(STEPPER, (), "1", current_user(), A100)
    junk = Profile(0.8686, 55.0, 20.0, 1024, 160.0, (CapPoint(100.0, 0.0106, 100.1, 462, 63.2),
                                                    CapPoint(125.0, 0.4574, 117.4, 15, 143.6),
                                                    CapPoint(400.0, 0.8686, 160.0, 15, 0.7)))
    History(state_dir).store_profile(identity.fingerprint("junk"), junk, job_id="a393c569")
    out = run(["--dry-run", "--explain", "-v", "--job-key", "junk", STEPPER, "10", "0.01"], env)
    assert out.returncode == 0, out.stderr
    assert "predicted -" not in out.stdout and "slowdown -" not in out.stdout
    assert "measured while disturbed" in out.stderr and "profiling again" in out.stderr
    assert "power is not known yet" in out.stdout  # placed as an unknown job: uncapped until profiled again


def test_a_repeat_matches_without_its_run_length_and_seed(sim_env, state_dir) -> None:
    env = sim_env()
    identity = JobIdentity(EXAMPLE, ("--steps", "60"), "1", current_user(), A100)
    History(state_dir).store_profile(identity.fingerprint(), Profile(0.01, 50.0, 20.0, 1024, 100.0),
                                     job_id="feed0001")

    def match(*args: str) -> str:
        out = run(["--dry-run", "-v", "--nproc-per-node", "1", *args], env)
        assert out.returncode == 0, out.stderr
        (line,) = [ln for ln in out.stderr.splitlines() if "history: " in ln]
        return line.split("history: ", 1)[1]

    assert match(EXAMPLE, "--steps", "500", "--seed=3") == (
        f"script instrumented_ddp.py, 1 worker, {A100}, no arguments (ignoring --steps 500 --seed=3); "
        "profile of job feed0001")
    assert match(EXAMPLE, "--steps", "500", "--batch-size", "32").endswith(
        "its arguments (ignoring --steps 500); no stored profile")  # the batch size changes the work
    assert match("--fresh-profile", EXAMPLE, "--steps", "60").endswith(
        "--fresh-profile: its stored profile not used")
    bad = run(["--dry-run", "--job-key", " ", EXAMPLE], env)
    assert bad.returncode == 2 and "--job-key (or ECOLAUNCH_JOB_KEY) must be 1 to 200 characters" in bad.stderr


def test_a_key_the_script_declares_matches_its_next_launch(sim_env, state_dir, tmp_path) -> None:
    script = tmp_path / "keyed.py"
    script.write_text("import sys, time\nimport ecolaunch\n\n\n@ecolaunch.job(key='my-job')\ndef main():\n"
                      "    for _ in range(int(sys.argv[2])):\n        time.sleep(0.01)\n        ecolaunch.step()\n\n\n"
                      "main()\n")
    env = sim_env()
    first = run([str(script), "--lr", "60"], env)
    assert first.returncode == 0, first.stderr
    (job_id,) = [r["job_id"] for r in records(env)]
    out = run(["--dry-run", "-v", str(script), "--lr", "90"], env)  # another argument: the script's key still holds
    assert out.returncode == 0, out.stderr
    assert f"history: job key 'my-job' (the script's @ecolaunch.job), script keyed.py, 1 worker, {A100}; " \
           f"profile of job {job_id}" in out.stderr


def test_an_older_record_reads_and_says_it_predates_matching(sim_env, state_dir) -> None:
    env = sim_env()
    jobs = state_dir / "history" / current_user() / "jobs"
    jobs.mkdir(parents=True)
    # version 1: cap points as [cap, time, power] lists; no word of how the launch matched
    (jobs / "0ld00001.json").write_text(json.dumps({
        "format": "ecolaunch-job", "version": 1, "job_id": "0ld00001", "user": current_user(), "name": "old",
        "fingerprint": None, "started": 1.7e9, "ended": 1.7e9 + 60, "duration_s": 60.0, "exit_code": 0,
        "gpus": ["GPU-x"], "gpu_names": [A100], "energy_j": 6000.0, "gpu_energy_j": 6000.0, "profile_action": "inline",
        "profile": {"iter_time_s": 0.1, "power_w": 300.0, "cap_points": [[400.0, 0.1, 300.0], [250.0, 0.11, 240.0]]}}))
    (rec,) = records(env)
    assert rec["history_match"] is None and rec["not_learned"] is None and rec["energy_j"] == 6000.0
    assert rec["profile"]["cap_points"][1] == {"power_cap_w": 250.0, "iter_time_s": 0.11, "power_w": 240.0,
                                               "iterations": 0, "iter_time_cv_pct": None, "windows": 0,
                                               "run_iterations": 0}
    detail = run(["history", "0ld"], env)
    assert detail.returncode == 0, detail.stderr
    assert "  matched on  N/A (recorded before ecolaunch kept it" in detail.stdout
    assert "  profile     measured in this run (inline)" in detail.stdout


def test_a_repeat_at_the_same_speed_says_so_in_words_and_power_per_gpu(sim_env) -> None:
    """Issue 23, items 3 and 5, through the CLI: two workers report their mean power per GPU (not the sum), and a
    repeat at about the same speed says how fast in words ("as fast as", never "as fast than")."""
    env = sim_env()
    args = ["--nproc-per-node", "2", "--job-key", "pair", STEPPER, "120", "0.02"]
    first, repeat = run(args, env), run(args, env)
    for out in (first, repeat):
        assert out.returncode == 0, out.stderr
        assert re.search(r"used [\d.]+ kJ \([\d.]+ Wh\) in [\d.]+ s, mean power 50 W per GPU \(2 GPUs\)\n", out.stderr), \
            out.stderr
    # the words follow the measured change: "as fast as" within its error (issue 41), else "N % faster/slower than"
    assert re.search(r"power cap: ended at 400 W, measured (as fast as alone and uncapped within its measurement error "
                     r"of ±[\d.]+ points|[\d.]+ % (faster|slower) than alone and uncapped, beyond its measurement "
                     r"error of ±[\d.]+ points) \(kept in the history for the next launch\)", repeat.stderr), \
        repeat.stderr
    assert "as fast than" not in first.stderr + repeat.stderr
