"""The click classes every subcommand is built with, and the one way a subcommand fails.

What lives here: :class:`Command` and :class:`Group`, which turn an :class:`~ecolaunch.errors.EcolaunchError` raised
in a subcommand into :class:`Failed` (``Error: <message>``, ``HINT: <hint>`` when it has one, exit 1 or the
command's code); a subcommand refusing with a fix for something that is no EcolaunchError raises ``Failed(message,
hint=...)``. Usage errors stay click's own (exit 2). What does not: the launch path (``cli/launch_cmd.py``, which
must not import click) and the cap guard (``cli/guard_cmd.py``, an argparse helper) print the same rendering.
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
