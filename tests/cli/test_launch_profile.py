"""End to end through the launcher: an instrumented DDP example is profiled, its energy and profile land in the
history, and the next launch of the same job is placed with that knowledge: not capped while the profile says
the job draws nothing (a CPU job on simulated GPUs), capped once the stored profile holds the power a real GPU
would have measured; caps restored after.

One worker: two gloo workers occasionally abort at interpreter exit on a loaded machine ("terminate called without
an active exception", a torch/gloo teardown issue, see the README's known issues), which this test is not about."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import REPO, ecolaunch_cmd

EXAMPLE = str(REPO / "examples" / "instrumented_ddp.py")


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=240)


def test_profile_energy_history_and_an_informed_second_launch(sim_env, state_dir) -> None:
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

    # a CPU job draws nothing on the simulated GPUs (their idle power): the stored profile is flat, and a cap would
    # save nothing measurable, so the informed launch keeps the default limit
    flat = run(["--dry-run", "--json", "--nproc-per-node", "1", EXAMPLE, "--steps", "120"], env)
    assert flat.returncode == 0, flat.stderr
    assert set(json.loads(flat.stdout)["power_caps_w"].values()) == {None}

    # what the profile holds for a power-hungry job on a real A100 (the boundary this test cannot reach): the
    # stored profile of this fingerprint, with measured power and caps
    (path,) = (state_dir / "history").glob("*/profiles/*.json")  # <state>/history/<user>/profiles
    doc = json.loads(path.read_text())
    t0 = doc["profile"]["iter_time_s"]
    doc["profile"].update(power_w=330.0, sm_util_pct=90.0, mem_bw_util_pct=45.0, cap_points=[
        {"power_cap_w": 400.0, "iter_time_s": t0, "power_w": 330.0},
        {"power_cap_w": 275.0, "iter_time_s": 1.06 * t0, "power_w": 262.0},
        {"power_cap_w": 225.0, "iter_time_s": 1.3 * t0, "power_w": 218.0}])
    path.write_text(json.dumps(doc))

    explained = run(["--dry-run", "--explain", "--nproc-per-node", "1", EXAMPLE, "--steps", "120"], env)
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[0].startswith("ecolaunch: would run on GPU ") and "policy curve" in lines[0]
    assert any("capped at" in line for line in lines)  # the profile is known: the policy caps
    assert "the job's measured curve: cap " in lines[0] and "kept back" in lines[0]  # the one cap choice, in words

    second = run(["--nproc-per-node", "1", EXAMPLE, "--steps", "120"], env)  # same job: same fingerprint
    assert second.returncode == 0, second.stderr
    records = json.loads(run(["history", "--json"], env).stdout)
    newest = records[0]
    assert newest["job_id"] != record["job_id"] and newest["profile_action"] == "history"
    assert newest["power_caps_w"] and all(w < 400 for w in newest["power_caps_w"].values())
    status = json.loads(run(["status", "--json"], env).stdout)
    assert all(g["power_limit_w"] == 400 for g in status["gpus"])  # restored after the run
    assert status["jobs"] == []
