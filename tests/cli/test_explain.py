"""``--explain`` (issue 23, defect 4), through the real CLI: it shows the alternatives the policy set aside (other GPU
models, other caps, uncapped) with what each would cost, and ``--policy zeus`` explains its cap from the job's
profile in the history instead of claiming there is none. (That it says why a job would wait: tests/cli/test_queue.py.)
"""

from __future__ import annotations

import json
import subprocess

from tests.cli.test_launch import SLEEPER, run
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "instrumented_ddp.py")


def test_a_first_launch_on_mixed_gpus_lists_the_other_model(sim_env, tmp_path) -> None:
    env = sim_env("2xRTX4090+2xA6000")
    args = ["--dry-run", "--nproc-per-node", "1", SLEEPER, str(tmp_path), "1"]
    doc = json.loads(run(["--json", *args], env).stdout)
    status = json.loads(run(["status", "--json"], env).stdout)
    a6000 = [g["uuid"] for g in status["gpus"] if g["name"] == "NVIDIA RTX A6000"]
    assert doc["gpus"] == [status["gpus"][0]["uuid"]]  # the first RTX 4090
    (alt,) = doc["alternatives"]
    assert alt["gpus"] == a6000[:1] and alt["predicted_slowdown_pct"] is None
    assert alt["why_not"].startswith("the job's power is not known yet, so no GPU is predicted to save energy")
    lines = run(["--explain", *args], env).stdout.splitlines()
    assert lines[-1] == ("ecolaunch:   not GPU 2 (NVIDIA RTX A6000) at default power: no prediction, the job's power "
                         "is not known yet, so no GPU is predicted to save energy; of the free sets the policy takes "
                         "the best-linked, lowest indexes first")


def _set_profile(state_dir, cap_points: list[dict], power_w: float) -> None:
    """The stored profile of the one job in the history, as a real GPU would have measured it (the boundary this
    test cannot reach: a CPU job on simulated GPUs draws nothing)."""
    (path,) = (state_dir / "history").glob("*/profiles/*.json")
    doc = json.loads(path.read_text())
    doc["profile"].update(power_w=power_w, sm_util_pct=90.0, mem_bw_util_pct=45.0, cap_points=cap_points)
    path.write_text(json.dumps(doc))


def _explain(env, *policy: str) -> subprocess.CompletedProcess:
    out = run(["--dry-run", "--explain", *policy, "--nproc-per-node", "1", EXAMPLE, "--steps", "60"], env)
    assert out.returncode == 0, out.stderr
    return out


def test_a_job_with_a_profile_is_shown_uncapped_and_lower_caps_and_zeus_uses_its_profile(sim_env, state_dir) -> None:
    env = sim_env()
    first = run(["--nproc-per-node", "1", EXAMPLE, "--steps", "60"], env)
    assert first.returncode == 0, first.stderr
    t0 = 0.01
    _set_profile(state_dir, [{"power_cap_w": 400.0, "iter_time_s": t0, "power_w": 330.0},
                             {"power_cap_w": 275.0, "iter_time_s": 1.06 * t0, "power_w": 262.0},
                             {"power_cap_w": 225.0, "iter_time_s": 1.3 * t0, "power_w": 218.0}], 330.0)

    lines = _explain(env).stdout.splitlines()
    assert "capped at" in "\n".join(lines)
    cap = int(lines[0].split("the job's measured curve: cap ")[1].split(" W")[0])
    alternatives = [line for line in lines if line.startswith("ecolaunch:   not GPU ")]
    assert alternatives[0].startswith("ecolaunch:   not GPU 0 at default power: predicted 0.0 % slower, ")
    assert alternatives[0].endswith("% more energy per unit of work")
    assert alternatives[1].startswith(f"ecolaunch:   not GPU 0 at {cap - 5} W: predicted ")
    doc = json.loads(run(["--dry-run", "--json", "--nproc-per-node", "1", EXAMPLE, "--steps", "60"], env).stdout)
    uncapped = doc["alternatives"][0]
    assert uncapped["energy_w_per_work"] > doc["predicted"]["energy_w_per_work"]

    zeus = _explain(env, "--policy", "zeus").stdout
    assert "no profile with power" not in zeus and "makes no predictions" not in zeus, zeus
    assert "ecolaunch:   predicted: job " in zeus and " W, capped at " in zeus
    assert "ecolaunch:   not GPU 0 at default power: predicted 0.0 % slower, " in zeus
    assert zeus.rstrip().endswith("% more energy per iteration")

    # a profile whose energy per iteration only grows below 400 W: zeus keeps the default limit and says why
    _set_profile(state_dir, [{"power_cap_w": 400.0, "iter_time_s": t0, "power_w": 330.0},
                             {"power_cap_w": 375.0, "iter_time_s": 1.2 * t0, "power_w": 320.0},
                             {"power_cap_w": 325.0, "iter_time_s": 1.5 * t0, "power_w": 300.0},
                             {"power_cap_w": 275.0, "iter_time_s": 1.9 * t0, "power_w": 262.0}], 330.0)
    kept = _explain(env, "--policy", "zeus").stdout
    assert "no cap below 400 W" in kept and "no profile with power" not in kept, kept
