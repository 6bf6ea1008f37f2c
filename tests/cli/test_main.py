from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ecolaunch.cli import main as cli_main
from tests.conftest import REPO, clean_env, ecolaunch_cmd


def test_subcommand_names_match_the_registered_commands() -> None:
    from ecolaunch.cli.group import register

    assert set(register().commands) == cli_main.SUBCOMMANDS


def test_the_launch_path_imports_no_subcommand_no_click_and_no_torch_geometric(state_dir) -> None:
    code = ("import sys; from ecolaunch.cli import main; main.main(['--dry-run', 'examples/ddp_train.py'])")
    probe = (
        "import sys, runpy\n"
        "try:\n"
        f"    {code}\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = [m for m in sys.modules if m.startswith(('torch_geometric', 'click', 'ecolaunch.cli.simulate_cmd',"
        " 'ecolaunch.cli.status_cmd'))]\n"
        "print(bad if 'ecolaunch.policy.gnn' in sys.modules else 'the launch did not reach its decision')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=clean_env(ECOLAUNCH_SIMULATE="2xA100-SXM4-80GB", ECOLAUNCH_STATE_DIR=str(state_dir)),
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_simulate_help_names_every_policy() -> None:
    from click.testing import CliRunner

    from ecolaunch.cli.simulate_cmd import simulate
    from ecolaunch.sim.policies import sim_policy_names

    text = " ".join(CliRunner().invoke(simulate, ["--help"]).output.split())
    for name in sim_policy_names():
        assert name in text, name


def test_launch_help_names_every_registered_subcommand() -> None:
    from ecolaunch.cli.group import register

    # one line per paragraph: argparse would otherwise wrap a name like init-state at its hyphen
    out = subprocess.run(ecolaunch_cmd("--help"), env=clean_env(COLUMNS="1000"), cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    listed = text.split("Subcommands: ", 1)[1].split(" (see", 1)[0].split(", ")
    assert listed == sorted(register().commands), text


def test_launch_help_names_the_default_policy_the_launch_uses() -> None:
    from ecolaunch import config

    out = subprocess.run(ecolaunch_cmd("--help"), env=clean_env(), cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert f"placement policy: {config.DEFAULT_PLACEMENT_POLICY} (default)," in text, text


def _run(args: list[str], env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(ecolaunch_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_mistyped_subcommand_is_a_usage_error_that_books_nothing(sim_env, state_dir: Path) -> None:
    out = _run(["statsu"], sim_env())
    assert out.returncode == 2, out.stderr
    assert out.stderr == ("Usage: ecolaunch [OPTIONS] COMMAND [ARGS]...\n"
                          "Try 'ecolaunch --help' for help.\n\n"
                          "Error: No such command 'statsu'. Did you mean 'status'?\n")
    assert out.stdout == ""
    assert list(state_dir.iterdir()) == []  # no booking, no history record


def test_scripts_named_like_subcommands_still_run(sim_env, tmp_path: Path) -> None:
    for name in ("status", "statsu"):
        (tmp_path / name).write_text("print('hello')\n")
    env = sim_env(ECOLAUNCH_DRY_RUN="1")  # the first argument must be the script: the option goes in the env
    for script in ("./status", "statsu"):
        out = _run([script], env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("ecolaunch: would run on GPU 0 "), out.stdout


@pytest.mark.parametrize("args", [["--dry-run", "nonexistent.py"], ["nonexistent.py", "--lr", "1"],
                                  ["python", "nonexistent.py"]])
def test_a_missing_script_is_a_usage_error_before_anything_is_booked(args, sim_env, state_dir: Path) -> None:
    out = _run(args, sim_env())
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("usage: ecolaunch ")
    assert out.stderr.splitlines()[-2:] == [
        "ecolaunch: error: training script 'nonexistent.py' does not exist",
        "HINT: check the path; run a module with -m MODULE, a program on PATH with --no-python"]
    assert "would run" not in out.stdout + out.stderr
    assert list(state_dir.iterdir()) == []

