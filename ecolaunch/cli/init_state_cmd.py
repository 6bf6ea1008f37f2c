"""``ecolaunch init-state``: the lab admin creates (or repairs) the shared state directory's layout, as root."""

from __future__ import annotations

import grp
import json
import os
import socket
from pathlib import Path

import click

from ecolaunch.cli.command import Command, Failed
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR
from ecolaunch.errors import ConfigError, EcolaunchError, with_hint

#: what to do about a parent directory a non-root user may write (``ecolaunch.state.init.parent_warnings``)
PARENT_HINT = ("keep the state directory below directories only root may write (chown root DIR; chmod go-w DIR, "
               "or chmod +t DIR), such as /var/lib/ecolaunch")


@click.command("init-state", cls=Command)
@click.option("--group", "group", default=None, metavar="NAME",
              help="the Unix group of the lab's users (default: the policy's [state] group)")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"the state directory (default: {ENV_STATE_DIR}, else the policy's [state] dir, else the built-in "
                   f"default; with {ENV_SIMULATE}, the simulated machine's own sub-directory)")
def init_state(group: str | None, directory: Path | None) -> None:
    """Create or repair the shared state directory, as root, before any user runs.

    Creates jobs/, hooks/ and history/ (3770 root:GROUP), state.lock and state.json (0660 root:GROUP), a history
    directory for root and for each member of GROUP (0750, theirs), gnn/ and calibration/ (0750, root's) and an
    empty cap ledger caps.json (0640, root's), and sets the directory itself to 3770 root:GROUP, so that no lab
    member owns anything the others write into or that root relies on. Anything a member planted in those places
    (a link, a FIFO, a file where a directory belongs, a directory made first in a colleague's or root's name) is
    moved aside; one line says each change. The state directory itself must not be a link or another user's
    (exit 1), and a parent directory a non-root user may write is warned about. Reads the policy
    (ECOLAUNCH_POLICY) and the state directory (ECOLAUNCH_STATE_DIR) like every other command. With
    ECOLAUNCH_SIMULATE and without --dir it also creates the simulated GPUs' shared files, in the simulated
    machine's own directory; with --dir it lays out that directory only, and creates no simulated GPU files.
    """
    # lazy: registering the subcommands loads every cli module; the state layout loads when `init-state` runs
    from ecolaunch.runtime import open_gpus, resolve
    from ecolaunch.state.init import parent_warnings  # lazy: as above
    from ecolaunch.state.layout import init_state as make_layout  # lazy: as above

    environment, rules = resolve()
    target = directory if directory is not None else environment.state_dir
    name = group or rules.state_group
    if name is None:
        raise click.UsageError(f"name the lab's group: --group NAME, or [state] group in the policy "
                               f"({ENV_POLICY_FILE})")
    try:
        gid = grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(f"group {name!r} does not exist on this host",
                          hint=f"create it (groupadd {name}) and add the lab's users to it") from None
    if os.geteuid() != 0:
        raise Failed("init-state must run as root: it gives the shared directories to root",
                     hint=f"sudo ecolaunch init-state --group {name}")
    warnings = parent_warnings(target)
    try:
        done = make_layout(target, gid, empty_ledger=_empty_ledger(environment, open_gpus))
    except OSError as e:
        raise click.ClickException(f"cannot set up {str(target)!r}: {e.strerror or e}") from e
    if environment.simulate and directory is None:
        open_gpus(environment).gpus()  # creates the simulated GPUs' state and lock files as root, group-shared
    for line in done:
        click.echo(f"ecolaunch init-state: {line}")
    if warnings:
        click.echo(with_hint("\n".join(f"Warning: {line}: whoever may write there can rename {target} away and put "
                                       "another directory in its place" for line in warnings), PARENT_HINT), err=True)
    click.echo(f"ecolaunch init-state: {target} is ready for group {name}"
               + ("" if done else " (nothing to change)"))


def _empty_ledger(environment, open_gpus) -> bytes:
    """An empty cap ledger for this host (``ecolaunch.caps.ledger`` owns the format): the simulated machine's host
    name with ECOLAUNCH_SIMULATE, else this host's (NVML's backend names the host so; it is not probed here)."""
    # lazy: only a new state directory needs an empty ledger
    from ecolaunch.caps.ledger import empty_ledger

    host = socket.gethostname()
    if environment.simulate:
        try:
            host = open_gpus(environment).hostname()
        except EcolaunchError:
            pass  # a bad spec is reported by the command that uses it; the ledger is rewritten by its first writer
    return json.dumps(empty_ledger(host), indent=1, sort_keys=True).encode()
