"""The click group of the subcommands (``status``, ``policy``, ...), built only when a subcommand runs."""

from __future__ import annotations

import click

from ecolaunch._version import __version__
from ecolaunch.cli.agent_cmd import agent
from ecolaunch.cli.calibrate_cmd import calibrate
from ecolaunch.cli.cancel_cmd import cancel
from ecolaunch.cli.command import Group
from ecolaunch.cli.exporter_cmd import exporter
from ecolaunch.cli.history_cmd import history
from ecolaunch.cli.init_state_cmd import init_state
from ecolaunch.cli.policy_cmd import policy
from ecolaunch.cli.predict_cmd import predict
from ecolaunch.cli.report_cmd import report
from ecolaunch.cli.simulate_cmd import simulate
from ecolaunch.cli.status_cmd import status
from ecolaunch.cli.top_cmd import top


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ecolaunch")
def cli() -> None:
    """ecolaunch subcommands. To launch a job: ecolaunch [torchrun options] script.py [args]."""


def register() -> click.Group:
    """Add every subcommand to the group; returns it."""
    for command in (status, top, cancel, policy, simulate, agent, predict, history, report, init_state, calibrate,
                    exporter):
        cli.add_command(command)
    return cli
