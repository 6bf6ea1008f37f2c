"""The gnn policy's first launch through the real CLI: with nothing known of the job, under a power budget that an
uncapped job would break, it is admitted at once at a cap from the GNN's predicted curve (where ``curve`` makes it
wait), says so and that the decision is learned; the run still measures and stores only its own profile, and its
repeat is decided from that."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ecolaunch.profile.history import History, JobIdentity
from ecolaunch.runtime import current_user
from tests.conftest import BIN, REPO, clean_env, ecolaunch_cmd

A100 = "A100-SXM4-80GB"
STEPPER = str(BIN / "stepper.py")
ARGS = ("400", "0.01")


def env(tmp_path: Path) -> dict[str, str]:
    policy = tmp_path / "policy.toml"
    # 2 x A100 (100-400 W): an uncapped job and the idle GPU at its minimum need 500 W, more than the budget
    policy.write_text("[power]\nmax_total_w = 420\n")
    return clean_env(ECOLAUNCH_SIMULATE=f"2x{A100}", ECOLAUNCH_STATE_DIR=str(tmp_path / "state"),
                     ECOLAUNCH_POLICY=str(policy))


def dry_run(tmp_path: Path, policy: str) -> dict:
    out = subprocess.run(ecolaunch_cmd("--dry-run", "--json", "--policy", policy, "--allowed-slowdown", "20", STEPPER,
                                       *ARGS), env=env(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_first_launch_nothing_is_known_of_is_admitted_at_a_cap_from_the_gnns_curve(tmp_path: Path) -> None:
    plain = dry_run(tmp_path, "curve")
    assert plain["placed"] is False and plain["waiting"]["reason"] == "PowerBudget"
    told = dry_run(tmp_path, "gnn")
    assert told["placed"] is True and told["waiting"] is None, told
    cap = next(iter(told["power_caps_w"].values()))
    assert cap <= 320.0  # the budget less the idle GPU's minimum
    assert told["predicted"]["first_curve"] == "gnn" and told["predicted"]["learned"] is True
    assert told["reasons"][0].startswith("first launch: capped from the GNN's predicted curve")
    assert any("the GNN's predicted curve: cap" in r for r in told["reasons"])  # not called a measured one


def test_the_run_stores_its_own_measurements_and_its_repeat_is_decided_from_them(tmp_path: Path) -> None:
    run = subprocess.run(ecolaunch_cmd("--policy", "gnn", "--allowed-slowdown", "20", "--wait-timeout", "30", STEPPER,
                                       *ARGS), env=env(tmp_path), cwd=REPO, capture_output=True, text=True,
                         timeout=180)
    assert run.returncode == 0, run.stderr
    assert "capped from the GNN's predicted curve" in run.stderr
    mine = History(tmp_path / "state").lookup(JobIdentity(STEPPER, ARGS, "1", current_user(),
                                                          f"NVIDIA {A100}").fingerprint())
    assert mine is not None and mine.profile.knows_power
    # what was stored is what the run measured, not the prediction (which spans the board on a 5 W grid)
    assert len(mine.profile.cap_points) < 20
    repeat = dry_run(tmp_path, "gnn")
    assert "first_curve" not in repeat["predicted"], repeat["reasons"]
