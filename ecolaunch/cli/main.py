"""``ecolaunch``: launch a training job (torchrun's command line) or run a subcommand.

What lives here: :func:`main` (the console script), :data:`SUBCOMMANDS` (their names, known without importing
them) and the rule that keeps subcommands from shadowing scripts (docs/torchrun.md#drop-in-rules). What does not:
the subcommands (``cli.group``), the launch (``cli.launch_cmd``); neither is imported on the launch path, which is
the drop-in for torchrun and must start as fast.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Sequence

#: the subcommands' names, known without importing them; the launch help lists them (a test checks them against
#: the registered commands, and that the help names each)
SUBCOMMANDS = frozenset({"status", "top", "cancel", "policy", "simulate", "agent", "predict", "history", "report",
                         "init-state", "calibrate", "exporter"})


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and (args[0] in SUBCOMMANDS or args[0] == "--version" or _mistyped_subcommand(args[0])):
        # a mistyped name goes to click too, which answers "No such command 'statsu'. Did you mean 'status'?"
        # lazy: click and the subcommands load only for a subcommand; the launch path must start as fast as torchrun
        from ecolaunch.cli.group import register

        register().main(args=args, prog_name="ecolaunch")
        return
    # lazy: the launch path (torch's parser, the pipeline) loads only for a launch, not for a subcommand
    from ecolaunch.cli.launch_cmd import launch

    sys.exit(launch(args, os.environ, SUBCOMMANDS))


def _mistyped_subcommand(word: str) -> bool:
    """True when ``word`` reads as a misspelt subcommand rather than a script: not an existing path, no directory
    and no extension, and close to a subcommand's name by the measure click uses for its suggestion."""
    if word.startswith("-") or os.sep in word or "." in word or os.path.exists(word):
        return False
    return bool(difflib.get_close_matches(word, sorted(SUBCOMMANDS), n=1))
