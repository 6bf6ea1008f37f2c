"""End to end through the launcher: an instrumented DDP example is profiled, its energy and profile land in the
history, and the next launch of the same job is placed (and capped) with that knowledge, caps restored after.

One worker: two gloo workers occasionally abort at interpreter exit on a loaded machine ("terminate called without
an active exception", a torch/gloo teardown issue, see the README's known issues), which this test is not about."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import REPO, ecolaunch_cmd

EXAMPLE = str(REPO / "examples" / "instrumented_ddp.py")


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=240)


def test_profile_energy_history_and_an_informed_second_launch(sim_env) -> None:
    env = sim_env()
    first = run(["--nproc-per-node", "1", EXAMPLE, "--steps", "120"], env)
    assert first.returncode == 0, first.stderr
    assert "used" in first.stderr and "Wh" in first.stderr  # the energy line at the end

    history = json.loads(run(["history", "--json"], env).stdout)
    assert len(history) == 1
    record = history[0]
    assert record["exit_code"] == 0 and record["energy_j"] > 0 and record["iterations"] >= 120
    profile = record["profile"]
    assert profile["iter_time_s"] > 0 and profile["power_w"] > 0 and profile["cap_points"]

    explained = run(["--dry-run", "--explain", "--nproc-per-node", "1", EXAMPLE, "--steps", "120"], env)
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[0].startswith("ecolaunch: would run on GPU ") and "policy gnn" in lines[0]
    assert any("capped at" in line for line in lines)  # the profile is known: the policy caps
    assert any(line.startswith("ecolaunch:   not GPU ") and "slower" in line for line in lines)  # alternatives

    second = run(["--nproc-per-node", "1", EXAMPLE, "--steps", "120"], env)  # same job: same fingerprint
    assert second.returncode == 0, second.stderr
    records = json.loads(run(["history", "--json"], env).stdout)
    newest = records[0]
    assert newest["job_id"] != record["job_id"] and newest["profile_action"] == "history"
    # the simulated GPUs draw idle power under a CPU job, so the profile is flat: the GNN policy caps it
    assert newest["power_caps_w"] and all(w < 400 for w in newest["power_caps_w"].values())
    status = json.loads(run(["status", "--json"], env).stdout)
    assert all(g["power_limit_w"] == 400 for g in status["gpus"])  # restored after the run
    assert status["jobs"] == []
