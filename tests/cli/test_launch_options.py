"""ecolaunch's own launch options as a user meets them: bad values are usage errors (exit 2, like argparse's own),
and a value the admin policy overrides is said so."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, ecolaunch_cmd

EXAMPLE = "examples/ddp_train.py"


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--policy", "magic"], {}, "--policy (or ECOLAUNCH_PLACEMENT_POLICY) must be a placement policy, got 'magic'\n"
                                    "HINT: use one of: curve, curve-link, eaco, exclusive, first-fit, gnn, lucid, zeus"),
        ([], {"ECOLAUNCH_PLACEMENT_POLICY": "magic"}, "--policy (or ECOLAUNCH_PLACEMENT_POLICY) must be a placement "
                                                      "policy, got 'magic'\nHINT: use one of: curve, curve-link, eaco, "
                                                      "exclusive, first-fit, gnn, lucid, zeus"),
        (["--profile", "sometimes"], {}, "--profile 'sometimes' is not a profiling mode\nHINT: use one of: auto, pre, "
                                         "inline, off"),
        (["--allowed-slowdown", "lots"], {}, "--allowed-slowdown (or ECOLAUNCH_ALLOWED_SLOWDOWN) must be a number, "
                                             "got 'lots'\nHINT: e.g. --allowed-slowdown 10 (percent: at most 10 % "
                                             "slower than the job alone and uncapped)"),
    ],
    ids=["policy", "policy-env", "profile", "slowdown"],
)
def test_bad_option_values_are_usage_errors(args, env, message, sim_env, state_dir: Path) -> None:
    out = run([*args, "--dry-run", EXAMPLE], sim_env(**env))
    assert out.returncode == 2, out.stderr
    assert out.stderr.endswith(f"ecolaunch: error: {message}\n"), out.stderr
    assert list(state_dir.iterdir()) == []


def test_a_slowdown_above_the_admin_maximum_is_clipped_in_one_line(sim_env, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[slowdown]\nmax_pct = 20\n")
    out = run(["--allowed-slowdown", "500", "--dry-run", EXAMPLE], sim_env(ECOLAUNCH_POLICY=str(policy)))
    assert out.returncode == 0, out.stderr
    assert out.stderr == "ecolaunch: allowed slowdown 500 % is above the admin policy's maximum: the job gets 20 %\n"
    assert "(bound 20 %)" in out.stdout
    within = run(["--allowed-slowdown", "15", "--dry-run", EXAMPLE], sim_env(ECOLAUNCH_POLICY=str(policy)))
    assert within.returncode == 0 and within.stderr == "", within.stderr
    assert "(bound 15 %)" in within.stdout
