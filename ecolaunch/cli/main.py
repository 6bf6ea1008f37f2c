"""``ecolaunch``: launch a training job (torchrun's command line) or run a subcommand.

The rule that keeps subcommands from shadowing scripts: the first argument selects a subcommand only when it
is exactly a subcommand's name (``status``, ``policy``, ``simulate``, ...). Anything else — ``./status``, ``status.py``, an
option — is a launch, so ``ecolaunch ./status`` runs a script named ``status``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from ecolaunch import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ecolaunch")
def cli() -> None:
    """ecolaunch subcommands. To launch a job: ecolaunch [torchrun options] script.py [args]."""


def _register() -> None:
    from ecolaunch.cli.agent_cmd import agent
    from ecolaunch.cli.history_cmd import history
    from ecolaunch.cli.policy_cmd import policy
    from ecolaunch.cli.predict_cmd import predict
    from ecolaunch.cli.report_cmd import report
    from ecolaunch.cli.simulate_cmd import simulate
    from ecolaunch.cli.status_cmd import status

    for command in (status, policy, simulate, agent, predict, history, report):
        cli.add_command(command)


_register()

SUBCOMMANDS = frozenset(cli.commands)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and (args[0] in SUBCOMMANDS or args[0] == "--version"):
        cli.main(args=args, prog_name="ecolaunch")
        return
    from ecolaunch.cli.launch_cmd import launch

    sys.exit(launch(args, os.environ))
