"""What a new user hits in the first hour, run as they would (the real CLI, simulated GPUs): the showcase example is
not capped for nothing, ``@ecolaunch.job`` hints are used, ``--nproc-per-node gpu`` keeps the chosen policy, and a
request that can never fit is an error (exit 1), not "try again later" (75)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import REPO, ecolaunch_cmd

INSTRUMENTED = str(REPO / "examples" / "instrumented_ddp.py")
HINTED = '''
import time
import ecolaunch

@ecolaunch.job(name="hinted", max_slowdown_pct=5, memory_mib=1000)
def main():
    for _ in range(40):
        time.sleep(0.01)
        ecolaunch.step()

main()
'''


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=240)


def test_the_showcase_is_not_capped_for_nothing(sim_env) -> None:
    env = sim_env("2xA100-SXM4-80GB")
    done = run(["--nproc-per-node", "1", INSTRUMENTED, "--steps", "300"], env)
    assert done.returncode == 0, done.stderr
    # a CPU job on simulated GPUs draws their idle power at every cap: no cap saves anything, none is set
    assert "no cap below 400 W: the job is not bound by any cap" in done.stderr
    assert "setting the power cap" not in done.stderr and "warning:" not in done.stderr
    status = json.loads(run(["status", "--json"], env).stdout)
    assert {g["power_limit_w"] for g in status["gpus"]} == {400.0}


def test_job_hints_set_the_bound_and_the_memory_of_the_next_launch(sim_env, tmp_path: Path) -> None:
    env = sim_env("2xA100-SXM4-80GB")
    script = tmp_path / "hinted.py"
    script.write_text(HINTED)
    first = run(["python", str(script)], env)
    assert first.returncode == 0, first.stderr
    second = run(["python", str(script)], env)
    assert second.returncode == 0, second.stderr
    assert "the script declares a 5 % slowdown bound (@ecolaunch.job); using it" in second.stderr
    assert "(bound 5 %)" in second.stderr
    (record, _) = json.loads(run(["history", "--json"], env).stdout)
    assert record["profile"]["memory_mib"] == 1000  # the GPUs could not show a CPU job's memory: the declared one
    # an explicit --allowed-slowdown still wins over the declaration
    third = run(["--allowed-slowdown", "8", "--dry-run", "python", str(script)], env)
    assert third.returncode == 0, third.stderr
    assert "(bound 8 %)" in third.stdout and "declares" not in third.stderr


def test_nproc_gpu_keeps_the_chosen_policy(sim_env) -> None:
    done = run(["--nproc-per-node", "gpu", "--policy", "gnn", "--dry-run", "--json", INSTRUMENTED], sim_env())
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["policy"] == "gnn" and len(doc["gpus"]) == 4 and doc["placed"] is True


def test_a_request_that_can_never_fit_is_an_error_not_a_retry(sim_env) -> None:
    env = sim_env()
    too_many = run(["--nproc-per-node", "9", INSTRUMENTED], env)
    assert too_many.returncode == 1, too_many.stderr
    assert "Error: job asks for 9 GPU(s) and can never fit: the host has 4 GPU(s)" in too_many.stderr
    assert "HINT: lower --nproc-per-node" in too_many.stderr
    too_big = run(["--memory-mib", "999999", "--dry-run", INSTRUMENTED], env)
    assert too_big.returncode == 1, too_big.stderr
    assert "can never fit: the largest GPU it may use has 81920 MiB" in too_big.stderr
    assert json.loads(run(["status", "--json"], env).stdout)["jobs"] == []  # nothing was booked


def test_a_dry_run_without_gpus_says_so_and_prints_json_only_when_asked(sim_env) -> None:
    plain = run(["--nproc-per-node", "cpu", "--dry-run", INSTRUMENTED], sim_env())
    assert plain.returncode == 0 and plain.stdout.strip() == (
        "ecolaunch: --nproc-per-node cpu asks for no GPUs; would launch like torchrun")
    doc = json.loads(run(["--nproc-per-node", "cpu", "--dry-run", "--json", INSTRUMENTED], sim_env()).stdout)
    assert doc["placed"] is False and "policy" in doc and doc["gpus"] == []
