"""``ecolaunch``: launch a training job (torchrun's command line) or run a subcommand.

The rule that keeps subcommands from shadowing scripts: the first argument selects a subcommand only when it
is exactly a subcommand's name (``status``, ``policy``, ``simulate``, ...). Anything else — ``./status``,
``status.py``, an option — is a launch, so ``ecolaunch ./status`` runs a script named ``status``.

The launch path imports neither click nor the subcommands: it is the drop-in for torchrun and must start as fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

#: the subcommands' names, known without importing them (a test checks them against the registered commands)
SUBCOMMANDS = frozenset({"status", "policy", "simulate", "agent", "predict", "history", "report"})


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and (args[0] in SUBCOMMANDS or args[0] == "--version"):
        from ecolaunch.cli.group import register

        register().main(args=args, prog_name="ecolaunch")
        return
    from ecolaunch.cli.launch_cmd import launch

    sys.exit(launch(args, os.environ))
