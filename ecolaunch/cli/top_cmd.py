"""``ecolaunch top``: a live view of this host's GPUs, the ecolaunch jobs on them and the queue, refreshed in place.

Each refresh is one read of :class:`~ecolaunch.cli.hostview.HostView`, what ``ecolaunch status`` prints, drawn by
:mod:`ecolaunch.cli.topview` (rich, loaded only when ``top`` runs). ``q`` (or Ctrl-C) quits with exit 0. The live view
needs a terminal on stdout (an ssh session is one); when stdout is none (a pipe, a file, cron), or with ``--once``, it
prints the view once as plain text and exits.
"""

from __future__ import annotations

import contextlib
import sys

import click

from ecolaunch.cli.command import Command
from ecolaunch.cli.hostview import HostView
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR

DEFAULT_INTERVAL_S = 2.0


@click.command(cls=Command)
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.1, max=3600.0), default=DEFAULT_INTERVAL_S,
              show_default=True, help="seconds between refreshes")
@click.option("--once", is_flag=True, help="print the view once as plain text and exit (what top does when stdout "
                                           "is not a terminal)")
def top(interval_s: float, once: bool) -> None:
    from ecolaunch.cli import topview  # lazy: rich loads only when top runs, not for every subcommand

    view = HostView.open()
    if once or not sys.stdout.isatty():
        topview.print_once(view.read())
        return
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C quits like q: exit 0
        topview.live(view.read, interval_s)


# the f-string docstring above is not a docstring to Python: set the help text explicitly
top.help = f"""A live view of this host's GPUs, the ecolaunch jobs on them and the queue; q quits.

Reads {ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} like the launcher. When stdout is not a
terminal (or with --once) it prints the view once as plain text."""
