from __future__ import annotations

import subprocess
import sys

from ecolaunch.cli import main as cli_main
from tests.conftest import REPO, clean_env


def test_subcommand_names_match_the_registered_commands() -> None:
    from ecolaunch.cli.group import register

    assert set(register().commands) == cli_main.SUBCOMMANDS


def test_the_launch_path_imports_no_subcommand_no_click_and_no_torch_geometric(state_dir) -> None:
    code = ("import sys; from ecolaunch.cli import main; main.main(['--dry-run', 'x.py'])")
    probe = (
        "import sys, runpy\n"
        "try:\n"
        f"    {code}\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = [m for m in sys.modules if m.startswith(('torch_geometric', 'click', 'ecolaunch.cli.simulate_cmd',"
        " 'ecolaunch.cli.status_cmd'))]\n"
        "print(bad)\n"
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
