"""The click classes every subcommand is built with, and the one way a subcommand fails.

An :class:`~ecolaunch.errors.EcolaunchError` raised anywhere in a subcommand (``@click.command(cls=Command)``, or
a command of a ``Group``) becomes :class:`Failed`: click prints ``Error: <message>``, then ``HINT: <hint>`` when the
error has one (:meth:`EcolaunchError.render <ecolaunch.errors.EcolaunchError.render>`), and exits 1, or the code the
command gives. A subcommand that must refuse with a fix for something that is no EcolaunchError raises
``Failed(message, hint=...)``. Usage errors stay click's own (exit 2, ``Try '... --help'``).

What does not live here: the launch path (``cli/launch_cmd.py``), which must not import click, prints the same
rendering itself; the cap guard (``cli/guard_cmd.py``) is an argparse helper and does so too.
"""

from __future__ import annotations

from typing import Any

import click

from ecolaunch.errors import EcolaunchError, with_hint


class Failed(click.ClickException):
    """A subcommand's failure: ``Error: message`` and its ``HINT:`` line on stderr, exit ``exit_code`` (1)."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 1) -> None:
        super().__init__(with_hint(message, hint))
        self.hint = hint
        self.exit_code = exit_code

    @classmethod
    def from_error(cls, error: EcolaunchError, exit_code: int = 1) -> Failed:
        """The failure that prints ``error`` (its message and hint)."""
        return cls(str(error), error.hint, exit_code)


class Command(click.Command):
    """A subcommand whose EcolaunchErrors fail as :class:`Failed` (exit 1)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EcolaunchError as e:
            raise Failed.from_error(e) from e


class Group(click.Group):
    """A group of subcommands (``ecolaunch policy ...``) built as :class:`Command`."""

    command_class = Command
